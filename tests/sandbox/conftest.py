"""Fixtures for the sandbox tests: one contained fork server shared by the session, helpers to find
processes on the host by a marker a sandboxed program puts in its command line or comm.

Every test that takes ``server`` (or ``as_user``) runs twice: ``[root]``, with the fork server
started by this (root) test process, and ``[unprivileged]``, with the fork server started as
uid 65534 with empty capability sets (``opteval.evalcore.sandbox.asuser``: setpriv, and the Python
installation bound back at its own path where that user could not reach it). The test process
stays root in both, so it can check the host side: planted files, host pids, a loopback port.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from opteval.evalcore.sandbox import ForkServer
from opteval.evalcore.sandbox.asuser import NOBODY, unprivileged_launcher
from opteval.evalcore.sandbox.host import SandboxUnavailable

# Present in the host process *before* any fork server starts: it must never reach a program.
SECRET_ENV = "OPTEVAL_SANDBOX_TEST_SECRET"
SECRET_VALUE = "hunter2-d1b7c0"
os.environ[SECRET_ENV] = SECRET_VALUE


@pytest.fixture(scope="session", params=["root", "unprivileged"])
def as_user(request) -> dict:
    """``ForkServer`` keyword arguments that start the server as root or as an unprivileged user."""
    if request.param == "root":
        return {}
    launcher, why = unprivileged_launcher(NOBODY)
    if launcher is None:
        pytest.skip(f"cannot start a fork server as uid {NOBODY}: {why}")
    return {"launcher": launcher}


@pytest.fixture(scope="session")
def server(as_user):
    fs = ForkServer(pool_size=2, **as_user)
    try:
        fs.start()
    except SandboxUnavailable as exc:
        if as_user:
            pytest.skip(f"this kernel gives an unprivileged user no namespaces, so the sandbox refuses: {exc}")
        pytest.fail(f"namespaces should work as root on this machine and in CI: {exc}")
    assert fs.contained, fs.note
    yield fs
    fs.close()


def reachable_dir(tmp_root: str = "/tmp") -> str:
    """A fresh directory every user may read (so a planted file is hidden by the sandbox, not by
    permissions: pytest's tmp_path is mode 0700 and uid 65534 could not read it anyway)."""
    import tempfile

    d = tempfile.mkdtemp(prefix="opteval-plant-", dir=tmp_root)
    os.chmod(d, 0o755)
    return d


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose comm or command line contains ``marker``."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            comm = (entry / "comm").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue  # a zombie runs nothing; its parent reaps it
        if marker in comm or marker in cmdline:
            found.append(int(entry.name))
    return found


def wait_gone(marker: str, timeout: float = 3.0) -> list[int]:
    """Poll until no live process carries ``marker``; return what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    left = host_pids_with(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = host_pids_with(marker)
    return left
