"""Sampling views: pass@k and maj@k curves, majority vote and SIRL's instance-enhanced
self-consistency (ISC) over each problem's samples.

Per problem the samples are the planned (problem, sample) cells in sample order; missing
ones (not run, status error) are wrong for pass@k and do not vote. pass@k and maj@k are
undefined (None, shown "n/a") when a problem has fewer than k planned samples: a
single-sample benchmark has pass@1 only.

ISC (SIRL's instance-enhanced self-consistency) is defined in ``opteval.evalcore.selection``.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from opteval.evalcore.grading import grade_parsed
from opteval.evalcore.metrics import maj_at_k, majority_answer, mean_if_all, mean_pass_at_k, pass_at_k
from opteval.evalcore.reporting.frame import GROUP, Prepared
from opteval.evalcore.reporting.tables import MACRO
from opteval.evalcore.selection import isc_select, orr1_vote, unscored


def k_values(max_n: int) -> list[int]:
    """1, 2, 4, ... up to ``max_n``, plus ``max_n`` itself when it is not a power of two."""
    ks, k = [], 1
    while k <= max_n:
        ks.append(k)
        k *= 2
    if max_n >= 1 and ks[-1] != max_n:
        ks.append(max_n)
    return ks


def sampling_tables(prep: Prepared, profile: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(curves, selection)``.

    ``curves``: one row per (model, method, benchmark, k) with ``pass@k`` and ``maj@k``
    (None when undefined) and ``n_problems``; k runs over :func:`k_values` of the largest
    samples-per-problem of the whole report, so short benchmarks show undefined entries.

    ``selection``: one row per (model, method), for each benchmark and Macro the columns
    ``avg:<b>`` (avg@k), ``pass@n:<b>``, ``maj@n:<b>`` (tolerance-clustered vote),
    ``orr1@n:<b>`` (OR-R1's released vote, :func:`opteval.evalcore.selection.orr1_vote`: int(float) of
    the numbers, a winner needs two votes), ``isc@n:<b>`` and ``isc_unscored:<b>``
    (submitted samples without a captured model) with n the benchmark's samples per
    problem (``n:<b>``). Macro of a selection column is None when a benchmark has no value.
    """
    ok = f"ok_{profile}"
    used = GROUP + ["problem_id", "sample", "present", "status", "parsed", ok, "final_model", "expected"]
    t = prep.traj[used].sort_values(GROUP + ["problem_id", "sample"], kind="stable")  # a sorted copy of these only
    per_group: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    cur: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for m, x, b, pid, pres, st, pp, okv, fm, exp in zip(
            t["model"], t["method"], t["benchmark"], t["problem_id"], t["present"], t["status"], t["parsed"],
            t[ok], t["final_model"], t["expected"]):
        pr = cur.get((m, x, b, pid))
        if pr is None:
            pr = cur[(m, x, b, pid)] = {"n": 0, "c": 0, "subs": [], "models": [], "expected": exp}
            per_group.setdefault((m, x, b), []).append(pr)
        pr["n"] += 1
        pr["c"] += bool(okv) if okv is not None and okv == okv else 0
        pr["subs"].append(pp if pres and st != "error" else None)
        pr["models"].append(fm)
    max_n = max((pr["n"] for probs in per_group.values() for pr in probs), default=0)
    ks = k_values(max_n)
    curve_rows: list[dict[str, Any]] = []
    sel_rows: dict[tuple[str, str], dict[str, Any]] = {}
    for g, probs in per_group.items():
        known_expected = all(pr["expected"] is not None for pr in probs)
        for k in ks:
            defined = bool(probs) and all(pr["n"] >= k for pr in probs)
            pk = mean_pass_at_k([(pr["n"], pr["c"]) for pr in probs], k) if defined else None
            mk = (sum(maj_at_k(pr["subs"], pr["expected"], profile, k) for pr in probs) / len(probs)
                  if defined and known_expected else None)
            curve_rows.append(dict(zip(GROUP, g), k=k, n_problems=len(probs), **{"pass@k": pk, "maj@k": mk}))
        row = sel_rows.setdefault(g[:2], {"model": g[0], "method": g[1]})
        b = g[2]
        ns = {pr["n"] for pr in probs}
        n = min(ns) if ns else 0
        row[f"n:{b}"] = n if len(ns) == 1 else f"{min(ns)}-{max(ns)}"
        planned = prep.planned[g]
        row[f"avg:{b}"] = sum(pr["c"] for pr in probs) / planned if planned else None
        row[f"pass@n:{b}"] = mean_if_all([pass_at_k(pr["n"], pr["c"], pr["n"]) for pr in probs]) if probs and n else None
        if known_expected and probs:
            row[f"maj@n:{b}"] = sum(grade_parsed(majority_answer(pr["subs"], profile), pr["expected"], profile)
                                    for pr in probs) / len(probs)
            row[f"orr1@n:{b}"] = sum(grade_parsed(orr1_vote(pr["subs"]), pr["expected"], profile)
                                     for pr in probs) / len(probs)
            row[f"isc@n:{b}"] = sum(grade_parsed(isc_select(pr["subs"], pr["models"], profile)[0], pr["expected"], profile)
                                    for pr in probs) / len(probs)
        else:
            row[f"maj@n:{b}"] = row[f"orr1@n:{b}"] = row[f"isc@n:{b}"] = None
        row[f"isc_unscored:{b}"] = sum(unscored(pr["subs"], pr["models"]) for pr in probs)
    sel = pd.DataFrame(list(sel_rows.values())).astype(object)
    sel = sel.where(sel.notna(), None)
    for c in sel.columns:  # counts stay integers (a benchmark absent for some rows made them float)
        if c.startswith(("n:", "isc_unscored:")):
            sel[c] = [int(v) if isinstance(v, float) and v.is_integer() else v for v in sel[c]]
    if len(sel):
        benches = sorted({g[2] for g in per_group})
        for kind in ("avg", "pass@n", "maj@n", "orr1@n", "isc@n"):
            vals = [[r.get(f"{kind}:{b}") for b in benches] for r in sel.to_dict("records")]
            sel[f"{kind}:{MACRO}"] = [sum(v) / len(v) if v and all(x is not None and not pd.isna(x) for x in v) else None
                                      for v in vals]
        kinds = ("n", "avg", "pass@n", "maj@n", "orr1@n", "isc@n", "isc_unscored")
        order = ["model", "method"] + [f"{kind}:{b}" for b in benches + [MACRO] for kind in kinds
                                       if f"{kind}:{b}" in sel.columns]
        sel = sel[order]
    return pd.DataFrame(curve_rows, columns=GROUP + ["k", "n_problems", "pass@k", "maj@k"]), sel
