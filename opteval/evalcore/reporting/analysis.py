"""Tokens, execution, failure split, repair, latency/cost and grading sensitivity.

All functions take a :class:`~opteval.evalcore.reporting.frame.Prepared` (one row per planned
trajectory) and return plain DataFrames; rendering is left to ``report.py``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from opteval.evalcore.metrics import macro, token_macro
from opteval.evalcore.reporting.frame import CATEGORIES, GROUP, Prepared, _nn, category_column, percentile
from opteval.evalcore.reporting.tables import MACRO, main_table_from_summary, summary_from_prepared


def token_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Paper A.1 token accounting, one row per (model, method): input + output tokens per
    trajectory, mean within each benchmark (``<bench>``), unweighted mean of the benchmark
    means (``Macro``; None when a benchmark has no recorded count). Cached prompt tokens
    (``cached:<bench>``, ``cached:Macro``) appear only where the server reported them.
    ``tokens_missing`` counts committed trajectories without a recorded count (left out of
    the means); ``simulated`` labels counts produced by the simulated policy."""
    rows = []
    benches = sorted(set(summary["benchmark"])) if len(summary) else []
    any_cached = len(summary) and summary["cached_mean"].notna().any()
    for (model, method), g in summary.groupby(["model", "method"], sort=True):
        by_b = {r["benchmark"]: r for r in g.to_dict("records")}
        row: dict[str, Any] = {"model": model, "method": method}
        means = {b: _nn(by_b[b]["tokens_mean"]) if b in by_b else None for b in benches}
        row.update(means)
        row[MACRO] = token_macro(means) if all(v is not None for v in means.values()) and means else None
        if any_cached:
            cm = {b: _nn(by_b[b]["cached_mean"]) if b in by_b else None for b in benches}
            row.update({f"cached:{b}": v for b, v in cm.items()})
            row[f"cached:{MACRO}"] = macro(cm) if all(v is not None for v in cm.values()) and cm else None
        row["tokens_missing"] = int(g["tokens_missing"].fillna(0).sum())
        row["simulated"] = bool(g["simulated"].any())
        rows.append(row)
    return pd.DataFrame(rows)


def failure_split(prep: Prepared, profile: str, summary: pd.DataFrame) -> pd.DataFrame:
    """Per (model, method, benchmark) and per (model, method) over all benchmarks (benchmark
    ``"all"``): planned, exec_rate, and the count of each category (correct, no_submission,
    syntactic, semantic, missing). Unnamed missing trajectories (unknown grid) are added to
    ``missing`` so the categories always sum to ``planned``."""
    t = prep.traj[GROUP].assign(category=category_column(prep.traj, profile))  # its groups copy only these
    rows = []
    by_group = {k: v for k, v in t.groupby(GROUP, sort=False)}
    s_by = {(r["model"], r["method"], r["benchmark"]): r for r in summary.to_dict("records")}
    for g, n in sorted(prep.planned.items()):
        sub = by_group.get(g, t.iloc[0:0])
        counts = sub["category"].value_counts()
        row: dict[str, Any] = dict(zip(GROUP, g), planned=n)
        row.update({c: int(counts.get(c, 0)) for c in CATEGORIES})
        row["missing"] += prep.unnamed_missing.get(g, 0)
        row["exec_rate"] = _nn(s_by.get(g, {}).get("exec_rate"))
        rows.append(row)
    df = pd.DataFrame(rows)
    if not len(df):
        return df
    tot = []
    for (m, x), g in df.groupby(["model", "method"], sort=True):
        row = {"model": m, "method": x, "benchmark": "all", "planned": int(g["planned"].sum())}
        row.update({c: int(g[c].sum()) for c in CATEGORIES})
        er = [e for e in g["exec_rate"] if e is not None and not pd.isna(e)]
        # exec rate over all planned trajectories of the pair (pooled, like the counts)
        row["exec_rate"] = (sum(e * p for e, p in zip(g["exec_rate"], g["planned"])) / row["planned"]
                            if len(er) == len(g) else None)
        tot.append(row)
    out = pd.concat([df, pd.DataFrame(tot)], ignore_index=True)
    return out[GROUP + ["planned", "exec_rate"] + list(CATEGORIES)]


def multi_turn_methods(prep: Prepared) -> list[str]:
    """Methods that ever made more than one model call or execution in a trajectory."""
    t = prep.traj[prep.traj["present"]]
    out = []
    for method, g in t.groupby("method", sort=True):
        calls = pd.to_numeric(g["n_calls"], errors="coerce").fillna(0)
        execs = pd.to_numeric(g["n_execs"], errors="coerce").fillna(0)
        if (calls > 1).any() or (execs > 1).any():
            out.append(method)
    return out


def repair_table(prep: Prepared, profile: str, methods: Iterable[str] | None = None) -> pd.DataFrame:
    """Repair analysis for multi-turn methods, per (model, method, benchmark) and ``all``:
    ``first_failed`` = trajectories whose first execution did not end ``ok``;
    ``repaired`` = those of them that still ended correct; ``repair_rate`` = repaired /
    first_failed (None when nothing failed first)."""
    methods = list(multi_turn_methods(prep) if methods is None else methods)
    t = prep.traj[prep.traj["present"] & prep.traj["method"].isin(methods)]
    rows = []
    overall = [((m, x, "all"), g) for (m, x), g in t.groupby(["model", "method"], sort=True)]
    for keys, g in list(t.groupby(GROUP, sort=True)) + overall:
        ff = g["first_outcome"].map(lambda v: _nn(v) is not None and v != "ok")
        rep = int((ff & g[f"ok_{profile}"].astype(bool)).sum())
        n_ff = int(ff.sum())
        rows.append(dict(zip(GROUP, keys), executed=int(g["first_outcome"].map(lambda v: _nn(v) is not None).sum()),
                         first_failed=n_ff, repaired=rep, repair_rate=(rep / n_ff) if n_ff else None))
    return pd.DataFrame(rows, columns=GROUP + ["executed", "first_failed", "repaired", "repair_rate"])


def latency_table(prep: Prepared) -> pd.DataFrame:
    """Per (model, method) over committed trajectories: wall time per trajectory and per
    model call (median, p90, seconds), mean model calls and executions per trajectory."""
    t = prep.traj[prep.traj["present"]]
    rows = []
    for (m, x), g in t.groupby(["model", "method"], sort=True):
        walls = [float(v) for v in g["wall_s"] if _nn(v) is not None]
        lat = [v for lst in g["call_latencies"] for v in lst]
        rows.append({"model": m, "method": x, "trajectories": len(g),
                     "wall_median_s": percentile(walls, 50), "wall_p90_s": percentile(walls, 90),
                     "call_median_s": percentile(lat, 50), "call_p90_s": percentile(lat, 90),
                     "calls_per_traj": float(pd.to_numeric(g["n_calls"], errors="coerce").fillna(0).mean()),
                     "execs_per_traj": float(pd.to_numeric(g["n_execs"], errors="coerce").fillna(0).mean()),
                     "simulated": bool(g["simulated"].fillna(False).astype(bool).any())})
    return pd.DataFrame(rows)


def sensitivity_table(prep: Prepared, profiles: Sequence[str]) -> pd.DataFrame:
    """The main table's accuracies under each grading profile side by side: one row per
    (model, method), columns ``<column>[<profile>]`` for every benchmark and Macro."""
    parts = []
    for prof in profiles:
        try:
            mt = main_table_from_summary(summary_from_prepared(prep, prof))
        except ValueError:
            continue  # a benchmark without answer key cannot be regraded under this profile
        cols = [c for c in mt.columns if ":" not in c and c not in ("model", "method", "simulated")]
        renamed = mt[["model", "method"] + cols].rename(columns={c: f"{c}[{prof}]" for c in cols})
        parts.append(renamed.set_index(["model", "method"]))
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, axis=1)
    bases = [c.split("[")[0] for c in parts[0].columns]
    order = [f"{b}[{p}]" for b in bases for p in profiles if f"{b}[{p}]" in out.columns]
    return out[order].reset_index()
