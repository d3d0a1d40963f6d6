"""The simulated policy as OpenAI-compatible Serve apps: one app per simulated model, and the
stand-in stage app (a vLLM stage's placement, answered by the simulated policy).

``deploy_simulated`` runs one model's app (``opteval.sweepcore.backends.simulated`` calls it for a stage);
``opteval.cluster.serve.llm_serving`` builds the stand-in app from a vLLM stage's placement. This module
imports neither ``opteval.cluster.serve.serving`` nor ``opteval.cluster.serve.llm_serving``.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from opteval.cluster.serve.serve_apps import QUIET_LOGS, server_deployment_name
from opteval.evalcore.models.base import CallMeta, Sampling
from opteval.evalcore.models.openai_backend import HARNESS_HEADER, STAGE_HEADER
from opteval.sweepcore.backends.sim_config import simulated_app_name, simulated_client_config
from opteval.sweepcore.endpoint import Endpoint, serve_url

SIMULATED_FINGERPRINT = "opteval-simulated"


# -- the simulated policy as an OpenAI-compatible Serve app --------------------------------

def simulated_model_cfg(model_cfg: dict[str, Any]) -> dict[str, Any]:
    """configs/models shape (``simulated: {p_correct, ttft_s, ...}``) -> ``SimulatedModel.from_config``'s."""
    return simulated_client_config(model_cfg)


def _usage_block(usage: Any) -> dict[str, Any]:
    """OpenAI usage JSON; counts the policy did not report are left out or null (missing, not zero)."""
    out: dict[str, Any] = {}
    if usage.prompt_tokens is not None:
        out["prompt_tokens"] = usage.prompt_tokens
    if usage.completion_tokens is not None:
        out["completion_tokens"] = usage.completion_tokens
    if "prompt_tokens" in out and "completion_tokens" in out:
        out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    # Always present (as vLLM sends it); null when the policy did not report it.
    out["prompt_tokens_details"] = {"cached_tokens": usage.cached_prompt_tokens}
    return out


def _sampling_from_body(body: dict[str, Any]) -> Any:
    defaults = Sampling()
    return Sampling(
        temperature=float(body.get("temperature", defaults.temperature)),
        top_p=float(body.get("top_p", defaults.top_p)),
        top_k=int(body.get("top_k", defaults.top_k) or defaults.top_k),
        max_tokens=int(body.get("max_tokens") or defaults.max_tokens),
    )


def call_meta(headers: Any) -> Any:
    """The call's harness and stage from the side-channel headers (``X-Opteval-Harness`` /
    ``X-Opteval-Stage``, see ``OpenAIChatModel``) as a ``CallMeta``; None without them."""
    harness = headers.get(HARNESS_HEADER) or headers.get(HARNESS_HEADER.lower())
    stage = headers.get(STAGE_HEADER) or headers.get(STAGE_HEADER.lower())
    return CallMeta(harness=harness, stage=stage or "act") if harness else None


def _json(status: int, content: Any) -> Response:
    return Response(json.dumps(content, separators=(",", ":")).encode(), status_code=status,
                    media_type="application/json")


def _error(status: int, message: str, param: str | None = None) -> Response:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error", "param": param}})


CHAT_PATH = "/v1/chat/completions"
# How often a replica being torn down checks that its requests have drained (Serve's default:
# 2 s, so every teardown of an idle model took 2 s or more). A model is torn down once its work
# is done, so there is nothing to drain; graceful_shutdown_timeout_s (20 s) still bounds a drain.
DRAIN_CHECK_S = 0.2
MODELS_PATH = "/v1/models"


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024,
                  graceful_shutdown_wait_loop_s=DRAIN_CHECK_S)
class SimulatedOpenAI:
    """``POST /v1/chat/completions`` and ``GET /v1/models`` over ``SimulatedModel.chat``.

    Why a plain ``__call__`` and not a FastAPI ingress: the replica shares the CPUs with
    the executors, and FastAPI's middleware stack, routing and response validation cost
    several ms per request (measured in ``bench/bench_sweep.py``); two routes do not
    need a framework. Paths are matched on their ending, so any route prefix works.
    """

    def __init__(self, model_cfg: dict[str, Any]) -> None:
        # deferred: the simulator loads only when a simulated model is used
        from opteval.evalcore.sim.policy import SimulatedModel

        self._name = str(model_cfg["name"])
        self._model = SimulatedModel.from_config(simulated_model_cfg(model_cfg))

    async def __call__(self, request: Request) -> Response:
        path = request.url.path.rstrip("/")
        if path.endswith(CHAT_PATH):
            if request.method != "POST":
                return _error(405, f"{CHAT_PATH} takes POST")
            return await self.chat(await request.body(), call_meta(request.headers))
        if path.endswith(MODELS_PATH):
            return _json(200, {"object": "list",
                               "data": [{"id": self._name, "object": "model", "owned_by": SIMULATED_FINGERPRINT}]})
        return _error(404, f"no route {path!r}: use {CHAT_PATH} or {MODELS_PATH}")

    async def respond(self, raw: bytes, meta: Any = None) -> tuple[int, bytes]:
        """The handle route (``opteval.cluster.serve.serve_handle``): the same body and meta as over HTTP."""
        r = await self.chat(raw, meta)
        return r.status_code, bytes(r.body)

    async def chat(self, raw: bytes, meta: Any = None) -> Response:
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "messages")
        if body.get("stream"):
            return _error(400, "the simulated policy does not stream", "stream")
        seed = int(body.get("seed") or 0)
        comp = await self._model.chat(messages, _sampling_from_body(body), seed, meta)
        return _json(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or self._name, "system_fingerprint": SIMULATED_FINGERPRINT,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": comp.text},
                         "finish_reason": comp.finish_reason}],
            "usage": _usage_block(comp.usage),
        })


# -- stand-ins: the placement of a vLLM stage, answered by the simulated policy ----------


@serve.deployment(ray_actor_options={"num_cpus": 0}, graceful_shutdown_wait_loop_s=DRAIN_CHECK_S)
class StandinServer:
    """One model's stand-in replica: placed with the real replica's bundles and strategy
    (``opteval.sweepcore.placement.placement``), answering with the simulated policy (marked simulated)."""

    def __init__(self, model_cfg: dict[str, Any]) -> None:
        # serve.deployment turns the class into a Deployment; Ray's stubs type it as the class
        self._sim = SimulatedOpenAI.func_or_class(model_cfg)  # type: ignore[attr-defined]

    async def respond(self, raw: bytes, meta: Any = None) -> tuple[int, bytes]:
        r = await self._sim.chat(raw, meta)
        return r.status_code, bytes(r.body)


@serve.deployment(max_ongoing_requests=1000, graceful_shutdown_wait_loop_s=DRAIN_CHECK_S)
class StandinIngress:
    """Routes ``/v1/chat/completions`` by the body's ``model`` like Ray's ``OpenAiIngress``."""

    def __init__(self, servers: dict[str, Any]) -> None:
        self._servers = servers

    async def __call__(self, request: Request) -> Response:
        path = request.url.path.rstrip("/")
        if path.endswith(MODELS_PATH):
            return _json(200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": SIMULATED_FINGERPRINT}
                                                          for n in self._servers]})
        if not path.endswith(CHAT_PATH) or request.method != "POST":
            return _error(404, f"no route {request.method} {path!r}: use POST {CHAT_PATH} or GET {MODELS_PATH}")
        raw = await request.body()
        try:
            model = json.loads(raw).get("model")
        except (ValueError, AttributeError):
            return _error(400, "request body is not a JSON object")
        handle = self._servers.get(model)
        if handle is None:
            return _error(404, f"model {model!r} is not served here", "model")
        status, body = await handle.respond.remote(raw, call_meta(request.headers))
        return Response(body, status_code=status, media_type="application/json")


def standin_app(placements: list[dict[str, Any]], ingress_options: dict[str, Any], ttft_s: float = 0.0) -> Any:
    """The stand-in stage app: one ``StandinServer`` per model with its real replica's
    placement (``opteval.sweepcore.placement.placement`` dicts plus ``max_ongoing_requests``) behind one ingress
    with the real ingress's options. ``ttft_s`` (``serving.standin_ttft_s``) delays every answer as a
    real replica would: a rehearsal of the schedule's order needs calls that take time."""
    servers = {}
    for pl in placements:
        sim_cfg = {"name": pl["model"], "backend": "simulated", "simulated": {"ttft_s": float(ttft_s)}}
        servers[pl["model"]] = StandinServer.options(  # type: ignore[attr-defined]
            name=server_deployment_name(pl["model"]), num_replicas=int(pl["replicas"]),
            placement_group_bundles=[dict(b) for b in pl["bundles"]], placement_group_strategy=pl["strategy"],
            max_ongoing_requests=int(pl.get("max_ongoing_requests") or 256),
        ).bind(sim_cfg)
    return StandinIngress.options(**ingress_options).bind(servers)  # type: ignore[attr-defined]


def deploy_simulated(model_cfg: dict[str, Any], http_port: int, replicas: int = 1,
                     timeout_s: float = 600.0, http_host: str = "127.0.0.1") -> Endpoint:
    name = str(model_cfg["name"])
    prefix = f"/{name}"
    app = SimulatedOpenAI.options(num_replicas=max(1, int(replicas))).bind(model_cfg)  # type: ignore[attr-defined]
    # Not waiting here: wait_ready checks RUNNING and a real request (and sees DEPLOY_FAILED).
    serve.run_many([serve.RunTarget(app, name=simulated_app_name(name), route_prefix=prefix,
                                    logging_config=QUIET_LOGS)],
                   wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
    return Endpoint(name=name, base_url=serve_url(http_port, prefix, http_host), model_id=name, simulated=True,
                    api_key_env=None, timeout_s=float(timeout_s), max_retries=4, app_name=simulated_app_name(name))
