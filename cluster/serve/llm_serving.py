"""vLLM backbones on Ray Serve through ``ray.serve.llm`` (one OpenAI-compatible app per stage).

Why a separate module: ``ray.serve.llm`` refuses to import without vLLM (its OpenAI
protocol models come from vLLM), and this repository must run everywhere else without a
GPU. So everything here that only *describes* an application (``llm_config_dict``,
``serving_args``, ``serve_app_config``, ``with_replicas``) uses plain dicts and Ray's own
``LLMConfig`` pydantic class from ``ray.llm._internal.serve.core.configs.llm_config``
(the parent of the public ``ray.serve.llm.LLMConfig``; it validates without vLLM), while
``build_llm_app`` / ``deploy_stage`` import ``ray.serve.llm`` lazily and raise
:class:`VLLMNotInstalled` (install ``pip install -e '.[gpu]'``) when vLLM is absent.

Public API (callers: ``sweepcore/backends/vllm.py``, ``cluster/serve/serving.py``, ``jobs/k8s.py``).
``model_cfg`` is one ``configs/models/<name>.yaml`` as a dict or
DictConfig; ``cfg`` is either the whole sweep config (with a ``serving`` section) or
that ``serving`` section itself.

    llm_config_dict(model_cfg, cfg=None) -> dict          # kwargs of LLMConfig, plain YAML-able
    llm_config(model_cfg, cfg=None) -> LLMConfig           # validated by Ray's pydantic class
    serving_args(model_cfgs, cfg=None) -> dict             # LLMServingArgs: {"llm_configs": [...]}
    serve_app_config(model_cfgs, cfg=None, *, name=APP_NAME, route_prefix="/") -> dict
                                                           # one entry of a Serve config's
                                                           # "applications" (RayService serveConfigV2)
    build_llm_app(model_cfgs, cfg=None) -> ray.serve.Application   # needs vLLM
    stage_deployments(model_cfgs, cfg=None) -> dict[str, dict]     # the app's deployments, no vLLM
    describe_built_app(app, name=APP_NAME) -> dict[str, dict]      # same view of a built app
    gpus_per_replica(model_cfg) -> int                     # tensor x pipeline parallel size
    stage_gpus(model_cfg) -> int                           # gpus_per_replica x max(1, min_replicas)
    with_replicas(model_cfg, replicas) -> dict             # pinned to the schedule's replica count
    llm_app_name(model, group=0), llm_route_prefix(...)    # one Serve app per model replica group
    deploy_stage(model_cfgs, cfg=None, *, app_name=APP_NAME, host="127.0.0.1", ready_timeout_s=None,
                 poll_s=2.0, standin=None, route_prefix="/") -> dict[str, Endpoint]  # vLLM, or stand-ins
    placement(model_cfg, cfg=None) -> dict                 # one replica's bundles, strategy, GPUs, CPUs
    check_placement(model_cfgs, cfg=None, nodes=None)      # UnplaceableModel before deploying
    build_standin_app(model_cfgs, cfg=None)                # serving.standin: same placement, simulated
    wait_app_ready, teardown, app_state, probe_model       # from cluster.serve.serve_apps (re-exported)
    require_vllm() -> None                                 # VLLMNotInstalled with the install hint

The served model id is the config's ``name`` (``Qwen3-4B``), so a request's ``model`` is
the same string the sweep, the ledger and the plots use.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, fields, is_dataclass
from typing import Any

from cluster.serve.serve_apps import (  # noqa: F401  (re-exported: part of this module's API)
    LLM_APP_NAME,
    PREFIX_TREE_ACTOR,
    QUIET_LOGS,
    SERVE_NAMESPACE,
    SERVER_PREFIX,
    UNSCHEDULED_HINT,
    ModelNotReady,
    UnplaceableModel,
    app_state,
    prefix_tree_actors,
    probe_model,
    server_deployment_name,
    teardown,
    wait_app_ready,
)
from sweepcore.endpoint import Endpoint
from sweepcore.model_sections import VllmSection

APP_NAME = LLM_APP_NAME
BUILDER_IMPORT_PATH = "ray.serve.llm:build_openai_app"
# Ray validates a request_router_class by importing it. The public alias
# ray.serve.llm.request_router.PrefixCacheAffinityRouter is an empty subclass of this class,
# but importing ray.serve.llm needs vLLM; naming the defining module keeps configs valid (and
# identical) on machines with and without vLLM.
PREFIX_ROUTER_CLASS = ("ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router:"
                       "PrefixCacheAffinityRouter")
GPU_EXTRA_HINT = "install the gpu extra: pip install -e '.[gpu]' (vLLM + ray[serve,llm])"

# vllm: keys of a model YAML (sweepcore.config.VllmSection, the one schema), and what each becomes:
#   source -> model_loading_config.model_source (HF hub id, local path, s3:// / gs:// mirror);
#   tokenizer_source -> model_loading_config.tokenizer_source; engine_kwargs -> LLMConfig.engine_kwargs
#   (vLLM engine + frontend args, verbatim); deployment -> LLMConfig.deployment_config;
#   accelerator_type -> LLMConfig.accelerator_type; gpus_per_replica: checked against tensor x
#   pipeline parallel size; chat_template_kwargs: sent per request by the client (extra_body);
#   runtime_env -> LLMConfig.runtime_env; placement_group_config -> the replica's bundles;
#   language_only: a VL checkpoint's language model only (vLLM language_model_only).
_VLLM_KEYS = frozenset(f.name for f in fields(VllmSection))
# Keys accepted under vllm.deployment (Ray Serve deployment options LLMConfig documents).
_DEPLOYMENT_KEYS = {
    "name", "num_replicas", "ray_actor_options", "max_ongoing_requests", "autoscaling_config",
    "max_queued_requests", "user_config", "health_check_period_s", "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "logging_config",
    "request_router_config",
}


class VLLMNotInstalled(ImportError):
    """``ray.serve.llm`` could not be imported (no vLLM on this machine)."""


class ModelConfigError(ValueError):
    """A model YAML does not describe a servable vLLM model; the message names model and key."""


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


def _plain(obj: Any) -> Any:
    """DictConfig/ListConfig -> plain containers (resolved), a dataclass -> its dict; else a copy."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(obj, (DictConfig, ListConfig)):
        return OmegaConf.to_container(obj, resolve=True)
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return copy.deepcopy(obj)


def _serving_section(cfg: Any) -> dict[str, Any]:
    """Accept the whole sweep config or its ``serving`` section (or None), typed or plain."""
    if cfg is None:
        return {}
    if not isinstance(cfg, Mapping) and hasattr(cfg, "serving"):
        cfg = cfg.serving
    plain = _plain(cfg)
    if not isinstance(plain, Mapping):
        raise TypeError(f"serving config must be a mapping, got {type(cfg).__name__}")
    if "serving" in plain and isinstance(plain["serving"], Mapping):
        return dict(plain["serving"])
    return dict(plain)


def _name(model_cfg: Mapping[str, Any]) -> str:
    name = model_cfg.get("name")
    if not name:
        raise ModelConfigError("model config has no 'name'")
    return str(name)


def _vllm_section(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    name = _name(model_cfg)
    vc = model_cfg.get("vllm")
    if not isinstance(vc, Mapping):
        raise ModelConfigError(f"model {name!r}: missing 'vllm' section")
    unknown = sorted(set(vc) - _VLLM_KEYS)
    if unknown:
        raise ModelConfigError(f"model {name!r}: unknown key(s) vllm.{', vllm.'.join(unknown)}; "
                               f"allowed: {sorted(_VLLM_KEYS)}")
    if not vc.get("source"):
        raise ModelConfigError(f"model {name!r}: vllm.source is required (hub id, path or s3:// URI)")
    return dict(vc)


def gpus_per_replica(model_cfg: Mapping[str, Any]) -> int:
    """GPUs one replica occupies: vLLM's tensor x pipeline parallel size."""
    model_cfg = _plain(model_cfg)
    vc = _vllm_section(model_cfg)
    ek = dict(vc.get("engine_kwargs") or {})
    n = int(ek.get("tensor_parallel_size", 1)) * int(ek.get("pipeline_parallel_size", 1))
    declared = vc.get("gpus_per_replica")
    if declared is not None and int(declared) != n:
        raise ModelConfigError(
            f"model {_name(model_cfg)!r}: vllm.gpus_per_replica={declared} but tensor_parallel_size x "
            f"pipeline_parallel_size = {n}")
    return n


def _min_replicas(deployment: Mapping[str, Any]) -> int:
    if "num_replicas" in deployment and deployment["num_replicas"] not in (None, "auto"):
        return int(deployment["num_replicas"])
    auto = dict(deployment.get("autoscaling_config") or {})
    return int(auto.get("min_replicas", 1))


def stage_gpus(model_cfg: Mapping[str, Any]) -> int:
    """GPUs a model holds while its stage runs: one replica at least, else min_replicas of them."""
    model_cfg = _plain(model_cfg)
    vc = _vllm_section(model_cfg)
    return gpus_per_replica(model_cfg) * max(1, _min_replicas(_deployment_config(model_cfg, vc)))


def _deployment_config(model_cfg: Mapping[str, Any], vc: Mapping[str, Any]) -> dict[str, Any]:
    name = _name(model_cfg)
    dep = dict(vc.get("deployment") or {})
    if "autoscaling" in dep:  # the short spelling of configs/models docs; Ray calls it autoscaling_config
        if "autoscaling_config" in dep:
            raise ModelConfigError(f"model {name!r}: give vllm.deployment.autoscaling_config only once")
        dep["autoscaling_config"] = dep.pop("autoscaling")
    unknown = sorted(set(dep) - _DEPLOYMENT_KEYS)
    if unknown:
        raise ModelConfigError(f"model {name!r}: unknown key(s) vllm.deployment.{', '.join(unknown)}")
    auto = dep.get("autoscaling_config")
    if auto is not None:
        from ray.serve.config import AutoscalingConfig  # plain Ray Serve, no vLLM

        bad = sorted(set(auto) - set(AutoscalingConfig.model_fields))
        if bad:  # pydantic would silently ignore a misspelled field; we refuse it
            raise ModelConfigError(f"model {name!r}: unknown key(s) vllm.deployment.autoscaling_config."
                                   f"{', '.join(bad)}")
    return dep


def accelerator_type(model_cfg: Mapping[str, Any], cfg: Any = None) -> str | None:
    """``serving.accelerator_type`` when set (overrides every model's), else the model's, else None (any GPU)."""
    over = _serving_section(cfg).get("accelerator_type")
    if over:
        return str(over)
    own = _vllm_section(_plain(model_cfg)).get("accelerator_type")
    return str(own) if own else None


def placement(model_cfg: Mapping[str, Any], cfg: Any = None) -> dict[str, Any]:
    """What one replica asks the cluster for, as Ray will place it.

    One bundle per GPU (``{"GPU": 1, "CPU": serving.cpus_per_gpu}``, plus Ray's
    ``accelerator_type:<T>: 0.001`` hint when a type is set), ``STRICT_PACK`` when the replica
    spans several GPUs (tensor/pipeline parallel ranks on one node, never across nodes),
    ``PACK`` for one. The LLMServer replica actor itself takes no CPU of its own (it sits in
    the first bundle), so a replica reserves exactly ``gpus x cpus_per_gpu`` CPUs. The real
    ``LLMConfig`` and the stand-in deployment use this same dict.
    """
    model_cfg = _plain(model_cfg)
    serving = _serving_section(cfg)
    vc = _vllm_section(model_cfg)
    n = gpus_per_replica(model_cfg)
    acc = accelerator_type(model_cfg, cfg)
    own = vc.get("placement_group_config")
    if own:
        bundles = [dict(b) for b in own.get("bundles") or [dict(own["bundle_per_worker"]) for _ in range(n)]]
        strategy = str(own.get("strategy", "PACK"))
    else:
        cpus = float(serving.get("cpus_per_gpu", 1.0))
        bundles = [{"GPU": 1, "CPU": cpus} for _ in range(n)]
        strategy = "STRICT_PACK" if n > 1 else "PACK"
    if acc:
        for b in bundles:
            b.setdefault(f"accelerator_type:{acc}", 0.001)
    dep = _deployment_config(model_cfg, vc)
    return {"model": _name(model_cfg), "gpus": n, "cpus": sum(float(b.get("CPU", 0)) for b in bundles),
            "accelerator_type": acc, "strategy": strategy, "bundles": bundles,
            "replicas": max(1, _min_replicas(dep))}


def _check_engine_kwargs(name: str, ek: Mapping[str, Any], dep: Mapping[str, Any]) -> None:
    """Typos against vLLM's own argument names; batch size and Serve's concurrency consistent."""
    from cluster.serve.vllm_args import known_args, unknown_args

    bad = unknown_args(dict(ek))
    if bad:
        version, names = known_args()
        hints = []
        import difflib

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


def llm_config_dict(model_cfg: Mapping[str, Any], cfg: Any = None) -> dict[str, Any]:
    """The ``LLMConfig`` keyword arguments for one model, as plain YAML-able data.

    This is what ``serveConfigV2`` embeds (``jobs/k8s.py``) and what ``build_llm_app``
    validates, so a RayService and a local stage are built from the very same dict.
    ``serving.prefix_cache_routing: true`` adds Ray's ``PrefixCacheAffinityRouter`` as the
    deployment's request router (unless the model YAML already names a router):
    multi-turn harnesses resend the same prefix every turn, and routing a conversation
    back to the replica that holds its KV cache saves the prefill.
    """
    model_cfg = _plain(model_cfg)
    serving = _serving_section(cfg)
    vc = _vllm_section(model_cfg)
    name = _name(model_cfg)
    gpus_per_replica(model_cfg)  # checks the declared GPU count against the parallel sizes
    mlc: dict[str, Any] = {"model_id": name, "model_source": str(vc["source"])}
    if vc.get("tokenizer_source"):
        mlc["tokenizer_source"] = str(vc["tokenizer_source"])
    dep = _deployment_config(model_cfg, vc)
    if serving.get("prefix_cache_routing") and "request_router_config" not in dep:
        dep["request_router_config"] = {
            "request_router_class": PREFIX_ROUTER_CLASS,
            "request_router_kwargs": {**PREFIX_ROUTER_DEFAULTS, **dict(serving.get("prefix_router_kwargs") or {})},
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
    pl = placement(model_cfg, cfg)
    out: dict[str, Any] = {
        "model_loading_config": mlc,
        "engine_kwargs": ek,
        "deployment_config": dep,
        "placement_group_config": {"bundles": pl["bundles"], "strategy": pl["strategy"]},
    }
    if pl["accelerator_type"]:
        out["accelerator_type"] = pl["accelerator_type"]
    if vc.get("runtime_env"):
        out["runtime_env"] = dict(vc["runtime_env"])
    return out


def _llm_config_class() -> type:
    """The public class when vLLM is importable, else its pydantic parent (same fields, same validators)."""
    try:
        from ray.serve.llm import LLMConfig
    except ImportError:
        from ray.llm._internal.serve.core.configs.llm_config import LLMConfig  # type: ignore[assignment]
    return LLMConfig


def llm_config(model_cfg: Mapping[str, Any], cfg: Any = None) -> Any:
    """One model YAML as a Ray ``LLMConfig`` (validated by Ray; no vLLM import needed)."""
    kwargs = llm_config_dict(model_cfg, cfg)
    cls = _llm_config_class()
    try:
        return cls(**kwargs)
    except Exception as exc:  # pydantic.ValidationError or ValueError from Ray's validators
        raise ModelConfigError(f"model {kwargs['model_loading_config']['model_id']!r}: Ray's LLMConfig "
                               f"rejected the config: {exc}") from exc


def serving_args(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None) -> dict[str, Any]:
    """``LLMServingArgs`` for ``build_openai_app``: one LLMConfig dict per model, ids unique."""
    configs = [llm_config_dict(m, cfg) for m in model_cfgs]
    if not configs:
        raise ModelConfigError("a vLLM stage needs at least one model")
    ids = [c["model_loading_config"]["model_id"] for c in configs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ModelConfigError(f"duplicate model ids in one stage: {dup}")
    return {"llm_configs": configs, "ingress_deployment_config": ingress_deployment_config(cfg)}


def ingress_timeout_s(cfg: Any = None) -> float:
    """Seconds the OpenAI ingress lets one request run: above the client's per-call timeout."""
    return float(_serving_section(cfg).get("request_timeout_s", 1800.0)) + INGRESS_TIMEOUT_MARGIN_S


def ingress_deployment_config(cfg: Any = None) -> dict[str, Any]:
    """The ingress replica's CPUs (``serving.ingress_cpus``) and its request timeout, set in its
    own runtime env: Ray reads ``RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT`` when the ingress imports."""
    serving = _serving_section(cfg)
    return {"ray_actor_options": {
        "num_cpus": float(serving.get("ingress_cpus", 1.0)),
        "runtime_env": {"env_vars": {"RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT": f"{ingress_timeout_s(cfg):g}"}},
    }}


def serve_app_config(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None, *,
                     name: str = APP_NAME, route_prefix: str = "/") -> dict[str, Any]:
    """One application entry of a Serve config file (``serve deploy`` / RayService serveConfigV2)."""
    return {"name": name, "route_prefix": route_prefix, "import_path": BUILDER_IMPORT_PATH,
            "args": serving_args(model_cfgs, cfg)}


def stage_deployments(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None) -> dict[str, dict[str, Any]]:
    """What ``build_openai_app`` makes of a stage, described without building it (no vLLM):
    deployment name -> {model_id, gpus_per_replica, autoscaling_config, max_ongoing_requests,
    request_router_class}; the ingress appears as ``OpenAiIngress`` with ``routes``.
    ``describe_built_app`` gives the same view of a real application, so a GPU machine can
    check the two agree."""
    models = [_plain(m) for m in model_cfgs]
    out: dict[str, dict[str, Any]] = {}
    for m, c in zip(models, serving_args(models, cfg)["llm_configs"]):
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
    from ray.serve._private.build_app import build_app

    built = build_app(app, name=name)
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
        import ray.serve.llm as serve_llm
    except ImportError as exc:
        raise VLLMNotInstalled(f"ray.serve.llm is unavailable ({exc}); {GPU_EXTRA_HINT}") from exc
    return serve_llm


def build_llm_app(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None) -> Any:
    """The stage's Serve application: one ``LLMServer`` deployment per model behind one
    ``OpenAiIngress`` (``/v1/chat/completions``, ``/v1/models``, ...)."""
    serve_llm = _import_serve_llm()
    args = serving_args(list(model_cfgs), cfg)
    args["llm_configs"] = [serve_llm.LLMConfig(**c) for c in args["llm_configs"]]
    return serve_llm.build_openai_app(serve_llm.LLMServingArgs(**args))


def build_standin_app(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None) -> Any:
    """``serving.standin``: the stage's app with the real replicas' placement (GPUs, CPUs,
    accelerator type, strategy, replicas, max_ongoing_requests) and ingress options, whose
    replicas answer with the simulated policy. Needs no vLLM: it rehearses placement, stages,
    readiness and teardown on a cluster with fake GPUs (``ray start --num-gpus=4``)."""
    from cluster.serve.sim_serving import standin_app  # Serve deployments: imported when a stage is built

    models = [_plain(m) for m in model_cfgs]
    configs = serving_args(models, cfg)["llm_configs"]  # the same checks as the real app
    placements = []
    for m, c in zip(models, configs):
        pl = placement(m, cfg)
        pl["max_ongoing_requests"] = c["deployment_config"].get("max_ongoing_requests")
        placements.append(pl)
    return standin_app(placements, ingress_deployment_config(cfg))


def deploy_stage(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None, *, app_name: str = APP_NAME,
                 host: str = "127.0.0.1", ready_timeout_s: float | None = None,
                 poll_s: float = 2.0, standin: bool | None = None, route_prefix: str = "/") -> dict[str, Endpoint]:
    """Check placement, ``serve.run`` the stage's app without blocking, wait until it is ready
    (:func:`wait_app_ready`). With ``standin`` (None: ``serving.standin``) the app is the stand-in
    one (:func:`build_standin_app`: same placement, simulated answers). A failed or timed-out
    deploy is torn down before the error propagates. Returns name -> Endpoint."""
    from ray import serve

    models = [_plain(m) for m in model_cfgs]
    serving = _serving_section(cfg)
    port = int(serving.get("http_port", 8000))
    timeout = float(ready_timeout_s if ready_timeout_s is not None else serving.get("ready_timeout_s", 900))
    check_placement(models, cfg)
    standin = bool(serving.get("standin")) if standin is None else standin
    app = build_standin_app(models, cfg) if standin else build_llm_app(models, cfg)
    try:
        serve.run_many([serve.RunTarget(app, name=app_name, route_prefix=route_prefix, logging_config=QUIET_LOGS)],
                       wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
        base_url = f"http://{host}:{port}{route_prefix.rstrip('/')}/v1"
        wait_app_ready(app_name, base_url, [_name(m) for m in models], timeout, poll_s=poll_s)
    except BaseException:
        try:
            teardown(app_name)
        except Exception as exc:
            print(f"[serving] teardown of {app_name!r} after a failed deploy failed too: {exc}", flush=True)
        raise
    return stage_endpoints(models, cfg, base_url=base_url, app_name=app_name, simulated=standin)


def stage_endpoints(model_cfgs: Iterable[Mapping[str, Any]], cfg: Any = None, *, base_url: str,
                    app_name: str = APP_NAME, simulated: bool = False) -> dict[str, Endpoint]:
    """How workers reach a deployed stage's models: one URL, the model's name as its id, the
    per-call timeout ``serving.request_timeout_s``, and ``vllm.chat_template_kwargs`` sent with
    every request."""
    per_call = float(_serving_section(cfg).get("request_timeout_s", 1800.0))
    eps = {}
    for m in (_plain(m) for m in model_cfgs):
        ctk = dict(_vllm_section(m).get("chat_template_kwargs") or {})
        eps[_name(m)] = Endpoint(name=_name(m), base_url=base_url, model_id=_name(m), simulated=simulated,
                                 api_key_env=None, timeout_s=per_call, max_retries=4,
                                 extra_body={"chat_template_kwargs": ctk} if ctk else {}, app_name=app_name)
    return eps


# -- placement ----------------------------------------------------------------------------


def _fits(free: dict[str, float], bundle: Mapping[str, float]) -> bool:
    return all(float(free.get(k, 0.0)) + 1e-9 >= float(v) for k, v in bundle.items() if float(v) > 0)


def _take(free: dict[str, float], bundle: Mapping[str, float]) -> None:
    for k, v in bundle.items():
        free[k] = float(free.get(k, 0.0)) - float(v)


def _place_replica(nodes: list[dict[str, float]], pl: Mapping[str, Any]) -> bool:
    """First fit of one replica's bundles onto ``nodes`` (mutated on success)."""
    bundles = pl["bundles"]
    if pl["strategy"] in ("STRICT_PACK",):
        total: dict[str, float] = {}
        for b in bundles:
            for k, v in b.items():
                total[k] = total.get(k, 0.0) + float(v)
        for free in nodes:
            if _fits(free, total):
                _take(free, total)
                return True
        return False
    trial = [dict(n) for n in nodes]
    for b in bundles:
        for free in trial:
            if _fits(free, b):
                _take(free, b)
                break
        else:
            return False
    nodes[:] = trial
    return True


def describe_request(pl: Mapping[str, Any]) -> str:
    acc = pl["accelerator_type"] or "any"
    where = "on one node" if pl["strategy"] == "STRICT_PACK" else "best effort"
    return (f"{pl['replicas']} replica(s) of {pl['gpus']} GPU(s) + {pl['cpus']:g} CPU(s), accelerator_type "
            f"{acc}, placement {pl['strategy']} ({where})")


def plan_placement(models: Sequence[Mapping[str, Any]], cfg: Any, nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """Problems placing a stage on ``nodes`` (free resources per node): every model's
    ``min_replicas`` replicas, then the ingress, then one prefix-tree actor per model when
    prefix routing is on. Empty when everything fits. Pure (tests give it node dicts)."""
    serving = _serving_section(cfg)
    free = [dict(n) for n in nodes]
    problems = []
    for m in models:
        pl = placement(m, cfg)
        for _ in range(pl["replicas"]):
            if not _place_replica(free, pl):
                problems.append(f"model {pl['model']!r} asks for {describe_request(pl)}")
                break
    extras = [("the OpenAI ingress", {"CPU": float(serving.get("ingress_cpus", 1.0))})]
    if serving.get("prefix_cache_routing"):
        extras += [(f"the prefix-tree actor of {_name(m)!r}", {"CPU": 1.0}) for m in models]
    for what, need in extras:
        if not _place_replica(free, {"strategy": "STRICT_PACK", "bundles": [need]}):
            problems.append(f"{what} asks for {need['CPU']:g} CPU(s)")
    return problems


def _free_nodes() -> list[dict[str, float]]:
    """Free resources per alive node right now (executors already hold theirs)."""
    import ray._private.state as state

    try:
        return [dict(v) for v in state.available_resources_per_node().values()]
    except Exception:
        from cluster.runtime import node_resources

        return node_resources()


def check_placement(models: Sequence[Mapping[str, Any]], cfg: Any = None,
                    nodes: Sequence[Mapping[str, float]] | None = None) -> None:
    """Refuse, before deploying, a stage no node and no autoscaler node type could ever hold
    (it would pend forever). ``nodes`` (tests) are the shapes to check against; by default the
    alive nodes' totals plus the autoscaler's node types (:mod:`cluster.serve.capacity`). A stage that
    fits those but not what is free right now is deployed and waited for (a busy node frees up,
    a GPU group scales up), with a line saying so."""
    from cluster.runtime import describe_nodes
    from cluster.serve.capacity import capacity_shapes

    shapes = capacity_shapes() if nodes is None else [dict(n) for n in nodes]
    problems = plan_placement(models, cfg, shapes)
    if problems:
        raise UnplaceableModel(f"cannot place the stage: {'; '.join(problems)}; the cluster has: "
                               f"{describe_nodes(shapes)} (set serving.accelerator_type, serving.cpus_per_gpu "
                               f"or cluster.executors, or add nodes)")
    if nodes is None:
        free = _free_nodes()
        busy = plan_placement(models, cfg, free)
        if busy:
            print(f"[serving] the stage does not fit what is free now ({'; '.join(busy)}); waiting for "
                  f"resources to free up or the autoscaler to add a node (serving.ready_timeout_s)", flush=True)


# -- replicas the schedule decides ---------------------------------------------------------


def with_replicas(model_cfg: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    """The model config deployed with exactly ``replicas`` replicas: the continuous schedule
    (``cluster.driver.schedule``) owns the GPUs, so Serve's autoscaler must not take free GPUs
    another model is about to be placed on (min = max = ``replicas``; more replicas come as
    another replica group, an app of their own)."""
    m = _plain(model_cfg)
    vc = dict(m.get("vllm") or {})
    dep = dict(vc.get("deployment") or {})
    key = "autoscaling_config" if "autoscaling_config" in dep else "autoscaling" if "autoscaling" in dep else None
    if key is None:
        dep["num_replicas"] = int(replicas)
    else:
        auto = dict(dep[key] or {})
        auto.pop("initial_replicas", None)
        auto.update(min_replicas=int(replicas), max_replicas=int(replicas))
        dep[key] = auto
    vc["deployment"] = dep
    m["vllm"] = vc
    return m


def app_slug(model: str) -> str:
    """A model name as a Serve app name and route segment."""
    return model.replace("/", "--")


def llm_app_name(model: str, group: int = 0) -> str:
    """The Serve app of one model's replica group (``opteval-llm-Qwen3-4B``, then ``-g2``, ...)."""
    return f"{APP_NAME}-{app_slug(model)}" + (f"-g{group + 1}" if group else "")


def llm_route_prefix(model: str, group: int = 0) -> str:
    return "/" + llm_app_name(model, group)[len(APP_NAME) + 1:]
