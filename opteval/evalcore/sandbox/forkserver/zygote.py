"""The zygote: a copy of the warm fork server whose only job is forking prepared children.

Why a separate process: forking the warm interpreter takes ~3 ms on an idle 2-core VM and
10+ ms under load, and the fork blocks the forking process. If the server's event loop did
it, every refill of the pool would delay the answers of runs in flight. The zygote forks
in parallel (on the other core) and hands the new child's pipes to the server over a unix
socket; it also reaps its children and reports each exit status, since only a parent can.

Messages: ``protocol.ZygoteReq`` from the server; ``protocol.ZygoteMsg`` to it (JSON on
SOCK_SEQPACKET): ``slot`` with fds (req_w, out_r, err_r, chan), ``reaped``, ``error``.
"""
from __future__ import annotations

import json
import os
import random
import selectors
import signal
import socket
import sys
import tempfile
import time
from typing import Any, NoReturn

from opteval.evalcore.sandbox import linux
from opteval.evalcore.sandbox.forkserver import isolation
from opteval.evalcore.sandbox.forkserver.isolation import WORKDIR, NsFactory
from opteval.evalcore.sandbox.forkserver.log import DEBUG, log
from opteval.evalcore.sandbox.protocol import ZygoteMsg, ZygoteReq

TMPFS_MB = 512


class Zygote:
    """Server-side handle: ``request()`` a child, ``recv()`` slots and reaped reports."""

    def __init__(self, factory: NsFactory | None, contained: bool, netns_per_run: bool, userns: bool = False) -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                a.close()
                linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
                _zygote_main(b, factory, contained, netns_per_run, userns)
            finally:
                os._exit(1)
        b.close()
        self.pid, self.sock = pid, a

    def request(self, warm: bool) -> None:
        self.sock.send(ZygoteReq.MAKE if warm else ZygoteReq.MAKE_COLD)

    def recv(self) -> tuple[dict[str, Any] | None, list[int]]:
        msg, fds, _, _ = socket.recv_fds(self.sock, 4096, 8)
        if not msg:
            return None, fds
        return json.loads(msg), fds

    def close(self) -> None:
        self.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _installation_reachable_by_others() -> bool:
    # deferred, no saving: isolation is imported at the top
    from opteval.evalcore.sandbox.forkserver.isolation import python_dirs

    for d in python_dirs():
        path = "/"
        for part in d.strip("/").split("/"):
            path = os.path.join(path, part)
            try:
                if not os.stat(path).st_mode & 0o001:  # others may not traverse it
                    return False
            except OSError:
                return False
    return True


def _zygote_main(sock: socket.socket, factory: NsFactory | None, contained: bool, netns: bool,
                 userns: bool) -> NoReturn:
    linux.set_name("opteval-zygote")
    self_pidfd = os.pidfd_open(os.getpid()) if contained else -1
    rng = random.Random()
    # Without namespaces a child sees the host's files: a throwaway uid can only run the
    # solvers (CBC is an executable inside site-packages) if the installation is reachable
    # by other users. Where it is not (e.g. under /root, mode 0700), keep the executor's uid.
    # In a user namespace only one uid is mapped: each run gets a user namespace of its own
    # instead (see ``child._drop_privileges``), which also makes RLIMIT_NPROC per run.
    # (contained and not userns: the server already checked the root path's capabilities;
    # after its pivot there is no /proc to look at here)
    root = not userns and os.geteuid() == 0 and (
        contained or (linux.privileged() and _installation_reachable_by_others()))
    if root and contained and isolation.UID_RANGE is None:
        # root of a user namespace that maps too few ids for throwaway uids: a nested user
        # namespace per run instead, exactly as without root
        root, userns = False, True
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                msg = sock.recv(64)
                if not msg:
                    os._exit(0)
                try:
                    warm = msg == ZygoteReq.MAKE
                    pid, pidfd = _make(sock, factory, contained, netns, self_pidfd, rng, root, userns, warm)
                    sel.register(pidfd, selectors.EVENT_READ, pid)
                except OSError as exc:
                    sock.send(json.dumps({"t": ZygoteMsg.ERROR, "v": str(exc)}).encode())
            else:
                pid = key.data
                try:
                    _, status, ru = os.wait4(pid, 0)
                    cpu = ru.ru_utime + ru.ru_stime
                except ChildProcessError:
                    status, cpu = signal.SIGKILL, 0.0
                sel.unregister(key.fileobj)
                os.close(key.fd)
                sock.send(json.dumps({"t": ZygoteMsg.REAPED, "pid": pid, "status": status, "cpu": cpu}).encode())


def _make(sock: socket.socket, factory: NsFactory | None, contained: bool, netns: bool, self_pidfd: int,
          rng: random.Random, root: bool, userns: bool, warm: bool) -> tuple[int, int]:
    # deferred: child loads in warm_imports, after the ns factory's fork
    from opteval.evalcore.sandbox.child import ChildConfig, child_main

    t0 = time.perf_counter()
    # a fresh uid per child: RLIMIT_NPROC then counts only its processes (the range is what this
    # user namespace maps: the host's, or a pod's 65536 ids; see isolation.throwaway_uid_range)
    uid = rng.randrange(*isolation.UID_RANGE) if root and isolation.UID_RANGE else None
    z = 0
    z_fd = -1
    workdir = None
    if contained:
        assert factory is not None
        z = factory.make()
        z_fd = os.pidfd_open(z)
        cfg = ChildConfig(True, uid, WORKDIR, "/tmp", TMPFS_MB, netns, userns=userns, warm_up=warm)
    else:
        workdir = tempfile.mkdtemp(prefix="opteval-sbx-")
        tmp = os.path.join(workdir, ".tmp")
        try:
            os.mkdir(tmp)
            if uid is not None:
                os.chown(workdir, uid, uid)
                os.chown(tmp, uid, uid)
        except OSError:
            # deferred, no saving: warm.py imports shutil in the server
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
            raise
        cfg = ChildConfig(False, uid, workdir, tmp, TMPFS_MB, False, warm_up=warm)
    req_r, req_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    chan_fs, chan_p = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    t1 = time.perf_counter()
    if contained:
        linux.setns(z_fd, linux.CLONE_NEWPID)  # our next child is born in the run's PID namespace
    try:
        pid = os.fork()
    except OSError:
        if contained:
            linux.setns(self_pidfd, linux.CLONE_NEWPID)
        raise
    if pid == 0:
        child_main(cfg, out_w, err_w, chan_p, req_r)  # never returns
    if contained:
        linux.setns(self_pidfd, linux.CLONE_NEWPID)
    t2 = time.perf_counter()
    if DEBUG:
        log(f"zygote: namespace {(t1 - t0) * 1e3:.1f} ms, fork {(t2 - t1) * 1e3:.1f} ms")
    if z_fd >= 0:
        os.close(z_fd)
    for fd in (req_r, out_w, err_w):
        os.close(fd)
    chan_p.close()
    pidfd = os.pidfd_open(pid)
    info = {"t": ZygoteMsg.SLOT, "p": pid, "z": z, "workdir": workdir}
    socket.send_fds(sock, [json.dumps(info).encode()], [req_w, out_r, err_r, chan_fs.fileno()])
    for fd in (req_w, out_r, err_r):
        os.close(fd)
    chan_fs.close()
    return pid, pidfd
