"""Difficulty recalibration (paper 003, Robustness Analysis) and paired comparisons.

Difficulty is per backbone and problem, from the first three planned samples (0, 1, 2) of
the reference method (Direct Generation): Easy when all are correct, Hard when none is,
Medium otherwise. A missing sample counts as wrong, as everywhere. With fewer than three
planned Direct samples the label uses those there are (a single sample gives Easy or Hard).

Paired comparison pairs trajectories by (model, benchmark, problem_id, sample) over the
cells planned for both methods; a missing trajectory is a wrong one.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from evalcore.metrics import paired_net_gain
from evalcore.reporting.frame import Prepared

EASY, MEDIUM, HARD = "Easy", "Medium", "Hard"
LEVELS = (EASY, MEDIUM, HARD)


def difficulty_labels(prep: Prepared, profile: str, method: str = "direct", n_samples: int = 3) -> pd.DataFrame:
    """``model, benchmark, problem_id, n_used, n_correct, difficulty`` from ``method``'s
    first ``n_samples`` planned samples per problem."""
    t = prep.traj[(prep.traj["method"] == method)].sort_values(["model", "benchmark", "problem_id", "sample"],
                                                                 kind="stable")
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
    t = prep.traj.merge(labels[["model", "benchmark", "problem_id", "difficulty"]],
                        on=["model", "benchmark", "problem_id"], how="inner")
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


def paired_table(prep: Prepared, profile: str, method_a: str, method_b: str, confidence: float = 0.95) -> pd.DataFrame:
    """A vs B per (model, benchmark) and per model overall (benchmark ``all``): ``n``
    pairs, discordant counts ``a_only`` / ``b_only``, ``both``, ``neither``, accuracies,
    ``net_gain`` = acc(A) - acc(B) with its interval, and the exact McNemar p-value."""
    ok = f"ok_{profile}"
    cols = ["model", "benchmark", "problem_id", "sample"]
    ta = prep.traj[prep.traj["method"] == method_a][cols + [ok]]
    tb = prep.traj[prep.traj["method"] == method_b][cols + [ok]]
    pairs = ta.merge(tb, on=cols, suffixes=("_a", "_b"), how="inner")
    rows: list[dict[str, Any]] = []

    def add(m: str, b: str, g: pd.DataFrame) -> None:
        a = g[f"{ok}_a"].fillna(False).astype(bool).tolist()
        bb = g[f"{ok}_b"].fillna(False).astype(bool).tolist()
        r = paired_net_gain(a, bb, confidence)
        rows.append({"model": m, "benchmark": b, "method_a": method_a, "method_b": method_b, "n": r.n,
                     "a_only": r.a_only, "b_only": r.b_only, "both": r.both, "neither": r.neither,
                     "acc_a": sum(a) / r.n, "acc_b": sum(bb) / r.n, "net_gain": r.net_gain,
                     "low": r.low, "high": r.high, "p_value": r.p_value})

    for m, gm in pairs.groupby("model", sort=True):
        for b, gb in gm.groupby("benchmark", sort=True):
            add(m, b, gb)
        add(m, "all", gm)
    return pd.DataFrame(rows, columns=["model", "benchmark", "method_a", "method_b", "n", "a_only", "b_only", "both",
                                       "neither", "acc_a", "acc_b", "net_gain", "low", "high", "p_value"])
