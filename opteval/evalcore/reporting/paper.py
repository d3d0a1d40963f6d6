"""The harness paper's results section from several sweeps' ledgers at once.

Why a module of its own: the single-sweep report (``report.py``) reads one ledger; the paper's
Table 1 rests on the ``table1`` sweep, Table 2 and Figures 2-3 on ``paper``, Figure 4 on
``figure4`` and Figure 5 on ``extra_backbones``. :func:`merge` joins those ledgers when they
share benchmarks, grading and plans (refusing a mix in one line), and :func:`write_paper` writes
every artefact under the paper's name (:data:`ARTEFACTS`), each stating which sweeps and how
many planned / scored trajectories it rests on.

Each ledger is read with column projection (:data:`LEDGER_COLUMNS`): the per-call and
per-execution JSON columns are never loaded. Accuracy is correct / *planned* (missing and
``status=error`` trajectories count as wrong, their cells get a dagger), regraded from the
submission text where an answer key is given, as the single-sweep report does.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from opteval.evalcore.grading import grade_parsed, parse_submission
from opteval.evalcore.metrics import macro
from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.protocols import protocol_notes
from opteval.evalcore.reporting import paper_figures as figs
from opteval.evalcore.reporting.plots import safe_name
from opteval.evalcore.reporting.table1 import METHOD_LABELS, TABLE1_BENCHMARKS, TABLE1_METHODS
from opteval.evalcore.reporting.tables import BEST, DAGGER, MACRO, SECOND, main_table_from_summary

# Only these columns of a ledger are read (pyarrow column projection).
LEDGER_COLUMNS = ("key", "status", "submission", "correct", "grading_profile", "prompt_tokens",
                  "completion_tokens", "simulated", "budgets", "committed_at")
GROUP = ["model", "method", "benchmark"]
MATCHED = "‡"  # a cell run under a matched budget (budgets.match)

# The paper's backbones in its order (configs/sweeps/paper.yaml; a test keeps them equal), its
# non-Qwen backbones (Figure 5, configs/sweeps/extra_backbones.yaml) and Figure 4's frozen
# backbone and post-trained models (configs/sweeps/figure4.yaml).
PAPER_BACKBONES = ("Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B", "Qwen3.5-0.8B", "Qwen3.5-2B",
                   "Qwen3.5-4B", "Qwen3.5-9B", "Qwen3.5-27B", "Qwen3.6-27B")
EXTRA_BACKBONES = ("DeepSeek-R1-Distill-Llama-8B", "Phi-4-reasoning", "Magistral-Small-2509", "GPT-OSS-20B")
FIGURE4_BACKBONE = "Qwen3-8B"
POST_TRAINED = ("ORLM-LLaMA-3-8B", "SIRL-Qwen2.5-7B-Gurobi", "LLMOPT-Qwen2.5-14B", "StepORLM-Qwen3-8B")
STUDY_METHODS = ("direct", "opticycle", "optistate")
BASELINES = tuple(m for m in TABLE1_METHODS if m not in STUDY_METHODS)

# The artefacts, named after the paper's (pinned: other tools read them), each with its files.
ARTEFACTS: dict[str, tuple[str, ...]] = {
    "table1": (".md", ".csv"), "table2": (".md", ".csv"), "figure2_left": (".png", ".csv"),
    "figure2_right": (".png", ".csv"), "figure3": (".png", ".csv"), "figure4": (".png", ".csv"),
    "figure5": (".png", ".csv"),
}
PER_BENCHMARK = "per_benchmark_{model}"  # .md and .csv per backbone (the paper's Tables 5 and 6)
BUDGET_CURVE = "budget_curve"  # .png and .csv, when a (model, method) ran at several matched budgets


class PaperReportError(ValueError):
    """Ledgers that cannot be merged (grading, plans) or graded; the message is one line."""


@dataclass
class SweepData:
    """One sweep as the merged report needs it: its plan (``key, model, method, benchmark,
    problem_id, sample``), its committed rows (:data:`LEDGER_COLUMNS`), the grading profile per
    benchmark and the answer keys (a benchmark without one keeps the stored grades)."""

    name: str
    plan: pd.DataFrame
    rows: pd.DataFrame
    grading: Mapping[str, str]
    answer_keys: Mapping[str, AnswerKey] = field(default_factory=dict)


@dataclass
class Merged:
    """One row per (model, method, benchmark) of the merged sweeps (``cells``; ``sweep`` says
    whose), every budget level of a cell (``levels``, for the budget curve) and what the
    merge decided (``notes``)."""

    cells: pd.DataFrame
    levels: pd.DataFrame
    sweeps: list[str]
    notes: list[str] = field(default_factory=list)


# -- one sweep's cells -----------------------------------------------------------------------------


def budget_label(budgets: Any) -> str | None:
    """``tokens=N`` / ``calls=N`` for a trajectory run under ``budgets.match``, else None."""
    if budgets is None or (isinstance(budgets, float) and math.isnan(budgets)):
        return None
    try:
        b = json.loads(budgets) if isinstance(budgets, str) else dict(budgets)
    except (TypeError, ValueError):
        return None
    kind = b.get("match") if isinstance(b, dict) else None
    if kind == "tokens":
        return f"tokens={b.get('max_total_tokens')}"
    if kind == "calls":
        return f"calls={b.get('max_calls')}"
    return None


def _latest(rows: pd.DataFrame) -> pd.DataFrame:
    """A retried key keeps its last committed row (as the single-sweep report)."""
    if len(rows) and rows["key"].duplicated().any():
        if rows["committed_at"].notna().all():
            rows = rows.sort_values("committed_at", kind="stable")
        rows = rows.drop_duplicates("key", keep="last")
    return rows


def sweep_cells(sweep: SweepData) -> pd.DataFrame:
    """Per (model, method, benchmark, budget): planned, scored (committed without error),
    missing, correct, tokens per scored trajectory, simulated, and the sweep's name."""
    rows = _latest(sweep.rows.reindex(columns=list(LEDGER_COLUMNS)))
    t = sweep.plan[["key", *GROUP, "problem_id"]].merge(rows, on="key", how="left")
    present = t["status"].notna() & (t["status"] != "error")
    ok, tokens = [], []
    for bench, pid, pres, sub, stored, prof_used, pt, ct in zip(
            t["benchmark"], t["problem_id"], present, t["submission"], t["correct"], t["grading_profile"],
            t["prompt_tokens"], t["completion_tokens"]):
        profile = sweep.grading.get(bench)
        if profile is None:
            raise PaperReportError(f"sweep {sweep.name}: no grading profile for benchmark {bench!r}")
        key = sweep.answer_keys.get(bench)
        if not pres:
            ok.append(False)
        elif key is not None:
            if pid not in key.answers:
                raise PaperReportError(f"sweep {sweep.name}: answer key {bench!r} has no problem {pid!r}")
            ok.append(grade_parsed(parse_submission(sub), parse_submission(key.answers[pid]), profile))
        elif prof_used in (None, profile) or (isinstance(prof_used, float) and math.isnan(prof_used)):
            ok.append(bool(stored))
        else:
            raise PaperReportError(f"sweep {sweep.name}: no answer key for {bench!r} and its rows were graded "
                                   f"under {prof_used!r}, not {profile!r}")
        both = pres and pd.notna(pt) and pd.notna(ct)
        tokens.append(float(pt) + float(ct) if both else None)
    t = t.assign(ok=ok, tokens=tokens, present=present,
                 budget=[budget_label(b) if p else None for b, p in zip(t["budgets"], present)])
    t["simulated"] = t["simulated"].fillna(False).astype(bool)
    t["budget"] = t.groupby(GROUP)["budget"].transform(lambda s: s.dropna().iloc[0] if s.notna().any() else None)
    out = t.groupby(GROUP + ["budget"], dropna=False, sort=True).agg(
        planned=("key", "size"), scored=("present", "sum"), correct=("ok", "sum"),
        tokens_mean=("tokens", "mean"), tokens_n=("tokens", "count"), simulated=("simulated", "any")).reset_index()
    out["missing"] = out["planned"] - out["scored"]
    out["tokens_missing"] = out["scored"] - out["tokens_n"]
    out["tokens_mean"] = [None if pd.isna(v) else float(v) for v in out["tokens_mean"]]
    out["budget"] = [None if pd.isna(v) else v for v in out["budget"]]
    out["errors"] = 0  # error rows are already in ``missing``
    out["cached_mean"] = None
    out["sweep"] = sweep.name
    return out.drop(columns="tokens_n")


# -- merging -----------------------------------------------------------------------------------------


def _grid(plan: pd.DataFrame) -> dict[str, frozenset[tuple[str, int]]]:
    return {b: frozenset(zip(g["problem_id"], g["sample"].astype(int))) for b, g in plan.groupby("benchmark")}


def merge(sweeps: Sequence[SweepData]) -> Merged:
    """The sweeps' cells in one frame. Refused (one line): two sweeps grading a shared benchmark
    under different profiles, or planning different (problem, sample) cells for it, or a sweep
    sharing no benchmark with the first. A (model, method, benchmark) in several sweeps at the
    same budget is taken from the first sweep named (said in ``notes``); at different matched
    budgets every level is kept in ``levels`` for the budget curve."""
    if not sweeps:
        raise PaperReportError("no sweep to report")
    names = [s.name for s in sweeps]
    if len(set(names)) != len(names):
        raise PaperReportError(f"a sweep is named twice: {','.join(names)}")
    grids = {s.name: _grid(s.plan) for s in sweeps}
    first = sweeps[0]
    for s in sweeps[1:]:
        if not set(grids[s.name]) & set(grids[first.name]):
            raise PaperReportError(f"sweeps {first.name} and {s.name} share no benchmark; a merged report needs "
                                   "the same benchmarks")
    for i, a in enumerate(sweeps):
        for b in sweeps[i + 1:]:
            for bench in sorted(set(grids[a.name]) & set(grids[b.name])):
                pa_, pb = a.grading.get(bench), b.grading.get(bench)
                if pa_ != pb:
                    raise PaperReportError(f"sweeps {a.name} and {b.name} grade {bench} differently ({pa_} vs {pb}); "
                                           "a merged report needs one grading rule")
                ga, gb = grids[a.name][bench], grids[b.name][bench]
                if ga != gb:
                    raise PaperReportError(f"sweeps {a.name} and {b.name} plan {bench} differently ({len(ga)} vs "
                                           f"{len(gb)} problem x sample cells, {len(ga ^ gb)} not shared); a merged "
                                           "report needs the same plan per benchmark")
    allc = pd.concat([sweep_cells(s) for s in sweeps], ignore_index=True)
    allc["_order"] = allc["sweep"].map({n: i for i, n in enumerate(names)})
    allc = allc.sort_values(["_order", *GROUP], kind="stable")
    levels = allc.drop_duplicates([*GROUP, "budget"], keep="first").drop(columns="_order").reset_index(drop=True)
    dup = allc.duplicated(GROUP, keep="first")
    notes = []
    for (model, method), g in allc[dup].groupby(["model", "method"], sort=False):
        used = allc[~dup & (allc["model"] == model) & (allc["method"] == method)]["sweep"].iloc[0]
        notes.append(f"{model}/{method} is also in sweep {', '.join(sorted(set(g['sweep'])))}: "
                     f"the report uses sweep {used}'s")
    cells = allc[~dup].drop(columns="_order").reset_index(drop=True)
    return Merged(cells=cells, levels=levels, sweeps=names, notes=notes)


# -- layouts -----------------------------------------------------------------------------------------


def benchmarks_of(cells: pd.DataFrame) -> list[str]:
    """The paper's nine in its order where present, then any other benchmark alphabetically."""
    present = set(cells["benchmark"])
    return [b for b in TABLE1_BENCHMARKS if b in present] + sorted(present - set(TABLE1_BENCHMARKS))


def provenance(cells: pd.DataFrame, order: Sequence[str]) -> str:
    """``rests on sweep A: P planned, S scored trajectories; sweep B: ...``."""
    parts = []
    for name in order:
        g = cells[cells["sweep"] == name]
        if len(g):
            parts.append(f"sweep {name}: {int(g['planned'].sum())} planned, {int(g['scored'].sum())} scored trajectories")
    return "rests on " + "; ".join(parts)


def _main(cells: pd.DataFrame, benches: Sequence[str]) -> pd.DataFrame:
    """``tables.main_table_from_summary`` (accuracy, best/second per backbone, daggers) plus
    per (model, method): the budget label, the sweep, planned and scored."""
    table = main_table_from_summary(cells, benches)
    if not len(table):
        return table
    per = cells.groupby(["model", "method"], sort=True).agg(
        sweep=("sweep", "first"), planned=("planned", "sum"), scored=("scored", "sum"),
        budget=("budget", lambda s: next((v for v in s if v is not None), None))).reset_index()
    return table.merge(per, on=["model", "method"], how="left")


def _rank(values: Sequence[str], order: Sequence[str]) -> list[tuple[int, str]]:
    pos = {v: i for i, v in enumerate(order)}
    return [(pos.get(v, len(order)), v) for v in values]


def _sort(table: pd.DataFrame, models: Sequence[str], methods: Sequence[str]) -> pd.DataFrame:
    t = table.assign(_m=_rank(list(table["model"]), models), _x=_rank(list(table["method"]), methods))
    return t.sort_values(["_m", "_x"], kind="stable").drop(columns=["_m", "_x"]).reset_index(drop=True)


def cell_text(v: Any, mark: str = "", dagger: bool = False, matched: bool = False) -> str:
    """A percentage with two decimals: **best**, <u>second</u>, † missing scores, ‡ matched budget."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    s = f"{100 * float(v):.2f}"
    if mark == BEST:
        s = f"**{s}**"
    elif mark == SECOND:
        s = f"<u>{s}</u>"
    return s + (DAGGER if dagger else "") + (MATCHED if matched else "")


def _pct(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(100 * float(v), 2)


def _csv(table: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """CSV layout: percentages (2 decimals), ``<c>_mark``, ``<c>_dagger``, and per row its
    budget, sweep, planned and scored trajectories."""
    out = table[["model", "method"]].copy()
    for c in cols:
        out[c] = [_pct(v) for v in table[c]]
        out[f"{c}_mark"] = table[f"{c}:mark"].values
        out[f"{c}_dagger"] = table[f"{c}:dagger"].astype(bool).values
    for c in ("simulated", "budget", "sweep", "planned", "scored"):
        out[c] = table[c].values
    return out


def _legend(table: pd.DataFrame) -> list[str]:
    lines = [f"{DAGGER}: missing scores counted as failures (in the denominator)."]
    budgets = sorted({b for b in table["budget"] if b is not None})
    if budgets:
        lines.append(f"{MATCHED}: run under a matched budget ({', '.join(budgets)} per trajectory, every method).")
    if bool(table["simulated"].any()):
        lines.append("Rows marked (simulated) come from the simulated policy: not a model's accuracy.")
    return lines


@dataclass
class Artefact:
    """One written artefact: its name, files and provenance line."""

    name: str
    files: list[Path]
    rests_on: str


def table1_artefact(m: Merged, benches: Sequence[str]) -> tuple[pd.DataFrame, str] | None:
    """Table 1: the backbones that ran a baseline, the nine methods in the paper's order as rows,
    benchmarks, Macro and thousand tokens per trajectory as columns."""
    models = sorted(set(m.cells[m.cells["method"].isin(BASELINES)]["model"]))
    if not models:
        return None
    cells = m.cells[m.cells["model"].isin(models) & m.cells["method"].isin(TABLE1_METHODS)]
    table = _sort(_main(cells, benches), PAPER_BACKBONES, TABLE1_METHODS)
    tok = _tokens_k(cells, benches)
    table["tokens_k"] = [tok.get((a, b)) for a, b in zip(table["model"], table["method"])]
    cols = [*benches, MACRO]
    lines = ["# Table 1: harnesses and adapted baselines per backbone (avg@k, %)", "", provenance(cells, m.sweeps), ""]
    for model, g in table.groupby("model", sort=False):
        lines += [f"**{model}**", "", "| method | " + " | ".join(cols) + " | tokens/traj (k) |",
                  "|---|" + "---:|" * (len(cols) + 1)]
        for r in g.to_dict("records"):
            label = METHOD_LABELS.get(r["method"], r["method"]) + (" (simulated)" if r["simulated"] else "")
            row = [cell_text(r[c], r[f"{c}:mark"], r[f"{c}:dagger"], r["budget"] is not None) for c in cols]
            tk = "—" if r["tokens_k"] is None else f"{r['tokens_k']:.2f}"
            lines.append(f"| {label} | " + " | ".join(row) + f" | {tk} |")
        lines.append("")
    lines += _legend(table)
    csv = _csv(table, cols)
    csv.insert(2, "label", [METHOD_LABELS.get(x, x) for x in table["method"]])
    csv["tokens_k"] = [None if v is None else round(v, 3) for v in table["tokens_k"]]
    return csv, "\n".join(lines) + "\n"


def _tokens_k(cells: pd.DataFrame, benches: Sequence[str]) -> dict[tuple[str, str], float | None]:
    """Thousand tokens per scored trajectory: mean within each benchmark, then the unweighted
    mean over benchmarks (paper A.1); None when a benchmark has no count."""
    out: dict[tuple[str, str], float | None] = {}
    for (model, method), g in cells.groupby(["model", "method"]):
        by_b = dict(zip(g["benchmark"], g["tokens_mean"]))
        vals = [by_b.get(b) for b in benches]
        ok = all(v is not None and not pd.isna(v) for v in vals)
        out[(model, method)] = sum(float(str(v)) for v in vals) / len(vals) / 1000.0 if ok and vals else None
    return out


def backbone_order(models: Sequence[str]) -> list[str]:
    """The paper's backbones in its order, then the others alphabetically."""
    return [b for b in PAPER_BACKBONES if b in models] + sorted(set(models) - set(PAPER_BACKBONES))


def table2_models(cells: pd.DataFrame) -> list[str]:
    """Table 2's backbones: every model that ran a study method, but for Figure 4's post-trained
    models and Figure 5's non-Qwen backbones, in the paper's order."""
    ran = set(cells[cells["method"].isin(STUDY_METHODS)]["model"])
    return backbone_order(sorted(ran - set(POST_TRAINED) - set(EXTRA_BACKBONES)))


def table2_artefact(m: Merged, benches: Sequence[str]) -> tuple[pd.DataFrame, str] | None:
    """Table 2: Macro per backbone (rows, the paper's order) x Direct / OptiCycle / OptiState."""
    models = table2_models(m.cells)
    if not models:
        return None
    cells = m.cells[m.cells["model"].isin(models) & m.cells["method"].isin(STUDY_METHODS)]
    main = _main(cells, benches)
    by = {(r["model"], r["method"]): r for r in main.to_dict("records")}
    labels = [METHOD_LABELS[x] for x in STUDY_METHODS]
    lines = ["# Table 2: Macro avg@k (%) per backbone", "", provenance(cells, m.sweeps), "",
             "| backbone | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    rows = []
    for model in models:
        row: dict[str, Any] = {"model": model}
        texts = []
        for x, label in zip(STUDY_METHODS, labels):
            r = by.get((model, x))
            v = None if r is None else r[MACRO]
            dag = bool(r is not None and r[f"{MACRO}:dagger"])
            mk = "" if r is None else r[f"{MACRO}:mark"]
            matched = bool(r is not None and r["budget"] is not None)
            texts.append(cell_text(v, mk, dag, matched))
            row.update({label: _pct(v), f"{label}_mark": mk, f"{label}_dagger": dag,
                        f"{label}_budget": None if r is None else r["budget"],
                        f"{label}_sweep": None if r is None else r["sweep"],
                        f"{label}_planned": 0 if r is None else int(r["planned"]),
                        f"{label}_scored": 0 if r is None else int(r["scored"])})
        sim = any(r["simulated"] for (mm, _), r in by.items() if mm == model)
        row["simulated"] = sim
        lines.append(f"| {model}{' (simulated)' if sim else ''} | " + " | ".join(texts) + " |")
        rows.append(row)
    lines += [""] + _legend(main)
    return pd.DataFrame(rows), "\n".join(lines) + "\n"


def per_benchmark_artefacts(m: Merged, benches: Sequence[str]) -> dict[str, tuple[pd.DataFrame, str]]:
    """Per backbone, methods as rows and every benchmark plus Macro as columns (the paper's
    Tables 5 and 6): ``per_benchmark_<model>``."""
    out: dict[str, tuple[pd.DataFrame, str]] = {}
    table = _sort(_main(m.cells, benches), PAPER_BACKBONES, TABLE1_METHODS)
    cols = [*benches, MACRO]
    for model, g in table.groupby("model", sort=False):
        cells = m.cells[m.cells["model"] == model]
        lines = [f"# {model}: avg@k (%) per benchmark", "", provenance(cells, m.sweeps), "",
                 "| method | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        for r in g.to_dict("records"):
            label = METHOD_LABELS.get(r["method"], r["method"]) + (" (simulated)" if r["simulated"] else "")
            lines.append(f"| {label} | " + " | ".join(
                cell_text(r[c], r[f"{c}:mark"], r[f"{c}:dagger"], r["budget"] is not None) for c in cols) + " |")
        lines += [""] + _legend(g)
        out[PER_BENCHMARK.format(model=safe_name(model))] = (_csv(g, cols), "\n".join(lines) + "\n")
    return out


def macro_frame(m: Merged, benches: Sequence[str]) -> pd.DataFrame:
    """One row per (model, method): ``macro`` (fraction; None when a benchmark is absent),
    ``dagger``, ``budget``, ``simulated``, ``tokens_k``, ``sweep``, ``planned``, ``scored``."""
    main = _main(m.cells, benches)
    if not len(main):
        return pd.DataFrame(columns=["model", "method", "macro", "dagger", "budget", "simulated", "tokens_k",
                                     "sweep", "planned", "scored"])
    tok = _tokens_k(m.cells, benches)
    return pd.DataFrame({"model": main["model"], "method": main["method"], "macro": main[MACRO],
                         "dagger": main[f"{MACRO}:dagger"].astype(bool), "budget": main["budget"],
                         "simulated": main["simulated"].astype(bool),
                         "tokens_k": [tok.get(k) for k in zip(main["model"], main["method"])],
                         "sweep": main["sweep"], "planned": main["planned"], "scored": main["scored"]})


def figure2_left_frame(mf: pd.DataFrame) -> pd.DataFrame:
    """OptiState - OptiCycle Macro (points) per backbone that ran both, the paper's order."""
    rows = []
    by = {(r["model"], r["method"]): r for r in mf.to_dict("records")}
    for model in table2_models(mf):
        c, s = by.get((model, "opticycle")), by.get((model, "optistate"))
        if c is None or s is None or c["macro"] is None or s["macro"] is None:
            continue
        rows.append({"model": model, "opticycle": _pct(c["macro"]), "optistate": _pct(s["macro"]),
                     "delta_points": round(100 * (float(s["macro"]) - float(c["macro"])), 2),
                     "dagger": bool(c["dagger"] or s["dagger"]),
                     "matched": bool(c["budget"] is not None or s["budget"] is not None),
                     "simulated": bool(c["simulated"] or s["simulated"]), "sweep": c["sweep"],
                     "planned": int(c["planned"]) + int(s["planned"]), "scored": int(c["scored"]) + int(s["scored"])})
    return pd.DataFrame(rows)


def _subset(mf: pd.DataFrame, models: Sequence[str], methods: Sequence[str] | None = None) -> pd.DataFrame:
    g = mf[mf["model"].isin(models)]
    if methods is not None:
        g = g[g["method"].isin(methods)]
    g = _sort(g, list(models), list(methods or TABLE1_METHODS))
    out = g.assign(macro=[_pct(v) for v in g["macro"]],
                   tokens_k=[None if v is None else round(float(v), 3) for v in g["tokens_k"]])
    out.insert(2, "label", [METHOD_LABELS.get(x, x) for x in out["method"]])
    return out.rename(columns={"macro": "macro_pct"})


def _cells_of(m: Merged, frame: pd.DataFrame) -> pd.DataFrame:
    if not len(frame):
        return m.cells.iloc[0:0]
    keys = set(zip(frame["model"], frame["method"]))
    return m.cells[[k in keys for k in zip(m.cells["model"], m.cells["method"])]]


def write_paper(m: Merged, out: Path, model_meta: Mapping[str, Mapping[str, Any]] | None = None) -> list[Artefact]:
    """Write every artefact the merged sweeps hold into ``out`` and ``index.md`` listing them
    (and the ones not written, with the reason); returns what was written."""
    out.mkdir(parents=True, exist_ok=True)
    benches = benchmarks_of(m.cells)
    written: list[Artefact] = []
    skipped: list[str] = []

    def table(name: str, built: tuple[pd.DataFrame, str] | None, cells: pd.DataFrame, why: str) -> None:
        if built is None:
            skipped.append(f"{name}: {why}")
            return
        csv, md = built
        (out / f"{name}.md").write_text(md)
        csv.to_csv(out / f"{name}.csv", index=False)
        written.append(Artefact(name, [out / f"{name}.md", out / f"{name}.csv"], provenance(cells, m.sweeps)))

    def figure(name: str, frame: pd.DataFrame, cells: pd.DataFrame, draw: Any, why: str) -> None:
        if not len(frame):
            skipped.append(f"{name}: {why}")
            return
        rests = provenance(cells, m.sweeps)
        frame.assign(rests_on=rests).to_csv(out / f"{name}.csv", index=False)
        png = draw(frame, out / f"{name}.png", rests)
        written.append(Artefact(name, [png, out / f"{name}.csv"], rests))

    t1 = table1_artefact(m, benches)
    table("table1", t1, m.cells[m.cells["model"].isin(set(t1[0]["model"]) if t1 else set())
                                & m.cells["method"].isin(TABLE1_METHODS)], "no backbone ran an adapted baseline")
    t2 = table2_artefact(m, benches)
    table("table2", t2, m.cells[m.cells["model"].isin(table2_models(m.cells)) & m.cells["method"].isin(STUDY_METHODS)],
          "no backbone ran Direct, OptiCycle or OptiState")
    for name, built in per_benchmark_artefacts(m, benches).items():
        model = str(built[0]["model"].iloc[0])
        table(name, built, m.cells[m.cells["model"] == model], "")
    mf = macro_frame(m, benches)
    f2l = figure2_left_frame(mf)
    figure("figure2_left", f2l, m.cells[m.cells["model"].isin(set(f2l.get("model", [])))
                                        & m.cells["method"].isin(("opticycle", "optistate"))],
           figs.figure2_left, "no backbone ran both OptiCycle and OptiState")
    t1_models = sorted(set(t1[0]["model"])) if t1 else []
    f2r = _subset(mf, backbone_order(t1_models))
    figure("figure2_right", f2r, _cells_of(m, f2r), figs.figure2_right, "no Table 1 backbone")
    f3 = _figure3_frame(mf, model_meta or {})
    figure("figure3", f3, _cells_of(m, f3), figs.figure3, "no study backbone with a known family and size")
    f4 = _subset(mf, [FIGURE4_BACKBONE, *POST_TRAINED])
    f4 = f4[(f4["model"] != FIGURE4_BACKBONE) | f4["method"].isin(("opticycle", "optistate"))]
    if not f4["model"].isin(POST_TRAINED).any():
        f4 = f4.iloc[0:0]
    f4 = f4.assign(note=[" ".join(protocol_notes([(a, b)], {k: v.get("family") for k, v in (model_meta or {}).items()}))
                         or None for a, b in zip(f4["model"], f4["method"])])
    figure("figure4", f4, _cells_of(m, f4), figs.figure4, "no post-trained model (configs/sweeps/figure4.yaml)")
    f5 = _subset(mf, [b for b in EXTRA_BACKBONES if b in set(mf["model"])], STUDY_METHODS)
    figure("figure5", f5, _cells_of(m, f5), figs.figure5, "no non-Qwen backbone (configs/sweeps/extra_backbones.yaml)")
    curve = budget_curve_frame(m, benches)
    if len(curve):
        figure(BUDGET_CURVE, curve, m.levels[m.levels["budget"].notna()], figs.budget_curve, "")
    _index(m, out, written, skipped)
    return written


def _figure3_frame(mf: pd.DataFrame, meta: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Macro against size per family (Table 2's backbones and methods)."""
    g = mf[mf["model"].isin(table2_models(mf)) & mf["method"].isin(STUDY_METHODS)]
    rows = []
    for r in g.to_dict("records"):
        info = meta.get(r["model"]) or {}
        if info.get("size_b") is None or r["macro"] is None:
            continue
        rows.append({"family": str(info.get("family") or r["model"]), "model": r["model"], "size_b": float(info["size_b"]),
                     "method": r["method"], "label": METHOD_LABELS[r["method"]], "macro_pct": _pct(r["macro"]),
                     "dagger": r["dagger"], "budget": r["budget"], "simulated": r["simulated"], "sweep": r["sweep"],
                     "planned": r["planned"], "scored": r["scored"]})
    return pd.DataFrame(rows).sort_values(["family", "method", "size_b"]).reset_index(drop=True) if rows else pd.DataFrame()


def budget_curve_frame(m: Merged, benches: Sequence[str]) -> pd.DataFrame:
    """Macro per (model, method, matched budget) where a (model, method) ran at two or more
    matched budgets (one sweep per level, as a budget is one setting of a sweep)."""
    lv = m.levels[m.levels["budget"].notna()]
    rows = []
    for (model, method), g in lv.groupby(["model", "method"], sort=True):
        if g["budget"].nunique() < 2:
            continue
        for budget, gb in g.groupby("budget", sort=False):
            by_b = {r["benchmark"]: r for r in gb.to_dict("records")}
            if not all(b in by_b for b in benches):
                continue
            acc = macro([by_b[b]["correct"] / by_b[b]["planned"] for b in benches])
            kind, _, value = str(budget).partition("=")
            rows.append({"model": model, "method": method, "label": METHOD_LABELS.get(method, method), "match": kind,
                         "budget": int(value), "macro_pct": round(100 * acc, 2),
                         "dagger": bool(sum(int(r["missing"]) for r in by_b.values())),
                         "simulated": bool(gb["simulated"].any()), "sweep": str(gb["sweep"].iloc[0]),
                         "planned": int(gb["planned"].sum()), "scored": int(gb["scored"].sum())})
    df = pd.DataFrame(rows)
    return df.sort_values(["model", "method", "match", "budget"]).reset_index(drop=True) if len(df) else df


def _index(m: Merged, out: Path, written: list[Artefact], skipped: list[str]) -> None:
    lines = ["# The paper's results section", "", f"Merged sweeps: {', '.join(m.sweeps)}.", ""]
    lines += [f"- `{a.name}` ({', '.join(p.name for p in a.files)}): {a.rests_on}" for a in written]
    if skipped:
        lines += ["", "Not written:", ""] + [f"- {s}" for s in skipped]
    if m.notes:
        lines += ["", "Cells in several sweeps:", ""] + [f"- {n}" for n in m.notes]
    (out / "index.md").write_text("\n".join(lines) + "\n")


__all__ = ["ARTEFACTS", "LEDGER_COLUMNS", "MATCHED", "Merged", "PaperReportError", "SweepData", "merge",
           "sweep_cells", "write_paper", "budget_label"]
