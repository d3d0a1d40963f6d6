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
    # (deployment, app) when workers call it through a Serve handle (serving.route=handle,
    # cluster.serve_handle); None: over base_url
    handle: tuple[str, str] | None = None

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

    async def respond(self, raw: bytes, meta: Any = None) -> tuple[int, bytes]:
        """The handle route (``cluster.serve_handle``): the same body and meta as over HTTP."""
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


@serve.deployment(ray_actor_options={"num_cpus": 0})
class StandinServer:
    """One model's stand-in replica: placed with the real replica's bundles and strategy
    (``llm_serving.placement``), answering with the simulated policy (marked simulated)."""

    def __init__(self, model_cfg: dict[str, Any]) -> None:
        self._sim = SimulatedOpenAI.func_or_class(model_cfg)

    async def respond(self, raw: bytes, meta: Any = None) -> tuple[int, bytes]:
        r = await self._sim.chat(raw, meta)
        return r.status_code, bytes(r.body)


@serve.deployment(max_ongoing_requests=1000)
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


def standin_app(placements: list[dict[str, Any]], ingress_options: dict[str, Any]) -> Any:
    """The stand-in stage app: one ``StandinServer`` per model with its real replica's
    placement (``llm_serving.placement`` dicts plus ``max_ongoing_requests``) behind one ingress
    with the real ingress's options."""
    from cluster.llm_serving import server_deployment_name

    servers = {}
    for pl in placements:
        sim_cfg = {"name": pl["model"], "backend": "simulated", "simulated": {}}
        servers[pl["model"]] = StandinServer.options(
            name=server_deployment_name(pl["model"]), num_replicas=int(pl["replicas"]),
            placement_group_bundles=[dict(b) for b in pl["bundles"]], placement_group_strategy=pl["strategy"],
            max_ongoing_requests=int(pl.get("max_ongoing_requests") or 256),
        ).bind(sim_cfg)
    return StandinIngress.options(**ingress_options).bind(servers)


def simulated_app_name(model: str) -> str:
    return f"opteval-sim-{model}"


def client_host(http_host: str) -> str:
    """Where a worker reaches its node's proxy: loopback unless the proxy binds one address."""
    return "127.0.0.1" if str(http_host) in ("0.0.0.0", "::", "", "localhost") else str(http_host)


def _base(port: int, prefix: str, host: str = "127.0.0.1") -> str:
    return f"http://{client_host(host)}:{port}{prefix}/v1"


class ServingError(RuntimeError):
    """Serve could not be started as configured; the message names the key."""


def _serve_running() -> bool:
    import ray

    try:
        ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    except ValueError:
        return False
    return True


def port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def ensure_serve(http_port: int, http_host: str = "127.0.0.1") -> None:
    """Start Serve's HTTP proxies on ``serving.http_host:serving.http_port`` (no-op when Serve
    already runs). Loopback by default: each node's proxy serves the workers on that node;
    a port another process holds is an error naming it, not a proxy that silently never binds."""
    if _serve_running():
        return
    if not port_free(http_host, http_port):
        raise ServingError(f"serving.http_port: {http_host}:{http_port} is already in use by another process; "
                           f"choose a free port (serving.http_port=...)")
    serve.start(http_options={"host": str(http_host), "port": int(http_port)}, logging_config=QUIET_LOGS)


def deploy_simulated(model_cfg: dict[str, Any], http_port: int, replicas: int = 1,
                     timeout_s: float = 600.0, http_host: str = "127.0.0.1") -> Endpoint:
    name = str(model_cfg["name"])
    prefix = f"/{name}"
    app = SimulatedOpenAI.options(num_replicas=max(1, int(replicas))).bind(model_cfg)
    # Not waiting here: wait_ready checks RUNNING and a real request (and sees DEPLOY_FAILED).
    serve.run_many([serve.RunTarget(app, name=simulated_app_name(name), route_prefix=prefix,
                                    logging_config=QUIET_LOGS)],
                   wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
    return Endpoint(name=name, base_url=_base(http_port, prefix, http_host), model_id=name, simulated=True,
                    api_key_env=None, timeout_s=float(timeout_s), max_retries=4, app_name=simulated_app_name(name))


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
    from cluster import llm_serving  # lazy: needs ray[serve,llm] and vLLM (not for stand-ins)

    return llm_serving.deploy_stage(model_cfgs, cfg, app_name=LLM_APP_NAME,
                                    host=client_host(str(cfg.serving.http_host)))


def wait_ready(endpoints: dict[str, Endpoint], timeout_s: float) -> None:
    """Every endpoint with a Serve app: the app RUNNING and a 1-token request answered."""
    from cluster.llm_serving import wait_app_ready

    deadline = time.monotonic() + float(timeout_s)
    for ep in endpoints.values():
        if ep.app_name and ep.base_url:
            wait_app_ready(ep.app_name, ep.base_url, [ep.model_id], max(1.0, deadline - time.monotonic()),
                           poll_s=0.25)


def sim_replicas(model_cfg: dict[str, Any]) -> int:
    """Replica count of a simulated app: one (it is an async replica with no CPU of its own)."""
    return 1


def stage_apps(models: list[dict[str, Any]]) -> list[str]:
    """The Serve applications a stage of these models deploys (known before deploying)."""
    apps = [simulated_app_name(str(m["name"])) for m in models if m.get("backend") == "simulated"]
    if any(m.get("backend") == "vllm" for m in models):
        apps.append(LLM_APP_NAME)
    return apps


def deploy_stage(models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
    """Deploy (or point at) every model of one stage; returns name -> Endpoint, ready to call.
    On any failure (placement, deploy, readiness) what was deployed is torn down first."""
    port = int(cfg.serving.http_port)
    per_call = float(cfg.serving.request_timeout_s)
    eps: dict[str, Endpoint] = {}
    vllm = [m for m in models if m.get("backend") == "vllm"]
    needs_serve = bool(vllm) or any(m.get("backend") == "simulated" for m in models)
    try:
        if needs_serve:
            ensure_serve(port, str(cfg.serving.http_host))
        for mc in models:
            backend = mc.get("backend")
            if backend == "simulated":
                eps[mc["name"]] = deploy_simulated(mc, port, replicas=sim_replicas(mc), timeout_s=per_call,
                                                   http_host=str(cfg.serving.http_host))
            elif backend == "openai":
                eps[mc["name"]] = external_endpoint(mc)
            elif backend != "vllm":
                eps[mc["name"]] = in_process_endpoint(mc)
        wait_ready(eps, float(cfg.serving.ready_timeout_s))
        if vllm:
            eps.update(deploy_vllm(vllm, cfg))
        eps = with_routes(eps, models, cfg)
    except BaseException:
        try:
            teardown_stage(eps, models)
        except Exception as exc:
            print(f"[serving] teardown after a failed deploy failed too: {exc}", flush=True)
        raise
    return eps


def with_routes(endpoints: dict[str, Endpoint], models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
    """``serving.route``: with ``handle``, the apps this cluster deployed that answer through a
    handle (the simulated policy's, the stand-ins') get their (deployment, app); external URLs,
    in-process backends and real vLLM apps keep their route."""
    from cluster.config import ConfigError
    from cluster.serve_handle import HANDLE_ROUTE, ROUTES

    route = str(getattr(cfg.serving, "route", HANDLE_ROUTE))
    if route not in ROUTES:
        raise ConfigError(f"serving.route: {route!r} is not one of {', '.join(ROUTES)}")
    if route != HANDLE_ROUTE:
        return endpoints
    from dataclasses import replace

    from cluster.llm_serving import server_deployment_name

    standin = bool(getattr(cfg.serving, "standin", False))
    backends = {str(m["name"]): m.get("backend") for m in models}
    out = {}
    for name, ep in endpoints.items():
        target = None
        if ep.app_name and backends.get(name) == "simulated":
            target = (SimulatedOpenAI.name, ep.app_name)  # type: ignore[attr-defined]  # a Deployment at runtime
        elif ep.app_name and backends.get(name) == "vllm" and standin:
            target = (server_deployment_name(ep.model_id), ep.app_name)
        out[name] = replace(ep, handle=target) if target else ep
    return out


def teardown_stage(endpoints: dict[str, Endpoint], models: list[dict[str, Any]] | None = None) -> list[str]:
    """Delete the Serve apps of this stage (those of ``endpoints`` and, when given, every app
    ``models`` would deploy, so a half-deployed stage goes too) with their prefix-tree actors.
    External URLs are left alone. Returns the apps deleted; the first failure is re-raised
    after trying all of them (a stage that cannot be torn down must not be silently kept)."""
    from cluster.llm_serving import teardown

    apps = sorted({ep.app_name for ep in endpoints.values() if ep.app_name} | set(stage_apps(models or [])))
    error: BaseException | None = None
    for app in apps:
        try:
            teardown(app)
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error
    return apps


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
