"""Where a vLLM model's replicas go, planned without Ray: GPUs per replica, the replicas a model
starts with, one replica's bundles (GPUs, CPUs, accelerator type, strategy), and first-fit
placement of a stage onto node shapes (``plan_placement``, the bin-packing the schedule, the
fleet and readiness ask before anything is deployed).

Why out of ``opteval.cluster.serve.llm_serving``: this is pure state (model configs and node dicts in,
numbers and problems out), so the backend spec (``opteval.sweepcore.backends.vllm``: a model's GPUs), the
GPU schedule (``opteval.cluster.driver.schedule``) and its replay (``bench/bench_schedule.py``) use it
without Ray, and its tests need no cluster. ``llm_serving`` builds the Ray app from the same
dicts. A model config here is plain data (``opteval.sweepcore.config.as_plain`` of a validated model
config); ``serving`` is the sweep's typed :class:`~opteval.sweepcore.config.schema.ServingSection`: its
dataclass states every default, none is restated here.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from opteval.sweepcore.config_errors import ConfigError
from opteval.sweepcore.model_sections import VllmSection, check_vllm_section

if TYPE_CHECKING:  # type-only: the config package imports the backend specs, which import this module
    from opteval.sweepcore.config.schema import ServingSection


def _plain(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a model config (plain data): nothing here changes its input."""
    return copy.deepcopy(dict(model_cfg))


# vllm: keys of a model YAML (opteval.sweepcore.config.VllmSection, the one schema), and what each becomes:
#   source -> model_loading_config.model_source (HF hub id, local path, s3:// / gs:// mirror);
#   tokenizer_source -> model_loading_config.tokenizer_source; engine_kwargs -> LLMConfig.engine_kwargs
#   (vLLM engine + frontend args, verbatim); deployment -> LLMConfig.deployment_config;
#   accelerator_type -> LLMConfig.accelerator_type; gpus_per_replica: checked against tensor x
#   pipeline parallel size; chat_template_kwargs: sent per request by the client (extra_body);
#   runtime_env.env_vars -> LLMConfig.runtime_env (the replica's, so its engine's, environment);
#   placement_group_config -> the replica's bundles (CPU-only bundles: a CPU engine, 0 GPUs);
#   language_only: a VL checkpoint's language model only (vLLM language_model_only).
_VLLM_KEYS = frozenset(f.name for f in fields(VllmSection))
# Keys accepted under vllm.deployment (Ray Serve deployment options LLMConfig documents).
_DEPLOYMENT_KEYS = {
    "name", "num_replicas", "ray_actor_options", "max_ongoing_requests", "autoscaling_config",
    "max_queued_requests", "user_config", "health_check_period_s", "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "logging_config",
    "request_router_config",
}


class ModelConfigError(ConfigError):
    """A model YAML does not describe a servable vLLM model; the message names model and key
    (a ConfigError: a sweep prints it as one line and exits 2)."""


def model_name(model_cfg: Mapping[str, Any]) -> str:
    name = model_cfg.get("name")
    if not name:
        raise ModelConfigError("model config has no 'name'")
    return str(name)


def vllm_section(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    name = model_name(model_cfg)
    vc = model_cfg.get("vllm")
    if not isinstance(vc, Mapping):
        raise ModelConfigError(f"model {name!r}: missing 'vllm' section")
    unknown = sorted(set(vc) - _VLLM_KEYS)
    if unknown:
        raise ModelConfigError(f"model {name!r}: unknown key(s) vllm.{', vllm.'.join(unknown)}; "
                               f"allowed: {sorted(_VLLM_KEYS)}")
    if not vc.get("source"):
        raise ModelConfigError(f"model {name!r}: vllm.source is required (hub id, path or s3:// URI)")
    check_vllm_section(vc, lambda key, msg: ModelConfigError(f"model {name!r}: {key}: {msg}"))
    return dict(vc)


def _workers(vc: Mapping[str, Any]) -> int:
    """Engine workers of one replica: vLLM's tensor x pipeline parallel size."""
    ek = dict(vc.get("engine_kwargs") or {})
    return int(ek.get("tensor_parallel_size", 1)) * int(ek.get("pipeline_parallel_size", 1))


def _own_bundles(vc: Mapping[str, Any], workers: int) -> tuple[list[dict[str, float]], str] | None:
    """The replica's bundles and strategy when the YAML sets ``placement_group_config``, else None."""
    own = dict(vc.get("placement_group_config") or {})
    if own.get("bundles"):
        bundles = [dict(b) for b in own["bundles"]]
    elif own.get("bundle_per_worker"):
        bundles = [dict(own["bundle_per_worker"]) for _ in range(workers)]
    else:
        return None
    return bundles, str(own.get("strategy") or "PACK")


def gpus_per_replica(model_cfg: Mapping[str, Any]) -> int:
    """GPUs one replica occupies: vLLM's tensor x pipeline parallel size, or what the YAML's
    placement bundles hold (0: a CPU engine)."""
    model_cfg = _plain(model_cfg)
    vc = vllm_section(model_cfg)
    n = _workers(vc)
    declared = vc.get("gpus_per_replica")
    own = _own_bundles(vc, n)
    if own is not None:  # the YAML's bundles say how many GPUs a replica holds (none: a CPU engine)
        held = round(sum(float(b.get("GPU", 0)) for b in own[0]))
        if held and held != n:
            raise ModelConfigError(
                f"model {model_name(model_cfg)!r}: vllm.placement_group_config holds {held} GPU(s) but "
                f"tensor_parallel_size x pipeline_parallel_size = {n}")
        if declared is not None and int(declared) != held:
            raise ModelConfigError(
                f"model {model_name(model_cfg)!r}: vllm.gpus_per_replica={declared} but "
                f"vllm.placement_group_config's bundles hold {held} GPU(s)"
                + (" (a CPU engine: set gpus_per_replica: 0)" if not held else ""))
        return held
    if declared is not None and int(declared) != n:
        raise ModelConfigError(
            f"model {model_name(model_cfg)!r}: vllm.gpus_per_replica={declared} but tensor_parallel_size x "
            f"pipeline_parallel_size = {n}")
    return n


def min_replicas(deployment: Mapping[str, Any]) -> int:
    if "num_replicas" in deployment and deployment["num_replicas"] not in (None, "auto"):
        return int(deployment["num_replicas"])
    auto = dict(deployment.get("autoscaling_config") or {})
    return int(auto.get("min_replicas", 1))


def stage_gpus(model_cfg: Mapping[str, Any]) -> int:
    """GPUs a model holds while its stage runs: one replica at least, else min_replicas of them."""
    model_cfg = _plain(model_cfg)
    vc = vllm_section(model_cfg)
    return gpus_per_replica(model_cfg) * max(1, min_replicas(deployment_config(model_cfg, vc)))


def deployment_config(model_cfg: Mapping[str, Any], vc: Mapping[str, Any]) -> dict[str, Any]:
    name = model_name(model_cfg)
    dep = dict(vc.get("deployment") or {})
    if "autoscaling" in dep:  # the short spelling of configs/models docs; Ray calls it autoscaling_config
        if "autoscaling_config" in dep:
            raise ModelConfigError(f"model {name!r}: give vllm.deployment.autoscaling_config only once")
        dep["autoscaling_config"] = dep.pop("autoscaling")
    unknown = sorted(set(dep) - _DEPLOYMENT_KEYS)
    if unknown:
        raise ModelConfigError(f"model {name!r}: unknown key(s) vllm.deployment.{', '.join(unknown)}")
    return dep


def accelerator_type(model_cfg: Mapping[str, Any], serving: ServingSection) -> str | None:
    """``serving.accelerator_type`` when set (overrides every model's), else the model's, else None (any GPU)."""
    if serving.accelerator_type:
        return str(serving.accelerator_type)
    own = vllm_section(_plain(model_cfg)).get("accelerator_type")
    return str(own) if own else None


def placement(model_cfg: Mapping[str, Any], serving: ServingSection) -> dict[str, Any]:
    """What one replica asks the cluster for, as Ray will place it.

    One bundle per GPU (``{"GPU": 1, "CPU": serving.cpus_per_gpu}``, plus Ray's
    ``accelerator_type:<T>: 0.001`` hint when a type is set), ``STRICT_PACK`` when the replica
    spans several GPUs (tensor/pipeline parallel ranks on one node, never across nodes),
    ``PACK`` for one. The LLMServer replica actor itself takes no CPU of its own (it sits in
    the first bundle), so a replica reserves exactly ``gpus x cpus_per_gpu`` CPUs. The real
    ``LLMConfig`` and the stand-in deployment use this same dict.
    """
    model_cfg = _plain(model_cfg)
    vc = vllm_section(model_cfg)
    n = gpus_per_replica(model_cfg)
    acc = accelerator_type(model_cfg, serving) if n else None  # a GPU's type; a CPU engine has none
    own = _own_bundles(vc, _workers(vc))
    if own is not None:
        bundles, strategy = own
    else:
        cpus = float(serving.cpus_per_gpu)
        bundles = [{"GPU": 1, "CPU": cpus} for _ in range(n)]
        strategy = "STRICT_PACK" if n > 1 else "PACK"
    if acc:
        for b in bundles:
            if float(b.get("GPU", 0)) > 0:  # the type is a GPU's: a bundle without one stays as it is
                b.setdefault(f"accelerator_type:{acc}", 0.001)
    dep = deployment_config(model_cfg, vc)
    return {"model": model_name(model_cfg), "gpus": n, "cpus": sum(float(b.get("CPU", 0)) for b in bundles),
            "accelerator_type": acc, "strategy": strategy, "bundles": bundles,
            "replicas": max(1, min_replicas(dep))}


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


def plan_placement(models: Sequence[Mapping[str, Any]], serving: ServingSection,
                   nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """Problems placing a stage on ``nodes`` (free resources per node): every model's
    ``min_replicas`` replicas, then the ingress, then one prefix-tree actor per model when
    prefix routing is on. Empty when everything fits. Pure (tests give it node dicts)."""
    free = [dict(n) for n in nodes]
    problems = []
    for m in models:
        pl = placement(m, serving)
        for _ in range(pl["replicas"]):
            if not _place_replica(free, pl):
                problems.append(f"model {pl['model']!r} asks for {describe_request(pl)}")
                break
    extras = [("the OpenAI ingress", {"CPU": float(serving.ingress_cpus)})]
    if serving.prefix_cache_routing:
        extras += [(f"the prefix-tree actor of {model_name(m)!r}", {"CPU": 1.0}) for m in models]
    for what, need in extras:
        if not _place_replica(free, {"strategy": "STRICT_PACK", "bundles": [need]}):
            problems.append(f"{what} asks for {need['CPU']:g} CPU(s)")
    return problems


# -- replicas the schedule decides ---------------------------------------------------------


def with_replicas(model_cfg: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    """The model config deployed with exactly ``replicas`` replicas: the continuous schedule
    (``opteval.cluster.driver.schedule``) owns the GPUs, so Serve's autoscaler must not take free GPUs
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
