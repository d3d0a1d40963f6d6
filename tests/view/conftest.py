"""One real sweep (the simulated policy, real local Ray, the real sandbox) shared by the viewer tests."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SWEEP = "view-demo"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def opteval(*args: str, cwd: Path = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "opteval.jobs.cli", *args], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Path:
    """The output dir of a finished 2-method sweep over 3 sample problems, tracked to a SQLite MLflow."""
    out = tmp_path_factory.mktemp("view")
    done = opteval("sweep", f"sweep.name={SWEEP}", f"sweep.output_dir={out}", "models=[sim-fast]",
                   "methods=[direct,opticycle]", "benchmarks=[sample]", "limit_problems=3", "samples.default=1",
                   "cluster.workers=1", "cluster.executors=1", f"serving.http_port={free_port()}",
                   f"tracking.uri=sqlite:///{out}/mlflow.db")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def args(out: Path) -> list[str]:
    return [f"sweep.name={SWEEP}", f"sweep.output_dir={out}", f"tracking.uri=sqlite:///{out}/mlflow.db"]
