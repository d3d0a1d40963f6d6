"""One real demo sweep (the simulated policy, real local Ray, the real sandbox) shared by the export tests."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SWEEP = "export-demo"


def opteval(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "opteval.jobs.cli", *args], cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Path:
    """The output dir of a finished 2-method sweep (direct, opticycle) over 3 sample problems."""
    out = tmp_path_factory.mktemp("export")
    done = opteval("sweep", f"sweep.name={SWEEP}", f"sweep.output_dir={out}", "models=[sim-fast]",
                   "methods=[direct,opticycle]", "benchmarks=[sample]", "limit_problems=3", "samples.default=1",
                   "cluster.workers=1", "cluster.executors=1", f"serving.http_port={_free_port()}",
                   f"tracking.uri=sqlite:///{out}/mlflow.db")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def sweep_args(out: Path) -> list[str]:
    return [f"sweep.name={SWEEP}", f"sweep.output_dir={out}"]
