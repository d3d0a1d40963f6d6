"""Fingerprints, the ledger's keys: ``resolved`` (the whole sweep as plain data, stored in the
manifest), ``outcome_view`` (what decides outcomes), the sweep fingerprint and the per-item one
(model x method x benchmark). tests/sweepcore/test_config_fingerprints.py pins their values."""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from opteval.evalcore.harnesses.base import Budgets
from opteval.evalcore.records import config_fingerprint
from opteval.sweepcore.config.entities import benchmark_config, method_config, model_config
from opteval.sweepcore.config.precedence import effective_budgets, effective_limits, effective_sampling, grading_profile_for
from opteval.sweepcore.config.schema import BenchmarkConfig, SweepConfig, as_plain

# Top-level sections that never change a trajectory's outcome: they are left out of
# the fingerprint and of the changed-config check (resuming with more workers is fine).
# ``command_line`` (which keys the command line set) is among them: what it decides is the effective
# sampling/budgets/limits, which every item fingerprint hashes; the manifest still records it.
NON_OUTCOME_KEYS = ("sweep", "plan_only", "data", "cluster", "serving", "tracking", "progress", "command_line")
# Fields of the opteval.evalcore sections that the sweep schema gained after fingerprints were first
# recorded. At their default they stay out of the resolved config (and so out of every
# fingerprint), so existing sweeps keep their keys; any other value is hashed.
ADDED_FIELDS = (("sampling", "extra_body"), ("budgets", "max_output_tokens"), ("budgets", "match"),
                ("budgets", "match_to"))
# Top-level keys added later, left out of the resolved config while empty (same reason).
ADDED_TOP = ("method_budgets", "command_line")


def harness_versions(methods: Iterable[str]) -> dict[str, dict[str, str]]:
    """Prompt-file and code hashes of each method's harness (``opteval.evalcore.harnesses.version``)."""
    from opteval.evalcore.harnesses.version import harness_version  # reads every prompt file: on demand

    return {m: harness_version(method_config(m).harness) for m in methods}


def _sweep_view(cfg: SweepConfig) -> dict[str, Any]:
    """The sweep's own sections as plain data, as the manifest stores and the fingerprint hashes
    them: ``budgets.exec_limits`` is the ``limits`` section (not repeated), and the
    :data:`ADDED_FIELDS` are left out at their defaults."""
    out: dict[str, Any] = as_plain(cfg)
    out["budgets"].pop("exec_limits")
    default = SweepConfig()
    for section, key in ADDED_FIELDS:
        if out[section][key] == as_plain(getattr(getattr(default, section), key)):
            out[section].pop(key)
    for key in ADDED_TOP:
        if not out[key]:
            out.pop(key)
    return out


def resolved(cfg: SweepConfig) -> dict[str, Any]:
    """The whole sweep as plain data, with the model/method/benchmark configs it uses."""
    out = _sweep_view(cfg)
    out["model_configs"] = {m: _model_view(model_config(m)) for m in cfg.models}
    out["method_configs"] = {m: as_plain(method_config(m)) for m in cfg.methods}
    out["benchmark_configs"] = {b: _benchmark_view(benchmark_config(b)) for b in cfg.benchmarks}
    out["harness_versions"] = harness_versions(cfg.methods)
    return out


def _model_view(model: Any) -> dict[str, Any]:
    """A model config as plain data, as hashed: the typed ``vllm.runtime_env`` and
    ``vllm.placement_group_config`` leave out their empty fields (and the whole section when it
    asks for nothing), so a model that sets neither keeps the fingerprint it had when both were
    untyped mappings defaulting to ``{}``."""
    m = as_plain(model)
    vc = m.get("vllm")
    if isinstance(vc, dict):
        vc = dict(vc)
        for key in ("runtime_env", "placement_group_config"):
            sub = {k: v for k, v in dict(vc.get(key) or {}).items() if v not in ({}, [], None)}
            if key == "placement_group_config" and not (sub.get("bundles") or sub.get("bundle_per_worker")):
                sub = {}
            vc[key] = sub
        m["vllm"] = vc
    return m


def _benchmark_view(bench: BenchmarkConfig) -> dict[str, Any]:
    """A benchmark config as plain data; ``path``/``sha256`` (added for local benchmarks) left out
    when unset, so the pinned benchmarks' sweeps keep their fingerprints."""
    return {k: v for k, v in as_plain(bench).items() if not (k in ("path", "sha256") and v is None)}


def outcome_view(resolved_cfg: dict[str, Any]) -> dict[str, Any]:
    """The parts of a resolved config that decide what runs and how it scores."""
    out = {k: copy.deepcopy(v) for k, v in resolved_cfg.items() if k not in NON_OUTCOME_KEYS}
    if isinstance(out.get("limits"), dict):  # whether the executor may run uncontained: operational
        out["limits"].pop("allow_uncontained", None)
    return out


def sweep_fingerprint(cfg: SweepConfig | dict[str, Any]) -> str:
    """Hash of :func:`outcome_view`: not of output_dir, cluster, serving, tracking, progress."""
    res = cfg if isinstance(cfg, dict) else resolved(cfg)
    return config_fingerprint(outcome_view(res))


def item_fingerprint(cfg: SweepConfig, model: str, method: str, benchmark: str) -> str:
    """Fingerprint of what decides one (model, method, benchmark)'s trajectories' outcomes.

    Keys hash this rather than the whole sweep, so adding a model, a benchmark or
    samples to a sweep (with ``sweep.allow_config_change=true``) keeps the keys, and
    hence the committed results, of everything that did not change.
    """
    return item_fingerprinter(cfg)(model, method, benchmark)


def _budgets_view(cfg: SweepConfig, method: str) -> dict[str, Any]:
    """A method's effective budgets as hashed: the limits are hashed on their own, and
    ``max_output_tokens`` only when the method states it or the sweep changed it."""
    out: dict[str, Any] = as_plain(effective_budgets(cfg, method))
    out.pop("exec_limits")
    for key in ("match", "match_to"):  # added later: hashed only when a sweep matches budgets
        if out[key] is None:
            out.pop(key)
    stated = method_config(method).budgets.max_output_tokens is not None
    if not stated and cfg.budgets.max_output_tokens == Budgets().max_output_tokens:
        out.pop("max_output_tokens")
    return out


def item_fingerprinter(cfg: SweepConfig) -> Callable[[str, str, str], str]:
    """``item_fingerprint`` for one config, each model's, method's and benchmark's part
    computed once: a plan at 10x the paper asks for thousands of (model, method, benchmark)."""
    solvers = list(cfg.solvers)
    models: dict[str, tuple[Any, Any]] = {}
    methods: dict[str, tuple[Any, Any, Any, Any]] = {}
    grading: dict[str, str] = {}

    def fingerprint(model: str, method: str, benchmark: str) -> str:
        if model not in models:
            models[model] = (as_plain(effective_sampling(cfg, model)), _model_view(model_config(model)))
        if method not in methods:
            # allow_uncontained decides where programs may run, not their outcomes: not in the key
            limits = as_plain(effective_limits(cfg, method))
            limits.pop("allow_uncontained")
            methods[method] = (_budgets_view(cfg, method), limits, as_plain(method_config(method)),
                               harness_versions([method])[method])
        if benchmark not in grading:
            grading[benchmark] = grading_profile_for(cfg, benchmark)
        sampling, model_cfg = models[model]
        budgets, limits, method_cfg, harness = methods[method]
        return config_fingerprint({
            "sampling": sampling,
            "budgets": budgets,
            "limits": limits,
            "grading": grading[benchmark],
            "model": model_cfg,
            "method": method_cfg,
            "harness": harness,
            "solvers": solvers,
        })

    return fingerprint
