"""Throughput of a whole Direct sweep vs. the executors alone on the same programs (one run).

Why this ratio: the executors are the floor of a sweep's cost on CPU (every trajectory
runs a solver program). With the simulated policy at zero latency (``sim-fast``), the
rest of the path (plan, Serve HTTP, worker, executor facade, grading, Parquet commits)
should add little: target sweep/executor-only >= 0.8.

    python bench/bench_sweep.py [--problems N] [--samples K]

Baseline: the programs the simulated policy writes for exactly those Direct
trajectories (captured in process with the same harness, model and seeds), run
directly on executor actors like the sweep's, with as many in flight as the sweep keeps.
Both phases run on one local Ray started here; figures printed as JSON at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


class _Capture:
    """An Executor that records the program and reports a clean run (no submission)."""

    def __init__(self) -> None:
        self.programs: list[str] = []

    async def run(self, code, limits=None):
        from evalcore.sandbox.types import ExecResult

        self.programs.append(code)
        return ExecResult(outcome="ok")

    async def open_session(self):  # Direct never opens one
        raise NotImplementedError


async def capture_programs(prep) -> list[str]:
    """The program of every planned Direct trajectory, produced in process by the same policy."""
    from cluster.serving import simulated_model_cfg
    from evalcore.harnesses import get_harness
    from evalcore.harnesses.base import HarnessContext
    from evalcore.models import make_model

    cap = _Capture()
    models = {m: make_model(simulated_model_cfg(prep.model_cfgs[m])) for m in prep.model_cfgs}
    for it in prep.plan:
        sampling, budgets = prep.run_params(it.model, it.method)
        ctx = HarnessContext(model=models[it.model], executor=cap, sampling=sampling, sample=it.sample,
                             budgets=budgets, model_name=it.model, method=it.method)
        await get_harness("direct").run(prep.problems[(it.benchmark, it.problem_id)], ctx)
    return cap.programs


async def executor_only(programs: list[str], handles: list, slots: int, limits) -> float:
    """Programs/s on the executor actors alone, ``slots`` in flight (each actor runs one per CPU, the rest queue)."""
    from cluster.executors import RayExecutor, _Shared

    ex = RayExecutor(_Shared(handles), limits)
    sem = asyncio.Semaphore(slots)

    async def one(code: str):
        async with sem:
            return await ex.run(code, limits)

    t0 = time.perf_counter()
    results = await asyncio.gather(*[one(p) for p in programs])
    wall = time.perf_counter() - t0
    bad = [r.outcome for r in results if r.outcome == "killed"]
    assert not bad, f"executor-only baseline lost runs: {bad[:3]}"
    return len(programs) / wall


def cpu_snapshot() -> dict[str, float]:
    """CPU seconds per process role (Ray names its worker processes ray::<Class>), for the breakdown."""
    import psutil

    out: dict[str, float] = {}
    for p in psutil.process_iter(["cmdline", "cpu_times", "name"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])[:200]
            ct = p.info["cpu_times"]
            if ct is None:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        role = _role(cmd, p.info["name"] or "")
        if role:
            out[role] = out.get(role, 0.0) + ct.user + ct.system + getattr(ct, "children_user", 0.0) + getattr(ct, "children_system", 0.0)
    return out


def _role(cmd: str, name: str) -> str | None:
    for key in ("ExecutorActor", "HarnessWorker", "ProxyActor", "ServeReplica", "ServeController", "raylet",
                "gcs_server", "bench_sweep", "evalcore.sandbox"):
        if key in cmd or key in name:
            return key
    return "ray::other" if cmd.startswith("ray::") or "ray/" in cmd else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=46)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--port", type=int, default=8347)
    args = ap.parse_args()

    import ray

    from cluster.config import load_config
    from cluster.executors import start_executors
    from cluster.runtime import connect, disconnect
    from cluster.scheduler import drive, executor_count, prepare, stop_actors
    from evalcore.sandbox.types import Limits

    out = tempfile.mkdtemp(prefix="opteval-bench-")
    cfg = load_config([
        "sweep.name=bench", f"sweep.output_dir={out}", "models=[sim-fast]", "methods=[direct]", "benchmarks=[sample]",
        f"limit_problems={args.problems}", f"samples.default={args.samples}", f"serving.http_port={args.port}",
        "tracking.enabled=false", "progress.interval_s=5",
    ])
    prep = prepare(cfg)
    programs = asyncio.run(capture_programs(prep))
    rt = connect(None)
    try:
        limits = Limits(**dict(cfg.limits))
        n_exec = executor_count(cfg)
        handles = start_executors("bench-baseline", n_exec, float(cfg.cluster.executor_cpus), limits)
        inflight = int(cfg.cluster.max_in_flight_per_model)  # as many queued as the sweep keeps in flight
        asyncio.run(executor_only(programs[: min(8, len(programs))], handles, inflight, limits))  # warm up
        base_rate = asyncio.run(executor_only(programs, handles, inflight, limits))
        stop_actors(handles)
        before = cpu_snapshot()
        t0 = time.perf_counter()
        run = asyncio.run(drive(prep))
        total_wall = time.perf_counter() - t0
        after = cpu_snapshot()
        cpu = {k: round(after.get(k, 0.0) - before.get(k, 0.0), 1) for k in after}
        sweep_rate = run.progress.steady_rate()
        sweep_rate_all = run.progress.done / max(1e-9, run.progress.dispatch_wall())
    finally:
        disconnect(rt)
    figures = {
        "trajectories": len(prep.plan), "executors": n_exec, "cpus": os.cpu_count(),
        "executor_only_programs_per_s": round(base_rate, 3),
        "sweep_trajectories_per_s": round(sweep_rate, 3),
        "ratio": round(sweep_rate / base_rate, 3), "target": 0.8,
        "sweep_trajectories_per_s_incl_ramp_up": round(sweep_rate_all, 3),
        "sweep_wall_s_incl_actor_start_and_deploy": round(total_wall, 1),
        "sweep_cpu_s_by_process_role": {k: v for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v > 0.05},
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
