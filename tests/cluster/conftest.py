"""One local Ray (with Serve on a free port) for the whole cluster test session.

Why one: starting Ray costs 10-20 s on a busy 2-core machine. Sweeps under test run in
this process (``run_sweep``) or as ``jobs/sweep.py`` subprocesses that join this cluster
through ``cluster.address``; every test uses its own sweep name and output directory.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.configs_with import write_configs

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "jobs" / "sweep.py"

# A simulated model slow enough that trajectories are in flight when a test kills something.
SIM_SLOW = """name: sim-slow
backend: simulated
family: simulated
size_b: null
simulated: {p_correct: 0.6, ttft_s: 0.4, tokens_per_s: 0}
sampling: {}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def configs_dir(tmp_path_factory) -> Path:
    """The repo's configs plus ``sim-slow``; tests select it with ``$OPTEVAL_CONFIGS`` (monkeypatched)."""
    return write_configs(tmp_path_factory.mktemp("configs") / "configs", {"models/sim-slow.yaml": SIM_SLOW})


SERVE_WARNING_S = 3  # the session cluster's RAY_SERVE_SLOW_STARTUP_WARNING_S (Ray's default: 30)


@pytest.fixture(scope="session")
def ray_cluster():
    """(gcs address, serve http port) of the session's local Ray."""
    import ray

    from opteval.cluster.runtime import connect

    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Serve's slow-start / "to be scheduled" warnings after SERVE_WARNING_S instead of its 30 s:
    # every replica of the session that is slow to start shows them (readiness must wait through
    # them, tests/cluster/test_readiness_waits.py) without each such test sleeping past 30 s.
    os.environ["RAY_SERVE_SLOW_STARTUP_WARNING_S"] = str(SERVE_WARNING_S)
    os.environ["RAY_SERVE_SLOW_STARTUP_WARNING_PERIOD_S"] = str(SERVE_WARNING_S)
    connect(None, num_cpus=2)
    port = free_port()
    from opteval.cluster.serve.serving import ensure_serve

    ensure_serve(port)
    address = ray.get_runtime_context().gcs_address
    yield address, port
    try:
        from ray import serve

        serve.shutdown()
    finally:
        ray.shutdown()


def sweep_args(out: Path, name: str, port: int, *extra: str, models: str = "[sim-fast]",
               methods: str = "[direct,opticycle,optistate]", limit: int = 3, samples: int = 1) -> list[str]:
    return [
        f"sweep.name={name}", f"sweep.output_dir={out}", f"models={models}", f"methods={methods}",
        "benchmarks=[sample]", f"limit_problems={limit}", f"samples.default={samples}",
        f"serving.http_port={port}", "progress.interval_s=1", "sweep.commit_batch=2",
        "sweep.commit_interval_s=0.5", "cluster.workers=2", "cluster.executors=2",
        # a local SQLite store is never "hung": on a loaded CI machine its first migration alone can
        # pass the default 30 s bound, which turns tracking off and leaves the runs without metrics
        f"tracking.uri=sqlite:///{out}/mlflow.db", "tracking.timeout_s=300", *extra,
    ]


def spawn_sweep(args: list[str], address: str, log: Path, configs: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONPATH=str(REPO))
    if configs is not None:
        env["OPTEVAL_CONFIGS"] = str(configs)
    return subprocess.Popen([sys.executable, str(SWEEP), *args, f"cluster.address={address}"],
                            cwd=str(REPO), env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def committed_files(out: Path, name: str) -> list[Path]:
    root = out / name / "trajectories"
    if not root.exists():
        return []
    return [p for p in root.rglob("*.parquet") if not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)]


def wait_for(pred, timeout_s: float, what: str, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def ledger_frame(out: Path, name: str):
    """The sweep's rows as pandas in format 1's view (detail as JSON text, ``error`` as text), whatever
    the ledger's format: the tests read that, decoded through ``opteval.evalcore.ledger_detail``."""
    return format1_frame(out, name)


def format1_frame(out: Path, name: str):
    import pyarrow as pa

    from opteval.evalcore.ledger_detail import encode_row
    from opteval.evalcore.records import LEDGER_SCHEMA_V1
    from opteval.sweepcore.ledger import Ledger

    led = Ledger.open(str(out), name, {}, "", True, read_only=True)
    table = led.read_table()
    if led.format != 1:
        table = pa.Table.from_pylist([encode_row(r, 1) for r in table.to_pylist()], schema=LEDGER_SCHEMA_V1)
    return table.to_pandas()


IDENTITY = ["model", "method", "benchmark", "problem_id", "sample", "status", "submission", "correct"]


def identities(df) -> list[tuple]:
    return sorted(tuple(r) for r in df[IDENTITY].astype(str).itertuples(index=False))


def run_uninterrupted(args: list[str], out: Path, name: str, configs: Path):
    """Run a sweep to the end in this process with ``$OPTEVAL_CONFIGS`` = ``configs``: the
    reference a faulted run must equal. Returns (its ledger frame, planned trajectories)."""
    from opteval.cluster.driver import run_sweep
    from opteval.cluster.driver.prepare import prepare
    from opteval.sweepcore.config import load_config

    old = os.environ.get("OPTEVAL_CONFIGS")
    os.environ["OPTEVAL_CONFIGS"] = str(configs)
    try:
        cfg = load_config(args)
        assert run_sweep(cfg) == 0
        return ledger_frame(out, name), len(prepare(cfg, read_only=True).plan)
    finally:
        if old is None:
            os.environ.pop("OPTEVAL_CONFIGS", None)
        else:
            os.environ["OPTEVAL_CONFIGS"] = old


class _Helpers:
    """The helpers above as one fixture (test modules cannot import conftest under importlib mode)."""

    sweep_args = staticmethod(sweep_args)
    spawn_sweep = staticmethod(spawn_sweep)
    committed_files = staticmethod(committed_files)
    wait_for = staticmethod(wait_for)
    ledger_frame = staticmethod(ledger_frame)
    identities = staticmethod(identities)
    run_uninterrupted = staticmethod(run_uninterrupted)
    sweep_py = SWEEP
    repo = REPO


@pytest.fixture(scope="session")
def h() -> _Helpers:
    return _Helpers()
