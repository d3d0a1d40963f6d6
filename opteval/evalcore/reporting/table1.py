"""The paper's Table 1 layout: per backbone, methods as rows (Direct, the six adapted baselines,
OptiCycle, OptiState), the nine benchmarks as columns, Macro, and tokens per trajectory.

Why separate from ``tables.py``: the main table there is model x method in sorted order with
intervals; Table 1 fixes the paper's row and column order and adds the token cost of each
method (paper 4.3 / Figure 2: "thousand input plus output tokens per trajectory"). It is built
only from the two existing constructors (``main_table_from_summary`` and ``token_table``), so it
shows the same numbers as the main and token tables.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from opteval.evalcore.reporting.tables import BEST, DAGGER, MACRO, SECOND, main_table_from_summary

TABLE1_METHODS = ("direct", "cafa", "reflexion", "coe", "optimus", "autoformulation", "ormind", "opticycle", "optistate")
TABLE1_BENCHMARKS = ("mamo_easy", "optibench", "icml_competition", "nlp4lp", "nl4opt", "mamo_complex", "optmath",
                     "industryor", "complexor")
METHOD_LABELS = {
    "direct": "Direct Generation", "cafa": "CAFA", "reflexion": "Reflexion", "coe": "Chain-of-Experts",
    "optimus": "OptiMUS", "autoformulation": "AutoFormulation", "ormind": "ORMind", "opticycle": "OptiCycle",
    "optistate": "OptiState",
}
TOKENS = "tokens_k"  # thousand input + output tokens per trajectory (Macro over benchmarks)


def table1(summary: pd.DataFrame, benchmarks: Sequence[str] | None = None,
           methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (model, method) in the paper's order: ``model, method, label``, a fraction
    and a ``:mark`` (best/second within the backbone) and ``:dagger`` per benchmark and Macro,
    ``tokens_k`` and ``simulated``. ``summary`` is ``tables.summary_from_prepared``'s frame (or
    any frame with its columns). Benchmarks default to the paper's nine that are present, in the
    paper's order; methods not in ``TABLE1_METHODS`` follow them alphabetically."""
    from opteval.evalcore.reporting.analysis import token_table  # lazy: analysis imports tables

    present = set(summary["benchmark"]) if len(summary) else set()
    if benchmarks is None:
        benchmarks = [b for b in TABLE1_BENCHMARKS if b in present] + sorted(present - set(TABLE1_BENCHMARKS))
    main = main_table_from_summary(summary, benchmarks)
    if not len(main):
        return main
    tokens = token_table(summary[summary["benchmark"].isin(list(benchmarks))])
    tok = {(r["model"], r["method"]): r[MACRO] for r in tokens.to_dict("records")} if len(tokens) else {}
    main["tokens_k"] = [None if tok.get(k) is None else float(tok[k]) / 1000.0
                        for k in zip(main["model"], main["method"])]
    main["label"] = [METHOD_LABELS.get(m, m) for m in main["method"]]
    order = list(methods or TABLE1_METHODS)
    rank = {m: i for i, m in enumerate(order)}
    main["_rank"] = [(rank.get(m, len(order)), m) for m in main["method"]]
    main = main.sort_values(["model", "_rank"], kind="stable").drop(columns="_rank").reset_index(drop=True)
    keep = ["model", "method", "label"] + [x for c in list(benchmarks) + [MACRO] for x in (c, f"{c}:mark", f"{c}:dagger")]
    return main[keep + [TOKENS, "simulated"]]


def _cell(r: Any, c: str) -> str:
    v = r[c]
    if v is None or pd.isna(v):
        return "—"
    s = f"{100 * float(v):.2f}"
    if r[f"{c}:mark"] == BEST:
        s = f"**{s}**"
    elif r[f"{c}:mark"] == SECOND:
        s = f"<u>{s}</u>"
    return s + (DAGGER if r[f"{c}:dagger"] else "")


def table1_markdown(table: pd.DataFrame) -> str:
    """Markdown in the paper's layout, one block per backbone; simulated rows say so."""
    cols = [c for c in table.columns if ":" not in c and c not in ("model", "method", "label", TOKENS, "simulated")]
    head = "| method | " + " | ".join(cols) + " | tokens/traj (k) |"
    rule = "|---|" + "---:|" * (len(cols) + 1)
    out: list[str] = []
    for model, g in table.groupby("model", sort=False):
        out += [f"**{model}**", "", head, rule]
        for _, r in g.iterrows():
            label = r["label"] + (" (simulated)" if bool(r["simulated"]) else "")
            tok = "—" if r[TOKENS] is None or pd.isna(r[TOKENS]) else f"{float(r[TOKENS]):.2f}"
            out.append(f"| {label} | " + " | ".join(_cell(r, c) for c in cols) + f" | {tok} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


__all__ = ["table1", "table1_markdown", "TABLE1_METHODS", "TABLE1_BENCHMARKS", "METHOD_LABELS", "TOKENS"]
