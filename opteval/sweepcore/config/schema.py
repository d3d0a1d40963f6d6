"""The sweep's schema: frozen dataclasses whose defaults are the only ones, and ``as_plain``.

Frozen: a loaded config is a value. ``configs/sweep.yaml`` documents every key with its default
(a test keeps the two equal). The ``sampling``, ``budgets`` and ``limits`` sections are opteval.evalcore's
own ``Sampling``, ``Budgets`` and ``Limits``; a model's ``openai``/``replay`` sections are its
clients' own, its ``vllm`` section is ``opteval.sweepcore.model_sections.VllmSection``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from opteval.evalcore.harnesses.base import Budgets
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.models.clients import ReplaySection
from opteval.evalcore.models.openai_backend import OpenAISection
from opteval.evalcore.sandbox.types import Limits
from opteval.sweepcore.model_sections import VllmSection

TRACE_MODES = ("sample", "all", "none")  # tracking.traces: which trajectories become MLflow traces (sweepcore/tracking/traces.py)


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
    # configuration error (opteval.cluster.driver.rejections)
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
    standin_ttft_s: float = 0.0
    route: str = "handle"


@dataclass(frozen=True)
class TrackingSection:
    enabled: bool = True
    uri: str | None = None
    experiment: str = "opteval"
    timeout_s: float = 30.0
    traces: str = "sample"
    traces_per_cell: int = 3
    max_traces: int | None = None  # at most this many traces a sync (errors first); null: no cap


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
    # what the sandbox pre-imports and the prompts offer (opteval.evalcore.solvers); the paper's set
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


# OpenAISection and ReplaySection are the clients' own (opteval.evalcore.models.clients): one schema
# for the model YAML and the flat config make_model takes.


@dataclass
class PromptSection:
    """A model's prompt contract (opteval.evalcore.models.contract.PromptContract)."""

    system: str = "keep"  # keep | into_user
    system_prefix: str = ""  # the model's own system prompt, before the harness's


@dataclass
class ModelConfig:
    """A model: ``configs/models/<name>.yaml``, a YAML anywhere, or a mapping in ``models=[...]``.
    ``backend`` picks the entry of ``opteval.sweepcore.backends.BACKENDS`` that checks, serves and calls it;
    only that backend's section may be set. ``backend`` has no default: a config without one is an
    error naming the choices (it used to become a simulated model silently)."""

    name: str = ""
    backend: str | None = None
    family: str = "simulated"
    size_b: float | None = None
    # SimSkill fields and SimulatedModel settings (opteval.sweepcore.backends.simulated checks them)
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
