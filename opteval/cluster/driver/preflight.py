"""Preflight: each served model gets the sweep's real request shape once, before any trajectory.

Why: a server that refuses the sweep's request (``max_tokens`` above its ``max_model_len``, a
field it does not accept) answered every call with HTTP 400, and each refusal became an empty
reply graded wrong: a whole sweep reported 0% with 0 errors. One request with the shape the
sweep will send (the largest ``max_tokens`` any method's stage asks for, after the budget cap;
that stage's temperature, top_p, top_k, seed and ``extra_body``; the longest problem of the
plan as the prompt) finds that in seconds, and the sweep stops before dispatch with one line
naming the model, the field and what the server said (exit 2). Where the server's
``/v1/models`` gives ``max_model_len`` the ``max_tokens`` is checked against it before sending.

A request that gets no proper answer (refused connection, timeout, 5xx, a garbled body, after
the client's own retries) is tried ``PREFLIGHT_TRIES`` times; still none is
:class:`EndpointUnanswered` (its own exit code, 6): a transient or a server that is down, not bad
input. Only a refusal of the request itself (a 4xx) is a configuration error.

Only models reached over HTTP at a real server are checked (``openai``, and ``vllm`` apps this
cluster deployed); the simulated policy and its stand-ins never refuse, so they pass. No Ray
import.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace
from typing import Any

from opteval.cluster.driver.prepare import Prepared
from opteval.evalcore.finish_reasons import rejection
from opteval.evalcore.harnesses._common import stage_sampling
from opteval.evalcore.models.base import EndpointFailure, Message, ModelError, Sampling
from opteval.sweepcore import config as cconf
from opteval.sweepcore.backends import BACKEND_KEY, backend_of
from opteval.sweepcore.config_errors import ConfigError
from opteval.sweepcore.endpoint import Endpoint

INSTRUCTION = "Reply with the single word OK. (A connectivity check; the problem below needs no answer.)"
MODELS_TIMEOUT_S = 30.0
_MAX_TOKENS_HINT = "set sampling.max_tokens or serve with a longer context"
PREFLIGHT_TRIES = 3  # each try is a whole client call, with the model's own retries inside
PREFLIGHT_PAUSE_S = 2.0  # between tries


class PreflightError(ConfigError):
    """A served model refused the sweep's request shape: a configuration error (exit 2)."""


class EndpointUnanswered(Exception):
    """The preflight request got no proper answer on any try (no connection, time-outs, 5xx, a
    body that is not a completion): the endpoint is down or flaky, not misconfigured (exit 6)."""


@dataclass(frozen=True)
class Shape:
    """The request a model will get: its sampling and seed, and where that shape comes from."""

    sampling: Sampling
    seed: int
    where: str  # "method opticycle, stage act"


def request_shape(prep: Prepared, model: str) -> Shape:
    """The largest ``max_tokens`` any of the model's methods (and their stages) will send,
    capped by the budget as the harness caps it; first method wins a tie."""
    best: Shape | None = None
    for method in cconf.methods_for(prep.cfg, model):
        sampling, budgets = prep.run_params(model, method)
        stages = dict(prep.method_cfgs[method].stages) if method in prep.method_cfgs else {}
        for stage, over in [(None, None), *stages.items()]:
            s = stage_sampling(sampling, cconf.as_plain(over) if over is not None else None)
            s = replace(s, max_tokens=min(s.max_tokens, budgets.max_output_tokens))
            where = f"method {method}" + (f", stage {stage}" if stage else "")
            if best is None or s.max_tokens > best.sampling.max_tokens:
                best = Shape(s, s.seed_for(0), where)
    assert best is not None, f"model {model!r} runs no method"
    return best


def longest_question(prep: Prepared, model: str) -> str:
    """The longest problem text the model's plan holds (what is cheap to know of its prompts)."""
    benchmarks = {it.benchmark for it in prep.pending if it.model == model} or set(prep.cfg.benchmarks)
    texts = [p.question for (b, _), p in prep.problems.items() if b in benchmarks]
    return max(texts, key=len, default="")


def messages_for(prep: Prepared, model: str) -> list[Message]:
    return [{"role": "user", "content": f"{INSTRUCTION}\n\n{longest_question(prep, model)}"}]


def checked(prep: Prepared, model: str, ep: Endpoint) -> bool:
    cfg = prep.model_cfgs.get(model)
    if not cfg or BACKEND_KEY not in cfg:
        return False
    return backend_of(cfg).asks_server and not ep.simulated and bool(ep.base_url)


async def preflight(prep: Prepared, endpoints: dict[str, Endpoint]) -> None:
    """Raise :class:`PreflightError` for the first model whose server refuses the sweep's request."""
    for model, ep in endpoints.items():
        if checked(prep, model, ep):
            await _check(prep, model, ep)


async def _check(prep: Prepared, model: str, ep: Endpoint) -> None:
    shape = request_shape(prep, model)
    limit = await max_model_len(ep)
    if limit is not None and shape.sampling.max_tokens > limit:
        raise PreflightError(f"model {model!r}: max_tokens={shape.sampling.max_tokens} > max_model_len={limit}: "
                             f"{_MAX_TOKENS_HINT} ({shape.where}; max_model_len from the server's /v1/models)")
    client = ep.client()
    body = client.request_body(messages_for(prep, model), shape.sampling, shape.seed)  # type: ignore[attr-defined]
    print(f"[sweep] preflight {model}: one request as the sweep sends it (max_tokens={shape.sampling.max_tokens}, "
          f"{shape.where})", flush=True)
    try:
        completion = await _answered(client, prep, model, shape)
    except EndpointFailure as exc:
        raise EndpointUnanswered(f"model {model!r}: the endpoint did not answer properly to the sweep's first "
                                 f"request ({PREFLIGHT_TRIES} tries, {shape.where}): "
                                 f"{' '.join(str(exc).split())}") from None
    except ModelError as exc:  # refused outright (401, 404, ...): not retried, a configuration fault
        raise PreflightError(f"model {model!r}: the sweep's first request failed ({shape.where}): "
                             f"{' '.join(str(exc).split())}") from None
    finally:
        close = getattr(client, "aclose", None)
        if close is not None:
            await close()
    refused = rejection(completion.finish_reason)
    if refused is not None:
        status, text = refused
        raise PreflightError(f"model {model!r}: {_fields(body, text)}the server refused the sweep's request "
                             f"with HTTP {status}: {text} ({shape.where}): {_hint(body, text)}")


async def _answered(client: Any, prep: Prepared, model: str, shape: Shape) -> Any:
    """The preflight's completion, tried ``PREFLIGHT_TRIES`` times through transient failures."""
    for attempt in range(PREFLIGHT_TRIES):
        try:
            return await client.chat(messages_for(prep, model), shape.sampling, shape.seed)
        except EndpointFailure as exc:
            if attempt + 1 == PREFLIGHT_TRIES:
                raise
            print(f"[sweep] preflight {model}: no proper answer ({' '.join(str(exc).split())[-160:]}); "
                  f"trying again in {PREFLIGHT_PAUSE_S:g} s", flush=True)
            await asyncio.sleep(PREFLIGHT_PAUSE_S)
    raise AssertionError("unreachable")


def _fields(body: dict[str, Any], text: str) -> str:
    """``max_tokens=16384: `` for each request field the server's text names."""
    named = [f"{k}={v}" for k, v in body.items() if k not in ("model", "messages") and k in text]
    return ", ".join(named) + ": " if named else ""


def _hint(body: dict[str, Any], text: str) -> str:
    if "max_tokens" in text or "context length" in text or "max_model_len" in text:
        return _MAX_TOKENS_HINT
    return ("change the field in the model's sampling (a null in sampling.extra_body drops a field, "
            "e.g. extra_body: {seed: null}) or fix the server")


async def max_model_len(ep: Endpoint) -> int | None:
    """``max_model_len`` of the endpoint's model from ``GET {base_url}/models`` (vLLM reports it),
    or None when the server does not say (any failure here is left to the request itself)."""
    import httpx  # lazy: the driver imports this module before any HTTP is needed

    headers = {}
    key = os.environ.get(ep.api_key_env) if ep.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        async with httpx.AsyncClient(timeout=MODELS_TIMEOUT_S, headers=headers) as http:
            resp = await http.get(f"{str(ep.base_url).rstrip('/')}/models")
        cards = resp.json().get("data") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for card in cards if isinstance(cards, list) else []:
        if isinstance(card, dict) and card.get("id") == ep.model_id:
            value = card.get("max_model_len")
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None
