"""Namespaces for the fork server: the user namespace (when not root), the PID-namespace factory
and the private read-only root.

All run once per server (the user namespace, the root) or in a small helper process (the
factory), never on a run's critical path. See the package docstring for the whole process tree.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import sys

from opteval.evalcore.sandbox import linux
from opteval.evalcore.sandbox.forkserver.log import log
from opteval.evalcore.sandbox.protocol import FactoryMsg

WORKDIR = "/sandbox"
STOCK = 2  # PID namespaces the factory keeps ready
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
             "host.conf", "localtime", "protocols", "services", "ssl", "alternatives", "mime.types", "fonts")
DEV_NODES = ("null", "zero", "full", "random", "urandom")
HEAVY_MODULES = ("numpy", "scipy", "scipy.optimize", "scipy.sparse", "pulp", "pyscipopt", "highspy",
                 "pyomo.environ", "coptpy", "gurobipy")


# ====================================================================== user namespace


def enter_user_namespace(new_user: bool = True) -> None:
    """Without root: become root of a new user namespace and pid 1 of a PID namespace it owns.

    Why the PID namespace too: the factory and the zygote step into each run's PID namespace
    and back with ``setns``, and going back needs CAP_SYS_ADMIN over the namespace's owner;
    the host's PID namespace belongs to the host, ours to our user namespace. The calling
    process stays outside as a small shim (the pid the host knows): it waits for the server
    and exits with it; if the shim is killed, the parent-death signal kills the server, and
    with pid 1 gone the kernel kills everything in its namespace. Returns in the server.
    Only the executor's own uid and gid are mapped (to 0): that is all an unprivileged
    process may map without setuid helpers. ``new_user=False``: root of a user namespace
    whose PID namespace belongs to an ancestor; only the PID namespace is new.
    """
    # deferred, no saving: socket at the top has loaded select
    import select

    uid, gid = os.geteuid(), os.getegid()
    linux.unshare(linux.CLONE_NEWPID | (linux.CLONE_NEWUSER if new_user else 0))
    if new_user:
        linux.write_id_maps(0, uid, 0, gid)
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([alive_r], [], [], 0)[0]:  # the shim died before the line above
            os._exit(1)
        os.close(alive_r)
        return
    linux.set_name("opteval-nsshim")
    os.closerange(0, alive_w)  # the control socket included: the host sees EOF when the server dies
    os.closerange(alive_w + 1, 1 << 20)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


# ====================================================================== namespace factory


def _init_loop(death_r: int) -> None:
    """pid 1 of one run's PID namespace: reap orphans until the server kills us (or dies)."""
    # deferred, no saving: socket at the top has loaded select
    import select

    linux.set_name("opteval-init")
    while True:
        r, _, _ = select.select([death_r], [], [], 0.5)
        if r:
            os._exit(0)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def _new_pid_namespace(self_pidfd: int, sock: socket.socket, death_r: int) -> int:
    """Fork the init of a brand-new PID namespace; return its pid (ours, the parent's view)."""
    linux.unshare(linux.CLONE_NEWPID)
    try:
        z = os.fork()
    except OSError:
        linux.setns(self_pidfd, linux.CLONE_NEWPID)
        raise
    if z == 0:
        try:
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _init_loop(death_r)
        finally:
            os._exit(0)
    # back to our own namespace for children, so the next unshare can make a new one
    linux.setns(self_pidfd, linux.CLONE_NEWPID)
    return z


def _factory_loop(sock: socket.socket, death_r: int) -> None:
    """Serve "join" once, then "mk" requests from a small stock of ready namespaces.

    One fork of this small process per namespace (~0.5 ms); the inits are reaped
    automatically (SIGCHLD ignored) and the server watches them through pidfds.
    """
    linux.set_name("opteval-nsfac")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    self_pidfd = os.pidfd_open(os.getpid())
    stock: list[int] = []
    joined = False
    while True:
        if joined and len(stock) < STOCK:
            sock.settimeout(0)
        else:
            sock.settimeout(None)
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 64, 4)
        except (BlockingIOError, TimeoutError):
            try:
                stock.append(_new_pid_namespace(self_pidfd, sock, death_r))
            except OSError:
                sock.settimeout(None)
                joined = False  # stop trying in the background; "mk" will report the error
            continue
        if not msg:
            os._exit(0)
        if msg == FactoryMsg.JOIN:
            try:
                linux.setns(fds[0], linux.CLONE_NEWNET)
                linux.setns(fds[1], linux.CLONE_NEWNS)
                joined = True
                sock.send(FactoryMsg.OK)
            except OSError as exc:
                sock.send(f"error {exc}".encode())
            for fd in fds:
                os.close(fd)
        elif msg == FactoryMsg.MAKE:
            try:
                z = stock.pop(0) if stock else _new_pid_namespace(self_pidfd, sock, death_r)
            except OSError:
                z = -1
            sock.send(struct.pack("!i", z))


class NsFactory:
    """Handle on the small helper that creates PID namespaces (see module docstring)."""

    def __init__(self, death_r: int) -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
                keep = {0, 1, 2, b.fileno(), death_r}
                for name in os.listdir("/proc/self/fd"):
                    if int(name) not in keep:
                        try:
                            os.close(int(name))
                        except OSError:
                            pass
                _factory_loop(b, death_r)
            finally:
                os._exit(1)
        b.close()
        self.pid, self.sock = pid, a

    def join(self, net_fd: int, mnt_fd: int) -> None:
        socket.send_fds(self.sock, [FactoryMsg.JOIN], [net_fd, mnt_fd])
        reply = self.sock.recv(256)
        if reply != FactoryMsg.OK:
            raise OSError(f"namespace factory could not join the server namespaces: {reply!r}")

    def make(self) -> int:
        self.request()
        return self.result()

    def request(self) -> None:
        self.sock.send(FactoryMsg.MAKE)

    def result(self) -> int:
        (z,) = struct.unpack("!i", self.sock.recv(16))
        if z <= 0:
            raise OSError("namespace factory could not create a PID namespace")
        return z


# ====================================================================== private root


def throwaway_uid_range(uid_map: str, gid_map: str, default: tuple[int, int]) -> tuple[int, int] | None:
    """Where per-run uids come from: ``default`` when this user namespace maps it (the host's,
    or any full map), else the largest range mapped for both uids and gids above 1000 (root
    of a pod user namespace, ``hostUsers: false``, maps 65536 ids); None if there is none."""
    def extents(text: str) -> list[tuple[int, int]]:
        out = []
        for line in text.splitlines():
            inside, _, count = (int(x) for x in line.split())
            out.append((inside, inside + count))
        return out

    uids, gids = extents(uid_map), extents(gid_map)
    if any(a <= default[0] and default[1] <= b for a, b in uids) and any(
            a <= default[0] and default[1] <= b for a, b in gids):
        return default
    best = None
    for ua, ub in uids:
        for ga, gb in gids:
            lo, hi = max(ua, ga, 1000), min(ub, gb, 65534)  # below the overflow id (nobody)
            if hi - lo >= 1000 and (best is None or hi - lo > best[1] - best[0]):
                best = (lo, hi)
    return best


# Per-run throwaway uids (root path): set by build_root from this namespace's id maps.
UID_RANGE: tuple[int, int] | None = (1_000_000, 2_000_000_000)

# Python directories that live under /tmp (a venv there): every per-run /tmp is a fresh
# tmpfs, so the child binds these back over it (see ``child._mounts``). Set by build_root.
TMP_PYTHON_DIRS: tuple[str, ...] = ()


def under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def _bind(src: str, root: str, writable: bool = False, via: str | None = None) -> None:
    """Bind ``src`` read-only at ``root + src``; ``via`` names the source when ``src`` itself
    is hidden by then (an O_PATH fd as ``/proc/self/fd/N``)."""
    dst = root + src
    if os.path.isdir(via or src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    linux.mount(via or src, dst, None, linux.MS_BIND | linux.MS_REC)
    flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_NOSUID | (0 if writable else linux.MS_RDONLY)
    linux.mount(None, dst, None, flags | linux.mount_flags(dst))


def python_dirs() -> list[str]:
    """Directories holding the interpreter and the solver packages (never the checkout)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for name in HEAVY_MODULES:
        mod = sys.modules.get(name.split(".")[0])
        f = getattr(mod, "__file__", None)
        if f:
            dirs.add(os.path.realpath(os.path.dirname(os.path.dirname(f))))
    out: list[str] = []
    for d in sorted(dirs):
        if d == "/" or here == d or here.startswith(d + os.sep):
            log(f"not exposing {d} in the sandbox: it contains the checkout {here}")
            continue
        if any(d == o or d.startswith(o + os.sep) for o in out):
            continue
        out.append(d)
    return out


def build_root(own_pidns: bool = False) -> tuple[int, int, int]:
    """Enter private mount, network, IPC and UTS namespaces and pivot into a minimal read-only root.

    Returns fds (net ns, mount ns, /proc) opened before the pivot: the factory joins the
    namespaces, and the server keeps /proc to read its children's CPU time. As root that is
    the host's /proc (the server lives in the host PID namespace). In a user namespace
    (``own_pidns``) the server is pid 1 of its own PID namespace, so it mounts that namespace's /proc in the new
    root: its children's pids are numbered there, and a kernel in a user namespace lets a
    run mount its own /proc only where a proc mount is already fully visible.
    """
    global TMP_PYTHON_DIRS, UID_RANGE
    with open("/proc/self/uid_map") as fu, open("/proc/self/gid_map") as fg:
        UID_RANGE = throwaway_uid_range(fu.read(), fg.read(), (1_000_000, 2_000_000_000))
    linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWNET | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS)
    try:
        linux.sethostname("sandbox")
    except OSError:
        pass
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    exposed = python_dirs()
    # held open before the host /tmp disappears under the new root (a venv in /tmp)
    held = {d: os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for d in exposed if under_tmp(d)}
    TMP_PYTHON_DIRS = tuple(held)
    root = "/tmp"  # a tmpfs over the host /tmp: hides it and becomes the new root
    linux.mount("opteval-root", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=0755,size=16m")
    if own_pidns:  # first, so that a refusal (a runtime that masks /proc) leaves the host's view intact
        os.makedirs(root + "/proc")
        try:
            linux.mount("proc", root + "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
        except OSError:
            linux.umount2(root, linux.MNT_DETACH)
            for fd in held.values():
                os.close(fd)
            raise
    for name in sorted(os.listdir("/")):
        p = "/" + name
        if os.path.islink(p):
            os.symlink(os.readlink(p), root + p)
    for d in ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        if os.path.isdir(d) and not os.path.islink(d):
            _bind(d, root)
    for d in exposed:
        _bind(d, root, via=f"/proc/self/fd/{held[d]}" if d in held else None)
    for fd in held.values():
        os.close(fd)
    for name in ETC_FILES:
        p = "/etc/" + name
        if os.path.exists(p):
            _bind(p, root)
    os.makedirs(root + "/dev", exist_ok=True)
    for name in DEV_NODES:
        if os.path.exists("/dev/" + name):
            _bind("/dev/" + name, root, writable=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for d in ("/dev/shm", "/proc", "/tmp", WORKDIR, "/.oldroot"):
        os.makedirs(root + d, exist_ok=True)
    os.chmod(root + "/tmp", 0o1777)
    net_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    mnt_fd = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    proc_fd = os.open(root + "/proc" if own_pidns else "/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    linux.pivot_root(root, root + "/.oldroot")
    os.chdir("/")
    linux.umount2("/.oldroot", linux.MNT_DETACH)
    os.rmdir("/.oldroot")
    linux.mount(None, "/", None, linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV)
    return net_fd, mnt_fd, proc_fd
