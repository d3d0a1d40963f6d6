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
not read. The ``sampling``, ``budgets`` and ``limits`` sections are evalcore's own
``Sampling``, ``Budgets`` and ``Limits``: what a harness and the sandbox receive is what
the config held, with the model's and the method's overrides put on top by
:func:`overlay` (the only overlay).

Model, method and benchmark configs are separate YAML files under the configs
directory (``configs/`` beside the package, or ``$OPTEVAL_CONFIGS``), each with its
own schema; their errors name the file.

No Ray import here: ``plan_only`` runs must not start or import Ray.
"""
from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from evalcore.extraction import PROFILES as EXTRACTION_PROFILES
from evalcore.grading import PROFILES
from evalcore.harnesses._common import STAGE_SAMPLING_KEYS, merge_body
from evalcore.harnesses.base import Budgets
from evalcore.harnesses.registry import all_harnesses, get_harness
from evalcore.models.base import Sampling
from evalcore.models.clients import ReplaySection
from evalcore.models.openai_backend import OpenAISection
from evalcore.problems import REGISTRY, register_local_benchmark
from evalcore.records import config_fingerprint
from evalcore.sandbox.types import Limits
from sweepcore.backends import BACKENDS, Where, backend_of
from sweepcore.config_errors import ConfigError
from sweepcore.config_errors import hint as _hint
from sweepcore.endpoint import ROUTES
from sweepcore.model_sections import VllmSection

CONFIGS_ENV = "OPTEVAL_CONFIGS"
# Top-level sections that never change a trajectory's outcome: they are left out of
# the fingerprint and of the changed-config check (resuming with more workers is fine).
TRACE_MODES = ("sample", "all", "none")  # tracking.traces: which trajectories become MLflow traces (sweepcore/tracking/traces.py)
# ``command_line`` (which keys the command line set) is among them: what it decides is the effective
# sampling/budgets/limits, which every item fingerprint hashes; the manifest still records it.
NON_OUTCOME_KEYS = ("sweep", "plan_only", "data", "cluster", "serving", "tracking", "progress", "command_line")
# Fields of the evalcore sections that the sweep schema gained after fingerprints were first
# recorded. At their default they stay out of the resolved config (and so out of every
# fingerprint), so existing sweeps keep their keys; any other value is hashed.
ADDED_FIELDS = (("sampling", "extra_body"), ("budgets", "max_output_tokens"))
# Top-level keys added later, left out of the resolved config while empty (same reason).
ADDED_TOP = ("method_budgets", "command_line")
# The sections whose command-line values win over the model/method YAML.
PINNABLE = ("sampling", "budgets", "limits")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
T = TypeVar("T")


# -- schemas ----------------------------------------------------------------------------
# Frozen: a loaded config is a value. The defaults here are the only ones.


@dataclass(frozen=True)
class SweepSection:
    name: str = "demo"
    output_dir: str = "results"
    allow_config_change: bool = False
    commit_batch: int = 32
    commit_interval_s: float = 5.0
    wait_for_lease: bool = False
    lease_stale_s: float = 60.0
    repair: bool = False
    retry_errors: bool = False
    # the same HTTP 400 text this many calls in a row of one model stops its dispatch as a
    # configuration error (cluster.driver.rejections)
    reject_streak: int = 8
    allow_errors: bool = False  # true: a sweep that ends with status=error rows exits 0, not 4


@dataclass(frozen=True)
class SamplesSection:
    default: int = 2
    per_benchmark: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DataSection:
    dir: str | None = None
    base_url: str | None = None
    fetch_missing: bool = True


@dataclass(frozen=True)
class GradingSection:
    profile: str = "optagentbench"


@dataclass(frozen=True)
class ClusterSection:
    address: str | None = None
    executors: int | None = None
    executor_cpus: float = 1.0
    sandbox_pool: int = 2
    workers: int = 2
    worker_concurrency: int = 64
    max_in_flight_per_model: int = 64
    retries: int = 2
    retry_backoff_s: float = 5.0
    trajectory_timeout_s: float = 10800.0


@dataclass(frozen=True)
class ServingSection:
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    ready_timeout_s: float = 900.0
    request_timeout_s: float = 1800.0
    prefix_cache_routing: bool = False
    prefix_router_kwargs: dict[str, Any] = field(default_factory=dict)
    gpus: int | None = None
    accelerator_type: str | None = None
    cpus_per_gpu: float = 1.0
    ingress_cpus: float = 1.0
    standin: bool = False
    route: str = "handle"


@dataclass(frozen=True)
class TrackingSection:
    enabled: bool = True
    uri: str | None = None
    experiment: str = "opteval"
    timeout_s: float = 30.0
    traces: str = "sample"
    traces_per_cell: int = 3


@dataclass(frozen=True)
class ProgressSection:
    interval_s: float = 10.0


@dataclass(frozen=True)
class SweepConfig:
    sweep: SweepSection = field(default_factory=SweepSection)
    plan_only: bool = False
    models: list[str] = field(default_factory=lambda: ["sim-small"])
    methods: tuple[str, ...] = ("direct", "opticycle", "optistate")
    # model -> the methods it runs (a subset of ``methods``); a model not listed runs all of them
    model_methods: dict[str, list[str]] = field(default_factory=dict)
    benchmarks: tuple[str, ...] = ("sample",)
    samples: SamplesSection = field(default_factory=SamplesSection)
    limit_problems: int | None = None
    data: DataSection = field(default_factory=DataSection)
    grading: GradingSection = field(default_factory=GradingSection)
    sampling: Sampling = field(default_factory=Sampling)
    # ``budgets.exec_limits`` is not set here: load_config fills it from ``limits``
    budgets: Budgets = field(default_factory=Budgets)
    limits: Limits = field(default_factory=Limits)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    serving: ServingSection = field(default_factory=ServingSection)
    # what the sandbox pre-imports and the prompts offer (evalcore.solvers); the paper's set
    solvers: tuple[str, ...] = ("scipy", "pulp", "pyscipopt")
    tracking: TrackingSection = field(default_factory=TrackingSection)
    progress: ProgressSection = field(default_factory=ProgressSection)
    # method -> {budget key: value} over that method's YAML (``method_budgets.opticycle.max_calls=2``)
    method_budgets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # filled by load_config, never by hand: the sampling/budgets/limits keys the command line set,
    # which win over the model's and the method's YAML (the precedence rule, configs/sweep.yaml)
    command_line: tuple[str, ...] = ()


@dataclass
class ModelSamplingOverrides:
    """A model's overrides of the sweep's sampling; None = keep the sweep's value."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    base_seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


# OpenAISection and ReplaySection are the clients' own (evalcore.models.clients): one schema
# for the model YAML and the flat config make_model takes.


@dataclass
class PromptSection:
    """A model's prompt contract (evalcore.models.contract.PromptContract)."""

    system: str = "keep"  # keep | into_user
    system_prefix: str = ""  # the model's own system prompt, before the harness's


@dataclass
class ModelConfig:
    """A model: ``configs/models/<name>.yaml``, a YAML anywhere, or a mapping in ``models=[...]``.
    ``backend`` picks the entry of ``sweepcore.backends.BACKENDS`` that checks, serves and calls it;
    only that backend's section may be set. ``backend`` has no default: a config without one is an
    error naming the choices (it used to become a simulated model silently)."""

    name: str = ""
    backend: str | None = None
    family: str = "simulated"
    size_b: float | None = None
    # SimSkill fields and SimulatedModel settings (sweepcore.backends.simulated checks them)
    simulated: dict[str, Any] = field(default_factory=dict)
    openai: OpenAISection = field(default_factory=OpenAISection)
    vllm: VllmSection = field(default_factory=VllmSection)
    replay: ReplaySection = field(default_factory=ReplaySection)
    sampling: ModelSamplingOverrides = field(default_factory=ModelSamplingOverrides)
    prompt: PromptSection = field(default_factory=PromptSection)


@dataclass(frozen=True)
class MethodBudgetOverrides:
    """A method's budgets over the sweep's (``Budgets`` fields; None = keep the sweep's)."""

    max_turns: int | None = None
    max_calls: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    summary_chars: int | None = None
    summary_actions: int | None = None


@dataclass(frozen=True)
class MethodLimitsOverrides:
    """A method's sandbox limits over the sweep's ``limits`` (e.g. ORLM's 300 s)."""

    wall_s: float | None = None
    cpu_s: float | None = None
    memory_mb: int | None = None
    max_procs: int | None = None
    output_bytes: int | None = None
    file_mb: int | None = None


@dataclass(frozen=True)
class MethodConfig:
    name: str = ""
    harness: str = "direct"
    extraction: str = "submit"
    budgets: MethodBudgetOverrides = field(default_factory=MethodBudgetOverrides)
    limits: MethodLimitsOverrides = field(default_factory=MethodLimitsOverrides)
    # per-stage request overrides: {stage: {temperature, top_p, top_k, max_tokens, extra_body}}
    stages: dict[str, Any] = field(default_factory=dict)
    # the harness's own parameters (e.g. semopt's search and critic), handed to it as ctx.params
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkConfig:
    slug: str = ""
    samples: int | None = None  # default per-problem samples for this benchmark
    grading: str | None = None  # grading profile override
    # a local benchmark: its JSONL (rows id, question, answer; relative to the YAML's folder) and
    # the file's optional sha256, checked on every load; unset for the pinned public benchmarks
    path: str | None = None
    sha256: str | None = None


# -- locations ---------------------------------------------------------------------------


def configs_dir() -> Path:
    """Where the YAML configs are: ``$OPTEVAL_CONFIGS``; else a ``configs/`` folder of the user's in
    the working directory (one holding ``sweep.yaml`` and ``methods/``); else the checkout's
    ``configs/`` beside the package; else the copy shipped in the wheel (``opteval_configs``), so
    an installed opteval runs from any folder. A folder replaces the shipped one whole."""
    env = os.environ.get(CONFIGS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    try:
        here: list[Path] = [Path.cwd() / "configs"]
    except OSError:  # a process whose working directory was removed (a Ray worker's temp dir)
        here = []
    for cand in (*here, Path(__file__).resolve().parents[2] / "configs"):
        if (cand / "sweep.yaml").is_file() and (cand / "methods").is_dir():
            return cand.resolve()
    import opteval_configs  # the wheel's copy (an editable install maps it to the checkout's configs/)

    return Path(opteval_configs.__file__).resolve().parent


def _known(kind: str) -> list[str]:
    d = configs_dir() / kind
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


# -- OmegaConf plumbing ---------------------------------------------------------------------


def _omega_error(exc: OmegaConfBaseException, where: str, node: Any = None) -> ConfigError:
    """Turn an OmegaConf error into a ConfigError that starts with the key path."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or "<config>"
    msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
    if "not in struct" in msg or "Key '" in msg and "not in" in msg:
        parent = str(key).rsplit(".", 1)[0] if "." in str(key) else ""
        known = _keys_at(node, parent) if node is not None else []
        leaf = str(key).rsplit(".", 1)[-1]
        msg = f"unknown key{_hint(leaf, known) if known else ''}"
    return ConfigError(f"{key}: {msg} [{where}]")


def _keys_at(node: Any, dotted: str) -> list[str]:
    try:
        sub = OmegaConf.select(node, dotted) if dotted else node
        return sorted(str(k) for k in sub.keys()) if isinstance(sub, DictConfig) else []
    except OmegaConfBaseException:
        return []


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _merge(base: DictConfig, data: Any, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, data)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise _omega_error(exc, where, base) from exc


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
    p = Path(arg).expanduser()
    for cand in (p, configs_dir().parent / p, configs_dir() / p):
        if cand.is_file():
            return cand.resolve()
    raise ConfigError(f"{arg}: no such config file (first positional argument)")


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def _positive(node: DictConfig, keys: list[str], *, zero_ok: bool = False, nullable: bool = False) -> None:
    for key in keys:
        v = OmegaConf.select(node, key)
        if v is None and nullable:
            continue
        ok = v is not None and (v >= 0 if zero_ok else v > 0)
        _check(ok, key, f"must be {'>= 0' if zero_ok else '> 0'}, got {v!r}")


def _check_ranges(node: DictConfig) -> None:
    """Ranges OmegaConf's types cannot express, checked on the merged tree (before the
    evalcore dataclasses' own checks could fail without a key path)."""
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
    _positive(node, ["serving.cpus_per_gpu", "serving.ingress_cpus", "tracking.traces_per_cell"], zero_ok=True)
    _positive(node, ["limit_problems", "cluster.executors"], nullable=True)
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
    from evalcore.solvers import validate as validate_solvers

    try:
        validate_solvers(list(cfg.solvers))
    except ValueError as exc:
        raise ConfigError(f"solvers: {exc}") from None
    _check_method_budgets(cfg)
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


def _model_exists(name: str) -> bool:
    return name in _GIVEN or (configs_dir() / "models" / f"{name}.yaml").is_file()


def _method_exists(name: str) -> bool:
    return (configs_dir() / "methods" / f"{name}.yaml").is_file()


def benchmark_known(slug: str) -> bool:
    """A slug with a configs/benchmarks yaml, or one evalcore.problems.REGISTRY knows."""
    return (configs_dir() / "benchmarks" / f"{slug}.yaml").is_file() or slug in REGISTRY


# -- model / method / benchmark configs ----------------------------------------------------------


def _load_entity(kind: str, name: str, schema: type, name_key: str) -> DictConfig:
    path = configs_dir() / kind / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"{name}: no {path}{_hint(name, _known(kind))}")
    node = _merge(OmegaConf.structured(schema), _read_yaml(path), str(path))
    OmegaConf.set_readonly(node, False)  # a frozen schema's node: the name is filled in below
    given = node[name_key]
    if given and given != name:
        raise ConfigError(f"{name_key}: {given!r} differs from the file name {name!r} [{path}]")
    node[name_key] = name
    return node


_CACHE: dict[tuple[Any, ...], Any] = {}


def _cached(kind: str, name: str, build: Callable[[str], T]) -> T:
    """Validated entity configs are cached per file state and returned read-only (frozen
    dataclasses, or a read-only DictConfig): planning asks for them hundreds of times and
    OmegaConf construction is slow."""
    path = configs_dir() / kind / f"{name}.yaml"
    try:
        st = path.stat()
        sig: tuple[Any, ...] = (st.st_mtime_ns, st.st_size)
    except OSError:
        sig = (None,)
    key = (kind, name, str(path), *sig)
    node = _CACHE.get(key)
    if node is None:
        node = build(name)
        if isinstance(node, DictConfig):
            OmegaConf.set_readonly(node, True)
        _CACHE[key] = node
    return node


def model_config(name: str) -> DictConfig:
    """A model given in the sweep config (a YAML path or a mapping in ``models``), else
    ``configs/models/<name>.yaml``; validated (errors name the file and key); read-only."""
    given = _GIVEN.get(name)
    if given is not None:
        return given
    return _cached("models", name, _build_model_config)


def _build_model_config(name: str) -> DictConfig:
    node = _load_entity("models", name, ModelConfig, "name")
    _check_model(node, _where(str(configs_dir() / "models" / f"{name}.yaml")))
    return node


def _where(source: str, prefix: str = "") -> Where:
    return Where(source, prefix)


def _check_model(node: DictConfig, where: Where) -> None:
    """The one validation of a model config: the schema typed it; its backend checks its own
    section; another backend's section left at its defaults (set, it would do nothing)."""
    from evalcore.models.contract import SYSTEM_MODES

    if node.backend is None:
        raise where.error("backend", f"missing: say which backend serves this model, one of {sorted(BACKENDS)}")
    backend = BACKENDS.get(str(node.backend))
    if backend is None:
        raise where.error("backend", f"unknown backend {node.backend!r}{_hint(str(node.backend), list(BACKENDS))}")
    plain = as_plain(node)
    defaults = as_plain(OmegaConf.structured(ModelConfig))
    for other in BACKENDS.values():
        sec = other.section
        if sec and other is not backend and plain.get(sec) != defaults.get(sec):
            raise where.error(sec, f"set, but backend is {backend.name!r}: only the {backend.section!r} "
                                   f"section takes effect")
    backend.check(plain, where)
    if node.prompt.system not in SYSTEM_MODES:
        raise where.error("prompt.system", f"must be one of {list(SYSTEM_MODES)}, got {node.prompt.system!r}")


# -- models given in the sweep config (a YAML anywhere, or inline) -----------------------------

# name -> validated model config, for models given by path or inline in this process's
# sweep config; model_config() answers them first. A given model's fingerprint covers its
# whole config, as a file model's does, so a resume with a changed one is caught.
_GIVEN: dict[str, DictConfig] = {}
_MODEL_SUFFIXES = (".yaml", ".yml")


def _take_models(data: Any, where: str) -> Any:
    """``models`` of a config layer with every path or mapping entry registered and replaced by
    its name (what the plan, the ledger keys and the reports use)."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        return data
    out = dict(data)
    out["models"] = [_given_model(entry, i, where) for i, entry in enumerate(data["models"])]
    return out


def _given_model(entry: Any, i: int, where: str) -> Any:
    key = f"models[{i}]"
    if isinstance(entry, dict):
        return _register(entry, _where(where, f"{key}."), None)
    if isinstance(entry, str) and (entry.endswith(_MODEL_SUFFIXES) or "/" in entry):
        path = Path(entry).expanduser()
        if not path.is_file():
            raise ConfigError(f"{key}: no such model file {entry!r} (relative to {Path.cwd()}) [{where}]")
        path = path.resolve()
        if path.parent == configs_dir() / "models":
            return path.stem  # one of ours, by its path
        return _register(_read_yaml(path), _where(str(path)), path.stem)
    return entry  # a name: configs/models/<name>.yaml, checked with the others


def _register(data: dict[str, Any], where: Where, default_name: str | None) -> str:
    try:
        node = _merge(OmegaConf.structured(ModelConfig), data, where.source)
    except ConfigError as exc:
        raise ConfigError(f"{where.prefix}{exc}") from None
    name = str(node.name or default_name or "")
    if not name:
        raise where.error("name", "a model given inline needs a name")
    if not _NAME_RE.match(name):
        raise where.error("name", f"{name!r} is not a valid model name (letters, digits, '.', '_', '-')")
    if (configs_dir() / "models" / f"{name}.yaml").is_file():
        raise where.error("name", f"{name!r} is also configs/models/{name}.yaml: give this model another name")
    node.name = name
    _check_model(node, where)
    OmegaConf.set_readonly(node, True)
    _GIVEN[name] = node
    return name


def backend_config(name: str) -> dict[str, Any]:
    """The flat dict ``evalcore.models.make_model`` takes, built from a model config."""
    return flat_backend_config({**as_plain(model_config(name)), "name": name})


def flat_backend_config(model: Mapping[str, Any]) -> dict[str, Any]:
    """A model config as plain data -> the flat dict ``evalcore.models.make_model`` takes.

    simulated: ``{name, backend, skill: {SimSkill fields}, ttft_s, tokens_per_s, ...}``;
    openai: ``{name, backend, base_url, model_id, ...}``; replay: ``{name, backend, path}``
    (unset keys left out). A vllm model is served by the cluster and reached as ``openai``
    at its Serve URL, so it has no backend config of its own here. Pure: Serve replicas
    call it on the dict they were given, without reading config files.
    """
    return backend_of(model).client_config(model)


def method_config(name: str) -> MethodConfig:
    """``configs/methods/<name>.yaml``: harness, extraction profile, budget overrides."""
    return _cached("methods", name, _build_method_config)


def _build_method_config(name: str) -> MethodConfig:
    node = _load_entity("methods", name, MethodConfig, "name")
    path = configs_dir() / "methods" / f"{name}.yaml"
    for section in ("budgets", "limits"):
        for key, v in node[section].items():
            _check(v is None or v > 0, f"{section}.{key} [{path}]", f"must be > 0, got {v!r}")
    for stage, over in node.stages.items():
        _check(isinstance(over, DictConfig), f"stages.{stage} [{path}]", "must be a mapping of request fields")
        bad = sorted(set(over) - set(STAGE_SAMPLING_KEYS))
        _check(not bad, f"stages.{stage}.{bad[0] if bad else ''} [{path}]",
               f"unknown request field; allowed {list(STAGE_SAMPLING_KEYS)}")
    method = OmegaConf.to_object(node)
    assert isinstance(method, MethodConfig)
    try:  # the registry (evalcore.harnesses.registry); ``<module>:<name>`` imports a harness from elsewhere
        get_harness(method.harness)
    except KeyError:
        known = sorted(all_harnesses())
        _check(False, f"harness [{path}]", f"unknown harness {method.harness!r}{_hint(method.harness, known)}")
    _check(method.extraction in EXTRACTION_PROFILES, f"extraction [{path}]",
           f"unknown extraction profile {method.extraction!r}{_hint(method.extraction, sorted(EXTRACTION_PROFILES))}")
    _check_params(method, path)
    return method


def _check_params(method: MethodConfig, path: Path) -> None:
    """A harness that states its parameters (``check_params``) validates ``params`` here, so a
    typo fails at config load with the file named, not in every trajectory."""
    harness = get_harness(method.harness)  # known: the method check above found it
    check = getattr(harness, "check_params", None)
    if check is not None:
        try:
            check(as_plain(method.params))
        except ValueError as exc:
            raise ConfigError(f"{exc} [{path}]") from None


def benchmark_config(slug: str) -> BenchmarkConfig:
    """``configs/benchmarks/<slug>.yaml``; a registry slug without a file gets the defaults
    (a ``<name>@sirl`` variant inherits ``<name>``'s sample count)."""
    return _cached("benchmarks", slug, _build_benchmark_config)


def _build_benchmark_config(slug: str) -> BenchmarkConfig:
    path = configs_dir() / "benchmarks" / f"{slug}.yaml"
    if path.is_file():
        bench = OmegaConf.to_object(_load_entity("benchmarks", slug, BenchmarkConfig, "slug"))
        assert isinstance(bench, BenchmarkConfig)
    elif slug in REGISTRY:
        base = slug.split("@", 1)[0]
        inherited = base != slug and (configs_dir() / "benchmarks" / f"{base}.yaml").is_file()
        bench = BenchmarkConfig(slug=slug, samples=benchmark_config(base).samples if inherited else None)
    else:
        raise ConfigError(f"{slug}: no {path}{_hint(slug, _known('benchmarks'))}")
    _check(bench.samples is None or bench.samples > 0, f"samples [{path}]", f"must be > 0, got {bench.samples!r}")
    if bench.grading is not None:
        _check(bench.grading in PROFILES, f"grading [{path}]",
               f"unknown grading profile {bench.grading!r}{_hint(bench.grading, list(PROFILES))}")
    if bench.path is not None:
        _register_local(bench, path)
    else:
        _check(bench.sha256 is None, f"sha256 [{path}]", "only a local benchmark (path:) takes a sha256")
        _check(slug in REGISTRY, f"path [{path}]",
               f"missing: {slug!r} is not a pinned benchmark{_hint(slug, sorted(REGISTRY))}, so its YAML must "
               f"give path: to a JSONL of id, question, answer")
    return bench


def _register_local(bench: BenchmarkConfig, yaml_path: Path) -> None:
    """``path:`` (relative: to the YAML's folder) -> evalcore.problems' registry."""
    assert bench.path is not None
    file = Path(bench.path).expanduser()
    file = file if file.is_absolute() else (yaml_path.parent / file).resolve()
    _check(file.is_file(), f"path [{yaml_path}]", f"no such file {str(file)!r}")
    if bench.sha256 is not None:
        _check(re.fullmatch(r"[0-9a-f]{64}", bench.sha256) is not None, f"sha256 [{yaml_path}]",
               f"must be 64 lower-case hex digits (quote it in YAML), got {bench.sha256!r}")
    try:
        register_local_benchmark(bench.slug, file, bench.sha256)
    except ValueError as exc:
        raise ConfigError(f"slug [{yaml_path}]: {exc}") from None


# -- derived values (what the driver and tracking use) --------------------------------------------


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
    """``base`` (a frozen evalcore dataclass) with every field ``over`` states (not None) on top;
    mapping fields (``extra_body``) merge key by key. The one overlay: sweep -> model -> method
    (a stage's own request overrides are evalcore's ``stage_sampling``, applied per call)."""
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


def harness_versions(methods: Iterable[str]) -> dict[str, dict[str, str]]:
    """Prompt-file and code hashes of each method's harness (``evalcore.harnesses.version``)."""
    from evalcore.harnesses.version import harness_version  # reads every prompt file: on demand

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
    out["model_configs"] = {m: as_plain(model_config(m)) for m in cfg.models}
    out["method_configs"] = {m: as_plain(method_config(m)) for m in cfg.methods}
    out["benchmark_configs"] = {b: _benchmark_view(benchmark_config(b)) for b in cfg.benchmarks}
    out["harness_versions"] = harness_versions(cfg.methods)
    return out


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
            models[model] = (as_plain(effective_sampling(cfg, model)), as_plain(model_config(model)))
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


def as_plain(node: Any) -> Any:
    """A config value as plain, JSON-able data: dataclasses and DictConfigs become dicts,
    tuples lists; anything else unchanged. The one "to plain data" helper."""
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    if is_dataclass(node) and not isinstance(node, type):
        return {f.name: as_plain(getattr(node, f.name)) for f in fields(node)}
    if isinstance(node, Mapping):
        return {k: as_plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [as_plain(v) for v in node]
    return node
