"""Throughput of a whole Direct sweep vs. the executors alone on the same programs (one run).

Why this ratio: the executors are the floor of a sweep's cost on CPU (every trajectory
runs a solver program). With the simulated policy at zero latency (``sim-fast``), the
rest of the path (plan, Serve HTTP, worker, executor facade, grading, Parquet commits)
should add little: target sweep/executor-only >= 0.8.

    python bench/bench_sweep.py [--problems N] [--samples K]

Baseline: the programs the simulated policy writes for exactly those Direct
trajectories (captured in process with the same harness, model and seeds), run
directly on executor actors like the sweep's, with as many in flight as the sweep keeps.
Both phases run on one local Ray started here, on the same executor actors' count
and configuration, each warmed first, with the same number in flight, and both rates
are steady rates (first 10% of completions left out). Figures printed as JSON at the end,
with CPU ms per item by process role over each steady window (sampled from this
process's descendants only, so other Ray clusters on a shared machine are not counted):
on a shared machine the ratio moves with other load, the CPU ms per item much less.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

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


async def executor_only(programs: list[str], handles: list, slots: int, limits) -> tuple[float, float, float]:
    """(programs/s, t0, t1) on the executor actors alone, ``slots`` in flight (each actor runs one
    per CPU, the rest queue); the rate is the steady one, measured exactly as the sweep's."""
    from cluster.driver.progress import Progress
    from cluster.executors import RayExecutor, _Shared

    ex = RayExecutor(_Shared(handles), limits)
    sem = asyncio.Semaphore(slots)
    prog = Progress(planned=len(programs), already=0)

    async def one(code: str):
        async with sem:
            res = await ex.run(code, limits)
        prog.record("x", "x", False, False)
        return res

    results = await asyncio.gather(*[one(p) for p in programs])
    bad = [r.outcome for r in results if r.outcome == "killed"]
    assert not bad, f"executor-only baseline lost runs: {bad[:3]}"
    t = prog.finish_times
    return prog.steady_rate(), t[int(len(t) * 0.1)], t[-1]


class CpuSampler:
    """CPU seconds per process role over time, for this bench's own Ray only.

    Why sampled in a thread: the sweep kills its actors (and Serve its replica) before
    ``drive`` returns, and a dead process's CPU time can no longer be read; other
    Ray clusters on a shared machine must not be counted either, so only
    descendants of this process are looked at. Children's reaped CPU (the sandbox
    forks) is included through ``children_user``/``children_system``.
    """

    def __init__(self, period_s: float = 0.2) -> None:
        import threading

        self._period = period_s
        self._samples: dict[int, list[tuple[float, float]]] = {}
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            now = time.monotonic()
            for p in [me] + me.children(recursive=True):
                try:
                    with p.oneshot():
                        if self._roles.get(p.pid, "ray:").startswith("ray:"):  # Ray renames its workers later
                            role = _role(" ".join(p.cmdline())[:200], p.name()) or f"other:{p.name()}"
                            if self._roles.get(p.ppid()) in ("evalcore.sandbox", "fork"):
                                # a sandboxed run (and its solver): counted, once reaped, in the server's children_*
                                role = "fork"
                            self._roles[p.pid] = role
                        ct = p.cpu_times()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                if self._roles[p.pid] == "fork":
                    continue
                cpu = ct.user + ct.system + ct.children_user + ct.children_system
                self._samples.setdefault(p.pid, []).append((now, cpu))
            self._stop.wait(self._period)

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per role spent between monotonic times t0 and t1 (last samples at or before each)."""
        out: dict[str, float] = {}
        for pid, series in self._samples.items():
            role = self._roles[pid]
            out[role] = out.get(role, 0.0) + max(0.0, _cpu_at(series, t1) - _cpu_at(series, t0))
        return out


def _cpu_at(series: list[tuple[float, float]], t: float) -> float:
    """The last cumulative CPU sample taken at or before monotonic time t (0 before the first)."""
    v = 0.0
    for ts, cpu in series:
        if ts > t:
            break
        v = cpu
    return v


def _role(cmd: str, name: str) -> str | None:
    for key in ("ExecutorActor", "HarnessWorker", "ProxyActor", "ServeReplica", "ServeController", "raylet",
                "gcs_server", "bench_sweep", "evalcore.sandbox", "dashboard", "log_monitor"):
        if key in cmd or key in name:
            return key
    return f"ray::{cmd[5:].split()[0][:30]}" if cmd.startswith("ray::") else ("ray:other" if "ray/" in cmd else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=46)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--port", type=int, default=8347)
    args = ap.parse_args()


    from cluster.config import load_config
    from cluster.driver.prepare import prepare
    from cluster.driver.run import drive, executor_count, stop_actors
    from cluster.executors import start_executors
    from cluster.runtime import connect, disconnect

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
        limits = cfg.limits
        n_exec = executor_count(cfg)
        handles = start_executors("bench-baseline", n_exec, float(cfg.cluster.executor_cpus), limits)
        inflight = int(cfg.cluster.max_in_flight_per_model)  # as many queued as the sweep keeps in flight
        sampler = CpuSampler().start()
        asyncio.run(executor_only(programs[: min(64, len(programs))], handles, inflight, limits))  # warm up
        base_rate, b0, b1 = asyncio.run(executor_only(programs, handles, inflight, limits))
        base_cpu = sampler.window(b0, b1)
        stop_actors(handles)
        t0 = time.perf_counter()
        run = asyncio.run(drive(prep))
        total_wall = time.perf_counter() - t0
        ft = run.progress.finish_times
        s0, s1 = ft[int(len(ft) * 0.1)], ft[-1]
        time.sleep(0.5)
        sampler.stop()
        sweep_cpu = sampler.window(s0, s1)
        sweep_rate = run.progress.steady_rate()
        sweep_rate_all = run.progress.done / max(1e-9, run.progress.dispatch_wall())
    finally:
        disconnect(rt)

    def per_item_ms(cpu: dict[str, float], rate: float, t_0: float, t_1: float) -> dict[str, float]:
        n = rate * (t_1 - t_0)  # items finished in the window
        rows = {k: round(1000 * v / max(1.0, n), 1) for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])}
        rows = {k: v for k, v in rows.items() if v >= 0.1}
        rows["TOTAL"] = round(sum(rows.values()), 1)
        return rows

    figures = {
        "trajectories": len(prep.plan), "executors": n_exec, "cpus": os.cpu_count(),
        "executor_only_programs_per_s": round(base_rate, 3),
        "sweep_trajectories_per_s": round(sweep_rate, 3),
        "ratio": round(sweep_rate / base_rate, 3), "target": 0.8,
        "sweep_trajectories_per_s_incl_ramp_up": round(sweep_rate_all, 3),
        "sweep_wall_s_incl_actor_start_and_deploy": round(total_wall, 1),
        # CPU ms per item by process role over each steady window (ExecutorActor includes its sandbox forks)
        "executor_only_cpu_ms_per_program": per_item_ms(base_cpu, base_rate, b0, b1),
        "sweep_cpu_ms_per_trajectory": per_item_ms(sweep_cpu, sweep_rate, s0, s1),
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
