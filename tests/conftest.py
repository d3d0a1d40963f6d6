"""Shared fixtures. Tests never write outside tmp dirs; Ray runs without token auth locally."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_BENCHMARKS = REPO.parent / "shared" / "benchmarks"


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """The normalized public benchmarks laid beside the checkout (read-only)."""
    if not (SHARED_BENCHMARKS / "nl4opt.jsonl").exists():
        pytest.fail(f"expected the shared benchmarks at {SHARED_BENCHMARKS}")
    return SHARED_BENCHMARKS
