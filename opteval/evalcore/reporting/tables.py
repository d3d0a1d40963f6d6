"""The paper's main table: rows model x method, columns the benchmarks and Macro.

:func:`main_table_from_summary` is the one constructor, fed either by the ledger
(:func:`summary_from_prepared`) or by MLflow metrics (``opteval.sweepcore.tracking.mlflow_views``): it needs
only counts per (model, method, benchmark), so both paths give the same values.

Intervals are problem-level (``opteval.evalcore.reporting.intervals``): each benchmark cell takes
``ci_low``/``ci_high`` from the summary (a percentile cluster bootstrap over problems) and
Macro takes its interval from ``macro_ci`` (a stratified bootstrap). Counts alone cannot
give a problem-level interval, so a summary without them (the MLflow path) shows none
rather than a trajectory-level one that would overstate precision.
Best / second best are per backbone (model) and per column, ties included. A dagger marks
a cell whose denominator includes missing scores (not run, or status error).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from opteval.evalcore.finish_reasons import with_counts
from opteval.evalcore.formulation import with_unsolved
from opteval.evalcore.metrics import macro, summarize
from opteval.evalcore.reporting.frame import GROUP, Prepared, number
from opteval.evalcore.reporting.intervals import BootstrapSpec, cell_intervals, with_intervals

MACRO = "Macro"
BEST, SECOND = "best", "second"
DAGGER = "†"
_EPS = 1e-12


def summary_from_prepared(prep: Prepared, profile: str, spec: BootstrapSpec | None = None) -> pd.DataFrame:
    """``opteval.evalcore.metrics.summarize`` per (model, method, benchmark), with the grades of
    ``profile`` and the plan's denominators; adds cached-token means. With a
    :class:`~opteval.evalcore.reporting.intervals.BootstrapSpec`, ``ci_low``/``ci_high`` are the
    problem-level bootstrap interval and ``n_problems`` is added; without one the interval
    columns are None (no trajectory-level interval is ever shown)."""
    # boolean indexing already returns a new frame: no second copy of every column, and the column
    # set below never reaches prep.traj
    t = prep.traj[prep.traj["present"]]
    if t[f"ok_{profile}"].isna().any():
        bad = t[t[f"ok_{profile}"].isna()].iloc[0]
        raise ValueError(f"no answer key for benchmark {bad['benchmark']!r} and its rows were graded under "
                         f"{bad['grading_profile']!r}, not {profile!r}")
    t["correct"] = t[f"ok_{profile}"].astype(bool)
    cols = ["key"] + GROUP + ["status", "correct", "prompt_tokens", "completion_tokens", "exec_ok",
                              "submission_value", "submission_status", "simulated"]
    s = summarize(t[cols] if len(t) else t[cols].iloc[0:0], planned=prep.planned)
    if not len(s):
        return s
    cached = []
    by_group = {k: v for k, v in t.groupby(GROUP, sort=False)}
    for r in s.itertuples(index=False):
        g = by_group.get((r.model, r.method, r.benchmark), t.iloc[0:0])
        vals = [float(v) for v in g["cached_prompt_tokens"] if v is not None and not pd.isna(v)]
        cached.append(sum(vals) / len(vals) if vals else None)
    s["cached_mean"] = cached
    s = with_counts(s, t)  # truncated / rejected calls per cell (opteval.evalcore.finish_reasons)
    s = with_unsolved(s, t)  # correct answers no solve produced (opteval.evalcore.formulation, issue 36)
    if "simulated" not in s.columns:
        s["simulated"] = False
    s["simulated"] = s["simulated"].fillna(False).astype(bool)
    if spec is None:
        s["ci_low"] = s["ci_high"] = s["ci_method"] = None
        return s
    cells, _, counts = cell_intervals(prep, profile, spec)
    return with_intervals(s, cells, counts)


def main_table_from_summary(summary: pd.DataFrame, benchmarks: Sequence[str] | None = None,
                            macro_ci: Mapping[tuple[str, str], tuple[float, float]] | None = None) -> pd.DataFrame:
    """The main table from per-(model, method, benchmark) counts.

    ``summary`` needs ``model, method, benchmark, planned, correct, missing``; ``errors``,
    ``simulated`` and the interval ``ci_low``/``ci_high`` are used when present;
    ``macro_ci`` maps (model, method) to the Macro interval. Returns one row per (model, method), sorted,
    with for each column ``c`` in the benchmarks (sorted) and ``Macro``: ``c`` (accuracy,
    fraction), ``c:low``, ``c:high``, ``c:mark`` (``best``/``second``/``""``) and
    ``c:dagger`` (bool), plus ``simulated``.
    """
    s = summary.copy()
    if "errors" not in s.columns:
        s["errors"] = 0
    if "simulated" not in s.columns:
        s["simulated"] = False
    benches = sorted(set(s["benchmark"])) if benchmarks is None else list(benchmarks)
    rows = []
    for (model, method), g in s.groupby(["model", "method"], sort=True):
        row: dict[str, Any] = {"model": model, "method": method}
        by_b = {r["benchmark"]: r for r in g.to_dict("records")}
        ps, ns, any_dagger, complete = [], [], False, True
        for b in benches:
            r = by_b.get(b)
            if r is None or int(r["planned"]) <= 0:
                row.update({b: None, f"{b}:low": None, f"{b}:high": None, f"{b}:dagger": False})
                complete = False
                continue
            n, c = int(r["planned"]), int(r["correct"])
            lo, hi = number(r.get("ci_low")), number(r.get("ci_high"))
            dag = int(r["missing"]) + int(r["errors"] or 0) > 0
            any_dagger |= dag
            row.update({b: c / n, f"{b}:low": lo, f"{b}:high": hi, f"{b}:dagger": dag})
            ps.append(c / n)
            ns.append(n)
        if complete and ps:
            row[MACRO] = macro(ps)
            row[f"{MACRO}:low"], row[f"{MACRO}:high"] = (macro_ci or {}).get((model, method), (None, None))
        else:
            row[MACRO] = row[f"{MACRO}:low"] = row[f"{MACRO}:high"] = None
        row[f"{MACRO}:dagger"] = any_dagger
        row["simulated"] = bool(g["simulated"].fillna(False).astype(bool).any())
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in benches + [MACRO]:
        table[f"{col}:mark"] = mark_best(table, col) if len(table) else []
    order = ["model", "method"] + [x for c in benches + [MACRO]
                                   for x in (c, f"{c}:low", f"{c}:high", f"{c}:mark", f"{c}:dagger")] + ["simulated"]
    return table[order] if len(table) else pd.DataFrame(columns=order)


def mark_best(table: pd.DataFrame, col: str) -> list[str]:
    """``best`` / ``second`` per model (backbone) in ``col``; equal values share a mark,
    and the second mark goes to the next distinct value below the best."""
    marks = [""] * len(table)
    for _, idx in table.groupby("model", sort=False).groups.items():
        vals = {i: table.at[i, col] for i in idx if table.at[i, col] is not None and not pd.isna(table.at[i, col])}
        distinct = sorted({round(float(v) / _EPS) * _EPS for v in vals.values()}, reverse=True)
        for i, v in vals.items():
            rv = round(float(v) / _EPS) * _EPS
            pos = table.index.get_loc(i)
            if distinct and rv == distinct[0]:
                marks[pos] = BEST
            elif len(distinct) > 1 and rv == distinct[1]:
                marks[pos] = SECOND
    return marks


def value_columns(table: pd.DataFrame) -> list[str]:
    """The benchmark columns plus Macro, in table order."""
    return [c for c in table.columns if ":" not in c and c not in ("model", "method", "simulated")]


# -- renderers --------------------------------------------------------------------------------------


def _pct(v: Any, nd: int = 1) -> str:
    return "—" if v is None or pd.isna(v) else f"{100 * float(v):.{nd}f}"


def _row_label(r: pd.Series) -> str:
    return f"{r['method']} (simulated)" if bool(r.get("simulated", False)) else str(r["method"])


def to_markdown(table: pd.DataFrame, with_ci: bool = True) -> str:
    """Markdown: **best**, _second_, † when missing scores are in the denominator."""
    cols = value_columns(table)
    lines = ["| model | method | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for _, r in table.iterrows():
        cells = []
        for c in cols:
            v = _pct(r[c])
            if r[c] is not None and not pd.isna(r[c]):
                if r[f"{c}:mark"] == BEST:
                    v = f"**{v}**"
                elif r[f"{c}:mark"] == SECOND:
                    v = f"<u>{v}</u>"
                if r[f"{c}:dagger"]:
                    v += DAGGER
                if with_ci and number(r[f"{c}:low"]) is not None:
                    v += f" [{_pct(r[f'{c}:low'])}, {_pct(r[f'{c}:high'])}]"
            cells.append(v)
        lines.append(f"| {r['model']} | {_row_label(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_csv_frame(table: pd.DataFrame) -> pd.DataFrame:
    """CSV layout: percentages (2 decimals) and their interval, a ``mark`` column
    (best/second) and a ``dagger`` column per benchmark and Macro."""
    out = table[["model", "method"]].copy()
    out["simulated"] = table["simulated"].astype(bool)
    for c in value_columns(table):
        out[c] = [None if v is None or pd.isna(v) else round(100 * float(v), 2) for v in table[c]]
        out[f"{c}_ci_low"] = [None if v is None or pd.isna(v) else round(100 * float(v), 2) for v in table[f"{c}:low"]]
        out[f"{c}_ci_high"] = [None if v is None or pd.isna(v) else round(100 * float(v), 2) for v in table[f"{c}:high"]]
        out[f"{c}_mark"] = table[f"{c}:mark"].values
        out[f"{c}_dagger"] = table[f"{c}:dagger"].astype(bool).values
    return out


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(s: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(s))


def to_latex(table: pd.DataFrame, caption: str = "avg@k (\\%) with 95\\% percentile cluster-bootstrap intervals "
             "over problems.", with_ci: bool = True) -> str:
    """A booktabs table: \\textbf best, \\underline second, $^\\dagger$ for missing scores."""
    cols = value_columns(table)
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             r"\begin{tabular}{ll" + "r" * len(cols) + "}", r"\toprule",
             "Model & Method & " + " & ".join(tex_escape(c) for c in cols) + r" \\", r"\midrule"]
    prev = None
    for _, r in table.iterrows():
        if prev is not None and r["model"] != prev:
            lines.append(r"\midrule")
        cells = []
        for c in cols:
            if r[c] is None or pd.isna(r[c]):
                cells.append("--")
                continue
            v = _pct(r[c])
            if r[f"{c}:mark"] == BEST:
                v = rf"\textbf{{{v}}}"
            elif r[f"{c}:mark"] == SECOND:
                v = rf"\underline{{{v}}}"
            if r[f"{c}:dagger"]:
                v += r"$^\dagger$"
            if with_ci and number(r[f"{c}:low"]) is not None:
                v += rf" {{\scriptsize[{_pct(r[f'{c}:low'])}, {_pct(r[f'{c}:high'])}]}}"
            cells.append(v)
        label = tex_escape(_row_label(r))
        lines.append(f"{tex_escape(r['model'])} & {label} & " + " & ".join(cells) + r" \\")
        prev = r["model"]
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption} $^\dagger$: missing scores counted as failures.}}",
              r"\end{table}"]
    return "\n".join(lines) + "\n"


def frame_markdown(df: pd.DataFrame, floatfmt: str = "{:.3f}", pct_cols: Sequence[str] = ()) -> str:
    """A plain Markdown table of any frame (None -> "—", fractions in ``pct_cols`` as %)."""
    if df is None or not len(df):
        return "_(none)_"
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        cells = []
        for c, v in zip(cols, r):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                cells.append("—")
            elif c in pct_cols and isinstance(v, (int, float)) and not isinstance(v, bool):
                cells.append(f"{100 * float(v):.1f}")
            elif isinstance(v, float):
                cells.append(floatfmt.format(v))
            else:
                cells.append(str(v).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
