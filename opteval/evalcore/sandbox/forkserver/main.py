"""Start-up of the fork-server process: namespaces, warm imports, the ``ready`` handshake, the loop.

Order matters: the user namespace (without root) first, then the namespace factory, forked
while this process is still small; then the heavy imports; then the private root (which needs
the imported modules' paths); the handshake last, so the host only sends work to a server
that can take it.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import traceback

from opteval.evalcore.sandbox import linux
from opteval.evalcore.sandbox.forkserver.isolation import HEAVY_MODULES, NsFactory, build_root, enter_user_namespace
from opteval.evalcore.sandbox.forkserver.log import log
from opteval.evalcore.sandbox.forkserver.loop import EventLoop
from opteval.evalcore.sandbox.forkserver.warm import warm_imports
from opteval.evalcore.sandbox.protocol import Ctl


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl-fd", type=int, required=True)
    ap.add_argument("--namespaces", choices=("auto", "0", "1"), default="auto")
    ap.add_argument("--pool", type=int, default=2)
    ap.add_argument("--netns-per-run", action="store_true")
    ap.add_argument("--modules", default=None, help="comma-separated modules to pre-import (default: HEAVY_MODULES)")
    args = ap.parse_args(argv)
    want_ns = args.namespaces != "0"
    userns = False
    note = ""
    own_pidns = False
    if want_ns and not linux.privileged():
        try:
            enter_user_namespace()  # from here on we are pid 1 of our own PID namespace
            userns = own_pidns = True
        except OSError as exc:
            note = f"user namespace unavailable ({exc})"
            want_ns = False
    elif want_ns and not linux.owns_pid_namespace():
        try:  # root of a user namespace living in an ancestor's PID namespace
            enter_user_namespace(new_user=False)
            own_pidns = True
        except OSError as exc:
            note = f"PID namespace unavailable ({exc})"
            want_ns = False
    ctl = socket.socket(fileno=args.ctl_fd)
    linux.set_name("opteval-forksrv")
    try:
        linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        pass
    death_r, death_w = os.pipe()
    os.set_inheritable(death_r, False)
    factory = None
    if want_ns:
        try:
            factory = NsFactory(death_r)
        except OSError as exc:
            note = f"namespace factory failed: {exc}"
    modules = tuple(m for m in args.modules.split(",") if m) if args.modules is not None else HEAVY_MODULES
    loaded = warm_imports(modules)
    contained = False
    proc_fd = -1
    if factory is not None:
        try:
            net_fd, mnt_fd, proc_fd = build_root(own_pidns)
            factory.join(net_fd, mnt_fd)
            os.close(net_fd)
            os.close(mnt_fd)
            probe = factory.make()  # can we make a PID namespace at all?
            os.kill(probe, signal.SIGKILL)
            contained = True
        except OSError as exc:
            note = f"Linux namespaces unavailable ({exc})"
            if proc_fd >= 0:
                # half-way through the pivot: we cannot fall back safely in this process
                log(f"FATAL: namespace setup failed after pivot: {exc}")
                os._exit(3)
    if not contained:
        if args.namespaces == "0":
            note = "namespaces disabled (OPTEVAL_SANDBOX_NAMESPACES=0)"
        note = (f"NOT CONTAINED: {note or 'namespaces unavailable'}; process-group kill only, "
                "setsid descendants may survive, host files and network are reachable")
        log("WARNING " + note)
        if factory is not None:
            os.kill(factory.pid, signal.SIGKILL)
            os.waitpid(factory.pid, 0)
            factory = None
        proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    gc.collect()
    gc.freeze()  # keep the warm heap shared copy-on-write with every child
    # userns even when not contained: uid 0 in there is not the host's root (no throwaway uids)
    ctl.send(json.dumps({"t": Ctl.READY, "contained": contained, "note": note, "modules": loaded,
                         "pid": os.getpid(), "userns": userns and contained}).encode())
    loop = EventLoop(ctl, factory, contained, note, proc_fd, death_w, args.pool, args.netns_per_run, userns)
    try:
        loop.run()
    except BaseException:
        log("fork server crashed:\n" + traceback.format_exc())
    finally:
        loop.shutdown()
    os._exit(0)
