"""The shared demo sweep (tests/demo_sweep.py: the simulated policy, real local Ray, the real sandbox) for the export tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import demo_sweep

REPO = Path(__file__).resolve().parents[2]
SWEEP = demo_sweep.SWEEP


def opteval(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "opteval.jobs.cli", *args], cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def demo(shared_demo: Path) -> Path:
    """The output dir of a finished 2-method sweep (direct, opticycle) over 3 sample problems: the
    one tests/demo_sweep.py runs for the viewer, audit and export tests (they only read it)."""
    return shared_demo


def sweep_args(out: Path) -> list[str]:
    return [f"sweep.name={SWEEP}", f"sweep.output_dir={out}"]
