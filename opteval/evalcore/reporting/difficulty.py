"""Difficulty recalibration (paper 003, Robustness Analysis) and paired comparisons.

Difficulty is per backbone and problem, from the first three planned samples (0, 1, 2) of
the reference method (Direct Generation): Easy when all are correct, Hard when none is,
Medium otherwise. A missing sample counts as wrong, as everywhere. With fewer than three
planned Direct samples the label uses those there are (a single sample gives Easy or Hard).

Paired comparison pairs the two methods by problem, over the (problem, sample) cells
planned for both; a missing trajectory is a wrong one. The unit is the problem, never the
(problem, sample) pair: samples of one problem are not independent. With one sample per
problem it is the exact McNemar test on discordant problems with SemOPT's 90% conditional
exact interval; with k > 1 a paired cluster bootstrap over problems (the same draws as the
main table's intervals) with a sign-flip permutation p-value. ``test`` names the one used.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from opteval.evalcore.metrics import PairedResult, paired_by_problem, percentile_interval, problem_bootstrap, sign_flip_pvalue
from opteval.evalcore.reporting.frame import Prepared
from opteval.evalcore.reporting.intervals import BootstrapSpec, draw_seed

EASY, MEDIUM, HARD = "Easy", "Medium", "Hard"
LEVELS = (EASY, MEDIUM, HARD)


def difficulty_labels(prep: Prepared, profile: str, method: str = "direct", n_samples: int = 3) -> pd.DataFrame:
    """``model, benchmark, problem_id, n_used, n_correct, difficulty`` from ``method``'s
    first ``n_samples`` planned samples per problem."""
    t = prep.traj.loc[prep.traj["method"] == method, ["model", "benchmark", "problem_id", "sample", f"ok_{profile}"]
                      ].sort_values(["model", "benchmark", "problem_id", "sample"], kind="stable")
    acc: dict[tuple[str, str, str], list[int]] = {}
    for m, b, pid, okv in zip(t["model"], t["benchmark"], t["problem_id"], t[f"ok_{profile}"]):
        nc = acc.setdefault((m, b, pid), [0, 0])
        if nc[0] < n_samples:
            nc[0] += 1
            nc[1] += int(bool(okv) if okv is not None and okv == okv else 0)
    rows = []
    for (m, b, pid), (n, c) in acc.items():
        level = EASY if c == n else HARD if c == 0 else MEDIUM
        rows.append({"model": m, "benchmark": b, "problem_id": pid, "n_used": n, "n_correct": c, "difficulty": level})
    return pd.DataFrame(rows, columns=["model", "benchmark", "problem_id", "n_used", "n_correct", "difficulty"])


def difficulty_table(prep: Prepared, profile: str, labels: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per difficulty for every method: one row per (model, method, benchmark,
    difficulty), plus benchmark ``all`` pooled; ``problems``, ``planned`` (trajectories of
    those problems), ``correct`` and ``acc`` (None for an empty level)."""
    if not len(labels):
        return pd.DataFrame(columns=["model", "method", "benchmark", "difficulty", "problems", "planned", "correct", "acc"])
    # the columns read below only: the merge copies what it is given, for every planned trajectory
    t = prep.traj[["model", "method", "benchmark", "problem_id", f"ok_{profile}"]].merge(
        labels[["model", "benchmark", "problem_id", "difficulty"]], on=["model", "benchmark", "problem_id"], how="inner")
    t = t.assign(ok=t[f"ok_{profile}"].fillna(False).astype(bool))
    rows = []

    def add(m: str, x: str, b: str, g: pd.DataFrame, lab: pd.DataFrame) -> None:
        for lvl in LEVELS:
            s = g[g["difficulty"] == lvl]
            n = len(s)
            rows.append({"model": m, "method": x, "benchmark": b, "difficulty": lvl,
                         "problems": int((lab["difficulty"] == lvl).sum()), "planned": n,
                         "correct": int(s["ok"].sum()), "acc": (float(s["ok"].sum()) / n) if n else None})

    for (m, x), gx in t.groupby(["model", "method"], sort=True):
        for b, gb in gx.groupby("benchmark", sort=True):
            add(m, x, b, gb, labels[(labels["model"] == m) & (labels["benchmark"] == b)])
        add(m, x, "all", gx, labels[(labels["model"] == m) & labels["benchmark"].isin(set(gx["benchmark"]))])
    return pd.DataFrame(rows)


def _problem_grades(g: pd.DataFrame, col: str) -> list[list[bool]]:
    return [[bool(v) if v is not None and v == v else False for v in sub[col]]
            for _, sub in g.sort_values(["problem_id", "sample"], kind="stable").groupby("problem_id", sort=True)]


def paired_table(prep: Prepared, profile: str, method_a: str, method_b: str, confidence: float = 0.90,
                 spec: BootstrapSpec | None = None) -> pd.DataFrame:
    """A vs B per (model, benchmark), per model over the pooled problems of all benchmarks
    (benchmark ``all``) and for the Macro (``Macro``: the difference of the two macros,
    benchmarks resampled independently, sign flips weighted as the macro weighs problems).

    Columns: ``n`` problems, ``k`` samples per problem (a range when mixed), ``a_only`` /
    ``b_only`` (problems where A / B does better), ``both`` / ``neither`` (ties at rate 1 /
    0), accuracies, ``net_gain`` = acc(A) - acc(B) with its ``confidence`` interval
    (``low``, ``high``), ``p_value`` and ``test``."""
    spec = spec or BootstrapSpec()
    ok = f"ok_{profile}"
    cols = ["model", "benchmark", "problem_id", "sample"]
    ta = prep.traj[prep.traj["method"] == method_a][cols + [ok]]
    tb = prep.traj[prep.traj["method"] == method_b][cols + [ok]]
    pairs = ta.merge(tb, on=cols, suffixes=("_a", "_b"), how="inner")
    rows: list[dict[str, Any]] = []

    def add(m: str, b: str, ga: list[list[bool]], gb: list[list[bool]], r: PairedResult) -> None:
        ks = sorted({len(x) for x in ga})
        na = sum(len(x) for x in ga)
        rows.append({"model": m, "benchmark": b, "method_a": method_a, "method_b": method_b, "n": r.n,
                     "k": str(ks[0]) if len(ks) == 1 else f"{ks[0]}-{ks[-1]}",
                     "a_only": r.a_only, "b_only": r.b_only, "both": r.both, "neither": r.neither,
                     "acc_a": sum(map(sum, ga)) / na, "acc_b": sum(map(sum, gb)) / na, "net_gain": r.net_gain,
                     "low": r.low, "high": r.high, "p_value": r.p_value, "test": r.test})

    for m, gm in pairs.groupby("model", sort=True):
        all_a: list[list[bool]] = []
        all_b: list[list[bool]] = []
        macro_parts = []
        for b, gb in gm.groupby("benchmark", sort=True):
            pa_, pb_ = _problem_grades(gb, f"{ok}_a"), _problem_grades(gb, f"{ok}_b")
            add(m, b, pa_, pb_, paired_by_problem(pa_, pb_, confidence, spec.n_resamples,
                                                  draw_seed(spec, b, len(pa_))))
            all_a += pa_
            all_b += pb_
            macro_parts.append((b, pa_, pb_))
        add(m, "all", all_a, all_b, paired_by_problem(all_a, all_b, confidence, spec.n_resamples,
                                                      draw_seed(spec, "all", len(all_a))))
        if len(macro_parts) > 1:
            rows.append(_macro_row(m, method_a, method_b, macro_parts, confidence, spec))
    return pd.DataFrame(rows, columns=["model", "benchmark", "method_a", "method_b", "n", "k", "a_only", "b_only",
                                       "both", "neither", "acc_a", "acc_b", "net_gain", "low", "high", "p_value",
                                       "test"])


MACRO_TEST = "stratified paired cluster bootstrap over problems; weighted sign-flip permutation p-value"


def _macro_row(model: str, method_a: str, method_b: str, parts: list[tuple[str, list, list]],
               confidence: float, spec: BootstrapSpec) -> dict[str, Any]:
    """Macro(A) - Macro(B): per benchmark the rate difference, unweighted over benchmarks."""
    reps, diffs, weights, accs = [], [], [], []
    for b, ga, gb in parts:
        ca = np.array([sum(x) for x in ga], float)
        cb = np.array([sum(x) for x in gb], float)
        k = np.array([len(x) for x in ga], float)
        reps.append(problem_bootstrap(ca - cb, k, spec.n_resamples, draw_seed(spec, b, len(ga))))
        accs.append((ca.sum() / k.sum(), cb.sum() / k.sum()))
        # macro delta = sum_i w_i * (ca_i - cb_i) with w_i = 1 / (B * planned samples of i's benchmark)
        diffs.append(ca - cb)
        weights.append(np.full(len(ga), 1.0 / (len(parts) * k.sum())))
    d = np.concatenate(diffs) * np.concatenate(weights)
    low, high = percentile_interval(np.mean(np.vstack(reps), axis=0), confidence)
    acc_a = float(np.mean([a for a, _ in accs]))
    acc_b = float(np.mean([b for _, b in accs]))
    return {"model": model, "benchmark": "Macro", "method_a": method_a, "method_b": method_b,
            "n": int(len(d)), "k": "", "a_only": int((d > 0).sum()), "b_only": int((d < 0).sum()),
            "both": None, "neither": None, "acc_a": acc_a, "acc_b": acc_b, "net_gain": acc_a - acc_b,
            "low": low, "high": high, "p_value": sign_flip_pvalue(d * len(d), seed=spec.seed), "test": MACRO_TEST}
