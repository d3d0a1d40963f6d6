"""One real sweep (the simulated policy, real local Ray, the real sandbox) shared by the viewer tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo_sweep import SWEEP, free_port  # noqa: F401  (the shared sweep; tests import both from here)

REPO = Path(__file__).resolve().parents[2]


def opteval(*args: str, cwd: Path = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "opteval.jobs.cli", *args], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def demo(shared_demo: Path) -> Path:
    """The output dir of a finished 2-method sweep over 3 sample problems, tracked to a SQLite MLflow
    (tests/demo_sweep.py: one sweep for the viewer, audit and export tests)."""
    return shared_demo


def args(out: Path) -> list[str]:
    return [f"sweep.name={SWEEP}", f"sweep.output_dir={out}", f"tracking.uri=sqlite:///{out}/mlflow.db"]
