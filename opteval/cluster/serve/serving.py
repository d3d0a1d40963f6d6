"""Model endpoints: deploy and tear down models through the backend registry
(``opteval.sweepcore.backends``) and each backend's deployer (``opteval.cluster.serve.deployers``), and the
Serve apps of the simulated policy and stand-ins. The sweep's schedule deploys one model at a
time through ``opteval.cluster.serve.fleet.ServeFleet``; ``deploy_stage`` stands several up at once
(``opteval serve``, tests).

Why serve the simulated policy over HTTP at all: so the whole path a real model takes
(Serve proxy, HTTP, ``OpenAIChatModel``, usage parsing) is exercised by tests and load
runs. Workers reach every endpoint the same way, through an :class:`Endpoint`.

Every completion from the simulated app carries ``system_fingerprint:
"opteval-simulated"``, which ``OpenAIChatModel`` turns into ``Completion.simulated``.
vLLM apps come from ``opteval.cluster.serve.llm_serving`` (imported only when a model needs it).
"""
from __future__ import annotations

import socket
import time
from dataclasses import replace
from typing import Any

import ray

from opteval.cluster.serve.deployers import deployer_of
from opteval.cluster.serve.serve_apps import LLM_APP_NAME, QUIET_LOGS, start_serve, teardown, wait_app_ready
from opteval.cluster.serve.sim_serving import (
    SIMULATED_FINGERPRINT,
    SimulatedOpenAI,
    StandinIngress,
    StandinServer,
    call_meta,
    deploy_simulated,
    simulated_app_name,
    simulated_model_cfg,
    standin_app,
)
from opteval.sweepcore.backends import Backend, by_backend
from opteval.sweepcore.endpoint import HANDLE_ROUTE, Endpoint, client_host

__all__ = ["LLM_APP_NAME", "SIMULATED_FINGERPRINT", "Endpoint", "ServingError", "SimulatedOpenAI", "StandinIngress",
           "StandinServer", "call_meta", "client_host", "deploy_simulated", "deploy_stage", "ensure_serve", "cluster_gpus",
           "simulated_app_name", "simulated_model_cfg", "stage_apps", "standin_app", "teardown_stage",
           "wait_ready", "with_routes"]


class ServingError(RuntimeError):
    """Serve could not be started as configured; the message names the key."""


def _serve_running() -> bool:
    try:
        ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    except ValueError:
        return False
    return True


def port_free(host: str, port: int) -> bool:
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
    start_serve(str(http_host), int(http_port), QUIET_LOGS)  # retried when its proxy dies starting


def wait_ready(endpoints: dict[str, Endpoint], timeout_s: float) -> None:
    """Every endpoint with a Serve app: the app RUNNING and a 1-token request answered."""
    deadline = time.monotonic() + float(timeout_s)
    for ep in endpoints.values():
        if ep.app_name and ep.base_url:
            wait_app_ready(ep.app_name, ep.base_url, [ep.model_id], max(1.0, deadline - time.monotonic()),
                           poll_s=0.25)


def stage_apps(models: list[dict[str, Any]], serving: Any = None) -> list[str]:
    """The Serve applications a stage of these models deploys (known before deploying)."""
    return [app for b, ms in by_backend(models, serving) for app in deployer_of(b).apps(ms)]


def deploy_stage(models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
    """Deploy (or point at) every model of one stage through its backend; name -> Endpoint,
    ready to call. Backends off the GPUs first (awaited together), then the GPU app (which
    awaits itself). On any failure (placement, deploy, readiness) what was deployed is torn
    down first. ``cfg`` is the sweep config (``serving`` read by attribute)."""
    groups = by_backend(models, cfg.serving)
    eps: dict[str, Endpoint] = {}
    try:
        if any(b.serve for b, _ in groups):
            ensure_serve(int(cfg.serving.http_port), str(cfg.serving.http_host))
        for b, ms in groups:
            if not b.on_gpus:
                eps.update(deployer_of(b).deploy(ms, cfg))
        wait_ready(eps, float(cfg.serving.ready_timeout_s))
        for b, ms in groups:
            if b.on_gpus:
                eps.update(deployer_of(b).deploy(ms, cfg))
        eps = with_routes(eps, groups, cfg.serving)
    except BaseException:
        try:
            teardown_stage(eps, models, cfg.serving)
        except Exception as exc:
            print(f"[serving] teardown after a failed deploy failed too: {exc}", flush=True)
        raise
    return eps


def with_routes(endpoints: dict[str, Endpoint], groups: list[tuple[Backend, list[dict[str, Any]]]],
                serving: Any) -> dict[str, Endpoint]:
    """``serving.route``: with ``handle``, the apps this cluster deployed that answer through a
    Serve handle (each backend says which: the simulated policy's, the stand-ins') get their
    (deployment, app); external URLs, in-process backends and real vLLM apps keep their route."""
    if serving.route != HANDLE_ROUTE:
        return endpoints
    out = dict(endpoints)
    for backend, models in groups:
        for m in models:
            ep = out.get(str(m["name"]))
            target = deployer_of(backend).handle_target(ep) if ep is not None and ep.app_name else None
            if ep is not None and target is not None:
                out[ep.name] = replace(ep, handle=target)
    return out


def teardown_stage(endpoints: dict[str, Endpoint], models: list[dict[str, Any]] | None = None,
                   serving: Any = None) -> list[str]:
    """Delete the Serve apps of this stage (those of ``endpoints`` and, when given, every app
    ``models`` would deploy, so a half-deployed stage goes too) with their prefix-tree actors.
    External URLs are left alone. Returns the apps deleted; the first failure is re-raised
    after trying all of them (a stage that cannot be torn down must not be silently kept)."""
    apps = sorted({ep.app_name for ep in endpoints.values() if ep.app_name} | set(stage_apps(models or [], serving)))
    error: BaseException | None = None
    for app in apps:
        try:
            teardown(app)
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error
    return apps


def cluster_gpus(cfg: Any) -> int:
    """GPUs the schedule may use: ``serving.gpus``, else the cluster's."""
    if cfg.serving.gpus is not None:
        return int(cfg.serving.gpus)
    return int(ray.cluster_resources().get("GPU", 0))
