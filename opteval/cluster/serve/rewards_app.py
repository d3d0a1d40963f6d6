"""The reward service: ``POST /rewards`` on Ray Serve, programs on autoscaled sandbox replicas.

Two deployments:

* ``RewardService`` (the ingress, no CPU): validates the request, extracts each
  completion's program with the extraction profile, sends *only the code* to the runners,
  then scores with ``opteval.evalcore.rewards`` against the answers, which never leave it.
* ``SandboxRunner`` (one CPU each): an executor that owns one warm
  ``opteval.evalcore.sandbox.ForkServer`` and runs up to ``slots`` programs at once. Serve
  autoscales it between ``min_executors`` and ``max_executors`` replicas on the number
  of programs queued or running per replica (``target_ongoing_requests = slots``).

Why a Serve deployment rather than the sweep's named ``ExecutorActor`` pool: the service
lives longer than any one batch and its load comes in bursts (a trainer's rollout step),
which is what Serve's request-driven autoscaling is for; the runner does exactly what
``ExecutorActor.run`` does.

Request::

    {"scheme": "correct", "extraction": "orlm", "grading": "orlm",
     "items": [{"id": "p1", "completion": "...", "answer": 12}, ...]}

Optional ``"deadline_s": 2.0`` bounds the whole request (see :func:`parse_deadline`).

Response: ``{"rewards": [{"id", "reward", "correct", "parts", "error"}, ...], "errors": n}`` in
item order. ``error`` is null, or ``{"kind", "message"}`` when the reward could not be computed
(then ``reward`` and ``correct`` are null): ``executor_lost`` (the sandbox machinery failed twice:
the item is retried once first, on another executor), ``timeout_budget`` (still running at the
request's ``deadline_s``), ``internal``. ``errors`` counts them. A program killed by its *own*
limits is not an error: it gets its normal, low reward (``parts`` says so).
Items that share an ``id`` are completions of one prompt (``orr1`` votes within them).
``POST /rewards/openrlhf`` takes OpenRLHF's remote reward body (:mod:`opteval.cluster.serve.rewards_openrlhf`).
A bad request answers 400 with ``{"error": {"message", "param"}}`` naming the key (a body
nested too deeply to parse, a number of more digits than Python converts, an ``id`` that
is not a string or a number included). ``GET /rewards`` answers the known schemes and
profiles (a readiness probe). With a token (``jobs/rewards.py serve --token-env NAME``) every
request needs ``Authorization: Bearer <token>`` (401 otherwise); the app holds only its SHA-256.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from starlette.requests import Request
from starlette.responses import Response

from opteval.cluster.actors.executors import infra_loss
from opteval.cluster.runtime import EXECUTOR_RESOURCE
from opteval.cluster.serve import rewards_openrlhf
from opteval.evalcore.extraction import PROFILES as EXTRACTIONS
from opteval.evalcore.extraction import extract_code
from opteval.evalcore.grading import PROFILES as GRADINGS
from opteval.evalcore.grading import parse_submission
from opteval.evalcore.registry import UnknownNameError
from opteval.evalcore.rewards import SCHEMES, RewardItem, check_names, score
from opteval.evalcore.rewards_released import extraction_for
from opteval.evalcore.sandbox.types import KILLED, TIMEOUT, ExecResult, Limits

APP_NAME = "opteval-rewards"
ROUTE = "/rewards"
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}
MAX_ITEMS = 10_000
MAX_DEADLINE_S = 3600.0
# Error kinds of an item whose reward could not be computed (pinned: trainers match on them).
EXECUTOR_LOST = "executor_lost"
TIMEOUT_BUDGET = "timeout_budget"
INTERNAL = "internal"
BUDGET_NOTE = "request deadline"  # the note of a run the runner cut (or never started) at the deadline
MIN_RUN_S = 0.05  # a program with less budget left than this is not started
# After the deadline the ingress waits this much longer for the runners' cut results (they end
# the programs at the deadline themselves), then stops waiting and cancels what is left.
DEADLINE_GRACE_S = 0.5


@dataclass(frozen=True)
class ItemError:
    """Why an item has no reward: ``kind`` (one of the three above) and a message."""

    kind: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class ServiceConfig:
    """How the reward app is deployed; every field has a CLI flag in ``jobs/rewards.py serve``."""

    min_executors: int = 1
    max_executors: int = 2
    initial_executors: int | None = None  # None: min_executors
    slots: int = 2  # programs at once per executor (threads over one fork server)
    executor_cpus: float = 1.0
    wall_s: float = 60.0  # per-program wall and CPU limit
    # Across nodes: at most this many executors on one node (Serve's max_replicas_per_node), so
    # a trainer's burst spreads over every CPU node instead of filling the first; None: Serve's
    # own best-effort spread.
    executors_per_node: int | None = None
    # Each executor takes one unit of the sweep's executor resource (opteval_executor), so on a
    # shared cluster it lands only where a node offers executor slots (never a GPU node).
    executor_resource: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_executors <= self.max_executors:
            raise ValueError(f"need 1 <= min_executors <= max_executors, got {self.min_executors}, {self.max_executors}")
        if self.initial_executors is not None and not self.min_executors <= self.initial_executors <= self.max_executors:
            raise ValueError(f"initial_executors {self.initial_executors} is outside [min_executors, max_executors]")
        if self.slots < 1 or self.wall_s <= 0 or self.executor_cpus < 0:
            raise ValueError("slots must be >= 1, wall_s > 0 and executor_cpus >= 0")
        if self.executors_per_node is not None and self.executors_per_node < 1:
            raise ValueError(f"executors_per_node must be >= 1, got {self.executors_per_node}")

    def actor_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.executor_cpus}
        if self.executor_resource:
            opts["resources"] = {EXECUTOR_RESOURCE: 1}
        return opts

    def capacity(self, nodes: list[dict[str, float]]) -> int:
        """Executors the cluster's alive ``nodes`` (their total resources) can hold: per node its
        CPUs over ``executor_cpus``, its executor units when the resource is asked for, and
        ``executors_per_node``. Pure, so the rule is tested without Ray."""
        total = 0
        for res in nodes:
            fits = [int(float(res.get("CPU", 0)) // self.executor_cpus) if self.executor_cpus > 0 else self.max_executors]
            if self.executor_resource:
                fits.append(int(float(res.get(EXECUTOR_RESOURCE, 0))))
            if self.executors_per_node is not None:
                fits.append(self.executors_per_node)
            total += max(0, min(fits))
        return total

    def chunk_count(self) -> int:
        """Chunks per batch: 4 per slot of the largest pool, so a replica that the autoscaler
        adds mid-batch still finds queued chunks and a slow chunk does not hold the batch."""
        return self.max_executors * self.slots * 4

    def limits(self) -> Limits:
        return Limits(wall_s=self.wall_s, cpu_s=self.wall_s)

    def autoscaling(self) -> dict[str, Any]:
        return {
            "min_replicas": self.min_executors,
            "initial_replicas": self.initial_executors or self.min_executors,
            "max_replicas": self.max_executors,
            "target_ongoing_requests": self.slots,
            # a trainer's batch lasts seconds: react within seconds, give CPUs back slowly
            "metrics_interval_s": 1.0,
            "look_back_period_s": 5.0,
            "upscale_delay_s": 2.0,
            "downscale_delay_s": 120.0,
        }


@serve.deployment(ray_actor_options={"num_cpus": 1})
class SandboxRunner:
    """One warm fork server; ``run(code)`` never raises for anything the program does."""

    def __init__(self, slots: int, limits: Limits) -> None:
        # deferred, no saving: sandbox.types at the top loads the package
        from opteval.evalcore.sandbox import ForkServer

        self._server = ForkServer()
        self._slots = asyncio.Semaphore(max(1, int(slots)))
        self._limits = limits
        self._server.run_program("pass", limits)  # start the fork server before the first request

    async def run(self, code: str, budget_end: float | None = None) -> ExecResult:
        """One program; with ``budget_end`` (this process's monotonic clock) its wall limit is cut
        to the time left, so a program still running at the request's deadline ends there
        (a ``killed`` result noted ``request deadline``, never a ``timeout`` of its own)."""
        async with self._slots:
            limits = self._limits
            if budget_end is not None:
                left = budget_end - time.monotonic()
                if left < MIN_RUN_S:
                    return ExecResult(outcome=KILLED, note=f"{BUDGET_NOTE}: not started")
                if left < limits.wall_s:
                    limits = dataclasses.replace(limits, wall_s=left)
            res = await asyncio.to_thread(self._server.run_program, code, limits)
            if limits is not self._limits and res.outcome == TIMEOUT:
                return ExecResult(outcome=KILLED, wall_s=res.wall_s, note=f"{BUDGET_NOTE}: stopped after "
                                  f"{res.wall_s:.1f} s")
            return res

    async def run_many(self, codes: list[str], budget_s: float | None = None) -> list[ExecResult]:
        """A chunk of programs, ``slots`` at a time, results in order; ``budget_s``: seconds
        left of the request's deadline when the chunk was sent (None: no deadline)."""
        end = None if budget_s is None else time.monotonic() + budget_s
        return list(await asyncio.gather(*(self.run(c, end) for c in codes)))


class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_request(body: Any) -> tuple[str, str, str, list[RewardItem]]:
    """(scheme, extraction, grading, items) from a request body; RequestError names the key."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    unknown = sorted(set(body) - {"scheme", "extraction", "grading", "items", "deadline_s"})
    if unknown:
        raise RequestError(f"unknown key(s) {unknown}; expected scheme, extraction, grading, items, deadline_s",
                           unknown[0])
    scheme = body.get("scheme", "correct")
    grading = body.get("grading", "optagentbench")
    try:
        extraction = extraction_for(str(scheme), body.get("extraction"))
    except ValueError as exc:
        raise RequestError(str(exc), "extraction") from None
    try:
        needs_answer = check_names(scheme, extraction, grading).needs_answer
    except UnknownNameError as exc:  # one error class for every registry: its kind names the key
        key = {"reward scheme": "scheme", "extraction profile": "extraction"}.get(exc.kind, "grading")
        raise RequestError(str(exc), key) from None
    raw_items = body.get("items")
    if not isinstance(raw_items, list) or not raw_items:
        raise RequestError("items must be a non-empty list", "items")
    if len(raw_items) > MAX_ITEMS:
        raise RequestError(f"at most {MAX_ITEMS} items per request, got {len(raw_items)}", "items")
    return scheme, extraction, grading, [_item(i, row, needs_answer, scheme) for i, row in enumerate(raw_items)]


def _item(i: int, row: Any, needs_answer: bool, scheme: str) -> RewardItem:
    where = f"items[{i}]"
    if not isinstance(row, dict):
        raise RequestError(f"{where} must be an object", where)
    if row.get("id") is None:
        raise RequestError(f"{where}.id is missing", f"{where}.id")
    if isinstance(row["id"], bool) or not isinstance(row["id"], (str, int, float)):
        raise RequestError(f"{where}.id must be a string or a number, got {type(row['id']).__name__}", f"{where}.id")
    if not isinstance(row.get("completion"), str):
        raise RequestError(f"{where}.completion must be a string", f"{where}.completion")
    answer = row.get("answer")
    if answer is None and needs_answer:
        raise RequestError(f"{where}.answer is missing (scheme {scheme!r} needs one)", f"{where}.answer")
    if answer is not None and parse_submission(answer) is None:
        raise RequestError(f"{where}.answer {answer!r} is neither a number nor a status", f"{where}.answer")
    return RewardItem(str(row["id"]), row["completion"], answer)


def parse_deadline(value: Any, param: str = "deadline_s") -> float | None:
    """The request's ``deadline_s`` (seconds, > 0, at most an hour), None when absent.

    Why a deadline per request: one degenerate program must never stall a training step;
    programs still running at the deadline end there and come back as ``timeout_budget``
    errors, the others are scored and returned.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise RequestError(f"{param} must be a number of seconds, got {value!r}", param) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_DEADLINE_S:
        raise RequestError(f"{param} must be a number of seconds in (0, {MAX_DEADLINE_S:.0f}], got {value!r}", param)
    return float(value)


def decode_body(raw: bytes) -> Any:
    """The request's JSON; RequestError with the real cause (too deep, too many digits, not JSON)."""
    try:
        return json.loads(raw)
    except RecursionError:  # json's C scanner recurses once per level
        raise RequestError("request body is nested too deeply to parse (a reward request is 3 levels deep)") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python's int_max_str_digits guard
            raise RequestError(f"a number in the request body has too many digits ({exc})") from None
        raise RequestError(f"request body is not JSON ({exc})") from None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def authorized(headers: Any, digest: str | None) -> bool:
    """No token configured, or ``Authorization: Bearer <token>`` whose SHA-256 matches."""
    if digest is None:
        return True
    scheme, _, given = str(headers.get("authorization") or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token_digest(given.strip()), digest)


def _json(status: int, content: Any) -> Response:
    return Response(json.dumps(content, separators=(",", ":")).encode(), status_code=status,
                    media_type="application/json")


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
class RewardService:
    """``POST /rewards`` and ``GET /rewards``; a plain ``__call__`` like ``SimulatedOpenAI``."""

    def __init__(self, runner: Any, chunk_count: int, token_sha256: str | None = None) -> None:
        self._runner = runner
        self._chunk_count = chunk_count
        self._token_sha256 = token_sha256

    async def __call__(self, request: Request) -> Response:
        if not authorized(request.headers, self._token_sha256):
            return _json(401, {"error": {"message": "missing or wrong Authorization: Bearer token", "param": None}})
        if request.method == "GET":
            return _json(200, {"schemes": sorted(SCHEMES), "extraction": sorted(EXTRACTIONS),
                               "grading": sorted(GRADINGS)})
        if request.method != "POST":
            return _json(405, {"error": {"message": f"{ROUTE} takes POST (or GET for the schemes)", "param": None}})
        openrlhf = request.url.path.rstrip("/").endswith(rewards_openrlhf.SUBROUTE)
        try:
            body = decode_body(await request.body())
            if openrlhf:
                body = rewards_openrlhf.as_rewards_body(body, dict(request.query_params))
            scheme, extraction, grading, items = parse_request(body)
            deadline_s = parse_deadline(body.get("deadline_s"))
        except (RequestError, rewards_openrlhf.OpenRLHFBodyError) as exc:
            return _json(400, {"error": {"message": str(exc), "param": getattr(exc, "param", None)}})
        rows = await self.rewards(scheme, extraction, grading, items, deadline_s)
        if openrlhf:
            return _json(*rewards_openrlhf.response(rows))
        return _json(200, {"rewards": rows, "errors": sum(1 for r in rows if r["error"] is not None)})

    async def rewards(self, scheme: str, extraction: str, grading: str, items: list[RewardItem],
                      deadline_s: float | None) -> list[dict[str, Any]]:
        """One JSON row per item: its reward, or ``reward: null`` and the ``error`` that stopped it."""
        results, errors = await self.run_all([extract_code(it.completion, extraction) for it in items], deadline_s)
        rewards = score(scheme, items, results, extraction, grading)  # an errored item scores as "no code"
        rows = []
        for i, (it, r) in enumerate(zip(items, rewards)):
            err = errors.get(i)
            if err is None:
                rows.append({**r.to_json(it.id), "error": None})
            else:
                rows.append({"id": it.id, "reward": None, "correct": None, "parts": {}, "error": err.to_json()})
        return rows

    async def run_all(self, codes: list[str | None], deadline_s: float | None = None
                      ) -> tuple[list[ExecResult | None], dict[int, ItemError]]:
        """Every program, sent to the runners in chunks (:func:`chunks`), all chunks at once;
        (results, errors by item index). An item with an error has no result.

        Why chunks: one handle call per program makes Serve's router probe replica queue
        lengths hundreds of times per batch, which cost more than the programs themselves
        (measured: 245 ORLM programs took 24-34 s one per call on 2 busy cores).

        Infrastructure losses (a runner's actor died mid-chunk, a fork server lost under a
        program: ``opteval.cluster.actors.executors.infra_loss``) are retried once: Serve's router drops
        a replica whose actor died, so the retry runs on another executor (or on the one Serve
        starts in its place). A second loss is an ``executor_lost`` error, never a result.
        """
        t_end = None if deadline_s is None else time.monotonic() + deadline_s
        results: list[ExecResult | None] = [None] * len(codes)
        errors: dict[int, ItemError] = {}

        def budget_left() -> float | None:
            return None if t_end is None else t_end - time.monotonic()

        async def attempt(idx: list[int], retries: int) -> None:
            left = budget_left()
            if left is not None and left < MIN_RUN_S:
                for i in idx:
                    errors[i] = ItemError(TIMEOUT_BUDGET, f"not run: the request's deadline_s={deadline_s} passed")
                return
            response = self._runner.run_many.remote([codes[i] for i in idx], left)
            try:
                got = await response
            except asyncio.CancelledError:
                response.cancel()
                raise
            except Exception as exc:  # the replica died or failed: none of this chunk has a result
                kind = EXECUTOR_LOST if isinstance(exc, (RayActorError, ActorUnavailableError)) else INTERNAL
                if retries:
                    await attempt(idx, retries - 1)
                    return
                why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                for i in idx:
                    errors[i] = ItemError(kind, f"{why} (retried once on another executor)")
                return
            again = []
            for i, res in zip(idx, got):
                lost = infra_loss(res)
                if res.note.startswith(BUDGET_NOTE):
                    errors[i] = ItemError(TIMEOUT_BUDGET, f"{res.note} (deadline_s={deadline_s})")
                elif lost and retries:
                    again.append(i)
                elif lost:
                    errors[i] = ItemError(EXECUTOR_LOST, f"{lost} (retried once on another executor)")
                else:
                    results[i] = res
            if again:
                await attempt(again, retries - 1)

        todo = [i for i, c in enumerate(codes) if c is not None]
        tasks = [asyncio.ensure_future(attempt(idx, 1)) for idx in chunks(todo, self._chunk_count)]
        if tasks:
            wait_s = None if deadline_s is None else deadline_s + DEADLINE_GRACE_S
            done, pending = await asyncio.wait(tasks, timeout=wait_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                if task.exception() is not None:  # a bug of ours, not the program's: say so per item
                    exc = task.exception()
                    for i in todo:
                        if results[i] is None and i not in errors:
                            errors[i] = ItemError(INTERNAL, f"{type(exc).__name__}: {exc}"[:300])
        for i in todo:
            if results[i] is None and i not in errors:
                errors[i] = ItemError(TIMEOUT_BUDGET, f"still running at the request's deadline_s={deadline_s}")
        return results, errors


def chunks(idx: list[int], count: int) -> list[list[int]]:
    """``idx`` split into at most ``count`` contiguous, near-equal chunks (none empty)."""
    count = max(1, min(count, len(idx)))
    size, extra = divmod(len(idx), count)
    out, start = [], 0
    for k in range(count):
        end = start + size + (1 if k < extra else 0)
        out.append(idx[start:end])
        start = end
    return [c for c in out if c]


def build_app(cfg: ServiceConfig, token: str | None = None) -> Any:
    placement: dict[str, Any] = {}
    if cfg.executors_per_node is not None:
        placement["max_replicas_per_node"] = cfg.executors_per_node
    runner = SandboxRunner.options(  # type: ignore[attr-defined]  # serve.deployment's stub returns the class; it is a Deployment
        ray_actor_options=cfg.actor_options(),
        autoscaling_config=cfg.autoscaling(),
        max_ongoing_requests=cfg.slots * 4,
        **placement,
    ).bind(cfg.slots, cfg.limits())
    digest = token_digest(token) if token else None
    return RewardService.bind(runner, cfg.chunk_count(), digest)  # type: ignore[attr-defined]  # serve.deployment's stub returns the class; it is a Deployment


def deploy(cfg: ServiceConfig, port: int, host: str = "127.0.0.1", token: str | None = None) -> str:
    """Start Serve's proxy on ``host:port`` and run the app; returns the endpoint URL."""
    from opteval.cluster.serve.serve_apps import start_serve  # retried when the proxy dies starting (a loaded machine)

    start_serve(host, port, QUIET_LOGS)
    serve.run(build_app(cfg, token), name=APP_NAME, route_prefix=ROUTE, logging_config=QUIET_LOGS)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{int(port)}{ROUTE}"


def undeploy() -> None:
    """Delete the app from a cluster this process joined (Serve apps outlive their driver there);
    a failure is printed, never raised: the service is stopping anyway."""
    try:
        serve.delete(APP_NAME)
    except Exception as exc:  # best effort on the way out: the cluster may be gone
        print(f"rewards: could not delete the app {APP_NAME!r}: {type(exc).__name__}: {exc}", flush=True)
