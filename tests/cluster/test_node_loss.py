"""A worker node lost mid-sweep on a real 2-node Ray cluster (``ray start`` twice on this
machine, explicit free ports, our own temp dir): its raylet is killed by PID, the pools
heal onto the surviving node, and the ledger ends identical to an uninterrupted run.

Slow (two nodes, two sweeps: minutes on 2 cores): marker ``faults``, deselected by the
README test command, run by ``.ci/run`` with ``-m faults``. It never touches other Ray
clusters on the machine: every process it stops is found by its own temp dir and port.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fake_nodes import Node, fake_cluster, free_ports

pytestmark = [pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "jobs" / "sweep.py"


@pytest.fixture()
def two_nodes():
    node = Node(cpus=2, resources={"opteval_executor": 2})
    with fake_cluster([node, node], wait=False, prefix="fl-") as cluster:
        yield {"address": cluster.address, "cluster": cluster, "http": free_ports(1)[0], "env": cluster.env}


def _args(out: Path, name: str, port: int) -> list[str]:
    return [f"sweep.name={name}", f"sweep.output_dir={out}", "models=[sim-slow]", "methods=[direct,opticycle]",
            "benchmarks=[sample]", "limit_problems=4", "samples.default=2", f"serving.http_port={port}",
            "progress.interval_s=2", "sweep.commit_batch=2", "sweep.commit_interval_s=0.5", "cluster.workers=2",
            "cluster.executors=3", "cluster.retries=3", "cluster.retry_backoff_s=2",
            "cluster.max_in_flight_per_model=4", "tracking.enabled=false"]


def _frame(out: Path, name: str):
    from tests.cluster.conftest import format1_frame

    return format1_frame(out, name)


IDENTITY = ["model", "method", "benchmark", "problem_id", "sample", "status", "submission", "correct"]


def test_worker_node_raylet_killed_mid_sweep_ends_identical(two_nodes, tmp_path, configs_dir):
    env = dict(two_nodes["env"], OPTEVAL_CONFIGS=str(configs_dir), PYTHONPATH=str(REPO))
    cmd = [sys.executable, str(SWEEP), f"cluster.address={two_nodes['address']}"]
    ref = subprocess.run([*cmd, *_args(tmp_path, "reference", two_nodes["http"])], env=env, cwd=str(REPO),
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]

    log = tmp_path / "lossy.log"
    proc = subprocess.Popen([*cmd, *_args(tmp_path, "lossy", two_nodes["http"])], env=env, cwd=str(REPO),
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        root = tmp_path / "lossy" / "trajectories"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if root.exists() and list(root.rglob("part-*.parquet")):
                break
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text()[-3000:]
        os.kill(two_nodes["cluster"].raylet_pid(1), signal.SIGKILL)
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert rc == 0, text[-4000:]
    base, df = _frame(tmp_path, "reference"), _frame(tmp_path, "lossy")
    assert len(df) == len(base) and not df["key"].duplicated().any()
    assert (df["status"] != "error").all(), df[df["status"] == "error"]["error"].tolist()
    key = lambda frame: sorted(tuple(r) for r in frame[IDENTITY].astype(str).itertuples(index=False))  # noqa: E731
    assert key(df) == key(base)
    # the lost node held part of the pools (3 one-CPU executors, 2 CPUs per node): its work was retried
    assert int((df["attempts"] - 1).sum()) >= 1 or "[sweep] retry" in text, text[-3000:]
    print(f"node loss: {int((df['attempts'] - 1).sum())} retries, "
          f"{text.count('[sweep] retry')} retry lines in the driver's log")
