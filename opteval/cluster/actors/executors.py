"""Executor actors (each owns an ``opteval.evalcore.sandbox.ForkServer``) and the async facade harnesses use.

Why the facade never raises: a harness must see an executor that vanished as an
``ExecResult(outcome="killed")``, exactly like a crashed sandbox, and must never hang
on it. The facade also remembers that it saw an infrastructure loss, so the worker can
report the trajectory as retryable instead of letting a lost executor count against
the model. What counts as a loss (:func:`infra_loss`): a Ray error or timeout reaching
the actor, and every sandbox failure that is not the program's doing (the fork server
died or was unavailable, the channel to the sandbox broke, a session that could not
start or was lost). A program that kills its own interpreter is the program's doing.
An executor that failed is avoided for ``DOWN_S`` while any other is up.
"""
from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from opteval.cluster.runtime import EXECUTOR_RESOURCE
from opteval.evalcore import sandbox
from opteval.evalcore.sandbox.types import KILLED, ExecResult, Limits
from opteval.evalcore.solvers import preimport_modules, validate, versions

# Slack on top of a program's own wall limit before the facade gives up on a remote call:
# queueing behind other runs on the same actor, pickling, an actor restart.
CALL_SLACK_S = 120.0
CONTROL_TIMEOUT_S = 60.0  # open/close a session, ping
DOWN_S = 30.0  # an executor that just failed is avoided this long while another is up
PROBE_S = 5.0  # after DOWN_S, a ping must answer this fast before it gets work again
# Notes of a ``killed`` ExecResult that mean the sandbox machinery failed, not the program
# (opteval.evalcore.sandbox.host: ForkServer._lost, run_program, Session._open/run_cell; ours below).
INFRA_NOTES = ("fork server", "sandbox lost", "session lost", "session could not start", "executor lost")


def infra_loss(res: ExecResult) -> str | None:
    """The reason when ``res`` is an infrastructure loss (retry the trajectory), else None."""
    if res.outcome != KILLED:
        return None
    note = res.note or ""
    return note if any(m in note for m in INFRA_NOTES) else None


def executor_name(sweep: str, index: int) -> str:
    return f"opteval/{sweep}/executor-{index}"


@ray.remote(max_restarts=-1, max_task_retries=0)
class ExecutorActor:
    """One fork server; runs up to ``slots`` programs or cells at once in threads.

    Sessions live in this process under string ids; after a restart the table is empty,
    and a cell for an unknown id comes back ``killed`` (the session was lost with us).
    """

    def __init__(self, slots: int = 1, default_limits: Limits | None = None,
                 solvers: tuple[str, ...] | None = None, pool_size: int = 2) -> None:
        self._default_limits = default_limits or Limits()
        self._solvers = validate(solvers)
        self._server = sandbox.ForkServer(modules=preimport_modules(self._solvers), pool_size=int(pool_size),
                                  allow_uncontained=self._default_limits.allow_uncontained)
        self._slots = asyncio.Semaphore(max(1, int(slots)))
        self._sessions: dict[str, Any] = {}

    async def ping(self) -> bool:
        return True

    async def warm(self) -> dict[str, Any]:
        """Start the fork server now (and import the solvers' common parts) rather than on the first run.

        Returns how it contains programs; ``refused`` is set when it cannot contain them and
        ``limits.allow_uncontained`` is false (the sandbox never silently runs on the host).
        """
        try:
            await asyncio.to_thread(self._server.start)
        except RuntimeError as exc:  # opteval.evalcore.sandbox.SandboxUnavailable, or a server that cannot start
            return {"contained": False, "refused": str(exc)}
        await asyncio.to_thread(self._server.run_program, "pass", self._default_limits)
        return {"contained": self._server.contained, "userns": getattr(self._server, "userns", False),
                "note": self._server.note, "refused": ""}

    async def run(self, code: str, limits: Limits | None = None) -> ExecResult:
        async with self._slots:
            return await asyncio.to_thread(self._server.run_program, code, limits or self._default_limits)

    async def open_session(self) -> str:
        sid = uuid.uuid4().hex
        self._sessions[sid] = await asyncio.to_thread(self._server.session)
        return sid

    async def run_cell(self, sid: str, code: str, limits: Limits | None = None) -> ExecResult:
        session = self._sessions.get(sid)
        if session is None:
            return ExecResult(outcome=KILLED, note="session lost: its executor restarted")
        async with self._slots:
            return await asyncio.to_thread(session.run_cell, code, limits)

    async def restart_session(self, sid: str) -> bool:
        """A fresh interpreter for session ``sid``; False when this actor no longer holds it."""
        session = self._sessions.get(sid)
        if session is None:
            return False
        await asyncio.to_thread(session.restart)
        return True

    async def close_session(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            await asyncio.to_thread(session.close)

    async def stats(self) -> dict[str, int]:
        return {"sessions": len(self._sessions)}

    async def environment(self) -> dict[str, Any]:
        """The solver set, its installed versions and the modules the fork server pre-imported."""
        await self.warm()
        return {"solvers": list(self._solvers), "versions": versions(self._solvers),
                "preimported": list(self._server.modules)}

    async def server_pid(self) -> int | None:
        """The fork server's pid (operators and fault-injection tests)."""
        return self._server.pid


def start_executors(sweep: str, count: int, cpus: float, default_limits: Limits | None = None,
                    solvers: tuple[str, ...] | None = None, pool_size: int = 2) -> list[Any]:
    """Named actors (so operators and tests can find them), not detached: they die with the driver.

    ``pool_size``: children each executor's fork server keeps forked ahead of demand
    (``cluster.sandbox_pool``).
    """
    handles, warming = launch_executors(sweep, count, cpus, default_limits, solvers, pool_size)
    return executors_warmed(handles, ray.get(warming, timeout=300))


def launch_executors(sweep: str, count: int, cpus: float, default_limits: Limits | None = None,
                     solvers: tuple[str, ...] | None = None, pool_size: int = 2) -> tuple[list[Any], list[Any]]:
    """The actors and their warm-up calls, not waited for: a sweep starts its harness workers
    while the fork servers come up (each side is seconds of process start on a small machine).
    Pass what the warm-up calls return to :func:`executors_warmed`."""
    handles = []
    for i in range(count):
        # Only where a node offers an executor slot (opteval.cluster.runtime.EXECUTOR_RESOURCE).
        opts = {"num_cpus": cpus, "resources": {EXECUTOR_RESOURCE: 1}, "name": executor_name(sweep, i),
                "get_if_exists": False}
        handles.append(ExecutorActor.options(**opts).remote(  # type: ignore[attr-defined]
            cpus, default_limits, solvers, pool_size))
    return handles, [h.warm.remote() for h in handles]


def executors_warmed(handles: list[Any], infos: list[dict[str, Any]]) -> list[Any]:
    """``handles``, once every warm-up answered; refused containment is a ConfigError (the actors killed)."""
    refused = [i["refused"] for i in infos if i.get("refused")]
    if refused:
        # deferred: keeps config (omegaconf, pyarrow) out of the actors
        from opteval.sweepcore.config import ConfigError

        for h in handles:
            ray.kill(h, no_restart=True)
        raise ConfigError(f"limits.allow_uncontained: executor refused to start: {refused[0]}")
    if not all(i.get("contained") for i in infos):
        print(f"WARNING: {sum(not i.get('contained') for i in infos)} of {len(infos)} executors run programs "
              "UNCONTAINED (limits.allow_uncontained: true); every result says contained=false", flush=True)
    return handles


# -- the facade --------------------------------------------------------------------


@dataclass
class _Shared:
    """Per-process load counts over the executor handles (one instance per worker)."""

    handles: list[Any]
    load: list[int] = field(default_factory=list)
    rr: Any = None
    down_until: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.load = [0] * len(self.handles)
        self.down_until = [0.0] * len(self.handles)
        self.rr = itertools.count()

    def pick(self, avoid: int | None = None) -> int:
        """Least loaded among the executors that have not just failed (and not ``avoid``);
        ties broken round robin so equal loads still spread."""
        start = next(self.rr) % len(self.handles)
        order = [(start + k) % len(self.handles) for k in range(len(self.handles))]
        now = time.monotonic()
        up = [i for i in order if self.down_until[i] <= now and i != avoid]
        return min(up or order, key=lambda i: self.load[i])

    def mark_down(self, idx: int) -> None:
        """A call to ``idx`` failed: send new work elsewhere while it restarts."""
        if 0 <= idx < len(self.down_until):
            self.down_until[idx] = time.monotonic() + DOWN_S

    async def pick_live(self, avoid: int | None = None) -> int:
        """:meth:`pick`, but an executor that failed earlier gets work again only once it answers
        a ping within ``PROBE_S``: one whose node died and that Ray cannot place again (no free
        CPUs on the surviving nodes) stays out of the pool instead of swallowing calls until
        they time out. With nothing live, the least loaded is returned (the call then fails)."""
        tried: set[int] = set()
        while True:
            idx = self.pick(avoid)
            if self.down_until[idx] == 0.0 or idx in tried or self.down_until[idx] > time.monotonic():
                return idx
            tried.add(idx)
            try:
                await _await_ref(self.handles[idx].ping.remote(), PROBE_S)
                self.down_until[idx] = 0.0
                return idx
            except (TimeoutError, RayError):
                self.mark_down(idx)


def _lost(reason: str) -> ExecResult:
    return ExecResult(outcome=KILLED, note=f"executor lost: {reason}")


async def _await_ref(ref: Any, timeout_s: float) -> Any:
    async def _get() -> Any:
        return await ref

    return await asyncio.wait_for(_get(), timeout=timeout_s)


class RayExecutor:
    """Implements ``opteval.evalcore.harnesses.base.Executor`` over executor actors.

    One instance per trajectory (cheap): ``losses`` lists every infrastructure loss this
    trajectory saw, which the worker turns into a retry.
    """

    def __init__(self, shared: _Shared, default_limits: Limits | None = None, on_loss: Any = None) -> None:
        self._shared = shared
        self._default = default_limits or Limits()
        self.losses: list[str] = []
        self._on_loss = on_loss  # the worker ends the trajectory early (it will be retried)

    def _loss(self, reason: str, idx: int | None = None) -> None:
        self.losses.append(reason)
        if idx is not None:
            self._shared.mark_down(idx)
        if self._on_loss is not None:
            self._on_loss(reason)

    def _timeout(self, limits: Limits | None) -> float:
        return float((limits or self._default).wall_s) + CALL_SLACK_S

    async def _call(self, idx: int, method: str, *args: Any, timeout_s: float) -> Any:
        self._shared.load[idx] += 1
        try:
            ref = getattr(self._shared.handles[idx], method).remote(*args)
            return await _await_ref(ref, timeout_s)
        finally:
            self._shared.load[idx] -= 1

    async def run(self, code: str, limits: Limits | None = None) -> ExecResult:
        idx = await self._shared.pick_live()
        try:
            res = await self._call(idx, "run", code, limits or self._default, timeout_s=self._timeout(limits))
        except (TimeoutError, RayError, GetTimeoutError) as exc:
            reason = f"executor {idx}: {type(exc).__name__}"
            self._loss(reason, idx)
            return _lost(reason)
        why = infra_loss(res)
        if why is not None:
            self._loss(f"executor {idx}: {why}")
        return res

    async def open_session(self) -> RaySession:
        """Try each actor once, least loaded first; if all fail, a session that reports killed."""
        last = "no executors"
        failed: int | None = None
        for _ in range(len(self._shared.handles)):
            idx = await self._shared.pick_live(avoid=failed)
            try:
                sid = await self._call(idx, "open_session", timeout_s=CONTROL_TIMEOUT_S)
                return RaySession(self, idx, sid)
            except (TimeoutError, RayError) as exc:
                last = f"executor {idx}: {type(exc).__name__}"
                self._loss(last, idx)
                failed = idx
        return RaySession(self, -1, "", dead_reason=last)


class RaySession:
    """A ``SessionHandle`` pinned to one executor actor for a trajectory's life."""

    def __init__(self, owner: RayExecutor, idx: int, sid: str, dead_reason: str = "") -> None:
        self._owner, self._idx, self._sid = owner, idx, sid
        self._dead = dead_reason

    async def run_cell(self, code: str, limits: Limits | None = None) -> ExecResult:
        if self._dead:
            return _lost(self._dead)
        try:
            res = await self._owner._call(
                self._idx, "run_cell", self._sid, code, limits, timeout_s=self._owner._timeout(limits)
            )
        except (TimeoutError, RayError) as exc:
            self._dead = f"executor {self._idx}: {type(exc).__name__}"
            self._owner._loss(self._dead, self._idx)
            return _lost(self._dead)
        why = infra_loss(res)
        if why is not None:
            self._dead = f"executor {self._idx}: {why}"
            self._owner._loss(self._dead)
        return res

    async def restart(self) -> None:
        """A fresh interpreter: on the same actor while it still holds the session, otherwise a
        new session on any actor (this handle then points at it). Never raises."""
        if not self._dead and self._idx >= 0:
            try:
                if await self._owner._call(self._idx, "restart_session", self._sid, timeout_s=CONTROL_TIMEOUT_S):
                    return
                self._dead = "session lost: its executor restarted"
            except (TimeoutError, RayError) as exc:
                self._dead = f"executor {self._idx}: {type(exc).__name__}"
            self._owner._loss(self._dead, self._idx)
        fresh = await self._owner.open_session()
        self._idx, self._sid, self._dead = fresh._idx, fresh._sid, fresh._dead

    async def close(self) -> None:
        if self._dead or self._idx < 0:
            return
        try:
            await self._owner._call(self._idx, "close_session", self._sid, timeout_s=CONTROL_TIMEOUT_S)
        except (TimeoutError, RayError):
            pass
