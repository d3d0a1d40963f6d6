"""Executor actors (each owns an ``evalcore.sandbox.ForkServer``) and the async facade harnesses use.

Why the facade never raises: a harness must see an executor that vanished as an
``ExecResult(outcome="killed")``, exactly like a crashed sandbox, and must never hang
on it. The facade also remembers that it saw an infrastructure loss, so the worker can
report the trajectory as retryable instead of letting a lost executor count against
the model.
"""
from __future__ import annotations

import asyncio
import inspect
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from evalcore.sandbox.types import KILLED, ExecResult, Limits

# Slack on top of a program's own wall limit before the facade gives up on a remote call:
# queueing behind other runs on the same actor, pickling, an actor restart.
CALL_SLACK_S = 120.0
CONTROL_TIMEOUT_S = 60.0  # open/close a session, ping


def executor_name(sweep: str, index: int) -> str:
    return f"opteval/{sweep}/executor-{index}"


@ray.remote(max_restarts=-1, max_task_retries=0)
class ExecutorActor:
    """One fork server; runs up to ``slots`` programs or cells at once in threads.

    Sessions live in this process under string ids; after a restart the table is empty,
    and a cell for an unknown id comes back ``killed`` (the session was lost with us).
    """

    def __init__(self, slots: int = 1, default_limits: Limits | None = None, pool_size: int = 2) -> None:
        try:
            from evalcore.sandbox import ForkServer
        except ImportError:  # the package may not re-export it
            from evalcore.sandbox.server import ForkServer

        self._default_limits = default_limits or Limits()
        self._server = ForkServer(pool_size=int(pool_size), allow_uncontained=self._default_limits.allow_uncontained)
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
        except RuntimeError as exc:  # evalcore.sandbox.SandboxUnavailable, or a server that cannot start
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
            return await asyncio.to_thread(_call_run_cell, session, code, limits)

    async def close_session(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            await asyncio.to_thread(session.close)

    async def stats(self) -> dict[str, int]:
        return {"sessions": len(self._sessions)}


def _call_run_cell(session: Any, code: str, limits: Limits | None) -> ExecResult:
    """``Session.run_cell`` may or may not take limits; pass them only when it does."""
    if limits is not None and "limits" in inspect.signature(session.run_cell).parameters:
        return session.run_cell(code, limits=limits)
    return session.run_cell(code)


def start_executors(sweep: str, count: int, cpus: int, default_limits: Limits | None = None,
                    pool_size: int = 2) -> list[Any]:
    """Named actors (so operators and tests can find them), not detached: they die with the driver.

    ``pool_size``: children each executor's fork server keeps forked ahead of demand
    (``cluster.sandbox_pool``).
    """
    handles = []
    for i in range(count):
        opts = {"num_cpus": cpus, "name": executor_name(sweep, i), "get_if_exists": False}
        handles.append(ExecutorActor.options(**opts).remote(cpus, default_limits, pool_size))
    infos = ray.get([h.warm.remote() for h in handles], timeout=300)
    refused = [i["refused"] for i in infos if i.get("refused")]
    if refused:
        from cluster.config import ConfigError

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

    def __post_init__(self) -> None:
        self.load = [0] * len(self.handles)
        self.rr = itertools.count()

    def pick(self) -> int:
        """Least loaded; ties broken round robin so equal loads still spread."""
        start = next(self.rr) % len(self.handles)
        order = [(start + k) % len(self.handles) for k in range(len(self.handles))]
        return min(order, key=lambda i: self.load[i])


def _lost(reason: str) -> ExecResult:
    return ExecResult(outcome=KILLED, note=f"executor lost: {reason}")


async def _await_ref(ref: Any, timeout_s: float) -> Any:
    async def _get() -> Any:
        return await ref

    return await asyncio.wait_for(_get(), timeout=timeout_s)


class RayExecutor:
    """Implements ``evalcore.harnesses.base.Executor`` over executor actors.

    One instance per trajectory (cheap): ``losses`` lists every infrastructure loss this
    trajectory saw, which the worker turns into a retry.
    """

    def __init__(self, shared: _Shared, default_limits: Limits | None = None) -> None:
        self._shared = shared
        self._default = default_limits or Limits()
        self.losses: list[str] = []

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
        idx = self._shared.pick()
        try:
            return await self._call(idx, "run", code, limits or self._default, timeout_s=self._timeout(limits))
        except (RayError, GetTimeoutError, asyncio.TimeoutError) as exc:
            reason = f"executor {idx}: {type(exc).__name__}"
            self.losses.append(reason)
            return _lost(reason)

    async def open_session(self) -> "RaySession":
        """Try each actor once, least loaded first; if all fail, a session that reports killed."""
        last = "no executors"
        for _ in range(len(self._shared.handles)):
            idx = self._shared.pick()
            try:
                sid = await self._call(idx, "open_session", timeout_s=CONTROL_TIMEOUT_S)
                return RaySession(self, idx, sid)
            except (RayError, asyncio.TimeoutError) as exc:
                last = f"executor {idx}: {type(exc).__name__}"
                self.losses.append(last)
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
        except (RayError, asyncio.TimeoutError) as exc:
            self._dead = f"executor {self._idx}: {type(exc).__name__}"
            self._owner.losses.append(self._dead)
            return _lost(self._dead)
        if res.outcome == KILLED and res.note.startswith("session lost"):
            self._dead = res.note
            self._owner.losses.append(res.note)
        return res

    async def close(self) -> None:
        if self._dead or self._idx < 0:
            return
        try:
            await self._owner._call(self._idx, "close_session", self._sid, timeout_s=CONTROL_TIMEOUT_S)
        except (RayError, asyncio.TimeoutError):
            pass
