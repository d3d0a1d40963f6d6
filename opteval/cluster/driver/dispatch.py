"""Bounded fan-out of one model's trajectories over the worker actors, with retries.

``Dispatcher.run_model(model, endpoint)`` is the per-model entry point the schedule
(``opteval.cluster.driver.schedule``) calls once the model's replicas are ready; the model's items
were grouped once before (``items``), and its in-flight bound is its own admission pool
(``opteval.cluster.driver.admission``), so one model's queue never holds back another's batch.

Failure policy: an infrastructure failure (worker died, endpoint unreachable, executor
lost, trajectory timeout) is retried up to ``cluster.retries`` times on another worker
when one is up, with exponential backoff, then committed with status ``error`` and its
reason; it counts as wrong and stays in the denominator. Needs Ray (imported only once
the sweep has started it).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ray
from ray.exceptions import RayError

from opteval.cluster.actors.workers import TrajectoryTask, WorkerFailure
from opteval.cluster.driver.admission import Admission, Pool, harness_factor
from opteval.cluster.driver.commit import Committer, Outcome, build_row
from opteval.cluster.driver.preflight import preflight
from opteval.cluster.driver.prepare import Prepared
from opteval.cluster.driver.progress import Progress
from opteval.cluster.driver.rejections import RejectionGuard
from opteval.cluster.driver.schedule import max_ongoing
from opteval.cluster.driver.signals import StopState
from opteval.evalcore.backoff import Backoff
from opteval.evalcore.records import Trajectory
from opteval.sweepcore.endpoint import Endpoint
from opteval.sweepcore.plan import PlanItem
from opteval.sweepcore.tracking import Tracker

WORKER_DOWN_S = 30.0  # a worker whose call failed gets no new work this long while another is up
WORKER_PROBE_S = 5.0  # a worker that failed must answer a ping this fast before it gets work again
WORKER_RESTART_WAIT_S = 180.0  # with no worker answering, wait this long for one to come back


class Dispatcher:
    """Bounded fan-out of each model's trajectories over the worker actors, with retries."""

    def __init__(self, prep: Prepared, workers: list[Any], committer: Committer, progress: Progress,
                 stop: StopState, tracker: Tracker | None = None, admission: Admission | None = None,
                 items: dict[str, Sequence[PlanItem]] | None = None) -> None:
        c = prep.cfg.cluster
        self.prep, self.workers, self.committer, self.progress, self.stop = prep, workers, committer, progress, stop
        self.tracker = tracker
        self.retries = c.retries
        self.backoff_s = c.retry_backoff_s
        self.down_until = [0.0] * len(workers)
        self.timeout_s = c.trajectory_timeout_s
        self.per_model = c.max_in_flight_per_model
        # the global bound is only what the workers hold (run_sweep's check_limits refused a per-model
        # limit above it before anything started)
        bound = max(1, (len(workers) or c.workers) * c.worker_concurrency)
        self.admission = admission or Admission(bound, c.max_in_flight_per_model)
        self.items: dict[str, Sequence[PlanItem]] = items if items is not None else {}
        self.endpoints: dict[str, list[Endpoint]] = {}
        self.ep_load: dict[str, list[int]] = {}
        self.on_finish: Callable[[PlanItem], None] | None = None  # the schedule counts what is left
        self.load = [0] * len(workers)
        self.tasks: set[asyncio.Task] = set()
        self.guard = RejectionGuard(prep.cfg.sweep.reject_streak, tripped=prep.config_errors)
        self.model_tasks: dict[str, set[asyncio.Task]] = {}
        # checks each model's server before its first trajectory; the schedule bench's fake replicas
        # have no server to ask and replace it
        self.preflight: Callable[[Prepared, dict[str, Endpoint]], Awaitable[None]] = preflight

    def _pick_worker(self, avoid: frozenset[int] = frozenset()) -> int:
        """Least loaded among workers that are up and did not already fail this trajectory;
        else up ones; else ones not tried; else any."""
        now = time.monotonic()
        every = list(range(len(self.workers)))
        up = [i for i in every if self.down_until[i] <= now]
        fresh_up = [i for i in up if i not in avoid]
        untried = [i for i in every if i not in avoid]
        return min(fresh_up or up or untried or every, key=lambda i: self.load[i])

    async def _live_worker(self, avoid: frozenset[int] = frozenset()) -> int:
        """A worker to send to: one that never failed, or a failed one that answers a ping now.
        While none answers (all restarting, e.g. after their node died) wait for one, up to
        ``WORKER_RESTART_WAIT_S``, without spending the trajectory's retries."""
        deadline = time.monotonic() + WORKER_RESTART_WAIT_S
        while True:
            idx = self._pick_worker(avoid)
            if self.down_until[idx] == 0.0:
                return idx
            try:
                await asyncio.wait_for(_await(self.workers[idx].ping.remote()), timeout=WORKER_PROBE_S)
                self.down_until[idx] = 0.0
                return idx
            except (TimeoutError, RayError):
                self.down_until[idx] = time.monotonic() + WORKER_DOWN_S
            if time.monotonic() >= deadline:
                return idx
            await asyncio.sleep(1.0)  # never spin on workers that fail at once

    def _retry_wait(self, attempt: int) -> float:
        """Backoff before retry ``attempt`` (1-based): ``retry_backoff_s * 2**(attempt-1)``, long
        enough for a killed actor to restart (a few seconds) by the second retry."""
        return Backoff(self.backoff_s).delay(attempt - 1)

    def _task(self, item: PlanItem, ep: Endpoint) -> TrajectoryTask:
        me = self.prep.method_cfgs[item.method]
        sampling, budgets = self.prep.run_params(item.model, item.method)
        return TrajectoryTask(
            key=item.key, model=item.model, method=item.method, harness=me.harness,
            extraction=me.extraction, problem=self.prep.problems[(item.benchmark, item.problem_id)],
            sample=item.sample, sampling=sampling, budgets=budgets, endpoint=ep,
            stages=dict(me.stages), solvers=self.prep.cfg.solvers,
            prompt=_contract(self.prep.model_cfgs[item.model]), params=dict(me.params))

    async def _attempt(self, task: TrajectoryTask, avoid: frozenset[int] = frozenset(),
                       used: list[int] | None = None) -> tuple[Trajectory | None, str | None]:
        """One remote run: (trajectory, None) or (partial trajectory or None, failure reason).
        The worker's index is appended to ``used`` (a retry avoids it)."""
        idx = await self._live_worker(avoid)
        if used is not None:
            used.append(idx)
        self.load[idx] += 1
        ref = self.workers[idx].run.remote(task)
        try:
            res = await asyncio.wait_for(_await(ref), timeout=self.timeout_s)
        except TimeoutError:
            _cancel(ref)
            return None, f"trajectory timeout after {self.timeout_s:g}s"
        except asyncio.CancelledError:  # abandoned (a second Ctrl-C): cancel the worker's coroutine,
            _cancel(ref)  # which closes its HTTP requests so the server aborts them
            raise
        except RayError as exc:
            self.down_until[idx] = time.monotonic() + WORKER_DOWN_S
            return None, f"worker {idx} failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
        finally:
            self.load[idx] -= 1
        if isinstance(res, WorkerFailure):
            return res.trajectory, res.reason
        return res, None

    async def run_item(self, item: PlanItem, ep: Endpoint) -> Outcome:
        task = self._task(item, ep)
        last_traj: Trajectory | None = None
        reason: str | None = "not attempted"
        tried: list[int] = []
        for attempt in range(1, self.retries + 2):
            traj, reason = await self._attempt(task, frozenset(tried), tried)
            if reason is None:
                return Outcome(traj, None, attempt)
            last_traj = traj or last_traj
            if attempt <= self.retries:
                self.progress.retries += 1
                print(f"[sweep] retry {attempt}/{self.retries} {item.key}: {reason}", flush=True)
                await asyncio.sleep(self._retry_wait(attempt))
        return Outcome(last_traj, reason, self.retries + 1)

    async def _one(self, item: PlanItem, ep_index: int, pool: Pool) -> None:
        load = self.ep_load[item.model]
        try:
            out = await self.run_item(item, self.endpoints[item.model][ep_index])
            self.finish(item, out)
        finally:
            load[ep_index] -= 1
            pool.release()

    def finish(self, item: PlanItem, out: Outcome) -> None:
        try:
            row, correct = build_row(self.prep, item, out)
        except Exception as exc:
            reason = f"driver could not grade/record: {type(exc).__name__}: {exc}"
            print(f"[sweep] error {item.key}: {reason}", flush=True)
            row, correct = build_row(self.prep, item, Outcome(None, reason, out.attempts))
            out = Outcome(None, reason, out.attempts)
        self.committer.add(row)
        self.guard.observe(item.model, out.traj)
        self.progress.record(item.model, item.method, correct, out.error is not None)
        if self.on_finish is not None:
            self.on_finish(item)

    def should_stop(self, model: str) -> bool:
        """Whether ``model`` gets no new trajectories: the sweep is stopping, or every call of the
        model was refused the same way (a configuration error, :class:`RejectionGuard`)."""
        return self.stop.soft.is_set() or self.guard.should_stop(model)

    def add_endpoint(self, model: str, ep: Endpoint) -> None:
        """Another replica group of ``model`` is ready: new items go to the least loaded group."""
        self.endpoints.setdefault(model, []).append(ep)
        self.ep_load.setdefault(model, []).append(0)

    def _pool(self, model: str) -> Pool:
        """The model's admission pool (the schedule opened it when its replicas came up; a
        caller without a schedule gets one sized from the model config)."""
        if model not in self.admission.shares:
            cfg = self.prep.model_cfgs[model]
            harnesses = [self.prep.method_cfgs[m].harness for m in self.prep.cfg.methods if m in self.prep.method_cfgs]
            factor = harness_factor(harnesses) if cfg.get("vllm") else 1.0
            self.admission.open(model, 1, max_ongoing(cfg, self.per_model), factor)
        return self.admission.shares[model].pool

    async def _produce(self, model: str, items: Sequence[PlanItem], pool: Pool) -> None:
        """Dispatch one model's items in plan order, at most its admission pool's limit at once."""
        load = self.ep_load[model]
        tasks = self.model_tasks.setdefault(model, set())
        for item in items:
            await pool.acquire()
            if self.should_stop(model):
                pool.release()
                return
            self.progress.dispatched()
            idx = min(range(len(load)), key=load.__getitem__)
            load[idx] += 1
            t = asyncio.create_task(self._one(item, idx, pool))
            for group in (self.tasks, tasks):
                group.add(t)
                t.add_done_callback(group.discard)

    async def run_model(self, model: str, endpoint: Endpoint) -> None:
        """Run every pending item of ``model`` against ``endpoint`` (and the replica groups
        added later); returns when all of them are finished, or at once on a hard stop."""
        await self.preflight(self.prep, {model: endpoint})  # before any trajectory of the model
        self.endpoints[model] = [endpoint]
        self.ep_load[model] = [0]
        tasks = self.model_tasks.setdefault(model, set())
        producer = asyncio.create_task(self._produce(model, self.items.get(model, ()), self._pool(model)))
        await _until(producer, self.stop.hard)
        while tasks and not self.stop.hard.is_set():
            await _until(asyncio.wait(set(tasks)), self.stop.hard)
        if self.stop.hard.is_set():
            for t in [*tasks, producer]:
                t.cancel()
            await asyncio.gather(*tasks, producer, return_exceptions=True)


def _contract(model_cfg: dict[str, Any]) -> dict[str, Any]:
    """The model's prompt contract, empty when it is the default (keep the harness's messages)."""
    prompt = dict(model_cfg.get("prompt") or {})
    return prompt if prompt.get("system", "keep") != "keep" or prompt.get("system_prefix") else {}


async def _await(ref: Any) -> Any:
    return await ref


def _cancel(ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception:
        pass


async def _until(aw: Awaitable[Any], event: asyncio.Event) -> None:
    """Await ``aw`` unless ``event`` fires first (then leave ``aw`` to the caller to cancel)."""
    fut = asyncio.ensure_future(aw)
    ev = asyncio.ensure_future(event.wait())
    await asyncio.wait({fut, ev}, return_when=asyncio.FIRST_COMPLETED)
    ev.cancel()
    if fut.done() and not fut.cancelled():
        fut.result()
