"""Async harness-worker actors: many trajectories at once, one chat client per endpoint.

A worker gets a ``TrajectoryTask`` (a ``ProblemSpec``: never an answer), runs the
method's harness against the endpoint and the executor actors, and returns either the
``Trajectory`` or a ``WorkerFailure`` naming an infrastructure cause (endpoint
unreachable, executor lost, harness crash) that the driver may retry. The harness
logic itself lives in ``opteval.evalcore.harnesses``; nothing here knows about prompts.
"""
from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import ray

from opteval.cluster.actors.executors import RayExecutor, _Shared
from opteval.evalcore.harnesses import get_harness  # the registry: every harness imported (and warm) here
from opteval.evalcore.harnesses.base import Budgets, HarnessContext
from opteval.evalcore.models.base import ModelError, Sampling
from opteval.evalcore.models.contract import PromptContract
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_ERROR, Trajectory
from opteval.evalcore.sandbox.types import Limits
from opteval.evalcore.solvers import PAPER_SOLVERS
from opteval.sweepcore.endpoint import Endpoint


def worker_name(sweep: str, index: int) -> str:
    return f"opteval/{sweep}/worker-{index}"


@dataclass
class TrajectoryTask:
    """Everything one trajectory needs on a worker. Holds no answer by construction."""

    key: str
    model: str
    method: str
    harness: str
    extraction: str
    problem: ProblemSpec
    sample: int
    sampling: Sampling
    budgets: Budgets
    endpoint: Endpoint
    stages: dict[str, Any] = field(default_factory=dict)  # per-stage request overrides (method config)
    solvers: tuple[str, ...] = PAPER_SOLVERS  # what the prompts offer
    prompt: dict[str, Any] = field(default_factory=dict)  # the model's prompt contract (model config)
    params: dict[str, Any] = field(default_factory=dict)  # the harness's own parameters (method config)


@dataclass
class WorkerFailure:
    """An infrastructure failure observed on the worker; the driver retries it."""

    reason: str
    trajectory: Trajectory | None = None  # what the harness produced, if anything
    wall_s: float = 0.0
    details: list[str] = field(default_factory=list)


# Requests of one worker to one endpoint are spread over this many small httpx pools
# (see OpenAIChatModel.pool_shards; bench/bench_sweep.py measured the worker's CPU).
POOL_SHARDS = 8


def build_client(ep: Endpoint) -> Any:
    """A Serve-handle client for the apps this cluster deployed (``ep.handle``, set by
    serving.route=handle); otherwise the endpoint's own client (HTTP for served endpoints,
    in-process for replay) with every setting its backend gave the endpoint."""
    if ep.handle:
        from opteval.cluster.serve.serve_handle import handle_client  # Serve's handle API: only for serving.route=handle

        return handle_client(ep)
    return ep.client(pool_shards=POOL_SHARDS)


@ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0)
class HarnessWorker:
    """Runs trajectories concurrently on one event loop (model calls and executions are I/O here)."""

    def __init__(self, executor_names: list[str], default_limits: Limits | None = None) -> None:
        # Names, not handles: a restarted worker looks the executors up again (constructor
        # arguments held in the object store could be gone by then).
        self._shared = _Shared([ray.get_actor(n) for n in executor_names])
        self._default_limits = default_limits or Limits()
        self._clients: dict[tuple, Any] = {}
        self._running = 0

    async def ping(self) -> bool:
        return True

    def _client(self, ep: Endpoint) -> Any:
        key = (ep.name, ep.base_url, ep.model_id)
        if key not in self._clients:
            self._clients[key] = build_client(ep)
        return self._clients[key]

    async def run(self, task: TrajectoryTask) -> Trajectory | WorkerFailure:
        self._running += 1
        try:
            return await self._run(task)
        finally:
            self._running -= 1

    async def _run(self, task: TrajectoryTask) -> Trajectory | WorkerFailure:
        lost = asyncio.Event()
        executor = RayExecutor(self._shared, task.budgets.exec_limits or self._default_limits,
                               on_loss=lambda _reason: lost.set())
        model = self._client(task.endpoint)
        if hasattr(model, "for_problem"):  # replay: recorded completions are keyed by (problem, sample)
            model = model.for_problem(task.problem.id, task.sample)
        ctx = HarnessContext(
            model=model, executor=executor, sampling=task.sampling,
            sample=task.sample, budgets=task.budgets, model_name=task.model, method=task.method,
            extraction=task.extraction, stages=task.stages, solvers=task.solvers, params=task.params,
            prompt_contract=PromptContract.from_config(task.prompt) if task.prompt else None,
        )
        start = time.perf_counter()
        try:
            traj = await _unless_lost(get_harness(task.harness).run(task.problem, ctx), lost)
            if traj is None:  # an executor or sandbox was lost: stop now, the driver retries elsewhere
                return WorkerFailure(f"executor lost: {executor.losses[0]}", wall_s=time.perf_counter() - start)
        except ModelError as exc:
            return WorkerFailure(f"endpoint unreachable: {exc}", wall_s=time.perf_counter() - start)
        except Exception as exc:
            tb = traceback.format_exc(limit=6)
            return WorkerFailure(f"harness crashed: {type(exc).__name__}: {exc}", details=[tb],
                                 wall_s=time.perf_counter() - start)
        return _finish(task, traj, executor, time.perf_counter() - start)

    async def stats(self) -> dict[str, int]:
        return {"running": self._running, "clients": len(self._clients)}


async def _unless_lost(coro: Any, lost: asyncio.Event) -> Trajectory | None:
    """The harness's trajectory, or None as soon as ``lost`` fires (the harness is cancelled:
    continuing would spend model calls and turns on a sandbox that is gone)."""
    run = asyncio.ensure_future(coro)
    watch = asyncio.ensure_future(lost.wait())
    try:
        await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        run.cancel()
        raise
    finally:
        watch.cancel()
    if run.done():
        return run.result()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    return None


def _finish(task: TrajectoryTask, traj: Trajectory, executor: RayExecutor, wall_s: float) -> Trajectory | WorkerFailure:
    """Stamp identity fields; turn executor losses and harness-reported errors into retries."""
    traj.key = task.key
    traj.model, traj.method = task.model, task.method
    traj.benchmark, traj.problem_id, traj.sample = task.problem.benchmark, task.problem.id, task.sample
    if not traj.wall_s:
        traj.wall_s = wall_s
    if executor.losses:
        return WorkerFailure(f"executor lost: {executor.losses[0]}", trajectory=traj, wall_s=wall_s)
    if traj.status == STATUS_ERROR:
        reason = traj.errors[-1] if traj.errors else "harness reported an infrastructure error"
        return WorkerFailure(str(reason), trajectory=traj, wall_s=wall_s)
    return traj


def start_workers(sweep: str, count: int, concurrency: int, executor_names: list[str],
                  default_limits: Limits | None = None) -> list[Any]:
    """Named worker actors in the driver's namespace, each finding the executors by name."""
    handles, pings = launch_workers(sweep, count, concurrency, executor_names, default_limits)
    ray.get(pings, timeout=300)
    return handles


def launch_workers(sweep: str, count: int, concurrency: int, executor_names: list[str],
                   default_limits: Limits | None = None) -> tuple[list[Any], list[Any]]:
    """The worker actors and a ping each, not waited for. The executors they name need only have
    been created (a named actor is registered when it is created), not warmed up."""
    handles = []
    for i in range(count):
        opts = {"name": worker_name(sweep, i), "max_concurrency": max(1, int(concurrency)) + 8}
        handles.append(HarnessWorker.options(**opts).remote(  # type: ignore[attr-defined]
            list(executor_names), default_limits))
    return handles, [h.ping.remote() for h in handles]
