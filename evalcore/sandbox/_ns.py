"""Thin ctypes wrappers over the Linux calls Python 3.11 lacks (unshare, setns, mount, pivot_root, prctl).

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
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
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
