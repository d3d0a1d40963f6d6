"""Preparation: config -> problems -> ledger and committed keys -> plan, and the run parameters.

Why it is its own module: ``plan_only`` and every read-only tool need exactly this and
must not import Ray, so neither this module nor anything it imports does.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from opteval.evalcore.harnesses.base import Budgets
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.problems import AnswerKey, ProblemSpec, load_benchmark
from opteval.sweepcore import config as cconf
from opteval.sweepcore.config import MethodConfig, SweepConfig
from opteval.sweepcore.dependencies import resolved_versions
from opteval.sweepcore.ledger import Ledger
from opteval.sweepcore.plan import Plan, PlanItem, check_plan, expand_plan, plan_counts, remaining


@dataclass
class Prepared:
    """Everything the driver knows before dispatching; built without importing Ray."""

    cfg: SweepConfig
    model_cfgs: dict[str, dict[str, Any]]  # as plain data: what serving deploys and workers build clients from
    method_cfgs: dict[str, MethodConfig]
    problems: dict[tuple[str, str], ProblemSpec]
    answers: dict[str, AnswerKey]
    plan: Plan  # model-major
    ledger: Ledger
    committed: pa.Array  # the ledger's own array of committed keys (Ledger.committed_array)

    # model -> one line, for each model whose dispatch was stopped as a configuration error
    # (opteval.cluster.driver.rejections); the sweep then exits 2 (opteval.cluster.driver.outcome)
    config_errors: dict[str, str] = field(default_factory=dict)
    _params: dict[tuple[str, str], tuple[Sampling, Budgets]] = field(default_factory=dict)
    _profiles: dict[str, str] = field(default_factory=dict)
    _pending: Sequence[PlanItem] | None = None

    @property
    def pending(self) -> Sequence[PlanItem]:
        """The plan minus committed keys, computed once (10x the paper: millions of items)."""
        if self._pending is None:
            self._pending = remaining(self.plan, self.committed)
        return self._pending

    def run_params(self, model: str, method: str) -> tuple[Sampling, Budgets]:
        """(Sampling, Budgets) for a model x method, computed once (config reads are not free)."""
        if (model, method) not in self._params:
            self._params[(model, method)] = (cconf.effective_sampling(self.cfg, model),
                                             cconf.effective_budgets(self.cfg, method))
        return self._params[(model, method)]

    def profile(self, benchmark: str) -> str:
        """Grading profile of a benchmark (its yaml's override, else the sweep's)."""
        if benchmark not in self._profiles:
            self._profiles[benchmark] = cconf.grading_profile_for(self.cfg, benchmark)
        return self._profiles[benchmark]


def load_problems(cfg: SweepConfig) -> tuple[dict[tuple[str, str], ProblemSpec], dict[str, AnswerKey], dict[str, list[str]]]:
    """Problems (first ``limit_problems`` of each benchmark) and their answer keys."""
    problems, answers, ids = {}, {}, {}
    limit = cfg.limit_problems
    for slug in cfg.benchmarks:
        specs, key = load_benchmark(slug, cfg.data.dir)
        specs = specs[:limit] if limit is not None else specs
        answers[slug] = key
        ids[slug] = [s.id for s in specs]
        problems.update({(slug, s.id): s for s in specs})
    return problems, answers, ids


def prepare(cfg: SweepConfig, read_only: bool = False) -> Prepared:
    """Config -> problems -> ledger (refusing a changed config) and its committed keys -> plan.

    The ledger is opened before the plan is expanded: reading the committed keys needs about
    twice their bytes for a moment (to sort them), and at 10x the paper that moment no longer
    comes on top of the plan's keys (a peak of 1.66 GB became 1.23 to 1.37 with nine keys in ten
    committed, ``bench/bench_plan.py --scale 10 --committed 0.9``).
    The plan is checked first (:func:`check_plan`), so a plan that cannot be made never
    touches the ledger.
    """
    model_cfgs = {m: cconf.as_plain(cconf.model_config(m)) for m in cfg.models}
    method_cfgs = {m: cconf.method_config(m) for m in cfg.methods}
    problems, answers, ids = load_problems(cfg)
    check_plan(cfg, ids)
    ledger = open_ledger(cfg, read_only=read_only)
    try:
        committed = ledger.committed_array()
        plan = expand_plan(cfg, ids)
        if not read_only:
            record_plan(ledger, cfg, plan)
    except BaseException:
        ledger.close()
        raise
    return Prepared(cfg, model_cfgs, method_cfgs, problems, answers, plan, ledger, committed)


def open_ledger(cfg: SweepConfig, read_only: bool = False) -> Ledger:
    """The sweep's ledger (refuses a changed config unless ``sweep.allow_config_change``)."""
    resolved = cconf.resolved(cfg)
    sw = cfg.sweep
    return Ledger.open(sw.output_dir, sw.name, resolved, cconf.sweep_fingerprint(resolved),
                       sw.allow_config_change, read_only=read_only,
                       lease_stale_s=None if read_only else sw.lease_stale_s,
                       wait_for_lease=sw.wait_for_lease, repair=sw.repair)


def record_plan(led: Ledger, cfg: SweepConfig, plan: Sequence[PlanItem]) -> None:
    """The plan and the dependencies in the ledger, then the repairs decided at open."""
    led.record_plan(plan)
    led.record_manifest_section("dependencies", resolved_versions())  # what produced the scores
    _after_open(led, cfg, plan)


def _after_open(led: Ledger, cfg: SweepConfig, plan: Sequence[PlanItem]) -> None:
    """Repairs and re-runs decided at open: name the keys quarantined files held; with
    ``sweep.retry_errors`` release committed ``error`` rows so they run again."""
    led.log_quarantined(plan)
    if cfg.sweep.retry_errors:
        planned = {it.key for it in plan}
        released = [k for k in led.supersede_errors() if k in planned]
        if released:
            print(f"[sweep] retry_errors: {len(released)} committed error row(s) superseded; they run again",
                  flush=True)


def plan_report(prep: Prepared) -> str:
    """The ``plan_only`` output: total, per model x method, already committed."""
    todo = plan_counts(prep.pending)  # plan keys are unique: committed = planned - still to run
    lines = [f"planned {len(prep.plan)} trajectories"]
    for (model, method), n in plan_counts(prep.plan).items():
        lines.append(f"  {model} x {method}: {n} planned, {n - todo.get((model, method), 0)} committed")
    lines.append(f"already committed: {len(prep.plan) - len(prep.pending)}; "
                 f"to run: {len(prep.pending)}")
    return "\n".join(lines)
