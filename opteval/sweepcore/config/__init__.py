"""The sweep configuration, by concern: ``schema`` (the frozen dataclasses, the only defaults),
``files`` (where configs live, YAML and OmegaConf plumbing), ``entities`` (model, method and
benchmark configs per name), ``loading`` (``load_config``: defaults, YAML, command line, checks),
``precedence`` (the one overlay and precedence rule) and ``fingerprints`` (the ledger's keys).

Import from here: ``from opteval.sweepcore.config import load_config, SweepConfig, ConfigError``. Modules
inside ``opteval.sweepcore`` import the module that defines a name. ``ConfigError`` and ``VllmSection`` are
leaves outside this package (``opteval.sweepcore.config_errors``, ``opteval.sweepcore.model_sections``) because the
backend specs this package imports use them too: a module inside the package would run this
``__init__`` (and so import the backends) first."""

from opteval.sweepcore.config.entities import (
    backend_config,
    benchmark_config,
    benchmark_known,
    flat_backend_config,
    method_config,
    model_config,
)
from opteval.sweepcore.config.files import CONFIGS_ENV, configs_dir
from opteval.sweepcore.config.fingerprints import (
    ADDED_FIELDS,
    ADDED_TOP,
    NON_OUTCOME_KEYS,
    harness_versions,
    item_fingerprint,
    item_fingerprinter,
    outcome_view,
    resolved,
    sweep_fingerprint,
)
from opteval.sweepcore.config.loading import LIST_KEYS, PINNABLE, command_line_keys, grading_profiles, load_config
from opteval.sweepcore.config.precedence import (
    effective_budgets,
    effective_limits,
    effective_sampling,
    grading_profile_for,
    methods_for,
    overlay,
    overridden,
    pinned,
    samples_for,
)
from opteval.sweepcore.config.schema import (
    TRACE_MODES,
    BenchmarkConfig,
    ClusterSection,
    DataSection,
    GradingSection,
    MethodBudgetOverrides,
    MethodConfig,
    MethodLimitsOverrides,
    ModelConfig,
    ModelSamplingOverrides,
    ProgressSection,
    PromptSection,
    SamplesSection,
    ServingSection,
    SweepConfig,
    SweepSection,
    TrackingSection,
    as_plain,
)
from opteval.sweepcore.config_errors import ConfigError, hint
from opteval.sweepcore.model_sections import VllmSection

__all__ = [
    "ADDED_FIELDS", "ADDED_TOP", "BenchmarkConfig", "CONFIGS_ENV", "ClusterSection", "ConfigError", "DataSection",
    "GradingSection", "LIST_KEYS", "MethodBudgetOverrides", "MethodConfig", "MethodLimitsOverrides", "ModelConfig",
    "ModelSamplingOverrides", "NON_OUTCOME_KEYS", "PINNABLE", "ProgressSection", "PromptSection", "SamplesSection",
    "ServingSection", "SweepConfig", "SweepSection", "TRACE_MODES", "TrackingSection", "VllmSection", "as_plain",
    "backend_config", "benchmark_config", "benchmark_known", "command_line_keys", "configs_dir", "effective_budgets",
    "effective_limits", "effective_sampling", "flat_backend_config", "grading_profile_for", "grading_profiles",
    "harness_versions", "hint", "item_fingerprint", "item_fingerprinter", "load_config", "method_config", "methods_for",
    "model_config", "outcome_view", "overlay", "overridden", "pinned", "resolved", "samples_for", "sweep_fingerprint"
]
