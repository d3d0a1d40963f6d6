"""The ``vllm`` section of a model config, in a leaf module: ``opteval.sweepcore.config`` types model YAMLs
with it and ``opteval.cluster.serve.llm_serving`` reads its fields, and config imports the backends, which
import llm_serving when they build an app. Ray-free; ``opteval.sweepcore.config`` re-exports it.

The placement and the replica's environment are typed (OmegaConf refuses an unknown key or a
wrong type with its dotted path, e.g. ``vllm.runtime_env.env_var``); their values are checked
by :func:`check_vllm_section` with the key named."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Ray's placement group strategies (ray.util.placement_group), the ones LLMConfig accepts.
STRATEGIES = ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD")


@dataclass
class PlacementGroupSection:
    """One replica's resources, as ``LLMConfig.placement_group_config``. Unset (no bundles): one
    ``{GPU: 1, CPU: serving.cpus_per_gpu}`` bundle per GPU. A CPU engine (vLLM's CPU build) sets
    ``bundles: [{CPU: 1}]``: with a GPU bundle Ray picks its own executor, which the CPU build refuses."""

    bundles: list[dict[str, float]] = field(default_factory=list)  # the replica's bundles, in order
    bundle_per_worker: dict[str, float] = field(default_factory=dict)  # or one, repeated per TP x PP rank
    strategy: str = "PACK"  # one of STRATEGIES; STRICT_PACK keeps every rank on one node


@dataclass
class RuntimeEnvSection:
    """The replica's runtime environment (``LLMConfig.runtime_env``): its engine's environment
    variables, e.g. vLLM's CPU build's ``VLLM_CPU_KVCACHE_SPACE`` (GiB) and
    ``VLLM_CPU_OMP_THREADS_BIND``."""

    env_vars: dict[str, str] = field(default_factory=dict)


@dataclass
class VllmSection:
    source: str | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    deployment: dict[str, Any] = field(default_factory=dict)
    accelerator_type: str | None = None
    gpus_per_replica: int = 1  # 0 with CPU-only placement bundles (vLLM's CPU build)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tokenizer_source: str | None = None
    language_only: bool = False  # a vision-language checkpoint served as a language model
    runtime_env: RuntimeEnvSection = field(default_factory=RuntimeEnvSection)
    placement_group_config: PlacementGroupSection = field(default_factory=PlacementGroupSection)


def check_vllm_section(vc: Mapping[str, Any], error: Callable[[str, str], Exception]) -> None:
    """Values OmegaConf's types cannot check: ``error(key, message)`` builds the exception, so the
    config loader names the file and ``llm_serving`` the model."""
    pgc = dict(vc.get("placement_group_config") or {})
    where = "vllm.placement_group_config"
    if pgc.get("bundles") and pgc.get("bundle_per_worker"):
        raise error(f"{where}.bundles", "give bundles or bundle_per_worker, not both")
    strategy = pgc.get("strategy", "PACK")
    if strategy not in STRATEGIES:
        raise error(f"{where}.strategy", f"{strategy!r} is not one of {', '.join(STRATEGIES)}")
    bundles = [("bundle_per_worker", dict(pgc["bundle_per_worker"]))] if pgc.get("bundle_per_worker") else []
    bundles += [(f"bundles[{i}]", dict(b or {})) for i, b in enumerate(pgc.get("bundles") or [])]
    for key, bundle in bundles:
        if not bundle:
            raise error(f"{where}.{key}", "an empty bundle asks for nothing")
        bad = sorted(k for k, v in bundle.items() if float(v) < 0)
        if bad:
            raise error(f"{where}.{key}.{bad[0]}", "a resource amount cannot be negative")
    for name in (vc.get("runtime_env") or {}).get("env_vars") or {}:
        if not str(name) or "=" in str(name):
            raise error("vllm.runtime_env.env_vars", f"{name!r} is not an environment variable name")
