"""vLLM backbones on Ray Serve through ``ray.serve.llm`` (one OpenAI-compatible app per model
replica group).

Why a separate module: ``ray.serve.llm`` refuses to import without vLLM (its OpenAI
protocol models come from vLLM), and this repository must run everywhere else without a
GPU. So everything here that only *describes* an application (``llm_config_dict``,
``serving_args``, ``serve_app_config``) uses plain dicts and Ray's own ``LLMConfig`` pydantic
class (its vLLM-free parent, reached through ``opteval.cluster.ray_private``), while ``build_llm_app`` /
``deploy_stage`` import ``ray.serve.llm`` lazily and raise :class:`VLLMNotInstalled` (with
``opteval.sweepcore.vllm_env.install_hint()``: the gpu extra on a GPU machine, else the CPU build's own
environment) when vLLM is absent. Where replicas go (GPUs per replica, bundles,
first-fit placement, ``with_replicas``) is planned without Ray in ``opteval.sweepcore.placement``.

Public API (callers: ``cluster/serve/deployers.py``, ``cluster/serve/fleet.py``, ``jobs/k8s.py``).
``model_cfg`` is one model config as plain data (``opteval.sweepcore.config.as_plain(model_config(name))``);
``serving`` is the sweep's typed ``serving`` section (``cfg.serving``; None: its defaults).

    llm_config_dict(model_cfg, serving=None) -> dict      # kwargs of LLMConfig, plain YAML-able
    llm_config(model_cfg, serving=None) -> LLMConfig       # validated by Ray's pydantic class
    serving_args(model_cfgs, serving=None) -> dict         # LLMServingArgs: {"llm_configs": [...]}
    serve_app_config(model_cfgs, serving=None, *, name=APP_NAME, route_prefix="/") -> dict
                                                           # one entry of a Serve config's
                                                           # "applications" (RayService serveConfigV2)
    build_llm_app(model_cfgs, serving=None) -> ray.serve.Application   # needs vLLM
    stage_deployments(model_cfgs, serving=None) -> dict[str, dict]     # the app's deployments, no vLLM
    describe_built_app(app, name=APP_NAME) -> dict[str, dict]          # same view of a built app
    llm_app_name(model, group=0), llm_route_prefix(...)    # one Serve app per model replica group
    deploy_stage(model_cfgs, serving=None, *, app_name=APP_NAME, host="127.0.0.1", ready_timeout_s=None,
                 poll_s=2.0, standin=None, route_prefix="/") -> dict[str, Endpoint]  # vLLM, or stand-ins
    check_placement(model_cfgs, serving=None, nodes=None)  # UnplaceableModel before deploying
    build_standin_app(model_cfgs, serving=None)            # serving.standin: same placement, simulated
    wait_app_ready, teardown, app_state, probe_model       # from opteval.cluster.serve.serve_apps (re-exported)
    require_vllm() -> None                                 # VLLMNotInstalled with the install hint
    check_local_source(model_cfg)                          # a missing local model directory, named (+ build hint)

The served model id is the config's ``name`` (``Qwen3-4B``), so a request's ``model`` is
the same string the sweep, the ledger and the plots use.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opteval.cluster import ray_private
from opteval.cluster.ray_private import PREFIX_ROUTER_CLASS
from opteval.cluster.runtime import describe_nodes, node_resources
from opteval.cluster.serve.capacity import capacity_shapes
from opteval.cluster.serve.serve_apps import (  # noqa: F401  (re-exported: part of this module's API)
    LLM_APP_NAME,
    PREFIX_TREE_ACTOR,
    QUIET_LOGS,
    SERVE_NAMESPACE,
    SERVER_PREFIX,
    UNSCHEDULED_HINT,
    ModelNotReady,
    UnplaceableModel,
    app_state,
    engine_error,
    last_exception,
    prefix_tree_actors,
    probe_model,
    server_deployment_name,
    teardown,
    wait_app_ready,
)
from opteval.cluster.serve.vllm_args import known_args, unknown_args
from opteval.evalcore.models.builds import build_for
from opteval.sweepcore.config.schema import ServingSection
from opteval.sweepcore.endpoint import Endpoint
from opteval.sweepcore.placement import (
    ModelConfigError,
    _plain,
    deployment_config,
    gpus_per_replica,
    model_name,
    placement,
    plan_placement,
    vllm_section,
)
from opteval.sweepcore.vllm_env import install_hint

APP_NAME = LLM_APP_NAME
BUILDER_IMPORT_PATH = "ray.serve.llm:build_openai_app"


class VLLMNotInstalled(ImportError):
    """``ray.serve.llm`` could not be imported (no vLLM on this machine)."""


INGRESS_DEPLOYMENT = "OpenAiIngress"
ROUTES = ("/v1/models", "/v1/chat/completions", "/v1/completions")  # those the harnesses use
# Ray's ingress ends a non-streaming request after RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT (600 s
# by default) with HTTP 408; it is raised above serving.request_timeout_s by this margin so
# the client's own per-call timeout is the one that fires.
INGRESS_TIMEOUT_MARGIN_S = 60.0
# Defaults of the prefix router's kwargs: evict, so the tree's memory stays bounded over a
# sweep of hundreds of thousands of prompts (Ray's default is no eviction at all).
PREFIX_ROUTER_DEFAULTS = {"do_eviction": True, "eviction_threshold_chars": 400_000,
                          "eviction_target_chars": 360_000, "eviction_interval_secs": 10}


# -- config plumbing -------------------------------------------------------------------


def _serving(serving: ServingSection | None) -> ServingSection:
    """The sweep's ``serving`` section; None: its defaults (the dataclass states them)."""
    return ServingSection() if serving is None else serving


def _check_autoscaling_keys(name: str, dep: Mapping[str, Any]) -> None:
    """Pydantic would silently ignore a misspelled autoscaling field; we refuse it (Ray Serve's own
    ``AutoscalingConfig`` fields, no vLLM needed)."""
    auto = dep.get("autoscaling_config")
    if auto is not None:
        from ray.serve.config import AutoscalingConfig  # plain Ray Serve (heavy), no vLLM: only when asked

        bad = sorted(set(auto) - set(AutoscalingConfig.model_fields))
        if bad:
            raise ModelConfigError(f"model {name!r}: unknown key(s) vllm.deployment.autoscaling_config."
                                   f"{', '.join(bad)}")


def _check_engine_kwargs(name: str, ek: Mapping[str, Any], dep: Mapping[str, Any]) -> None:
    """Typos against vLLM's own argument names; batch size and Serve's concurrency consistent."""
    bad = unknown_args(dict(ek))
    if bad:
        version, names = known_args()
        hints = []
        for k in bad:
            close = difflib.get_close_matches(k, sorted(names), n=1)
            hints.append(f"{k}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise ModelConfigError(f"model {name!r}: vllm.engine_kwargs has key(s) vLLM {version} does not accept: "
                               f"{', '.join(hints)}")
    seqs, ongoing = ek.get("max_num_seqs"), dep.get("max_ongoing_requests")
    if seqs is None or ongoing is None:
        raise ModelConfigError(f"model {name!r}: set both vllm.engine_kwargs.max_num_seqs and "
                               f"vllm.deployment.max_ongoing_requests (sized to the KV cache)")
    if not int(seqs) <= int(ongoing) <= 2 * int(seqs):
        raise ModelConfigError(
            f"model {name!r}: vllm.deployment.max_ongoing_requests={ongoing} must be between "
            f"vllm.engine_kwargs.max_num_seqs={seqs} (a full batch) and twice that (bounded queueing "
            f"inside one replica, so Serve spreads the rest)")
    target = (dep.get("autoscaling_config") or {}).get("target_ongoing_requests")
    if target is not None and float(target) > int(ongoing):
        raise ModelConfigError(f"model {name!r}: autoscaling_config.target_ongoing_requests={target} exceeds "
                               f"max_ongoing_requests={ongoing}: the replica count would never grow")


def llm_config_dict(model_cfg: Mapping[str, Any], serving: ServingSection | None = None) -> dict[str, Any]:
    """The ``LLMConfig`` keyword arguments for one model, as plain YAML-able data.

    This is what ``serveConfigV2`` embeds (``jobs/k8s.py``) and what ``build_llm_app``
    validates, so a RayService and a local stage are built from the very same dict.
    ``serving.prefix_cache_routing: true`` adds Ray's ``PrefixCacheAffinityRouter`` as the
    deployment's request router (unless the model YAML already names a router):
    multi-turn harnesses resend the same prefix every turn, and routing a conversation
    back to the replica that holds its KV cache saves the prefill.
    """
    model_cfg = _plain(model_cfg)
    serving = _serving(serving)
    vc = vllm_section(model_cfg)
    name = model_name(model_cfg)
    gpus_per_replica(model_cfg)  # checks the declared GPU count against the parallel sizes
    mlc: dict[str, Any] = {"model_id": name, "model_source": model_source(vc)}
    if vc.get("tokenizer_source"):
        mlc["tokenizer_source"] = str(vc["tokenizer_source"])
    dep = deployment_config(model_cfg, vc)
    _check_autoscaling_keys(name, dep)
    if serving.prefix_cache_routing and "request_router_config" not in dep:
        dep["request_router_config"] = {
            "request_router_class": PREFIX_ROUTER_CLASS,
            "request_router_kwargs": {**PREFIX_ROUTER_DEFAULTS, **dict(serving.prefix_router_kwargs)},
        }
    ek = dict(vc.get("engine_kwargs") or {})
    # The checkpoint's generation_config.json must not change the sampling: the sweep sends
    # every parameter it means, and "vllm" makes vLLM's own defaults the rest.
    ek.setdefault("generation_config", "vllm")
    if vc.get("language_only"):
        ek["language_model_only"] = True  # VL checkpoint: no vision tower, no image memory
    _check_engine_kwargs(name, ek, dep)
    # The replica actor takes no CPU of its own: placement() puts serving's CPUs in the bundles.
    rao = dict(dep.get("ray_actor_options") or {})
    rao.setdefault("num_cpus", 0)
    dep["ray_actor_options"] = rao
    pl = placement(model_cfg, serving)
    out: dict[str, Any] = {
        "model_loading_config": mlc,
        "engine_kwargs": ek,
        "deployment_config": dep,
        "placement_group_config": {"bundles": pl["bundles"], "strategy": pl["strategy"]},
    }
    if pl["accelerator_type"]:
        out["accelerator_type"] = pl["accelerator_type"]
    env_vars = dict((vc.get("runtime_env") or {}).get("env_vars") or {})
    if env_vars:  # the replica's, and so its engine's (vLLM's CPU build reads VLLM_CPU_* there)
        out["runtime_env"] = {"env_vars": {str(k): str(v) for k, v in env_vars.items()}}
    return out


def model_source(vc: Mapping[str, Any]) -> str:
    """``vllm.source`` as the replica reads it: a local path starting with ``~`` expanded (the
    driver's home; a hub id or an s3:// / gs:// URI is left as it is)."""
    src = str(vc["source"])
    return os.path.expanduser(src) if src.startswith("~") else src


def local_source(vc: Mapping[str, Any]) -> str | None:
    """The source as a local directory when it names one (absolute, ``~`` or ``./``), else None."""
    src = model_source(vc)
    return src if src.startswith(("/", "./", "../")) else None


def check_local_source(model_cfg: Mapping[str, Any]) -> None:
    """A local ``vllm.source`` must be a directory holding a ``config.json`` (what vLLM loads);
    else a :class:`ModelConfigError` naming the model, the path and, for a directory that
    ``opteval models build`` makes, the command that builds it."""
    model_cfg = _plain(model_cfg)
    path = local_source(vllm_section(model_cfg))
    if path is None or os.path.isfile(os.path.join(path, "config.json")):
        return
    recipe = build_for(path)
    how = f"; build it once: opteval models build {recipe}" if recipe else ""
    raise ModelConfigError(f"model {model_name(model_cfg)!r}: vllm.source {path} is not a model directory "
                           f"(no config.json){how}")


def _llm_config_class() -> type:
    """The public class when vLLM is importable, else its pydantic parent (same fields, same validators)."""
    try:
        from ray.serve.llm import LLMConfig  # imports vLLM: only where it is installed
    except ImportError:
        return ray_private.llm_config_base()
    return LLMConfig


def llm_config(model_cfg: Mapping[str, Any], serving: ServingSection | None = None) -> Any:
    """One model YAML as a Ray ``LLMConfig`` (validated by Ray; no vLLM import needed)."""
    kwargs = llm_config_dict(model_cfg, serving)
    cls = _llm_config_class()
    try:
        return cls(**kwargs)
    except Exception as exc:  # pydantic.ValidationError or ValueError from Ray's validators
        raise ModelConfigError(f"model {kwargs['model_loading_config']['model_id']!r}: Ray's LLMConfig "
                               f"rejected the config: {exc}") from exc


def serving_args(model_cfgs: Iterable[Mapping[str, Any]], serving: ServingSection | None = None) -> dict[str, Any]:
    """``LLMServingArgs`` for ``build_openai_app``: one LLMConfig dict per model, ids unique."""
    configs = [llm_config_dict(m, serving) for m in model_cfgs]
    if not configs:
        raise ModelConfigError("a vLLM stage needs at least one model")
    ids = [c["model_loading_config"]["model_id"] for c in configs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ModelConfigError(f"duplicate model ids in one stage: {dup}")
    return {"llm_configs": configs, "ingress_deployment_config": ingress_deployment_config(serving)}


def ingress_timeout_s(serving: ServingSection | None = None) -> float:
    """Seconds the OpenAI ingress lets one request run: above the client's per-call timeout."""
    return float(_serving(serving).request_timeout_s) + INGRESS_TIMEOUT_MARGIN_S


def ingress_deployment_config(serving: ServingSection | None = None) -> dict[str, Any]:
    """The ingress replica's CPUs (``serving.ingress_cpus``) and its request timeout, set in its
    own runtime env: Ray reads ``RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT`` when the ingress imports."""
    serving = _serving(serving)
    return {"ray_actor_options": {
        "num_cpus": float(serving.ingress_cpus),
        "runtime_env": {"env_vars": {"RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT": f"{ingress_timeout_s(serving):g}"}},
    }}


def serve_app_config(model_cfgs: Iterable[Mapping[str, Any]], serving: ServingSection | None = None, *,
                     name: str = APP_NAME, route_prefix: str = "/") -> dict[str, Any]:
    """One application entry of a Serve config file (``serve deploy`` / RayService serveConfigV2)."""
    return {"name": name, "route_prefix": route_prefix, "import_path": BUILDER_IMPORT_PATH,
            "args": serving_args(model_cfgs, serving)}


def stage_deployments(model_cfgs: Iterable[Mapping[str, Any]],
                      serving: ServingSection | None = None) -> dict[str, dict[str, Any]]:
    """What ``build_openai_app`` makes of a stage, described without building it (no vLLM):
    deployment name -> {model_id, gpus_per_replica, autoscaling_config, max_ongoing_requests,
    request_router_class}; the ingress appears as ``OpenAiIngress`` with ``routes``.
    ``describe_built_app`` gives the same view of a real application, so a GPU machine can
    check the two agree."""
    models = [_plain(m) for m in model_cfgs]
    out: dict[str, dict[str, Any]] = {}
    for m, c in zip(models, serving_args(models, serving)["llm_configs"]):
        dep = c["deployment_config"]
        rr = dep.get("request_router_config") or {}
        out[server_deployment_name(c["model_loading_config"]["model_id"])] = {
            "model_id": c["model_loading_config"]["model_id"],
            "gpus_per_replica": gpus_per_replica(m),
            "autoscaling_config": dict(dep.get("autoscaling_config") or {}),
            "max_ongoing_requests": dep.get("max_ongoing_requests"),
            "request_router_class": rr.get("request_router_class"),
        }
    out[INGRESS_DEPLOYMENT] = {"routes": list(ROUTES), "models": [m["name"] for m in models]}
    return out


def describe_built_app(app: Any, name: str = APP_NAME) -> dict[str, dict[str, Any]]:
    """Deployment name -> settings of a real built application (for comparison with
    :func:`stage_deployments`). Uses Serve's own ``build_app`` (what ``serve.run`` does)."""
    built = ray_private.build_serve_app(app, name)
    out: dict[str, dict[str, Any]] = {}
    for d in built.deployments:
        dc = d._deployment_config
        auto = dc.autoscaling_config
        rr = getattr(dc, "request_router_config", None)
        cls = getattr(rr, "request_router_class", None) if rr is not None else None
        out[d.name] = {
            "autoscaling_config": auto.model_dump() if auto is not None else {},
            "max_ongoing_requests": dc.max_ongoing_requests,
            "request_router_class": cls if isinstance(cls, str) or cls is None else
            f"{cls.__module__}:{cls.__qualname__}",
            "placement_group_bundles": d._replica_config.placement_group_bundles,
            "ingress": d.name == built.ingress_deployment_name,
        }
    return out


# -- building and running (vLLM needed) ------------------------------------------------


def require_vllm() -> None:
    """Raise :class:`VLLMNotInstalled` (with the install hint) unless ``ray.serve.llm`` imports."""
    _import_serve_llm()


def _import_serve_llm() -> Any:
    try:
        # deferred: needs vLLM (extra opteval[gpu]); VLLMNotInstalled if absent
        import ray.serve.llm as serve_llm
    except ImportError as exc:
        raise VLLMNotInstalled(f"ray.serve.llm is unavailable ({exc}); {install_hint()}") from exc
    return serve_llm


def build_llm_app(model_cfgs: Iterable[Mapping[str, Any]], serving: ServingSection | None = None) -> Any:
    """The stage's Serve application: one ``LLMServer`` deployment per model behind one
    ``OpenAiIngress`` (``/v1/chat/completions``, ``/v1/models``, ...)."""
    serve_llm = _import_serve_llm()
    args = serving_args(list(model_cfgs), serving)
    args["llm_configs"] = [serve_llm.LLMConfig(**c) for c in args["llm_configs"]]
    return serve_llm.build_openai_app(serve_llm.LLMServingArgs(**args))


def build_standin_app(model_cfgs: Iterable[Mapping[str, Any]], serving: ServingSection | None = None) -> Any:
    """``serving.standin``: the stage's app with the real replicas' placement (GPUs, CPUs,
    accelerator type, strategy, replicas, max_ongoing_requests) and ingress options, whose
    replicas answer with the simulated policy. Needs no vLLM: it rehearses placement, stages,
    readiness and teardown on a cluster with fake GPUs (``ray start --num-gpus=4``)."""
    from opteval.cluster.serve.sim_serving import standin_app  # Serve deployments: imported when a stage is built

    models = [_plain(m) for m in model_cfgs]
    serving = _serving(serving)
    configs = serving_args(models, serving)["llm_configs"]  # the same checks as the real app
    placements = []
    for m, c in zip(models, configs):
        pl = placement(m, serving)
        pl["max_ongoing_requests"] = c["deployment_config"].get("max_ongoing_requests")
        placements.append(pl)
    return standin_app(placements, ingress_deployment_config(serving), ttft_s=serving.standin_ttft_s)


def deploy_stage(model_cfgs: Iterable[Mapping[str, Any]], serving: ServingSection | None = None, *, app_name: str = APP_NAME,
                 host: str = "127.0.0.1", ready_timeout_s: float | None = None,
                 poll_s: float = 2.0, standin: bool | None = None, route_prefix: str = "/") -> dict[str, Endpoint]:
    """Check placement, ``serve.run`` the stage's app without blocking, wait until it is ready
    (:func:`wait_app_ready`). With ``standin`` (None: ``serving.standin``) the app is the stand-in
    one (:func:`build_standin_app`: same placement, simulated answers). A failed or timed-out
    deploy is torn down before the error propagates. Returns name -> Endpoint."""
    # deferred: llm_serving imports without Ray (k8s render, preflight)
    from ray import serve

    models = [_plain(m) for m in model_cfgs]
    serving = _serving(serving)
    port = int(serving.http_port)
    timeout = float(ready_timeout_s if ready_timeout_s is not None else serving.ready_timeout_s)
    check_placement(models, serving)
    standin = bool(serving.standin) if standin is None else standin
    if not standin:
        for m in models:
            check_local_source(m)
    app = build_standin_app(models, serving) if standin else build_llm_app(models, serving)
    try:
        serve.run_many([serve.RunTarget(app, name=app_name, route_prefix=route_prefix, logging_config=QUIET_LOGS)],
                       wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
        base_url = f"http://{host}:{port}{route_prefix.rstrip('/')}/v1"
        wait_app_ready(app_name, base_url, [model_name(m) for m in models], timeout, poll_s=poll_s)
    except BaseException:
        try:
            teardown(app_name)
        except Exception as exc:
            print(f"[serving] teardown of {app_name!r} after a failed deploy failed too: {exc}", flush=True)
        raise
    return stage_endpoints(models, serving, base_url=base_url, app_name=app_name, simulated=standin)


def stage_endpoints(model_cfgs: Iterable[Mapping[str, Any]], serving: ServingSection | None = None, *, base_url: str,
                    app_name: str = APP_NAME, simulated: bool = False) -> dict[str, Endpoint]:
    """How workers reach a deployed stage's models: one URL, the model's name as its id, the
    per-call timeout ``serving.request_timeout_s``, and ``vllm.chat_template_kwargs`` sent with
    every request."""
    per_call = float(_serving(serving).request_timeout_s)
    eps = {}
    for m in (_plain(m) for m in model_cfgs):
        ctk = dict(vllm_section(m).get("chat_template_kwargs") or {})
        eps[model_name(m)] = Endpoint(name=model_name(m), base_url=base_url, model_id=model_name(m), simulated=simulated,
                                 api_key_env=None, timeout_s=per_call, max_retries=4,
                                 extra_body={"chat_template_kwargs": ctk} if ctk else {}, app_name=app_name)
    return eps


def _free_nodes() -> list[dict[str, float]]:
    """Free resources per alive node right now (executors already hold theirs)."""
    try:
        return [dict(v) for v in ray_private.available_resources_per_node().values()]
    except Exception:
        return node_resources()


def check_placement(models: Sequence[Mapping[str, Any]], serving: ServingSection | None = None,
                    nodes: Sequence[Mapping[str, float]] | None = None) -> None:
    """Refuse, before deploying, a stage no node and no autoscaler node type could ever hold
    (it would pend forever). ``nodes`` (tests) are the shapes to check against; by default the
    alive nodes' totals plus the autoscaler's node types (:mod:`opteval.cluster.serve.capacity`). A stage that
    fits those but not what is free right now is deployed and waited for (a busy node frees up,
    a GPU group scales up), with a line saying so."""
    shapes = capacity_shapes() if nodes is None else [dict(n) for n in nodes]
    serving = _serving(serving)
    problems = plan_placement(models, serving, shapes)
    if problems:
        raise UnplaceableModel(f"cannot place the stage: {'; '.join(problems)}; the cluster has: "
                               f"{describe_nodes(shapes)} (set serving.accelerator_type, serving.cpus_per_gpu "
                               f"or cluster.executors, or add nodes)")
    if nodes is None:
        free = _free_nodes()
        busy = plan_placement(models, serving, free)
        if busy:
            print(f"[serving] the stage does not fit what is free now ({'; '.join(busy)}); waiting for "
                  f"resources to free up or the autoscaler to add a node (serving.ready_timeout_s)", flush=True)


def app_slug(model: str) -> str:
    """A model name as a Serve app name and route segment."""
    return model.replace("/", "--")


def llm_app_name(model: str, group: int = 0) -> str:
    """The Serve app of one model's replica group (``opteval-llm-Qwen3-4B``, then ``-g2``, ...)."""
    return f"{APP_NAME}-{app_slug(model)}" + (f"-g{group + 1}" if group else "")


def llm_route_prefix(model: str, group: int = 0) -> str:
    return "/" + llm_app_name(model, group)[len(APP_NAME) + 1:]
