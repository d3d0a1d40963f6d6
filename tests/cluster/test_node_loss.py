"""A worker node lost mid-sweep on a real 2-node Ray cluster (``ray start`` twice on this
machine, explicit free ports, our own temp dir): its raylet is killed by PID, the pools
heal onto the surviving node, and the ledger ends identical to an uninterrupted run.

Slow (two nodes, two sweeps: minutes on 2 cores): marker ``faults``, deselected by the
README test command, run by ``.ci/run`` with ``-m faults``. It never touches other Ray
clusters on the machine: every process it stops is found by its own temp dir and port.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "jobs" / "sweep.py"


def _ports(n: int) -> list[int]:
    socks, out = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        out.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return out


def _worker_blocks(n: int, size: int = 41) -> list[int]:
    """Bases of ``n`` free blocks of worker ports, below the kernel's ephemeral range (32768+)
    where ``_ports`` draws from, so a block never holds another component's port (a block
    beside those ports once swallowed the agent's gRPC port and ``ray start`` refused)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(11000, 32000 - n * size)
        socks = []
        try:
            for port in range(base, base + n * size):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return [base + i * size for i in range(n)]
    raise AssertionError(f"no {n} free blocks of {size} worker ports below 32000")


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _node_args(temp: str, nm: int, om: int, wmin: int, extra: list[int]) -> list[str]:
    agent, agent_grpc, metrics, rt_env = extra
    return [f"--temp-dir={temp}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
            f"--min-worker-port={wmin}", f"--max-worker-port={wmin + 40}",
            f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rt_env}", "--disable-usage-stats"]


def _our_pids(temp: str) -> list[int]:
    """PIDs of processes whose command line names our temp dir (our two nodes, nobody else's)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp in cmd:
            out.append(int(d.name))
    return out


def _raylet_pid(temp: str, nm_port: int) -> int:
    for pid in _our_pids(temp):
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "raylet" in cmd.split(" ")[0] and f"--node_manager_port={nm_port}" in cmd:
            return pid
    raise AssertionError(f"no raylet with node manager port {nm_port}")


@pytest.fixture()
def two_nodes(tmp_path):
    temp = tempfile.mkdtemp(prefix="fl-", dir="/tmp")
    ports = _ports(24)
    gcs = ports[0]
    head_workers, node_workers = _worker_blocks(2)
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    head = [_ray_bin(), "start", "--head", f"--port={gcs}", "--num-cpus=2", "--include-dashboard=false",
            '--resources={"opteval_executor": 2}',
            f"--ray-client-server-port={ports[1]}", *_node_args(temp, ports[2], ports[3], head_workers, ports[5:9])]
    worker = [_ray_bin(), "start", f"--address=127.0.0.1:{gcs}", "--num-cpus=2", '--resources={"opteval_executor": 2}',
              *_node_args(temp, ports[10], ports[11], node_workers, ports[13:17])]
    try:
        for what, cmd in (("head", head), ("worker", worker)):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
            assert r.returncode == 0, f"ray start ({what}) failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        yield {"address": f"127.0.0.1:{gcs}", "temp": temp, "worker_nm": ports[10], "http": ports[20], "env": env}
    finally:
        for pid in _our_pids(temp):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def _args(out: Path, name: str, port: int) -> list[str]:
    return [f"sweep.name={name}", f"sweep.output_dir={out}", "models=[sim-slow]", "methods=[direct,opticycle]",
            "benchmarks=[sample]", "limit_problems=4", "samples.default=2", f"serving.http_port={port}",
            "progress.interval_s=2", "sweep.commit_batch=2", "sweep.commit_interval_s=0.5", "cluster.workers=2",
            "cluster.executors=3", "cluster.retries=3", "cluster.retry_backoff_s=2",
            "cluster.max_in_flight_per_model=4", "tracking.enabled=false"]


def _frame(out: Path, name: str):
    from opteval.sweepcore.ledger import Ledger

    return Ledger.open(str(out), name, {}, "", True, read_only=True).read_table().to_pandas()


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
        os.kill(_raylet_pid(two_nodes["temp"], two_nodes["worker_nm"]), signal.SIGKILL)
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
