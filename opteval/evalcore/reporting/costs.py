"""Calls and tokens per trajectory per (model, method), beside the harness paper's figures.

Accounting as the paper's Appendix A.1: per scored trajectory (committed, not ``status=error``)
the counts summed over its model calls; the mean within each benchmark; the unweighted mean of
the benchmark means (None when a benchmark of the pair has no recorded count). Calls are
counted the same way. Ratios are to OptiCycle of the same model, because a simulated policy's
absolute counts are its own (short replies, no reasoning) and only the structure -- how many
calls and how much context a method spends relative to OptiCycle -- compares with the paper.
The paper's figures (Qwen3.5-9B) come from :mod:`opteval.evalcore.reporting.paper_costs`.

Used by the report (``tables/costs.csv`` and its section of ``report.md``) and by
``bench/bench_budgets.py``, which measures the same table in process.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from opteval.evalcore.metrics import macro
from opteval.evalcore.reporting.frame import number
from opteval.evalcore.reporting.paper_costs import BACKBONE, OPTICYCLE_TOKENS_K, REFERENCE, SOURCE, paper_tokens

COLUMNS = ["model", "method", "trajectories", "calls", "prompt_tokens", "completion_tokens", "tokens",
           "calls_vs_opticycle", "tokens_vs_opticycle", "paper_tokens_k", "paper_vs_opticycle", "simulated"]
STATUS_ERROR = "error"


def _macro_of_means(g: pd.DataFrame, col: str, benches: list[str]) -> float | None:
    means = {}
    for b in benches:
        vals = [x for x in (number(v) for v in g.loc[g["benchmark"] == b, col]) if x is not None]
        if not vals:
            return None
        means[b] = sum(vals) / len(vals)
    return macro(means) if means else None


def scored_rows(traj: pd.DataFrame) -> pd.DataFrame:
    """The trajectories the paper counts: committed (``present`` when the frame has it) and not
    ``status=error``; a trajectory whose token counts are missing keeps its calls but no tokens."""
    t = traj
    if "present" in t.columns:
        t = t[t["present"].fillna(False).astype(bool)]
    if "status" in t.columns:
        t = t[t["status"] != STATUS_ERROR]
    t = t.copy()
    both = [(number(p) is not None and number(c) is not None) for p, c in zip(t["prompt_tokens"], t["completion_tokens"])]
    t["tokens"] = [(number(p) or 0.0) + (number(c) or 0.0) if ok else None
                   for p, c, ok in zip(t["prompt_tokens"], t["completion_tokens"], both)]
    t["prompt_tokens"] = [number(p) if ok else None for p, ok in zip(t["prompt_tokens"], both)]
    t["completion_tokens"] = [number(c) if ok else None for c, ok in zip(t["completion_tokens"], both)]
    return t


def cost_table(traj: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method) with :data:`COLUMNS`. ``traj`` needs ``model, method,
    benchmark, n_calls, prompt_tokens, completion_tokens`` (``present``, ``status``,
    ``simulated`` are used when there): the report's prepared frame or the bench's rows."""
    t = scored_rows(traj)
    if not len(t):
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for (model, method), g in t.groupby(["model", "method"], sort=True):
        benches = sorted(set(g["benchmark"]))
        paper = paper_tokens(str(method))
        rows.append({
            "model": model, "method": method, "trajectories": len(g),
            "calls": _macro_of_means(g, "n_calls", benches),
            "prompt_tokens": _macro_of_means(g, "prompt_tokens", benches),
            "completion_tokens": _macro_of_means(g, "completion_tokens", benches),
            "tokens": _macro_of_means(g, "tokens", benches),
            "paper_tokens_k": paper.tokens_k if paper else None,
            "paper_vs_opticycle": paper.ratio_text() if paper else None,
            "simulated": bool(g["simulated"].fillna(False).astype(bool).any()) if "simulated" in g.columns else False,
        })
    out = pd.DataFrame(rows)
    ref = {r["model"]: r for r in rows if r["method"] == REFERENCE}
    for col, name in (("calls", "calls_vs_opticycle"), ("tokens", "tokens_vs_opticycle")):
        out[name] = [_ratio(r[col], ref.get(r["model"], {}).get(col)) for r in rows]
    return out[COLUMNS]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def allowance_band(table: pd.DataFrame, reference_tokens: float = 1000 * OPTICYCLE_TOKENS_K) -> pd.DataFrame:
    """For simulated rows: where a real model's tokens ÷ OptiCycle would lie, with the paper's
    ratio beside it (docs/calibration.md).

    A real reasoning model spends, per call, about what the simulated policy spends plus an
    allowance ``r`` (its reasoning beyond the code it writes). With OptiCycle as the reference:
    ``ratio(r) = (T + C r) / (T_oc + C_oc r)`` (``T``, ``C``: the measured tokens and calls per
    trajectory). ``r`` is unknown but bounded: ``r >= 0``, and since a real OptiCycle trajectory
    makes at least the simulated one's few calls (build, solve, submit), the paper's 11.77k for
    OptiCycle bounds it by ``r_max = (11,770 - T_oc) / C_oc``. ``band_low`` / ``band_high`` are
    ``ratio(0)`` and ``ratio(r_max)`` in ascending order; ``band_mid`` their geometric mean (the
    point a calibrated budget aims at); ``r_max`` the bound."""
    cols = ["model", "method", "calls", "tokens", "r_max", "band_low", "band_mid", "band_high", "paper_vs_opticycle",
            "paper_in_band"]
    rows = []
    for model, g in table.groupby("model", sort=True):
        ref = g[g["method"] == REFERENCE]
        if not len(ref):
            continue
        t_oc, c_oc = number(ref["tokens"].iloc[0]), number(ref["calls"].iloc[0])
        if t_oc is None or not c_oc or t_oc >= reference_tokens:
            continue
        r_max = (reference_tokens - t_oc) / c_oc
        for r in g.to_dict("records"):
            t, c = number(r["tokens"]), number(r["calls"])
            if t is None or c is None:
                continue
            lo, hi = sorted((t / t_oc, (t + c * r_max) / reference_tokens))
            paper = paper_tokens(str(r["method"]))
            inside = None
            if paper is not None:
                inside = (lo <= paper.ratio <= hi if paper.ratio is not None
                          else hi < 1 if paper.relation == "<" else lo > 1)
            rows.append({"model": model, "method": r["method"], "calls": c, "tokens": t, "r_max": r_max,
                         "band_low": lo, "band_mid": math.sqrt(lo * hi), "band_high": hi,
                         "paper_vs_opticycle": paper.ratio_text() if paper else None, "paper_in_band": inside})
    return pd.DataFrame(rows, columns=cols)


CAPTION = (f"Per scored trajectory: model calls and input/output tokens summed over its calls; the mean "
           f"within each benchmark, then the unweighted mean of the benchmark means (paper A.1). "
           f"`÷ OptiCycle`: the ratio to OptiCycle of the same model. `paper`: {BACKBONE}'s figures from "
           f"{SOURCE} (thousand tokens; `< 1` / `> 1`: the paper gives only a bound relative to OptiCycle; "
           f"OptiState's figure is derived from \"84.2% higher\"). The paper states no calls per trajectory. "
           f"A simulated policy's absolute counts are its own (short replies, no reasoning): compare its "
           f"ratios, not its counts.")


def cost_markdown(table: pd.DataFrame) -> str:
    """The table for ``report.md`` (simulated rows say so)."""
    if not len(table):
        return "_(no scored trajectories)_\n"
    head = ("| model | method | trajectories | calls | prompt tokens | completion tokens | tokens | "
            "calls ÷ OptiCycle | tokens ÷ OptiCycle | paper tokens (k) | paper ÷ OptiCycle |")
    lines = [head, "|---|---|" + "---:|" * 9]
    for r in table.to_dict("records"):
        method = f"{r['method']} (simulated)" if r["simulated"] else str(r["method"])
        cells = [str(r["model"]), method, str(int(r["trajectories"])), _fmt(r["calls"], "{:.2f}"),
                 _fmt(r["prompt_tokens"], "{:.0f}"), _fmt(r["completion_tokens"], "{:.0f}"), _fmt(r["tokens"], "{:.0f}"),
                 _fmt(r["calls_vs_opticycle"], "{:.2f}"), _fmt(r["tokens_vs_opticycle"], "{:.3f}"),
                 _fmt(r["paper_tokens_k"], "{:.2f}"), r["paper_vs_opticycle"] or "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(v: Any, spec: str) -> str:
    x = number(v)
    return "—" if x is None else spec.format(x)


__all__ = ["cost_table", "cost_markdown", "allowance_band", "scored_rows", "COLUMNS", "CAPTION"]
