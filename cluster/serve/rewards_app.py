"""The reward service: ``POST /rewards`` on Ray Serve, programs on autoscaled sandbox replicas.

Two deployments:

* ``RewardService`` (the ingress, no CPU): validates the request, extracts each
  completion's program with the extraction profile, sends *only the code* to the runners,
  then scores with ``evalcore.rewards`` against the answers, which never leave it.
* ``SandboxRunner`` (one CPU each): an executor that owns one warm
  ``evalcore.sandbox.ForkServer`` and runs up to ``slots`` programs at once. Serve
  autoscales it between ``min_executors`` and ``max_executors`` replicas on the number
  of programs queued or running per replica (``target_ongoing_requests = slots``).

Why a Serve deployment rather than the sweep's named ``ExecutorActor`` pool: the service
lives longer than any one batch and its load comes in bursts (a trainer's rollout step),
which is what Serve's request-driven autoscaling is for; the runner does exactly what
``ExecutorActor.run`` does.

Request::

    {"scheme": "correct", "extraction": "orlm", "grading": "orlm",
     "items": [{"id": "p1", "completion": "...", "answer": 12}, ...]}

Response: ``{"rewards": [{"id", "reward", "correct", "parts"}, ...]}`` in item order.
Items that share an ``id`` are completions of one prompt (``orr1`` votes within them).
A bad request answers 400 with ``{"error": {"message", "param"}}`` naming the key (a body
nested too deeply to parse, a number of more digits than Python converts, an ``id`` that
is not a string or a number included). ``GET /rewards`` answers the known schemes and
profiles (a readiness probe). With a token (``jobs/rewards.py serve --token-env NAME``) every
request needs ``Authorization: Bearer <token>`` (401 otherwise); the app holds only its SHA-256.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from evalcore.extraction import PROFILES as EXTRACTIONS
from evalcore.extraction import UnknownProfileError as UnknownExtraction
from evalcore.extraction import extract_code
from evalcore.grading import PROFILES as GRADINGS
from evalcore.grading import UnknownProfileError as UnknownGrading
from evalcore.grading import parse_submission
from evalcore.rewards import SCHEMES, RewardItem, UnknownSchemeError, check_names, score
from evalcore.rewards_released import extraction_for
from evalcore.sandbox.types import KILLED, ExecResult, Limits

APP_NAME = "opteval-rewards"
ROUTE = "/rewards"
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}
MAX_ITEMS = 10_000


@dataclass(frozen=True)
class ServiceConfig:
    """How the reward app is deployed; every field has a CLI flag in ``jobs/rewards.py serve``."""

    min_executors: int = 1
    max_executors: int = 2
    initial_executors: int | None = None  # None: min_executors
    slots: int = 2  # programs at once per executor (threads over one fork server)
    executor_cpus: float = 1.0
    wall_s: float = 60.0  # per-program wall and CPU limit

    def __post_init__(self) -> None:
        if not 1 <= self.min_executors <= self.max_executors:
            raise ValueError(f"need 1 <= min_executors <= max_executors, got {self.min_executors}, {self.max_executors}")
        if self.initial_executors is not None and not self.min_executors <= self.initial_executors <= self.max_executors:
            raise ValueError(f"initial_executors {self.initial_executors} is outside [min_executors, max_executors]")
        if self.slots < 1 or self.wall_s <= 0 or self.executor_cpus < 0:
            raise ValueError("slots must be >= 1, wall_s > 0 and executor_cpus >= 0")

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
        from evalcore.sandbox import ForkServer

        self._server = ForkServer()
        self._slots = asyncio.Semaphore(max(1, int(slots)))
        self._limits = limits
        self._server.run_program("pass", limits)  # start the fork server before the first request

    async def run(self, code: str) -> ExecResult:
        async with self._slots:
            return await asyncio.to_thread(self._server.run_program, code, self._limits)

    async def run_many(self, codes: list[str]) -> list[ExecResult]:
        """A chunk of programs, ``slots`` at a time, results in order."""
        return list(await asyncio.gather(*(self.run(c) for c in codes)))


class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_request(body: Any) -> tuple[str, str, str, list[RewardItem]]:
    """(scheme, extraction, grading, items) from a request body; RequestError names the key."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    unknown = sorted(set(body) - {"scheme", "extraction", "grading", "items"})
    if unknown:
        raise RequestError(f"unknown key(s) {unknown}; expected scheme, extraction, grading, items", unknown[0])
    scheme = body.get("scheme", "correct")
    grading = body.get("grading", "optagentbench")
    try:
        extraction = extraction_for(str(scheme), body.get("extraction"))
    except ValueError as exc:
        raise RequestError(str(exc), "extraction") from None
    try:
        needs_answer = check_names(scheme, extraction, grading).needs_answer
    except UnknownSchemeError as exc:
        raise RequestError(str(exc), "scheme") from None
    except UnknownExtraction as exc:
        raise RequestError(str(exc), "extraction") from None
    except UnknownGrading as exc:
        raise RequestError(str(exc), "grading") from None
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
        try:
            scheme, extraction, grading, items = parse_request(decode_body(await request.body()))
        except RequestError as exc:
            return _json(400, {"error": {"message": str(exc), "param": exc.param}})
        results = await self.run_all([extract_code(it.completion, extraction) for it in items])
        rewards = score(scheme, items, results, extraction, grading)
        return _json(200, {"rewards": [r.to_json(it.id) for it, r in zip(items, rewards)]})

    async def run_all(self, codes: list[str | None]) -> list[ExecResult | None]:
        """Every program, sent to the runners in chunks (:func:`chunks`), all chunks at once.

        Why chunks: one handle call per program makes Serve's router probe replica queue
        lengths hundreds of times per batch, which cost more than the programs themselves
        (measured: 245 ORLM programs took 24-34 s one per call on 2 busy cores).
        """
        todo = [i for i, c in enumerate(codes) if c is not None]
        results: list[ExecResult | None] = [None] * len(codes)

        async def one(idx: list[int]) -> None:
            try:
                got = await self._runner.run_many.remote([codes[i] for i in idx])
            except Exception as exc:
                got = [ExecResult(outcome=KILLED, note=f"executor lost: {type(exc).__name__}")] * len(idx)
            for i, r in zip(idx, got):
                results[i] = r

        await asyncio.gather(*(one(idx) for idx in chunks(todo, self._chunk_count)))
        return results


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
    runner = SandboxRunner.options(  # type: ignore[attr-defined]  # serve.deployment's stub returns the class; it is a Deployment
        ray_actor_options={"num_cpus": cfg.executor_cpus},
        autoscaling_config=cfg.autoscaling(),
        max_ongoing_requests=cfg.slots * 4,
    ).bind(cfg.slots, cfg.limits())
    digest = token_digest(token) if token else None
    return RewardService.bind(runner, cfg.chunk_count(), digest)  # type: ignore[attr-defined]  # serve.deployment's stub returns the class; it is a Deployment


def deploy(cfg: ServiceConfig, port: int, host: str = "127.0.0.1", token: str | None = None) -> str:
    """Start Serve's proxy on ``host:port`` and run the app; returns the endpoint URL."""
    from cluster.serve.serve_apps import start_serve  # retried when the proxy dies starting (a loaded machine)

    start_serve(host, port, QUIET_LOGS)
    serve.run(build_app(cfg, token), name=APP_NAME, route_prefix=ROUTE, logging_config=QUIET_LOGS)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{int(port)}{ROUTE}"
