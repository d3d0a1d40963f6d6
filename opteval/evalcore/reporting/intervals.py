"""Problem-level uncertainty for every rate of the report.

A benchmark's k samples of one problem share the question and the model, so they are not
independent: the unit of replication is the problem. Every interval here is a seeded
percentile cluster bootstrap over problems:

* a cell (model, method, benchmark): resample the benchmark's problems with replacement,
  each keeping all its planned samples, and recompute correct / planned;
* Macro: resample each benchmark's problems independently (stratified) and average the
  benchmark rates without weights, as the macro itself does;
* a paired delta: the same problems drawn for both methods (see ``difficulty.paired_table``).

The draw for a benchmark depends only on (seed, benchmark, number of problems), never on
the model or method, so two methods on the same problems see the same resampled problem
sets and a report is reproducible run to run.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from opteval.evalcore.metrics import bootstrap_seed, percentile_interval, problem_bootstrap
from opteval.evalcore.reporting.frame import GROUP, Prepared

Group = tuple[str, str, str]


@dataclass(frozen=True)
class BootstrapSpec:
    """How the report's intervals are drawn: ``n_resamples`` (B), ``seed``, ``confidence``."""

    n_resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if int(self.n_resamples) < 100:
            raise ValueError(f"bootstrap needs at least 100 resamples for a percentile interval, got {self.n_resamples}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")

    def caption(self) -> str:
        return (f"{round(100 * self.confidence)}% percentile cluster bootstrap over problems "
                f"(B={self.n_resamples}, seed {self.seed})")

    def as_dict(self) -> dict[str, Any]:
        return {"method": "percentile cluster bootstrap over problems", "confidence": self.confidence,
                "n_resamples": int(self.n_resamples), "seed": int(self.seed),
                "macro": "benchmarks resampled independently (stratified), unweighted mean"}


@dataclass(frozen=True)
class ProblemCounts:
    """One group's problems (sorted ids) with correct and planned sample counts.

    ``scale`` > 1 when planned trajectories could not be placed on a problem (the plan was
    given as counts that do not fit the answer key): each problem's denominator is then
    scaled so that the totals are the planned ones."""

    problem_ids: tuple[str, ...]
    correct: np.ndarray
    planned: np.ndarray
    scale: float = 1.0

    @property
    def denominators(self) -> np.ndarray:
        return self.planned * self.scale


def problem_counts(prep: Prepared, profile: str) -> dict[Group, ProblemCounts]:
    """Per (model, method, benchmark): the problems of its planned cells and their counts
    under ``profile`` (a missing trajectory is a planned sample that is wrong)."""
    ok = f"ok_{profile}"
    t = prep.traj[GROUP + ["problem_id", ok]].copy()
    t["c"] = t[ok].map(lambda v: bool(v) if v is not None and v == v else False).astype(int)
    t["problem_id"] = t["problem_id"].astype(str)
    out: dict[Group, ProblemCounts] = {}
    agg = t.groupby(GROUP + ["problem_id"], sort=True)["c"].agg(["sum", "size"]).reset_index()
    for g, sub in agg.groupby(GROUP, sort=True):
        g = tuple(g)
        planned = prep.planned.get(g, int(sub["size"].sum()))
        cells = int(sub["size"].sum())
        out[g] = ProblemCounts(tuple(sub["problem_id"]), sub["sum"].to_numpy(float), sub["size"].to_numpy(float),
                               planned / cells if cells else 1.0)
    return out


def draw_seed(spec: BootstrapSpec, benchmark: str, n_problems: int) -> list[int]:
    """The seed of a benchmark's draw: the same for every model and method."""
    return bootstrap_seed(spec.seed, benchmark, n_problems)


def cell_replicates(counts: Mapping[Group, ProblemCounts], spec: BootstrapSpec) -> dict[Group, np.ndarray]:
    """Bootstrap replicates of each group's avg@k."""
    return {g: problem_bootstrap(pc.correct, pc.denominators, spec.n_resamples,
                                 draw_seed(spec, g[2], len(pc.problem_ids)))
            for g, pc in counts.items() if len(pc.problem_ids) and pc.denominators.sum() > 0}


def cell_intervals(prep: Prepared, profile: str, spec: BootstrapSpec
                   ) -> tuple[dict[Group, tuple[float, float]], dict[tuple[str, str], tuple[float, float]],
                              dict[Group, ProblemCounts]]:
    """``(cells, macro, counts)``: each group's interval, each (model, method)'s Macro
    interval (only when every benchmark of the report has a value for it, as the Macro
    itself) and the per-problem counts they came from."""
    counts = problem_counts(prep, profile)
    reps = cell_replicates(counts, spec)
    cells = {g: percentile_interval(r, spec.confidence) for g, r in reps.items()}
    benches = sorted({g[2] for g in prep.planned})
    macro: dict[tuple[str, str], tuple[float, float]] = {}
    for mm in sorted({g[:2] for g in prep.planned}):
        keys = [(mm[0], mm[1], b) for b in benches]
        if keys and all(k in reps for k in keys):
            macro[mm] = percentile_interval(np.mean(np.vstack([reps[k] for k in keys]), axis=0), spec.confidence)
    return cells, macro, counts


def with_intervals(summary: pd.DataFrame, cells: Mapping[Group, tuple[float, float]],
                   counts: Mapping[Group, ProblemCounts]) -> pd.DataFrame:
    """The summary with the bootstrap ``ci_low``/``ci_high`` and ``n_problems`` per group
    (replacing summarize's trajectory-level interval)."""
    s = summary.copy()
    keys = list(zip(s["model"], s["method"], s["benchmark"]))
    s["ci_low"] = [cells[k][0] if k in cells else None for k in keys]
    s["ci_high"] = [cells[k][1] if k in cells else None for k in keys]
    s["ci_method"] = ["cluster bootstrap over problems" if k in cells else None for k in keys]
    s["n_problems"] = [len(counts[k].problem_ids) if k in counts else 0 for k in keys]
    return s
