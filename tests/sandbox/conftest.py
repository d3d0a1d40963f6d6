"""Fixtures for the sandbox tests: one contained fork server shared by the session, helpers to find
processes on the host by a marker a sandboxed program puts in its command line or comm."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from evalcore.sandbox import ForkServer

# Present in the host process *before* any fork server starts: it must never reach a program.
SECRET_ENV = "OPTEVAL_SANDBOX_TEST_SECRET"
SECRET_VALUE = "hunter2-d1b7c0"
os.environ[SECRET_ENV] = SECRET_VALUE


@pytest.fixture(scope="session")
def server():
    fs = ForkServer(pool_size=2)
    fs.start()
    if not fs.contained:
        pytest.fail(f"namespaces should work as root on this machine and in CI: {fs.note}")
    yield fs
    fs.close()


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
