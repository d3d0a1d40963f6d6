"""Thin ctypes wrappers over the Linux calls Python 3.11 lacks (unshare, setns, mount, pivot_root, prctl),
plus the few user-namespace helpers (id maps, capability check, locked mount flags).

Why ctypes: ``os.unshare``/``os.setns`` only arrive in Python 3.12 and ``mount``/``pivot_root``
never; the fork server needs all of them, once at start (its private root) and once per run
(a PID namespace and a private mount namespace for /proc, /tmp and the working directory).
Every wrapper raises ``OSError`` with the call's name and errno so a failure names itself.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

CAP_SETGID = 6
CAP_SETUID = 7
CAP_SYS_CHROOT = 18
CAP_SYS_ADMIN = 21
ROOT_PATH_CAPS = (CAP_SETGID, CAP_SETUID, CAP_SYS_CHROOT, CAP_SYS_ADMIN)

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), f"unshare(0x{flags:x})")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(fd, nstype), f"setns(fd={fd}, 0x{nstype:x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount({source!r} -> {target!r})")


def umount2(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(_b(target), flags), f"umount2({target!r})")


def pivot_root(new_root: str, put_old: str) -> None:
    if _SYS_PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(_libc.syscall(_SYS_PIVOT_ROOT, _b(new_root), _b(put_old)), f"pivot_root({new_root!r}, {put_old!r})")


def prctl(option: int, arg2: int = 0) -> None:
    _check(_libc.prctl(option, arg2, 0, 0, 0), f"prctl({option}, {arg2})")


def set_name(name: str) -> None:
    """Set this thread's comm (what ``/proc/<pid>/comm`` and ``ps`` show)."""
    buf = ctypes.create_string_buffer(name.encode()[:15])
    _libc.prctl(PR_SET_NAME, ctypes.cast(buf, ctypes.c_void_p).value or 0, 0, 0, 0)


def sethostname(name: str) -> None:
    data = name.encode()
    _check(_libc.sethostname(data, len(data)), "sethostname")


def effective_caps() -> int:
    """This process's effective capability set, as a bit mask (``CapEff`` in /proc/self/status)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def privileged() -> bool:
    """Whether the root path can work: euid 0 with the capabilities it uses (a throwaway uid
    per run needs SETUID/SETGID, mounts SYS_ADMIN, joining a mount namespace SYS_CHROOT)."""
    need = sum(1 << c for c in ROOT_PATH_CAPS)
    return os.geteuid() == 0 and effective_caps() & need == need


def _write_proc(name: str, text: str) -> None:
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
    try:
        os.write(fd, text.encode())  # an id map must arrive in one write
    finally:
        os.close(fd)


def write_id_maps(inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int) -> None:
    """Map one uid and one gid of a user namespace this process just created (all an
    unprivileged process may map: its own ids). ``setgroups`` must be denied first."""
    try:
        _write_proc("setgroups", "deny")
    except FileNotFoundError:  # kernels before 3.19
        pass
    _write_proc("uid_map", f"{inside_uid} {outside_uid} 1\n")
    _write_proc("gid_map", f"{inside_gid} {outside_gid} 1\n")


_ST_TO_MS = ((os.ST_RDONLY, MS_RDONLY), (os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
             (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
             (os.ST_RELATIME, MS_RELATIME))


def mount_flags(path: str) -> int:
    """The ``MS_*`` flags of the mount holding ``path``.

    Why: inside a user namespace, flags inherited from a more privileged mount namespace
    are locked; a bind remount that drops one (``nodev``, ``noexec``, an atime mode) fails
    with EPERM. Passing them back keeps the remount legal and changes nothing as root.
    """
    f = os.statvfs(path).f_flag
    return sum(ms for st, ms in _ST_TO_MS if f & st)


NS_GET_USERNS = 0xB701


def owns_pid_namespace() -> bool:
    """Whether our user namespace owns our PID namespace (so we may ``setns`` back into it).

    True on a host and in a pod whose runtime made the PID namespace inside the pod's user
    namespace; False when this process made a user namespace but still lives in a PID
    namespace owned by an ancestor.
    """
    # deferred, no saving: the sandbox package (host) has loaded fcntl
    import fcntl

    fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = fcntl.ioctl(fd, NS_GET_USERNS)
    except OSError as exc:
        return exc.errno != errno.EPERM  # EPERM: owned by an ancestor of our user namespace
    finally:
        os.close(fd)
    try:
        return os.fstat(owner).st_ino == os.stat("/proc/self/ns/user").st_ino
    finally:
        os.close(owner)
