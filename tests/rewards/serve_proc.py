"""Start ``jobs/rewards.py serve`` as a subprocess with its own local Ray, wait until it answers,
stop it with SIGTERM (then SIGKILL of its own session only). Shared by the service tests."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rewards_service(log: Path, *flags: str, env: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                    ready_s: float = 300.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL on loopback, process) of a running service started with ``flags``."""
    port = free_port()
    full_env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled", **(env or {}))
    full_env.pop("RAY_ADDRESS", None)  # always a local Ray of its own
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "jobs" / "rewards.py"), "serve", "--port", str(port), *flags],
        cwd=REPO, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/rewards"
    deadline = time.monotonic() + ready_s
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url, timeout=5, headers=headers).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"service not ready after {ready_s:.0f} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session only
            proc.wait(timeout=30)
