"""The continuous GPU schedule: models flow onto GPUs as others free them, no stage barriers.

A model waits in a :class:`GpuQueue` until its replicas fit the free GPUs; then its apps are
deployed (placement checked first, readiness awaited), its pending items run through the
dispatcher (one model's replicas serve all its methods), and the moment its last trajectory
is done its apps are torn down (in ``finally``, a failed deploy included) and the freed GPUs
take the next model that fits, while the other models keep running. When no model waits any
more, GPUs that free up go to the running model with the most work left, as an extra replica
group (one more app of the same model; the dispatcher spreads its items over them).

``barrier=True`` replays the old stage policy through the same code (deploy the models that
fit, wait for all of them, tear them all down, next): only ``bench/bench_schedule.py
--schedule stages`` uses it, for the before figure.

What it needs is injected (a ``Fleet`` deploys and tears down, ``run_model`` dispatches one
model), so the bench replays it with fake replicas on a virtual clock. No Ray import.
"""
from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from opteval.cluster.driver.admission import Admission, harness_factor
from opteval.cluster.runtime import PlacementError
from opteval.sweepcore.backends import backend_of
from opteval.sweepcore.config.schema import ServingSection
from opteval.sweepcore.placement import gpus_per_replica, placement
from opteval.sweepcore.plan import PlanItem


@dataclass
class ModelWork:
    """One model's share of the sweep, as the scheduler sees it."""

    name: str
    cfg: dict[str, Any]  # the model config (plain data)
    items: Sequence[PlanItem]  # its pending items, grouped once before any replica comes up
    gpus_per_replica: int  # 0: off the GPUs (simulated, external URL, replay)
    replicas: int = 1  # replicas it is deployed with (min_replicas)
    max_replicas: int = 1  # at most this many, replica groups included
    max_ongoing: int = 64  # per replica (Serve's max_ongoing_requests)
    factor: float = 1.0  # admission factor of its methods (opteval.cluster.driver.admission)
    cost: float = 1.0  # relative GPU-seconds per trajectory (trajectory_cost)
    left: int = 0  # items not finished yet
    groups: int = 0  # replica groups deployed (the first one included)
    held: int = 0  # GPUs held now

    def __post_init__(self) -> None:
        self.left = len(self.items)

    @property
    def gpus(self) -> int:
        """GPUs its first deployment holds."""
        return self.gpus_per_replica * self.replicas

    @property
    def work(self) -> float:
        """Remaining work (relative GPU-seconds): what the queue orders by."""
        return self.left * self.cost * max(1, self.gpus_per_replica)


def trajectory_cost(model_cfg: dict[str, Any]) -> float:
    """GPU-seconds of one trajectory relative to a 1B model's: decode on a GPU is bound by
    reading the weights once per step, so a trajectory's cost grows with the parameter
    count (``size_b``) when batches are full. A rough order, not a prediction: the queue
    only needs to know which model has more work."""
    return max(0.5, float(model_cfg.get("size_b") or 1.0))


class GpuQueue:
    """Models waiting for GPUs, largest remaining work first.

    Why largest first (LPT, Graham 1969): on identical machines it bounds the makespan by
    4/3 of the optimum, and, what matters here, the models still running when the queue is
    empty are the small ones, which finish close together, so the sweep's tail (GPUs idle
    while one big model finishes alone) is as short as list scheduling makes it. A model
    that does not fit the free GPUs now is skipped, not waited for: the next one that fits
    takes them (ties keep the config order)."""

    def __init__(self, models: Iterable[ModelWork], largest_first: bool = True) -> None:
        self._heap: list[tuple[float, int, ModelWork]] = []
        for i, m in enumerate(models):  # largest_first=False: config order (the stage replay's)
            heapq.heappush(self._heap, (-m.work if largest_first else 0.0, i, m))

    def __len__(self) -> int:
        return len(self._heap)

    def names(self) -> list[str]:
        return [m.name for _, _, m in sorted(self._heap)]

    def pop_fitting(self, fits: Callable[[ModelWork], bool]) -> ModelWork | None:
        """The largest-work model that fits now (removed from the queue), else None."""
        for entry in sorted(self._heap):
            if fits(entry[2]):
                self._heap.remove(entry)
                heapq.heapify(self._heap)
                return entry[2]
        return None


class Fleet(Protocol):
    """Deploys and tears down one model's apps at a time (``opteval.cluster.serve.fleet.ServeFleet``)."""

    total_gpus: int

    def fits(self, model: ModelWork, replicas: int) -> bool:
        """Whether ``replicas`` more replicas of ``model`` can be placed now (placement code)."""

    async def deploy(self, model: ModelWork, replicas: int, group: int) -> Any:
        """Placement checked, deployed, ready: the group's Endpoint. Cleans up on failure."""

    async def teardown(self, model: ModelWork) -> list[str]:
        """Every app of the model deleted (GPUs free when it returns); the apps' names."""


@dataclass
class ScheduleLog:
    """What happened, in order: (event, model, detail) -- the tests and the bench read it."""

    events: list[tuple[str, str, str]] = field(default_factory=list)


RunModel = Callable[[ModelWork, Any], Awaitable[None]]
AddEndpoint = Callable[[ModelWork, Any], None]


async def run_schedule(models: list[ModelWork], fleet: Fleet, run_model: RunModel, admission: Admission, *,
                       stop: Any = None, add_endpoint: AddEndpoint | None = None, barrier: bool = False,
                       say: Callable[[str], None] = print) -> ScheduleLog:
    """Run every model to its end on ``fleet.total_gpus`` GPUs (see the module docstring).

    ``run_model(model, endpoint)`` returns when the model's items are all finished (or the
    sweep stops). Raises PlacementError when a waiting model can never be placed (nothing
    runs and it still does not fit), and the first error of a model (the others are
    cancelled and torn down first)."""
    return await _Schedule(models, fleet, run_model, admission, stop, add_endpoint, barrier, say).run()


class _Schedule:
    """One run of :func:`run_schedule`: the waiting queue, the running and growing models, the
    free GPUs, and the steps of its loop (start what fits, grow, wait for a change)."""

    def __init__(self, models: list[ModelWork], fleet: Fleet, run_model: RunModel, admission: Admission,
                 stop: Any, add_endpoint: AddEndpoint | None, barrier: bool, say: Callable[[str], None]) -> None:
        self.fleet, self.run_model, self.admission = fleet, run_model, admission
        self.stop, self.add_endpoint, self.barrier, self.say = stop, add_endpoint, barrier, say
        self.log = ScheduleLog()
        self.queue = GpuQueue((m for m in models if m.items), largest_first=not barrier)
        self.running: dict[asyncio.Future[None], ModelWork] = {}
        self.growing: set[asyncio.Future[None]] = set()
        self.changed = asyncio.Event()  # a model became ready: growth is worth another look
        self.free = fleet.total_gpus

    def event(self, kind: str, m: ModelWork, detail: str = "") -> None:
        self.log.events.append((kind, m.name, detail))
        self.say(f"[schedule] {m.name}: {kind}" + (f" ({detail})" if detail else ""))

    async def serve(self, m: ModelWork) -> None:
        try:
            self.event("deploying", m, f"{m.replicas} replica(s), {m.gpus} GPU(s); {m.left} trajectories")
            ep = await self.fleet.deploy(m, m.replicas, 0)
            m.groups = 1
            self.admission.open(m.name, m.replicas, m.max_ongoing, m.factor)
            self.event("ready", m, f"{self.admission.limit(m.name)} in flight")
            self.changed.set()
            await self.run_model(m, ep)
        finally:
            self.admission.close(m.name)
            apps = await self.fleet.teardown(m)
            self.free += m.held
            m.held = 0
            self.event("torn down", m, ", ".join(apps) or "no Serve app")

    def fits(self, m: ModelWork) -> bool:
        return m.gpus <= self.free and self.fleet.fits(m, m.replicas)

    def start_fitting(self) -> None:
        while len(self.queue):
            m = self.queue.pop_fitting(self.fits)
            if m is None:
                return
            m.held = m.gpus
            self.free -= m.held
            self.running[asyncio.ensure_future(self.serve(m))] = m

    def grow(self) -> None:
        """No model waits: freed GPUs go to the running model with the most work per replica,
        as another replica group (deployed in the background; the loop goes on)."""
        while True:
            cands = [m for m in self.running.values() if m.gpus_per_replica and m.groups >= 1
                     and m.held // m.gpus_per_replica < m.max_replicas and m.gpus_per_replica <= self.free
                     and m.left > 2 * (m.held // m.gpus_per_replica + 1) * m.max_ongoing * m.factor]
            cands = [m for m in cands if self.fleet.fits(m, 1)]
            if not cands:
                return
            m = max(cands, key=lambda c: c.work / max(1, c.held))
            self.free -= m.gpus_per_replica
            m.held += m.gpus_per_replica
            m.groups += 1
            self.growing.add(asyncio.ensure_future(self.grow_one(m, m.groups - 1)))

    async def grow_one(self, m: ModelWork, group: int) -> None:
        self.event("growing", m, f"replica group {group + 1}, {m.held} GPU(s) held")
        try:
            ep = await self.fleet.deploy(m, 1, group)
        except Exception as exc:  # the model keeps the groups it has; the GPU goes back
            self.free += m.gpus_per_replica
            m.held -= m.gpus_per_replica
            self.event("growth failed", m, f"{type(exc).__name__}: {exc}")
            return
        if m.name not in self.admission.shares:  # done while this group came up: it goes too
            apps = await self.fleet.teardown(m)
            self.event("torn down", m, ", ".join(apps) or "no Serve app")
            return
        self.admission.grow(m.name, m.held // m.gpus_per_replica)
        if self.add_endpoint is not None:
            self.add_endpoint(m, ep)
        self.event("grown", m, f"{self.admission.limit(m.name)} in flight")

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.soft.is_set()

    def place_or_refuse(self) -> None:
        """Start what fits; a model that waits while nothing runs can never be placed."""
        self.start_fitting()
        if len(self.queue) and not self.running:
            m = self.queue.pop_fitting(lambda _: True)
            assert m is not None
            raise PlacementError(f"model {m.name!r} needs {m.gpus} GPU(s) ({m.replicas} replica(s) x "
                                 f"{m.gpus_per_replica}) but the cluster cannot place it even with every "
                                 f"other model torn down ({self.fleet.total_gpus} GPU(s) in all)")

    async def next_change(self) -> None:
        """Wait for a model to end, a growth to land or a model to become ready; a model's error
        ends the schedule (the others are torn down by :meth:`run`)."""
        self.changed.clear()
        wake: asyncio.Future[Any] = asyncio.ensure_future(self.changed.wait())
        waiting: set[asyncio.Future[Any]] = {*self.running, *self.growing, wake}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        wake.cancel()
        for t in done:
            self.growing.discard(t)
            if t in self.running:
                self.running.pop(t)
                t.result()

    async def run(self) -> ScheduleLog:
        try:
            while len(self.queue) or self.running:
                if not self.stopping() and (not self.barrier or not self.running):
                    self.place_or_refuse()
                if not self.stopping() and (self.barrier or not len(self.queue)):
                    self.grow()
                if self.stopping() and not self.running:
                    break
                await self.next_change()
        finally:
            for t in [*self.running, *self.growing]:
                t.cancel()
            await asyncio.gather(*self.running, *self.growing, return_exceptions=True)
        return self.log


def max_ongoing(model_cfg: dict[str, Any], default: int) -> int:
    """Serve's per-replica limit of a vLLM model (its YAML), else ``default``."""
    dep = dict(dict(model_cfg.get("vllm") or {}).get("deployment") or {})
    return int(dep.get("max_ongoing_requests") or default)


def model_works(model_cfgs: dict[str, dict[str, Any]], items: dict[str, Sequence[PlanItem]],
                harnesses: dict[str, list[str]], serving: ServingSection, default_ongoing: int) -> list[ModelWork]:
    """The scheduler's view of each model with items: GPUs per replica and replicas from the
    placement rules (``opteval.sweepcore.placement``), batch capacity, admission factor, cost."""
    out = []
    for name, cfg in model_cfgs.items():
        if not items.get(name):
            continue
        gpr, replicas, most = 0, 1, 1
        if backend_of(cfg, serving).on_gpus:
            gpr = gpus_per_replica(cfg)
            replicas = int(placement(cfg, serving)["replicas"])
            auto = dict(dict(dict(cfg.get("vllm") or {}).get("deployment") or {}).get("autoscaling_config") or {})
            most = max(replicas, int(auto.get("max_replicas", replicas)))
        # off the GPUs the capacity is unknown: the configured limit is the target, as it is
        factor = harness_factor(harnesses.get(name, [])) if gpr else 1.0
        out.append(ModelWork(name, cfg, items[name], gpr, replicas, most, max_ongoing(cfg, default_ongoing),
                             factor, trajectory_cost(cfg)))
    return out
