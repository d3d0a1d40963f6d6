"""Admission: how many trajectories each model has in flight, sized to what its replicas take.

Why per model: with one shared pool served first come first served every model advances at
the same rate, so a small model's batch runs a quarter full while a large one queues hundreds
of requests against its batch. Here each deployed model has its own pool,

    target = replicas x max_ongoing_requests x factor        (then at most max_in_flight_per_model)

where ``factor`` (``SANDBOX_FACTOR`` for methods that run code between calls) covers the time
a trajectory spends in the sandbox between two calls, when it holds no place in a batch. The
pools of the models deployed at once share only what the workers can hold
(``cluster.workers x cluster.worker_concurrency``); when their targets add up to more, each is
scaled down in proportion and the adjustment is printed. A configured limit that cannot be
delivered is refused (``check_limits``) or printed, never silently capped.

No Ray import: the bench replays it on a virtual clock.
"""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from opteval.sweepcore.config_errors import ConfigError

SANDBOX_FACTOR = 1.5  # multi-call harnesses: ~1/3 of a trajectory's time is in the sandbox (bench assumption)
SINGLE_CALL_FACTOR = 1.1  # one call then one run: a little slack so the batch refills at once
SINGLE_CALL_HARNESSES = frozenset({"direct", "orlm", "sirl"})  # one model call per trajectory (llmopt: up to 37)


def harness_factor(harnesses: Iterable[str]) -> float:
    """The factor of a model's methods: the largest (a multi-call method among them sets it)."""
    return max((SINGLE_CALL_FACTOR if h in SINGLE_CALL_HARNESSES else SANDBOX_FACTOR for h in harnesses),
               default=SINGLE_CALL_FACTOR)


def check_limits(workers: int, worker_concurrency: int, max_in_flight_per_model: int) -> int:
    """Refuse a per-model limit the workers cannot deliver; returns the global bound.

    ``max_in_flight_per_model`` above ``workers x worker_concurrency`` would be capped by the
    workers without a word (256 with 2 x 64 gave 126 measured): a ConfigError (exit 2) naming
    the keys to set."""
    hold = int(workers) * int(worker_concurrency)
    if int(max_in_flight_per_model) > hold:
        need = -(-int(max_in_flight_per_model) // max(1, int(worker_concurrency)))
        raise ConfigError(
            f"cluster.max_in_flight_per_model={max_in_flight_per_model} cannot be delivered: the workers hold "
            f"cluster.workers x cluster.worker_concurrency = {workers} x {worker_concurrency} = {hold} "
            f"trajectories at once; set cluster.workers={need} (or cluster.worker_concurrency higher), or "
            f"cluster.max_in_flight_per_model<={hold}")
    return hold


class Pool:
    """A counting limit that can be resized while held (a model grows a replica group, another
    one leaves): ``acquire`` waits while ``held >= limit``; first come first served. Hand-made
    rather than ``asyncio.Semaphore`` because a semaphore cannot shrink."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, int(limit))
        self.held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if not self._waiters and self.held < self.limit:
            self.held += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, then cancelled: give it back
                self.release()
            elif fut in self._waiters:
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        self.held -= 1
        self._wake()

    def resize(self, limit: int) -> None:
        self.limit = max(1, int(limit))
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.held < self.limit:
            fut = self._waiters.popleft()
            if not fut.done():
                self.held += 1
                fut.set_result(None)


@dataclass
class Share:
    """One deployed model's serving capacity and what it was given."""

    replicas: int
    max_ongoing: int
    factor: float
    pool: Pool

    @property
    def target(self) -> int:
        return max(1, round(self.replicas * self.max_ongoing * self.factor))


class Admission:
    """The per-model pools of the models deployed now, within the workers' global bound."""

    def __init__(self, global_bound: int, per_model_cap: int, say: Callable[[str], None] = print) -> None:
        self.global_bound = max(1, int(global_bound))
        self.per_model_cap = max(1, int(per_model_cap))
        self.say = say
        self.shares: dict[str, Share] = {}
        self._told_cap: set[str] = set()

    def open(self, model: str, replicas: int, max_ongoing: int, factor: float) -> Pool:
        """A model's replicas are up: its pool, sized (and the others resized) now."""
        share = Share(int(replicas), int(max_ongoing), float(factor), Pool(1))
        self.shares[model] = share
        self._rebalance()
        return share.pool

    def grow(self, model: str, replicas: int) -> None:
        if model in self.shares:
            self.shares[model].replicas = int(replicas)
            self._rebalance()

    def close(self, model: str) -> None:
        """A model is done: its share goes back to the others."""
        if self.shares.pop(model, None) is not None:
            self._rebalance()

    def limit(self, model: str) -> int:
        return self.shares[model].pool.limit

    def _rebalance(self) -> None:
        wants = {}
        for m, s in self.shares.items():
            want = s.target
            if want > self.per_model_cap:
                if m not in self._told_cap:
                    self._told_cap.add(m)
                    self.say(f"[admission] {m}: cluster.max_in_flight_per_model={self.per_model_cap} is below its "
                             f"serving capacity {want} ({s.replicas} replica(s) x max_ongoing_requests "
                             f"{s.max_ongoing} x {s.factor:g}); its batch will not be full (raise the limit)")
                want = self.per_model_cap
            wants[m] = want
        total = sum(wants.values())
        scale = min(1.0, self.global_bound / total) if total else 1.0
        limits = {m: max(1, int(want * scale)) for m, want in wants.items()}
        if scale < 1.0 and any(limits[m] != self.shares[m].pool.limit for m in limits):
            self.say(f"[admission] the {len(wants)} deployed models' targets add up to {total} > the workers' "
                     f"{self.global_bound} (cluster.workers x cluster.worker_concurrency): each scaled by "
                     f"{scale:.2f} ({', '.join(f'{m}={n}' for m, n in limits.items())}); raise cluster.workers "
                     f"to fill every batch")
        for m, limit in limits.items():
            self.shares[m].pool.resize(limit)
