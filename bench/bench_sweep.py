"""Throughput of a whole Direct sweep vs. the executors alone on the same programs (one run).

Why this ratio: the executors are the floor of a sweep's cost on CPU (every trajectory
runs a solver program). With the simulated policy at zero latency (``sim-fast``), the
rest of the path (plan, Serve, worker, executor facade, grading, Parquet commits)
should add little: target sweep/executor-only >= 0.8.

    python bench/bench_sweep.py [--problems N] [--samples K] [--routes http,handle]

One sweep per ``serving.route`` (``http``: through Serve's HTTP proxy; ``handle``: a Serve
deployment handle from the worker to the replica), each against the same baseline.

Baseline: the programs the simulated policy writes for exactly those Direct
trajectories (captured in process with the same harness, model and seeds), run
directly on executor actors like the sweep's, with as many in flight as the sweep keeps.
A second, stricter baseline runs the same programs on as many fork servers alone (no Ray, no
actor hop), each back to back in its own thread (``ratio_vs_sandbox_only``). Both Ray
phases run on one local Ray started here, on the same executor actors' count
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
import pickle
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any, cast

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


class _Capture:
    """An Executor that records the program and reports a clean run (no submission)."""

    def __init__(self) -> None:
        self.programs: list[str] = []

    async def run(self, code, limits=None):
        from opteval.evalcore.sandbox.types import ExecResult

        self.programs.append(code)
        return ExecResult(outcome="ok")

    async def open_session(self):  # Direct never opens one
        raise NotImplementedError


async def capture_programs(prep) -> tuple[list[str], list[Any]]:
    """The program of every planned Direct trajectory, produced in process by the same policy
    (and the first trajectories, for the wire-size figures)."""
    from opteval.cluster.serve.serving import simulated_model_cfg
    from opteval.evalcore.harnesses import get_harness
    from opteval.evalcore.harnesses.base import HarnessContext
    from opteval.evalcore.models import make_model

    cap = _Capture()
    models = {m: make_model(simulated_model_cfg(prep.model_cfgs[m])) for m in prep.model_cfgs}
    trajectories: list[Any] = []
    for it in prep.plan:
        sampling, budgets = prep.run_params(it.model, it.method)
        ctx = HarnessContext(model=models[it.model], executor=cap, sampling=sampling, sample=it.sample,
                             budgets=budgets, model_name=it.model, method=it.method)
        traj = await get_harness("direct").run(prep.problems[(it.benchmark, it.problem_id)], ctx)
        if len(trajectories) < 20:
            trajectories.append(traj)
    return cap.programs, trajectories


async def executor_only(programs: list[str], handles: list, slots: int, limits) -> tuple[float, float, float]:
    """(programs/s, t0, t1) on the executor actors alone, ``slots`` in flight (each actor runs one
    per CPU, the rest queue); the rate is the steady one, measured exactly as the sweep's."""
    from opteval.cluster.actors.executors import RayExecutor, _Shared
    from opteval.cluster.driver.progress import Progress

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


def sandbox_only(programs: list[str], servers: int, pool: int, solvers: tuple[str, ...], limits: Any) -> float:
    """Programs/s of ``servers`` fork servers alone (no Ray), each running its share of the
    programs back to back in its own thread: the sandbox alone, the floor under any sweep's
    rate. Steady rate as the sweep's (``Progress.steady_rate``)."""
    import threading

    from opteval.cluster.driver.progress import Progress
    from opteval.evalcore.sandbox import ForkServer
    from opteval.evalcore.solvers import preimport_modules

    fss = [ForkServer(modules=preimport_modules(solvers), pool_size=pool,
                      allow_uncontained=limits.allow_uncontained).start() for _ in range(servers)]
    prog = Progress(planned=len(programs), already=0)
    lock = threading.Lock()

    def share(fs: ForkServer, codes: list[str]) -> None:
        for code in codes:
            res = fs.run_program(code, limits)
            assert res.outcome != "killed", res.note
            with lock:
                prog.record("x", "x", False, False)

    try:
        for fs in fss:  # warm up
            for code in programs[:8]:
                fs.run_program(code, limits)
        threads = [threading.Thread(target=share, args=(fs, programs[i::servers])) for i, fs in enumerate(fss)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for fs in fss:
            fs.close()
    return prog.steady_rate()


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
                            if self._roles.get(p.ppid()) in ("opteval.evalcore.sandbox", "fork"):
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


COMPONENTS = {  # process role -> the component it is reported as
    "ProxyActor": "serve_proxy", "ServeReplica": "serve_replica", "HarnessWorker": "harness_worker",
    "ExecutorActor": "executor_actor", "opteval.evalcore.sandbox": "sandboxed_programs", "bench_sweep": "driver",
}


def _role(cmd: str, name: str) -> str | None:
    for key in ("ExecutorActor", "HarnessWorker", "ProxyActor", "ServeReplica", "ServeController", "raylet",
                "gcs_server", "bench_sweep", "opteval.evalcore.sandbox", "dashboard", "log_monitor"):
        if key in cmd or key in name:
            return key
    return f"ray::{cmd[5:].split()[0][:30]}" if cmd.startswith("ray::") else ("ray:other" if "ray/" in cmd else None)


def wire_costs(prep: Any, trajectories: list[Any]) -> dict[str, Any]:
    """Bytes and serialization CPU of what crosses Ray per trajectory: the ``TrajectoryTask``
    (driver -> worker, built as the driver builds it) and the ``Trajectory`` back."""
    import ray.cloudpickle as cloudpickle

    from opteval.cluster.driver.dispatch import Dispatcher
    from opteval.cluster.serve.serving import Endpoint

    ep = Endpoint(name="sim-fast", base_url="http://127.0.0.1:8000/sim-fast/v1", model_id="sim-fast",
                  simulated=True, app_name="opteval-sim-sim-fast")
    driver = cast(Any, SimpleNamespace(prep=prep))  # Dispatcher._task, the driver's builder, reads only self.prep
    tasks = [Dispatcher._task(driver, it, ep) for it in list(prep.plan)[: len(trajectories)]]

    def cost(objs: list[Any]) -> dict[str, float]:
        t0 = time.process_time()
        blobs = [cloudpickle.dumps(o) for o in objs for _ in range(10)]
        t1 = time.process_time()
        for b in blobs:
            pickle.loads(b)
        t2 = time.process_time()
        n = len(blobs)
        return {"bytes": round(sum(map(len, blobs)) / n), "dump_ms": round(1000 * (t1 - t0) / n, 3),
                "load_ms": round(1000 * (t2 - t1) / n, 3)}

    constant = ("sampling", "budgets", "endpoint", "stages", "solvers", "prompt", "params")
    return {"task": cost(tasks), "trajectory": cost(trajectories),
            "task_bytes_constant_per_model_method": round(sum(len(cloudpickle.dumps(getattr(t, f)))
                                                              for t in tasks for f in constant) / len(tasks))}


def per_item_ms(cpu: dict[str, float], rate: float, t_0: float, t_1: float) -> dict[str, float]:
    """CPU ms per item by component over a steady window (other roles under their own names)."""
    n = rate * (t_1 - t_0)  # items finished in the window
    rows: dict[str, float] = {}
    for role, sec in cpu.items():
        comp = COMPONENTS.get(role, role)
        rows[comp] = rows.get(comp, 0.0) + 1000 * sec / max(1.0, n)
    out = {k: round(v, 1) for k, v in sorted(rows.items(), key=lambda kv: -kv[1]) if v >= 0.05}
    out["TOTAL"] = round(sum(rows.values()), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--problems", type=int, default=46)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--port", type=int, default=8347)
    ap.add_argument("--routes", default="http,handle", help="serving.route values, one sweep each, in this order")
    args = ap.parse_args()
    routes = [r for r in args.routes.split(",") if r]

    from opteval.cluster.actors.executors import start_executors
    from opteval.cluster.driver.prepare import prepare
    from opteval.cluster.driver.run import drive, executor_count, stop_actors
    from opteval.cluster.runtime import connect, disconnect
    from opteval.sweepcore.config import load_config

    out = tempfile.mkdtemp(prefix="opteval-bench-")

    def config(route: str) -> Any:
        return load_config([
            f"sweep.name=bench-{route}", f"sweep.output_dir={out}", "models=[sim-fast]", "methods=[direct]",
            "benchmarks=[sample]", f"limit_problems={args.problems}", f"samples.default={args.samples}",
            f"serving.http_port={args.port}", f"serving.route={route}", "tracking.enabled=false",
            "progress.interval_s=5",
        ])

    cfg = config(routes[0])
    first = prepare(cfg, read_only=True)
    programs, trajectories = asyncio.run(capture_programs(first))
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    rt = connect(None)
    sweeps: dict[str, Any] = {}
    try:
        limits = cfg.limits
        n_exec = executor_count(cfg)
        # no actor started yet: the fork servers alone, as many as the sweep's executors
        sandbox_rate = sandbox_only(programs, n_exec, cfg.cluster.sandbox_pool, cfg.solvers, limits)
        handles = start_executors("bench-baseline", n_exec, cfg.cluster.executor_cpus, limits, cfg.solvers,
                                  cfg.cluster.sandbox_pool)  # as the sweep starts its executors
        inflight = int(cfg.cluster.max_in_flight_per_model)  # as many queued as the sweep keeps in flight
        sampler = CpuSampler().start()
        asyncio.run(executor_only(programs[: min(64, len(programs))], handles, inflight, limits))  # warm up
        base_rate, b0, b1 = asyncio.run(executor_only(programs, handles, inflight, limits))
        base_cpu = sampler.window(b0, b1)
        stop_actors(handles)
        for route in routes:
            prep = prepare(config(route))
            try:
                t0 = time.perf_counter()
                run = asyncio.run(drive(prep))
                wall = time.perf_counter() - t0
            finally:
                prep.ledger.close()
            ft = run.progress.finish_times
            s0, s1 = ft[int(len(ft) * 0.1)], ft[-1]
            time.sleep(0.5)
            rate = run.progress.steady_rate()
            sweeps[route] = {"rate": rate, "window": (s0, s1), "wall": wall, "done": run.progress.done,
                             "rate_all": run.progress.done / max(1e-9, run.progress.dispatch_wall())}
        sampler.stop()
        for sw in sweeps.values():
            sw["cpu"] = sampler.window(*sw["window"])
    finally:
        disconnect(rt)
    load["end"] = [round(x, 2) for x in os.getloadavg()]

    base_ms = per_item_ms(base_cpu, base_rate, b0, b1)
    figures: dict[str, Any] = {
        "trajectories": len(first.plan), "executors": n_exec, "cpus": os.cpu_count(), "load_average": load,
        "sandbox_only_programs_per_s": round(sandbox_rate, 3),
        "executor_only_programs_per_s": round(base_rate, 3),
        # CPU ms per program by component (executor_actor + sandboxed_programs are the floor)
        "executor_only_cpu_ms_per_program": base_ms, "target_ratio": 0.8,
    }
    for route, sw in sweeps.items():
        ms = per_item_ms(sw["cpu"], sw["rate"], *sw["window"])
        figures[f"route_{route}"] = {
            "sweep_trajectories_per_s": round(sw["rate"], 3),
            "ratio": round(sw["rate"] / base_rate, 3),
            "ratio_vs_sandbox_only": round(sw["rate"] / sandbox_rate, 3),
            "sweep_trajectories_per_s_incl_ramp_up": round(sw["rate_all"], 3),
            "sweep_wall_s_incl_actor_start_and_deploy": round(sw["wall"], 1),
            "cpu_ms_per_trajectory": ms,
            "cpu_per_trajectory_vs_per_program": round(ms["TOTAL"] / max(1e-9, base_ms["TOTAL"]), 2),
        }
    figures["wire_per_trajectory"] = wire_costs(first, trajectories)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
