"""Start a command as an unprivileged user with no capabilities, for tests and the benchmark.

Used as ``ForkServer(launcher=unprivileged_launcher())``: the fork server then runs the way it
runs in a Kubernetes pod (a non-root uid, empty capability sets, ``no_new_privs`` unset, a
mount namespace made by someone else), while the test process stays root and can still look
at the host (planted files, pids, a loopback listener).

Why a private mount namespace: the Python installation may sit where that user cannot reach
it (pyenv under ``/root``, mode 0700). Rather than copy a 2 GB installation, the launcher
(still root) makes a private mount namespace, hides every unreachable ancestor of the
installation under an empty tmpfs and binds the installation back at its own path, so
``sys.executable``, its rpath to ``libpython`` and every ``.pth`` path keep working. The rest
of the host is as that user would see it. Then ``setpriv`` drops to the user for good.

``--deny-userns`` instead models a kernel or pod that forbids user namespaces (seccomp,
``user.max_user_namespaces=0``): the command runs as root of a user namespace whose limit on
nested user namespaces is 0, with no capabilities at all; neither sandbox path can work there.

``--mask-proc`` models a container runtime's default masking of ``/proc`` paths (it binds
``/dev/null`` over ``/proc/uptime``, as runtimes do over ``/proc/kcore``, ``/proc/keys`` ...).

``--pod-userns OUTER`` models a pod with ``hostUsers: false``: the command runs as root with
every capability, but of a user namespace that maps ids 0-65535 to OUTER..OUTER+65535 (and
whose PID namespace is still the host's).

Run as ``python -m opteval.evalcore.sandbox.asuser --uid U [--gid G] [--deny-userns | --pod-userns OUTER]
-- CMD...`` (root only).
"""
from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys

from opteval.evalcore.sandbox import linux

NOBODY = 65534


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid`` (no supplementary groups) may traverse ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _hidden_ancestors(path: str, uid: int, gid: int) -> list[str]:
    """Ancestors of ``path`` (and itself) that ``uid`` cannot traverse, outermost first."""
    out, cur = [], "/"
    for part in path.strip("/").split("/"):
        cur = os.path.join(cur, part)
        if not _reachable(cur, uid, gid):
            out.append(cur)
    return out


def package_root() -> str:
    """The folder this package is imported from: site-packages for a wheel, the checkout for an
    editable install or ``PYTHONPATH`` (issue 41: a clone in ``/root`` sat under the hidden
    ancestor that :func:`expose` covers with a tmpfs for the Python installation, so the fork
    server, which imports ``opteval.evalcore`` from there, found an empty folder)."""
    return os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def installation_dirs() -> list[str]:
    """What the unprivileged fork server must reach: the Python installation and this package."""
    return sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, package_root())})


def expose(dirs: list[str], uid: int, gid: int) -> None:
    """In a fresh private mount namespace, make ``dirs`` reachable by ``uid`` at their own paths."""
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    held = {d: os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for d in dirs}
    covered: list[str] = []
    for d in dirs:
        for a in _hidden_ancestors(d, uid, gid):
            if a == d or any(a == c or a.startswith(c + "/") for c in covered):
                continue
            linux.mount("opteval-hide", a, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=0755,size=1m")
            covered.append(a)
            break
    for d in dirs:
        if any(d.startswith(c + "/") for c in covered):
            os.makedirs(d, exist_ok=True)
            linux.mount(f"/proc/self/fd/{held[d]}", d, None, linux.MS_BIND | linux.MS_REC)
    for fd in held.values():
        os.close(fd)


def deny_user_namespaces() -> None:
    """Enter a user namespace (as its root, mapped to our root) in which no further one may be made."""
    linux.unshare(linux.CLONE_NEWUSER)
    linux.write_id_maps(0, 0, 0, 0)
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("0")


def run_in_pod_userns(outer: int, cmd: list[str]) -> None:
    """Exec ``cmd`` as root of a new user namespace mapping 65536 ids from ``outer`` (only a
    process outside may write such a map, so a forked child waits for its parent to do it)."""
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        linux.unshare(linux.CLONE_NEWUSER)
        os.write(ready_w, b"x")
        os.read(go_r, 1)
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        os.execv(cmd[0], cmd)
    os.read(ready_r, 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as fh:
            fh.write(f"0 {outer} 65536\n")
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def unprivileged_launcher(uid: int = NOBODY, gid: int | None = None, deny_userns: bool = False,
                          pod_userns: int | None = None, mask_proc: bool = False) -> tuple[list[str] | None, str]:
    """A command prefix starting the rest as ``uid`` with no capabilities, or (None, why not)."""
    if os.geteuid() != 0:
        return None, "needs root to start a process as another user"
    if shutil.which("setpriv") is None:
        return None, "setpriv (util-linux) is not installed"
    gid = uid if gid is None else gid
    extra = ["--deny-userns"] if deny_userns else []
    extra += ["--pod-userns", str(pod_userns)] if pod_userns is not None else []
    extra += ["--mask-proc"] if mask_proc else []
    return [sys.executable, "-m", "opteval.evalcore.sandbox.asuser", "--uid", str(uid), "--gid", str(gid), *extra, "--"], ""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uid", type=int, default=NOBODY)
    ap.add_argument("--gid", type=int, default=None)
    ap.add_argument("--deny-userns", action="store_true")
    ap.add_argument("--pod-userns", type=int, default=None, metavar="OUTER")
    ap.add_argument("--mask-proc", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command given")
    gid = args.uid if args.gid is None else args.gid
    if args.pod_userns is not None:
        expose(installation_dirs(), args.pod_userns, args.pod_userns)
        run_in_pod_userns(args.pod_userns, cmd)
    expose(installation_dirs(), args.uid, gid)
    if args.mask_proc:
        linux.mount("/dev/null", "/proc/uptime", None, linux.MS_BIND)
    setpriv = shutil.which("setpriv") or "setpriv"
    ids = [f"--reuid={args.uid}", f"--regid={gid}", "--clear-groups"]
    if args.deny_userns:
        deny_user_namespaces()
        ids = []  # only root is mapped in there; it keeps uid 0 but loses every capability below
    os.execv(setpriv, [setpriv, *ids, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--", *cmd])


if __name__ == "__main__":
    main()
