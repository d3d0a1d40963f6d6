"""``opteval serve`` on SIGTERM tears down what it deployed, like Ctrl-C: on a cluster it joined,
the app would otherwise stay deployed and answering (and keep its GPUs)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from ray import serve

from tests.cluster.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray


def _read(proc: subprocess.Popen, sink: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sink.append(line.rstrip("\n"))


def test_sigterm_tears_down_the_served_app_on_a_joined_cluster(ray_cluster):
    from opteval.cluster.serve.serving import simulated_app_name

    address, port = ray_cluster
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled")
    proc = subprocess.Popen([sys.executable, str(REPO / "jobs" / "serve.py"), "models=[sim-fast]",
                             f"cluster.address={address}", f"serving.http_port={port}"],
                            cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=_read, args=(proc, lines), daemon=True).start()
    app = simulated_app_name("sim-fast")
    try:
        wait_for(lambda: any(x.startswith("serving;") for x in lines) or proc.poll() is not None, 180,
                 "opteval serve to print its endpoint")
        assert proc.poll() is None, "\n".join(lines[-30:])
        url = next(x for x in lines if x.startswith("sim-fast: base_url=")).split("base_url=")[1].split()[0]
        assert httpx.get(f"{url}/models", timeout=30).status_code == 200
        assert app in serve.status().applications
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, "\n".join(lines[-30:])
    assert any(x.startswith("tearing down") for x in lines), lines[-10:]
    assert app not in serve.status().applications  # the cluster it joined no longer serves it
