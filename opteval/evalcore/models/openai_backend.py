"""Chat completions over any OpenAI-compatible HTTP server (vLLM, SGLang, Ray Serve LLM, hosted APIs).

Why httpx and not the ``openai`` SDK: we need the raw response body (vLLM's
``reasoning_content``, ``system_fingerprint``, ``prompt_tokens_details``) and full
control of retries; the SDK adds its own retry layer and typed objects that drop
unknown fields. One ``httpx.AsyncClient`` per model object (per event loop) gives
connection pooling and keep-alive for the many concurrent requests a harness worker
sends to one endpoint.

What the body carries: ``model, messages, temperature, top_p, max_tokens, seed, top_k``,
then the model's ``extra_body`` and then the sampling's ``extra_body`` merged on top
(vLLM extras such as ``chat_template_kwargs``, ``min_p``, ``repetition_penalty``).
A ``None`` value in either ``extra_body`` removes that field from the body, e.g.
``extra_body: {top_k: null}`` for hosted APIs that reject ``top_k``.

Token usage is exactly the server's ``usage`` block; a missing field stays ``None``.
``latency_s`` is the wall time of the whole ``chat`` call, retries and backoff
included (what the harness waited). Reasoning models: ``text`` is the message
``content`` only; the thinking (``reasoning_content`` or ``reasoning``) goes to
``Completion.reasoning`` so that code extraction never picks code from it.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx

from opteval.evalcore.backoff import Backoff
from opteval.evalcore.models.base import CallMeta, Completion, EndpointFailure, Message, ModelError, Sampling, Usage

log = logging.getLogger(__name__)

SIMULATED_FINGERPRINT = "opteval-simulated"
# The call's harness and stage travel as headers, never in the body or the messages: real
# servers ignore unknown headers, the simulated policy's Serve app reads them.
HARNESS_HEADER = "X-Opteval-Harness"
STAGE_HEADER = "X-Opteval-Stage"
# Error classes. Infrastructure (retried with backoff, then EndpointFailure, a ModelError ->
# status=error with the reason): 408 request timeout (Ray's ingress ends long requests with
# it), 429 rate limit, every 5xx, connection errors, client timeouts, and a 200 whose body is
# not a completion (truncated or garbled JSON: one bad body costs one retried call, not the
# whole trajectory).
RETRY_STATUSES = frozenset({408, 429})
# The model's failure for this call (not retried, not an error): the request the harness
# built was refused (finish_reason "rejected: HTTP <status>: <the server's message>", which
# opteval.evalcore.finish_reasons.rejection parses and the driver's RejectionGuard counts), e.g. the
# conversation outgrew the context window (vLLM answers 400) or a field is invalid (400/422),
# or the body is too large (413). The harness gets an empty
# completion whose finish_reason starts with "rejected"; the trajectory goes on, and may end
# with no submission (wrong, never missing).
MODEL_FAULT_STATUSES = frozenset({400, 413, 422})
REJECTED = "rejected"
# Any other 4xx (401/403 key, 404 wrong URL or model id, 405 ...) is a configuration fault of
# the endpoint: ModelError at once (retrying cannot help), recorded as infrastructure.
MAX_BACKOFF_S = 60.0
ROUTE_POLL_S = 1.0  # how often a call waiting for a refusing route (route_wait_s) looks again
_ROUTE_OUTAGES: dict[str, int] = {}  # target -> calls now waiting for it (one warning per outage)
DEFAULT_BACKOFF_S = 1.0
# Many requests in flight from one worker to one endpoint: keep the pool wide.
POOL_LIMITS = httpx.Limits(max_connections=2048, max_keepalive_connections=512, keepalive_expiry=60.0)


@dataclass
class OpenAISection:
    """A model config's ``openai`` section: where an OpenAI-compatible server is and how to
    call it. The flat client config (``make_model``) takes these keys plus ``extra_body``."""

    base_url: str | None = None  # with the API prefix, e.g. http://host:8000/v1
    model_id: str | None = None  # the request's ``model``
    api_key_env: str = "OPENAI_API_KEY"  # variable holding the key; unset = no Authorization header
    timeout_s: float = 600.0  # per attempt
    max_retries: int = 4  # retries of infrastructure failures (408, 429, 5xx, connection)
    backoff_s: float | None = None  # first retry delay (doubles, jittered); None = DEFAULT_BACKOFF_S


class TransportFailure(Exception):
    """A request that got no HTTP-level answer (connection refused, timeout, a lost replica):
    infrastructure, retried with backoff, then ``ModelError``."""


class RouteRefused(TransportFailure):
    """Nothing accepted the connection (the route's listener is gone, e.g. a Serve proxy that
    died and is being replaced): the request never reached a server."""


class MalformedResponse(Exception):
    """A 200 whose body is not a chat completion (truncated or garbled JSON, no ``choices``):
    retried like a 5xx."""


class ChatCompletionsModel:
    """The OpenAI chat-completions protocol independent of how a request travels.

    Why split from the transport: a model served by this cluster can be reached over HTTP or
    through a Serve deployment handle, and it must see the byte-identical request and be
    answered with the same error classes either way. Subclasses implement :meth:`_send`
    (raw JSON body + side-channel meta -> status, response bytes, Retry-After); the body,
    retries, backoff, error classes and response parsing live here once.
    """

    def __init__(
        self,
        name: str,
        model_id: str,
        target: str,
        timeout_s: float = 600,
        max_retries: int = 4,
        backoff_s: float = DEFAULT_BACKOFF_S,
        extra_body: dict[str, Any] | None = None,
        route_wait_s: float = 0.0,
    ) -> None:
        if not model_id:
            raise ValueError(f"model {name!r}: model_id is required for the openai backend")
        if max_retries < 0:
            raise ValueError(f"model {name!r}: max_retries must be >= 0, got {max_retries!r}")
        if timeout_s <= 0:
            raise ValueError(f"model {name!r}: timeout_s must be > 0, got {timeout_s!r}")
        self.name = name
        self.model_id = model_id
        self.target = target  # where requests go, for messages (a URL or a Serve deployment)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.extra_body = dict(extra_body or {})
        if route_wait_s < 0:
            raise ValueError(f"model {name!r}: route_wait_s must be >= 0, got {route_wait_s!r}")
        self.route_wait_s = float(route_wait_s)

    # -- request ---------------------------------------------------------------------------

    def request_body(self, messages: list[Message], sampling: Sampling, seed: int) -> dict[str, Any]:
        """The JSON body sent for one call (public so tests and logs can show it)."""
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": list(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": seed,
            "top_k": sampling.top_k,
        }
        for extra in (self.extra_body, sampling.extra_body or {}):
            for key, value in extra.items():
                if value is None:
                    body.pop(key, None)
                else:
                    body[key] = value
        return body

    async def _send(self, raw: bytes, meta: CallMeta | None) -> tuple[int, bytes, float | None]:
        """One attempt: (status, response body, Retry-After seconds or None); raises
        ``TransportFailure`` when no answer came back."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release the transport's resources (nothing by default)."""

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        return Backoff(self.backoff_s, MAX_BACKOFF_S, jitter=True).delay(attempt, at_least=retry_after)

    async def chat(
        self, messages: list[Message], sampling: Sampling, seed: int, meta: CallMeta | None = None
    ) -> Completion:
        raw = encode_body(self.request_body(messages, sampling, seed))
        start = time.perf_counter()
        last = "no attempt made"
        attempts = self.max_retries + 1
        waited = 0.0  # seconds this call spent waiting for a refusing route (route_wait_s)
        attempt = 0
        while attempt < attempts:
            retry_after: float | None = None
            try:
                status, content, retry_after = await self._send(raw, meta)
            except RouteRefused as exc:
                last = str(exc)
                if waited < self.route_wait_s:
                    waited += await self._wait_for_route(self.route_wait_s - waited, last)
                    continue  # the request never reached a server: not an attempt
            except TransportFailure as exc:
                last = str(exc)
            else:
                if status == 200:
                    try:
                        return self._parse(content, time.perf_counter() - start)
                    except MalformedResponse as exc:
                        last = str(exc)
                else:
                    last = f"HTTP {status}: {_snippet(_text(content))}"
                    if status in MODEL_FAULT_STATUSES:
                        return self._rejected(f"HTTP {status}: {error_message(content)}",
                                              time.perf_counter() - start)
                    if not _retryable(status):
                        raise ModelError(f"model {self.name!r} at {self.target}: {last} (not retried)")
            if attempt + 1 < attempts:
                delay = self._backoff(attempt, retry_after)
                log.warning("model %r at %s: %s; retry %d/%d in %.2fs",
                            self.name, self.target, last, attempt + 1, self.max_retries, delay)
                await asyncio.sleep(delay)
            attempt += 1
        raise EndpointFailure(f"model {self.name!r} at {self.target}: failed after {attempts} attempt(s); "
                              f"last: {last}")

    async def _wait_for_route(self, budget_s: float, cause: str) -> float:
        """Wait (at most ``budget_s``) until the route accepts a connection again; the seconds
        waited. One line per outage and route, not one per waiting call."""
        t0 = time.perf_counter()
        if _ROUTE_OUTAGES.setdefault(self.target, 0) == 0:
            log.warning("model %r at %s: %s; waiting up to %.0f s for the route to come back "
                        "(a Serve proxy being replaced), without spending the call's retries",
                        self.name, self.target, cause, budget_s)
        _ROUTE_OUTAGES[self.target] += 1
        try:
            while time.perf_counter() - t0 < budget_s:
                await asyncio.sleep(ROUTE_POLL_S)
                if await self._route_accepts():
                    break
        finally:
            _ROUTE_OUTAGES[self.target] -= 1
        return time.perf_counter() - t0

    async def _route_accepts(self) -> bool:
        """Does something accept a TCP connection where requests go? (True where unknown.)"""
        return True

    # -- response --------------------------------------------------------------------------

    def _rejected(self, reason: str, latency_s: float) -> Completion:
        """The model refused this request: an empty completion the harness sees (and records:
        ``finish_reason`` carries the reason), not an infrastructure error."""
        log.warning("model %r at %s refused the request: %s", self.name, self.target, reason)
        return Completion(text="", usage=Usage(), finish_reason=f"{REJECTED}: {_snippet(reason, 200)}",
                          latency_s=latency_s)

    def _parse(self, content: bytes, latency_s: float) -> Completion:
        try:
            data = json.loads(content)
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise MalformedResponse(
                f"malformed response ({type(exc).__name__}: {exc}): {_snippet(_text(content))}") from exc
        reasoning = message.get("reasoning_content") or message.get("reasoning") or None
        return Completion(
            text=message.get("content") or "",
            usage=parse_usage(data.get("usage")),
            finish_reason=choice.get("finish_reason"),
            latency_s=latency_s,
            simulated=data.get("system_fingerprint") == SIMULATED_FINGERPRINT,
            reasoning=reasoning if isinstance(reasoning, str) else None,
        )


class OpenAIChatModel(ChatCompletionsModel):
    """``ChatModel`` over ``POST {base_url}/chat/completions``.

    ``base_url`` includes the API prefix, e.g. ``http://host:8000/v1``. The API key is
    read from ``api_key_env`` once, at construction; when the variable is unset no
    ``Authorization`` header is sent (local vLLM needs none).
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        model_id: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout_s: float = 600,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        extra_body: dict[str, Any] | None = None,
        pool_shards: int = 1,
        route_wait_s: float = 0.0,
    ) -> None:
        if not base_url:
            raise ValueError(f"model {name!r}: base_url is required for the openai backend")
        if pool_shards < 1:
            raise ValueError(f"model {name!r}: pool_shards must be >= 1, got {pool_shards!r}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        super().__init__(name, model_id, self.url, timeout_s=timeout_s, max_retries=max_retries,
                         backoff_s=backoff_s, extra_body=extra_body, route_wait_s=route_wait_s)
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env) if api_key_env else None
        self._headers = {"Content-Type": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        # httpcore scans every pooled connection each time a request enters or leaves its
        # pool; a client with many concurrent requests (a harness worker) spreads them over
        # a few small pools so each scan stays short (bench/bench_sweep.py measured it).
        self.pool_shards = int(pool_shards)
        self._clients: list[httpx.AsyncClient] = []
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._next = 0

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatModel(name={self.name!r}, url={self.url!r}, model_id={self.model_id!r})"

    def _client_for_loop(self) -> httpx.AsyncClient:
        # An AsyncClient's connections belong to the loop that opened them; a model object
        # reused under another loop (tests, asyncio.run per call) gets fresh clients.
        loop = asyncio.get_running_loop()
        if not self._clients or self._client_loop is not loop or any(c.is_closed for c in self._clients):
            self._clients = [
                httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), limits=POOL_LIMITS, headers=self._headers)
                for _ in range(self.pool_shards)
            ]
            self._client_loop = loop
        self._next = (self._next + 1) % len(self._clients)
        return self._clients[self._next]

    async def aclose(self) -> None:
        for client in self._clients:
            if not client.is_closed:
                await client.aclose()
        self._clients = []

    async def _send(self, raw: bytes, meta: CallMeta | None) -> tuple[int, bytes, float | None]:
        client = self._client_for_loop()
        try:
            response = await client.post(self.url, content=raw, headers=meta_headers(meta))
        except httpx.TimeoutException as exc:
            raise TransportFailure(f"timeout after {self.timeout_s:g}s ({type(exc).__name__})") from exc
        except httpx.ConnectError as exc:
            raise RouteRefused(f"connection error ({type(exc).__name__}: {exc})") from exc
        except httpx.TransportError as exc:
            raise TransportFailure(f"connection error ({type(exc).__name__}: {exc})") from exc
        return response.status_code, response.content, _retry_after(response)


    async def _route_accepts(self) -> bool:
        url = httpx.URL(self.url)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(url.host, port), timeout=5)
        except (OSError, TimeoutError):
            return False
        writer.close()
        return True


def error_message(content: bytes) -> str:
    """The server's own words for a refusal: the JSON error's ``message`` (vLLM and OpenAI put it
    at ``message`` or ``error.message``), else the body itself; one line."""
    try:
        data = json.loads(content)
    except ValueError:
        return _snippet(_text(content))
    if isinstance(data, dict):
        err = data.get("error")
        msg = err.get("message") if isinstance(err, dict) else data.get("message")
        if isinstance(msg, str) and msg:
            return _snippet(msg)
    return _snippet(_text(content))


def encode_body(body: dict[str, Any]) -> bytes:
    """The request's bytes, exactly as ``httpx`` encodes ``json=`` (compact, UTF-8, no NaN):
    every route sends these same bytes."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def meta_headers(meta: CallMeta | None) -> dict[str, str]:
    """The side-channel headers for one call (none without meta)."""
    if meta is None:
        return {}
    return {HARNESS_HEADER: meta.harness, STAGE_HEADER: meta.stage}


def parse_usage(usage: Any) -> Usage:
    """OpenAI ``usage`` block -> Usage; anything absent or non-integer is None (missing)."""
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
        cached_prompt_tokens=_int_or_none(cached),
    )


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # HTTP-date form: ignore, the exponential backoff applies
        return None


def _text(content: bytes) -> str:
    return content.decode("utf-8", errors="replace")


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
