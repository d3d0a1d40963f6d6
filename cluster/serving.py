"""Model endpoints for a sweep stage: the simulated policy on Ray Serve, external URLs, vLLM.

Why serve the simulated policy over HTTP at all: so the whole path a real model takes
(Serve proxy, HTTP, ``OpenAIChatModel``, usage parsing) is exercised by tests and load
runs. Workers reach every endpoint the same way, through an :class:`Endpoint`.

Every completion from the simulated app carries ``system_fingerprint:
"opteval-simulated"``, which ``OpenAIChatModel`` turns into ``Completion.simulated``.
vLLM stages come from ``cluster.llm_serving`` (imported only when a stage needs it).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from cluster.config import flat_backend_config

SIMULATED_FINGERPRINT = "opteval-simulated"
LLM_APP_NAME = "opteval-llm"
# One access-log line per request would drown the progress line in `ray job logs`.
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}


@dataclass(frozen=True)
class Endpoint:
    """How a worker reaches one model. ``base_url`` None means an in-process backend (replay)."""

    name: str
    base_url: str | None
    model_id: str
    simulated: bool = False
    api_key_env: str | None = None
    timeout_s: float = 600.0
    max_retries: int = 4
    extra_body: dict[str, Any] = field(default_factory=dict)
    model_cfg: dict[str, Any] | None = None  # only for in-process backends
    app_name: str | None = None  # the Serve application we deployed for it, if any

    def __hash__(self) -> int:  # extra_body is a dict; identity is the name and URL
        return hash((self.name, self.base_url, self.model_id))


# -- the simulated policy as an OpenAI-compatible Serve app --------------------------------

def simulated_model_cfg(model_cfg: dict[str, Any]) -> dict[str, Any]:
    """configs/models shape (``simulated: {p_correct, ttft_s, ...}``) -> ``SimulatedModel.from_config``'s."""
    return flat_backend_config({**model_cfg, "backend": "simulated"})


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
    from evalcore.models.base import Sampling

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
    from evalcore.models.base import CallMeta
    from evalcore.models.openai_backend import HARNESS_HEADER, STAGE_HEADER

    harness = headers.get(HARNESS_HEADER) or headers.get(HARNESS_HEADER.lower())
    stage = headers.get(STAGE_HEADER) or headers.get(STAGE_HEADER.lower())
    return CallMeta(harness=harness, stage=stage or "act") if harness else None


def _json(status: int, content: Any) -> Response:
    return Response(json.dumps(content, separators=(",", ":")).encode(), status_code=status,
                    media_type="application/json")


def _error(status: int, message: str, param: str | None = None) -> Response:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error", "param": param}})


CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024)
class SimulatedOpenAI:
    """``POST /v1/chat/completions`` and ``GET /v1/models`` over ``SimulatedModel.chat``.

    Why a plain ``__call__`` and not a FastAPI ingress: the replica shares the CPUs with
    the executors, and FastAPI's middleware stack, routing and response validation cost
    several ms per request (measured in ``bench/bench_sweep.py``); two routes do not
    need a framework. Paths are matched on their ending, so any route prefix works.
    """

    def __init__(self, model_cfg: dict[str, Any]) -> None:
        from evalcore.models.simulated import SimulatedModel

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


def simulated_app_name(model: str) -> str:
    return f"opteval-sim-{model}"


def _base(port: int, prefix: str) -> str:
    return f"http://127.0.0.1:{port}{prefix}/v1"


def ensure_serve(http_port: int) -> None:
    """Start Serve's HTTP proxies on the configured port (no-op when already running)."""
    serve.start(http_options={"host": "0.0.0.0", "port": int(http_port)}, logging_config=QUIET_LOGS)


def deploy_simulated(model_cfg: dict[str, Any], http_port: int, replicas: int = 1) -> Endpoint:
    name = str(model_cfg["name"])
    prefix = f"/{name}"
    app = SimulatedOpenAI.options(num_replicas=max(1, int(replicas))).bind(model_cfg)
    serve.run(app, name=simulated_app_name(name), route_prefix=prefix, logging_config=QUIET_LOGS)
    return Endpoint(name=name, base_url=_base(http_port, prefix), model_id=name, simulated=True,
                    api_key_env=None, timeout_s=600.0, max_retries=4, app_name=simulated_app_name(name))


def external_endpoint(model_cfg: dict[str, Any]) -> Endpoint:
    """``backend: openai``: a URL someone else runs; nothing to deploy."""
    oc = dict(model_cfg.get("openai") or {})
    name = str(model_cfg["name"])
    if not oc.get("base_url") or not oc.get("model_id"):
        raise ValueError(f"model {name!r}: openai.base_url and openai.model_id are required for backend openai")
    return Endpoint(name=name, base_url=str(oc["base_url"]), model_id=str(oc["model_id"]), simulated=False,
                    api_key_env=oc.get("api_key_env", "OPENAI_API_KEY"), timeout_s=float(oc.get("timeout_s", 600)),
                    max_retries=int(oc.get("max_retries", 4)), extra_body=dict(oc.get("extra_body") or {}))


def in_process_endpoint(model_cfg: dict[str, Any]) -> Endpoint:
    """Backends without a server (replay): the worker builds them with ``make_model``."""
    plain = flat_backend_config(model_cfg)
    name = plain["name"]
    return Endpoint(name=name, base_url=None, model_id=name, simulated=plain["backend"] == "simulated",
                    model_cfg=plain)


def deploy_vllm(model_cfgs: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
    """One Serve app for a vLLM stage, built and awaited by ``cluster.llm_serving`` (GPU-only import)."""
    from cluster import llm_serving  # lazy: needs ray[serve,llm] and vLLM

    return llm_serving.deploy_stage(model_cfgs, cfg, app_name=LLM_APP_NAME)


def wait_ready(endpoints: dict[str, Endpoint], timeout_s: float) -> None:
    """Poll ``GET /models`` until every served endpoint answers 200 (vLLM loads take minutes)."""
    import httpx

    deadline = time.monotonic() + float(timeout_s)
    for ep in endpoints.values():
        if not ep.app_name:
            continue
        last = "no attempt"
        while True:
            try:
                r = httpx.get(f"{ep.base_url}/models", timeout=10.0)
                if r.status_code == 200:
                    break
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise TimeoutError(f"endpoint {ep.name} at {ep.base_url} not ready after {timeout_s}s: {last}")
            time.sleep(0.5)


def sim_replicas(model_cfg: dict[str, Any]) -> int:
    """Replica count of a simulated app: ``serving.replicas`` or ``replicas`` in the model config, else 1."""
    serving = model_cfg.get("serving") or {}
    return max(1, int(serving.get("replicas") or model_cfg.get("replicas") or 1))


def deploy_stage(models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
    """Deploy (or point at) every model of one stage; returns name -> Endpoint, ready to call."""
    port = int(cfg.serving.http_port)
    eps: dict[str, Endpoint] = {}
    vllm = [m for m in models if m.get("backend") == "vllm"]
    needs_serve = bool(vllm) or any(m.get("backend") == "simulated" for m in models)
    if needs_serve:
        ensure_serve(port)
    for mc in models:
        backend = mc.get("backend")
        if backend == "simulated":
            eps[mc["name"]] = deploy_simulated(mc, port, replicas=sim_replicas(mc))
        elif backend == "openai":
            eps[mc["name"]] = external_endpoint(mc)
        elif backend != "vllm":
            eps[mc["name"]] = in_process_endpoint(mc)
    if vllm:
        eps.update(deploy_vllm(vllm, cfg))
    wait_ready(eps, float(cfg.serving.ready_timeout_s))
    return eps


def teardown_stage(endpoints: dict[str, Endpoint]) -> None:
    """Delete the Serve apps this stage deployed (external URLs are left alone)."""
    for app in sorted({ep.app_name for ep in endpoints.values() if ep.app_name}):
        try:
            serve.delete(app)
        except Exception:  # noqa: BLE001 - teardown is best effort; the next stage redeploys
            pass


def plan_stages(models: list[dict[str, Any]], cfg: Any) -> list[list[str]]:
    """Model-major stages: all non-GPU models first (one stage), then vLLM stages packed on the GPUs."""
    cheap = [m["name"] for m in models if m.get("backend") != "vllm"]
    vllm = [m for m in models if m.get("backend") == "vllm"]
    stages = [cheap] if cheap else []
    if vllm:
        from cluster import llm_serving

        gpus = cfg.serving.gpus
        if gpus is None:
            import ray

            gpus = int(ray.cluster_resources().get("GPU", 0))
        stages.extend(llm_serving.pack_stages(vllm, int(gpus)))
    return stages
