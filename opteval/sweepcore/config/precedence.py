"""The one precedence rule: command line > model/method YAML > sweep YAML > defaults.

``overlay`` is the only overlay; ``effective_sampling`` / ``effective_budgets`` / ``effective_limits``
apply it per model and method, ``overridden`` says once at start what it decided. Also the
per-benchmark and per-model choices the plan reads (``samples_for``, ``methods_for``)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar

from opteval.evalcore.harnesses._common import merge_body
from opteval.evalcore.harnesses.base import MATCH_KINDS, Budgets
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.sandbox.types import Limits
from opteval.sweepcore.config.entities import benchmark_config, method_config, model_config
from opteval.sweepcore.config.schema import SweepConfig, as_plain

T = TypeVar("T")


def methods_for(cfg: SweepConfig, model: str) -> list[str]:
    """The methods ``model`` runs: ``model_methods[model]`` in ``methods`` order, else all."""
    if model in cfg.model_methods:
        only = set(cfg.model_methods[model])
        return [m for m in cfg.methods if m in only]
    return list(cfg.methods)


def samples_for(cfg: SweepConfig, slug: str) -> int:
    """``samples.per_benchmark[slug]``, else the benchmark yaml's ``samples``, else ``samples.default``."""
    per = cfg.samples.per_benchmark
    if slug in per:
        return per[slug]
    own = benchmark_config(slug).samples
    return own if own is not None else cfg.samples.default


def grading_profile_for(cfg: SweepConfig, slug: str) -> str:
    """The benchmark yaml's ``grading`` override, else ``grading.profile``."""
    return benchmark_config(slug).grading or cfg.grading.profile


def overlay(base: T, over: Any) -> T:
    """``base`` (a frozen opteval.evalcore dataclass) with every field ``over`` states (not None) on top;
    mapping fields (``extra_body``) merge key by key. The one overlay: sweep -> model -> method
    (a stage's own request overrides are opteval.evalcore's ``stage_sampling``, applied per call)."""
    stated = as_plain(over)
    changes: dict[str, Any] = {}
    for f in fields(base):  # type: ignore[arg-type]
        value = stated.get(f.name)
        if value is None:
            continue
        current = getattr(base, f.name)
        changes[f.name] = merge_body(current, value) if isinstance(current, Mapping) else value
    return replace(base, **changes)  # type: ignore[type-var]


def pinned(cfg: SweepConfig, section: str) -> dict[str, Any]:
    """The fields of ``section`` the command line set, with their values (they win over YAML)."""
    values = as_plain(getattr(cfg, section))
    keys = [k.split(".", 1)[1] for k in cfg.command_line if k.split(".", 1)[0] == section]
    return {k: values[k] for k in keys if k in values}


def effective_sampling(cfg: SweepConfig, model: str) -> Sampling:
    """The precedence rule: defaults < sweep YAML < the model's YAML < the command line
    (``extra_body`` merged key by key at each layer)."""
    return overlay(overlay(cfg.sampling, model_config(model).sampling), pinned(cfg, "sampling"))


def effective_limits(cfg: SweepConfig, method: str) -> Limits:
    """The sweep's sandbox limits, the method's YAML on top, the command line's on top of that."""
    return overlay(overlay(cfg.limits, method_config(method).limits), pinned(cfg, "limits"))


def effective_budgets(cfg: SweepConfig, method: str) -> Budgets:
    """The sweep's budgets, the method's YAML on top, then the command line's ``budgets.*``, then
    ``method_budgets.<method>.*`` (the most specific); ``exec_limits`` are the method's effective
    sandbox limits."""
    own = _own_budgets(cfg, method)
    if cfg.budgets.match is None:
        return own
    # budgets.match: every method stops at the same budget, a number or the named method's own
    target = MATCH_KINDS[cfg.budgets.match]
    to = str(cfg.budgets.match_to)
    value = int(to) if to.isdigit() else int(getattr(_own_budgets(cfg, to), target))
    if target == "max_calls":
        return replace(own, max_calls=value)
    return replace(own, max_total_tokens=value)


def _own_budgets(cfg: SweepConfig, method: str) -> Budgets:
    """A method's budgets before ``budgets.match``."""
    base = replace(cfg.budgets, exec_limits=effective_limits(cfg, method))
    over = overlay(overlay(base, method_config(method).budgets), pinned(cfg, "budgets"))
    return overlay(over, cfg.method_budgets.get(method) or {})


def _layers(cfg: SweepConfig) -> list[tuple[str, str, Any, Any, dict[str, Any]]]:
    """(who, section, the sweep's section, the YAML's overrides, the command line's) per model
    and method of the sweep."""
    out: list[tuple[str, str, Any, Any, dict[str, Any]]] = []
    for m in cfg.models:
        out.append((f"model {m!r}", "sampling", cfg.sampling, model_config(m).sampling, pinned(cfg, "sampling")))
    for m in cfg.methods:
        method = method_config(m)
        cli = {**pinned(cfg, "budgets"), **(cfg.method_budgets.get(m) or {})}
        out.append((f"method {m!r}", "budgets", cfg.budgets, method.budgets, cli))
        out.append((f"method {m!r}", "limits", cfg.limits, method.limits, pinned(cfg, "limits")))
    return out


def overridden(cfg: SweepConfig) -> list[str]:
    """One line per model/method whose YAML overrode a sweep value, or whose YAML value the
    command line overrode: what the precedence rule decided, printed once at start."""
    lines = []
    for who, section, sweep_sec, yaml_sec, cli in _layers(cfg):
        sweep_vals, yaml_vals = as_plain(sweep_sec), as_plain(yaml_sec)
        parts = []
        for key, value in yaml_vals.items():
            if value is None or value == {}:
                continue
            if key in cli and cli[key] != value:
                parts.append(f"{section}.{key}={cli[key]!r} (command line) over its YAML's {value!r}")
            elif key not in cli and value != sweep_vals.get(key):
                parts.append(f"{section}.{key}={value!r} (its YAML) over the sweep's {sweep_vals.get(key)!r}")
        if parts:
            lines.append(f"[sweep] settings of {who}: " + "; ".join(parts))
    return lines
