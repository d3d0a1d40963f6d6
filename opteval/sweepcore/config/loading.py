"""Sweep configuration: the typed :class:`SweepConfig`, built once at the edge.

``load_config(argv)`` merges the dataclass defaults, an optional YAML file and a dotlist
through OmegaConf (so a misspelled key such as ``samples.defualt=4`` stops the job with
its key path instead of being ignored, and a wrong type fails before a cluster starts),
checks ranges and names OmegaConf cannot express (:func:`_check_values`), then returns a
frozen dataclass tree. Everything downstream reads that tree by attribute; mypy rejects
a read of a key the schema does not have. Every failure is a :class:`ConfigError` naming
the key path and where the value came from.

The dataclasses are the one source of the defaults. ``configs/sweep.yaml`` documents
every key with its default and meaning (a test keeps it equal to the dataclasses); it is
not read. The ``sampling``, ``budgets`` and ``limits`` sections are opteval.evalcore's own
``Sampling``, ``Budgets`` and ``Limits``: what a harness and the sandbox receive is what
the config held, with the model's and the method's overrides put on top by
:func:`overlay` (the only overlay).

Model, method and benchmark configs are separate YAML files under the configs
directory (``configs/`` beside the package, or ``$OPTEVAL_CONFIGS``), each with its
own schema; their errors name the file.

No Ray import here: ``plan_only`` runs must not start or import Ray.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from opteval.evalcore.grading import PROFILES
from opteval.evalcore.harnesses.base import MATCH_KINDS
from opteval.evalcore.sandbox.types import Limits
from opteval.evalcore.solvers import validate as validate_solvers
from opteval.sweepcore.config.entities import (
    _method_exists,
    _model_exists,
    _take_models,
    benchmark_config,
    benchmark_known,
    method_config,
    model_config,
)
from opteval.sweepcore.config.files import _NAME_RE, _check, _known, _merge, _omega_error, _read_yaml, configs_dir
from opteval.sweepcore.config.schema import TRACE_MODES, MethodBudgetOverrides, SweepConfig
from opteval.sweepcore.config_errors import ConfigError
from opteval.sweepcore.config_errors import hint as _hint
from opteval.sweepcore.endpoint import ROUTES

# The sections whose command-line values win over the model/method YAML.
PINNABLE = ("sampling", "budgets", "limits")


# -- the sweep config --------------------------------------------------------------------------


def load_config(argv: list[str] | None = None) -> SweepConfig:
    """The defaults, then an optional first positional YAML, then ``key=value`` overrides.

    Raises ConfigError naming the key path for unknown keys, bad types and bad values.
    """
    argv = list(argv or [])
    node = OmegaConf.structured(SweepConfig)
    if argv and "=" not in argv[0]:
        path = _find_file(argv.pop(0))
        node = _merge(node, _take_models(_read_yaml(path), str(path)), str(path))
    bad = [a for a in argv if "=" not in a]
    if bad and bad[0].startswith("-"):
        _find_file(bad[0])  # raises: names the flag
    if bad:
        raise ConfigError(
            f"{bad[0]}: expected key=value (only the first argument may be a YAML file)"
        )
    _check_list_syntax(argv)
    try:
        dot = OmegaConf.from_dotlist(argv)
    except OmegaConfBaseException as exc:
        raise _omega_error(exc, "command line") from exc
    given = OmegaConf.to_container(dot, resolve=False)
    _check(not (isinstance(given, dict) and "command_line" in given) and len(node.command_line) == 0,
           "command_line", "is filled from the command line's keys; do not set it")
    node = _merge(node, _take_models(given, "command line"), "command line")
    _check_ranges(node)
    cfg = OmegaConf.to_object(node)
    assert isinstance(cfg, SweepConfig)
    cfg = replace(cfg, command_line=tuple(command_line_keys(given)))
    _check_values(cfg)
    # one place for the sandbox limits: the budgets a harness gets carry the ``limits`` section
    return replace(cfg, budgets=replace(cfg.budgets, exec_limits=cfg.limits))


def command_line_keys(given: Any) -> list[str]:
    """``section.key`` for every sampling/budgets/limits field the dotlist set: these win over
    the model's and the method's YAML (see :func:`effective_sampling`)."""
    if not isinstance(given, dict):
        return []
    return sorted(f"{sec}.{key}" for sec in PINNABLE if isinstance(given.get(sec), dict) for key in given[sec])


LIST_KEYS = ("models", "methods", "benchmarks")


def _check_list_syntax(argv: list[str]) -> None:
    """``models=sim-small`` (no brackets) is the commonest slip; say the fix, not OmegaConf's
    'AnyNode is not a ListConfig'."""
    for arg in argv:
        key, _, value = arg.partition("=")
        key = key.strip().lstrip("+")
        if key in LIST_KEYS and not value.strip().startswith("["):
            raise ConfigError(f"{key}: expected a list in brackets, e.g. {key}=[{value.strip() or '...'}] "
                              f"(several: {key}=[a,b]) [command line]")


def _find_file(arg: str) -> Path:
    if arg.startswith("-"):  # `opteval sweep --verbose`: no flags but --help; say so, not "no such file"
        raise ConfigError(f"{arg}: not an option of opteval sweep (its only option is --help; settings are "
                          "key=value, e.g. progress.interval_s=10)")
    p = Path(arg).expanduser()
    for cand in (p, configs_dir().parent / p, configs_dir() / p):
        if cand.is_file():
            return cand.resolve()
    key = arg.partition(".")[0]
    if not p.suffix and "/" not in arg:  # `opteval sweep models [..]`: a key without its `=`
        keys = [str(k) for k in OmegaConf.structured(SweepConfig).keys()]
        close = difflib.get_close_matches(key, keys, n=1)
        if close:
            example = f"{close[0]}=[...]" if close[0] in LIST_KEYS else f"{arg}=VALUE"
            raise ConfigError(f"{arg}: missing '=' (and no config file of that name): settings are "
                              f"key=value, e.g. {example}")
    raise ConfigError(f"{arg}: no such config file (first positional argument)")


def _positive(node: DictConfig, keys: list[str], *, zero_ok: bool = False, nullable: bool = False) -> None:
    for key in keys:
        v = OmegaConf.select(node, key)
        if v is None and nullable:
            continue
        ok = v is not None and (v >= 0 if zero_ok else v > 0)
        _check(ok, key, f"must be {'>= 0' if zero_ok else '> 0'}, got {v!r}")


def _check_ranges(node: DictConfig) -> None:
    """Ranges OmegaConf's types cannot express, checked on the merged tree (before the
    opteval.evalcore dataclasses' own checks could fail without a key path)."""
    _positive(node, ["sweep.commit_batch", "sweep.commit_interval_s", "sweep.lease_stale_s", "sweep.reject_streak",
                     "samples.default",
                     "sampling.max_tokens", "budgets.max_turns", "budgets.max_calls", "budgets.max_output_tokens",
                     "budgets.max_total_tokens", "budgets.summary_chars", "budgets.summary_actions",
                     "limits.wall_s", "limits.cpu_s", "limits.memory_mb", "limits.max_procs",
                     "limits.output_bytes", "limits.file_mb", "cluster.executor_cpus",
                     "cluster.workers", "cluster.worker_concurrency",
                     "cluster.max_in_flight_per_model", "cluster.trajectory_timeout_s",
                     "serving.ready_timeout_s", "serving.request_timeout_s", "progress.interval_s",
                     "tracking.timeout_s"])
    _positive(node, ["serving.cpus_per_gpu", "serving.ingress_cpus", "serving.standin_ttft_s",
                     "tracking.traces_per_cell"], zero_ok=True)
    _positive(node, ["limit_problems", "cluster.executors", "tracking.max_traces"], nullable=True)
    _positive(node, ["sampling.temperature", "sampling.base_seed", "cluster.retries",
                     "cluster.retry_backoff_s", "cluster.sandbox_pool"], zero_ok=True)
    _positive(node, ["serving.gpus"], zero_ok=True, nullable=True)
    _check(node.budgets.exec_limits == OmegaConf.structured(Limits), "budgets.exec_limits",
           "the sandbox limits are the `limits` section; set limits.<key> instead")


def _check_values(cfg: SweepConfig) -> None:
    """Names and cross-references OmegaConf's types cannot express."""
    _check(bool(_NAME_RE.match(cfg.sweep.name)), "sweep.name",
           f"{cfg.sweep.name!r} is not a valid sweep name (letters, digits, '.', '_', '-')")
    _check(bool(cfg.sweep.output_dir), "sweep.output_dir", "must not be empty")
    _check(bool(cfg.serving.http_host.strip()), "serving.http_host", "must not be empty")
    _check(cfg.tracking.traces in TRACE_MODES, "tracking.traces",
           f"{cfg.tracking.traces!r} is not one of {', '.join(TRACE_MODES)}{_hint(cfg.tracking.traces, list(TRACE_MODES))}")
    _check(cfg.serving.route in ROUTES, "serving.route",
           f"{cfg.serving.route!r} is not one of {', '.join(ROUTES)}{_hint(cfg.serving.route, list(ROUTES))}")
    _check(0 < cfg.sampling.top_p <= 1, "sampling.top_p", f"must be in (0, 1], got {cfg.sampling.top_p}")
    _check(cfg.sampling.top_k == -1 or cfg.sampling.top_k >= 1, "sampling.top_k",
           f"must be -1 (off) or >= 1, got {cfg.sampling.top_k}")
    _check(1 <= cfg.serving.http_port <= 65535, "serving.http_port", f"not a port: {cfg.serving.http_port}")
    _check(cfg.grading.profile in PROFILES, "grading.profile",
           f"unknown grading profile {cfg.grading.profile!r}{_hint(cfg.grading.profile, list(PROFILES))}")
    lists: tuple[tuple[str, Iterable[str], Callable[[str], bool]], ...] = (
        ("models", cfg.models, _model_exists), ("methods", cfg.methods, _method_exists),
        ("benchmarks", cfg.benchmarks, benchmark_known))
    for section, given, exists in lists:
        names = list(given)
        _check(len(names) > 0, section, "must name at least one")
        for i, name in enumerate(names):
            _check(names.index(name) == i, f"{section}[{i}]", f"{name!r} is listed twice")
            if not exists(name):
                raise ConfigError(f"{section}[{i}]: no configs/{section}/{name}.yaml{_hint(name, _known(section))}")
    for model, ms in cfg.model_methods.items():
        _check(model in cfg.models, f"model_methods.{model}", "is not in models")
        bad = [m for m in ms if m not in cfg.methods]
        _check(not bad, f"model_methods.{model}", f"{bad} not in methods")
    try:
        validate_solvers(list(cfg.solvers))
    except ValueError as exc:
        raise ConfigError(f"solvers: {exc}") from None
    _check_method_budgets(cfg)
    _check_budget_match(cfg)
    for slug, n in cfg.samples.per_benchmark.items():
        _check(benchmark_known(slug), f"samples.per_benchmark.{slug}",
               f"unknown benchmark{_hint(slug, _known('benchmarks'))}")
        _check(n is not None and n > 0, f"samples.per_benchmark.{slug}", f"must be > 0, got {n!r}")
    # Referenced configs must themselves be valid (their errors name their files).
    for name in cfg.models:
        model_config(name)
    for name in cfg.methods:
        method_config(name)
    for slug in cfg.benchmarks:
        benchmark_config(slug)


def _check_budget_match(cfg: SweepConfig) -> None:
    """``budgets.match`` (tokens | calls) with ``budgets.match_to``: a positive number or a method."""
    match, to = cfg.budgets.match, cfg.budgets.match_to
    if match is None:
        _check(to is None, "budgets.match_to", "is set but budgets.match is not (tokens or calls)")
        return
    _check(match in MATCH_KINDS, "budgets.match", f"must be one of {', '.join(MATCH_KINDS)}, got {match!r}")
    _check(to is not None and str(to) != "", "budgets.match_to", "is needed with budgets.match: a number or a method")
    text = str(to)
    if text.isdigit():
        _check(int(text) > 0, "budgets.match_to", "must be positive")
    else:
        _check(_method_exists(text), "budgets.match_to",
               f"is neither a number nor a method (no configs/methods/{text}.yaml)")


def _check_method_budgets(cfg: SweepConfig) -> None:
    """``method_budgets.<method>.<key>``: a method of the sweep, a budget key, a positive integer."""
    keys = [f.name for f in fields(MethodBudgetOverrides)]
    for method, over in cfg.method_budgets.items():
        _check(method in cfg.methods, f"method_budgets.{method}",
               f"not a method of this sweep{_hint(method, list(cfg.methods))}")
        _check(isinstance(over, Mapping), f"method_budgets.{method}", "must be a mapping of budget keys")
        for key, v in over.items():
            _check(key in keys, f"method_budgets.{method}.{key}", f"unknown budget key{_hint(key, keys)}")
            _check(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"method_budgets.{method}.{key}",
                   f"must be an integer > 0, got {v!r}")


def grading_profiles() -> tuple[str, ...]:
    return tuple(PROFILES)
