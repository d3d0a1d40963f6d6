"""What a SemOPT run is judged by (the SemOPT paper, 5.1-5.4), from the ledger only.

Per (model, method, benchmark) and pooled (benchmark ``all``):

* **Pass@N**: at least one of the trajectory's N evaluated candidates (C_init and the search's
  leaves, each graded from its own execution's submission) is correct; **Best-of-N**: the
  candidate the critic R ranked best -- the trajectory's answer -- is correct (5.1).
* **gate acceptance rate**: accepted C_init / trajectories whose gate decided (4.1).
* **calls per trajectory**: mean, median, p90, max, per stage, and for each gate regime; plus
  the distribution (``calls_distribution``: trajectories per number of calls).
* **accuracy by difficulty** (5.2, Robustness): Easy / Medium / Hard from Direct Generation's
  first three samples when the run has a ``direct`` method; otherwise from semopt's own C_init
  (a single-pass sample of the same generator), as the ``source`` column says.

Rows come from :func:`opteval.evalcore.reporting.frame.prepare` (one per planned trajectory; missing
and error rows count as wrong and stay in every denominator). A method is a SemOPT method when
its transcripts carry the harness's ``"semopt"`` candidate annotations. Simulated runs say so.
The paper's Tables 5-8 and 16 (``opteval.evalcore.reporting.semopt_tables``) come with it, each method's
critic is named (the default ``semopt`` method's LLM critic is the paper's critic ablation, not its
trained reward model), and ``opteval report`` writes all of it as its SemOPT section.

    python -m opteval.evalcore.reporting.semopt <sweep dir> [--profile P] [--out semopt.md]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from opteval.evalcore.grading import DEFAULT_PROFILE, grade_parsed, parse_submission
from opteval.evalcore.problems import load_benchmark
from opteval.evalcore.reporting import semopt_tables
from opteval.evalcore.reporting.difficulty import EASY, HARD, LEVELS, MEDIUM, difficulty_labels
from opteval.evalcore.reporting.frame import Prepared, _nn, prepare

STAGES = ("generate", "reflect", "expand", "critic")
KEYS = ["model", "method", "benchmark", "problem_id", "sample"]
SIM_NOTE = "**SIMULATED**: these rows come from the simulated policy; the numbers are not a model's."


@dataclass
class SemoptReport:
    trajectories: pd.DataFrame  # one row per planned trajectory of a semopt method
    summary: pd.DataFrame
    calls_distribution: pd.DataFrame
    difficulty: pd.DataFrame
    simulated: bool
    profile: str = DEFAULT_PROFILE
    critics: dict[str, str] = field(default_factory=dict)  # method -> its critic, labelled
    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)
    table5: pd.DataFrame = field(default_factory=pd.DataFrame)
    table6: pd.DataFrame = field(default_factory=pd.DataFrame)
    table7: pd.DataFrame = field(default_factory=pd.DataFrame)
    table7_source: str = ""
    table8: pd.DataFrame = field(default_factory=pd.DataFrame)
    table16: pd.DataFrame = field(default_factory=pd.DataFrame)

    TABLES = ("summary", "calls_distribution", "difficulty", "table5", "table6", "table7", "table8", "table16")

    def markdown(self, level: int = 1) -> str:
        """The whole section; ``level`` is the heading depth of its title (2 inside report.md)."""
        h, hh = "#" * level, "#" * (level + 1)
        out = [f"{h} SemOPT runs", ""]
        if self.simulated:
            out += [SIM_NOTE, ""]
        out += ["Critic of each SemOPT method:", ""] + [f"- `{m}`: {label}" for m, label in sorted(self.critics.items())]
        out += ["", f"Graded under `{self.profile}`" + (
            " (the SemOPT paper's rule, 5.1: |a-b| < 1e-6). An answer key rounded to fewer decimals than the "
            "optimum (the embedded sample keeps 4) cannot be matched under it, so these accuracies can sit below "
            "the main table's." if self.profile == "semopt" else "."), ""]
        out += [f"{hh} Pass@N, Best-of-N, gate, calls", "", _md(self.summary), "",
                f"{hh} Calls per trajectory (distribution)", "", _md(self.calls_distribution), "",
                f"{hh} Accuracy by difficulty", "", _md(self.difficulty), "",
                f"{hh} Table 5: critic discrimination (AUC / F1)", "",
                "Executed candidates with a critic score; positive = the candidate's own answer is correct; F1 "
                "predicts positive when R > tau. `c_init`: single-pass generations (the paper's test set).", "",
                _md(self.table5), "",
                f"{hh} Table 6: evaluator and hierarchy (Best-of-N accuracy, %)", "", _md(self.table6), "",
                f"{hh} Table 7: efficiency on the combined hard subsets", "",
                f"Hard problems from {self.table7_source or 'no labels'}; accuracy (%), wall seconds and model calls "
                "per trajectory.", "", _md(self.table7), "",
                f"{hh} Table 8: accuracy / API calls per benchmark", "", _md(self.table8), "",
                f"{hh} Table 16: syntactic error handling during search", "",
                "error_rate: evaluated nodes whose first execution gave no objective value; repaired / failed: of "
                "those, fixed by reflection / still failing (score 0).", "",
                _md(self.table16) if len(self.table16) else "(no rows: the ledger predates the harness's "
                "`first_failed` annotation)", "",
                f"{hh} Not produced", ""] + [f"- {line}" for line in semopt_tables.NOT_PRODUCED] + [""]
        return "\n".join(out)

    def write(self, tables_dir: Path) -> list[Path]:
        """``semopt_<table>.csv`` per table under ``tables_dir``."""
        paths = []
        for name in self.TABLES:
            p = tables_dir / f"semopt_{name}.csv"
            getattr(self, name).to_csv(p, index=False)
            paths.append(p)
        return paths


def semopt_trajectories(prep: Prepared, profile: str = DEFAULT_PROFILE) -> pd.DataFrame:
    """One row per planned trajectory of every semopt method: its candidates graded."""
    t = prep.traj
    rows = []
    has_ann = [bool(x) for x in t["semopt_ann"]]
    methods = {m for m, ann in zip(t["method"], has_ann) if ann}
    # only the semopt methods' rows and the columns read below: the frame has every planned trajectory
    keep = t["method"].isin(methods).to_numpy(bool)
    used = list(dict.fromkeys(KEYS + ["semopt_ann", "semopt_subs", "expected", "present", "semopt_stages",
                                      f"ok_{profile}", "simulated", "semopt_n_calls"]))
    for row in t.loc[keep, used].itertuples(index=False):
        ann, subs = _annotations(row.semopt_ann), row.semopt_subs or []
        expected = row.expected
        graded = []
        for a in ann:
            e = a.get("exec")
            sub = subs[e] if isinstance(e, int) and 0 <= e < len(subs) else None
            graded.append(bool(row.present) and sub is not None and grade_parsed(parse_submission(sub), expected, profile))
        stages = dict(zip(STAGES, row.semopt_stages))
        gate = next((a.get("gate") for a in ann if "gate" in a), None)
        ok = bool(getattr(row, f"ok_{profile}") or False)
        rows.append({
            **{k: getattr(row, k) for k in KEYS}, "present": bool(row.present),
            "simulated": bool(_nn(row.simulated) or False), "gate": gate, "n_candidates": len(ann),
            "n_calls": int(row.semopt_n_calls), **{f"calls_{s}": int(stages.get(s, 0)) for s in STAGES},
            "best_of_n": ok, "pass_at_n": ok or any(graded), "init_ok": bool(graded[0]) if graded else False,
        })
    cols = KEYS + ["present", "simulated", "gate", "n_candidates", "n_calls"] + [f"calls_{s}" for s in STAGES] + [
        "best_of_n", "pass_at_n", "init_ok"]
    return pd.DataFrame(rows, columns=cols)


def _annotations(ann: Any) -> list[dict[str, Any]]:
    """A row's candidate annotations (frame.reduce_rows) by candidate."""
    return sorted(ann or [], key=lambda a: a.get("candidate", 0))


def _pct(x: pd.Series) -> float | None:
    return round(100.0 * float(x.mean()), 2) if len(x) else None


def _stats(g: pd.DataFrame) -> dict[str, Any]:
    calls = g["n_calls"].to_numpy(dtype=float)
    decided = g[g["gate"].isin(["accept", "search"])]
    acc, srch = g[g["gate"] == "accept"], g[g["gate"].isin(["search", "off"])]
    return {
        "trajectories": len(g), "pass_at_n": _pct(g["pass_at_n"]), "best_of_n": _pct(g["best_of_n"]),
        "init_acc": _pct(g["init_ok"]), "mean_candidates": round(float(g["n_candidates"].mean()), 2) if len(g) else None,
        "gate_accept_rate": _pct(decided["gate"] == "accept") if len(decided) else None,
        "accepted": len(acc), "searched": len(srch),
        "calls_mean": round(float(calls.mean()), 2) if len(g) else None,
        "calls_median": float(np.median(calls)) if len(g) else None,
        "calls_p90": float(np.percentile(calls, 90)) if len(g) else None,
        "calls_max": int(calls.max()) if len(g) else None,
        "calls_mean_accepted": round(float(acc["n_calls"].mean()), 2) if len(acc) else None,
        "calls_mean_searched": round(float(srch["n_calls"].mean()), 2) if len(srch) else None,
        **{f"calls_{s}_mean": round(float(g[f"calls_{s}"].mean()), 2) if len(g) else None for s in STAGES},
    }


def _by_group(t: pd.DataFrame, fn: Callable[[pd.DataFrame], list[dict[str, Any]]]) -> pd.DataFrame:
    rows = []
    for (m, x), gx in t.groupby(["model", "method"], sort=True):
        for b, gb in gx.groupby("benchmark", sort=True):
            rows += [{"model": m, "method": x, "benchmark": b, **r} for r in fn(gb)]
        rows += [{"model": m, "method": x, "benchmark": "all", **r} for r in fn(gx)]
    return pd.DataFrame(rows)


def summary_table(t: pd.DataFrame) -> pd.DataFrame:
    return _by_group(t, lambda g: [_stats(g)])


def calls_distribution(t: pd.DataFrame) -> pd.DataFrame:
    """Trajectories per number of calls, split by the gate's decision (pooled over benchmarks)."""
    rows = []
    for (m, x), g in t.groupby(["model", "method"], sort=True):
        for (gate, n), c in g.groupby([g["gate"].fillna("none"), "n_calls"], sort=True).size().items():
            rows.append({"model": m, "method": x, "gate": gate, "n_calls": int(n), "trajectories": int(c)})
    return pd.DataFrame(rows, columns=["model", "method", "gate", "n_calls", "trajectories"])


def difficulty_strata(prep: Prepared, t: pd.DataFrame, profile: str = DEFAULT_PROFILE) -> pd.DataFrame:
    """Best-of-N and Pass@N per Easy / Medium / Hard; labels from ``direct`` if it ran, else C_init."""
    if (prep.traj["method"] == "direct").any():
        labels, source = difficulty_labels(prep, profile, "direct"), "direct (first 3 samples)"
        lab = labels[["model", "benchmark", "problem_id", "difficulty"]]
        merged = t.merge(lab, on=["model", "benchmark", "problem_id"], how="inner")
    else:
        source = "semopt C_init (first 3 samples)"
        first = t[t["sample"] < 3].groupby(["model", "method", "benchmark", "problem_id"])["init_ok"].agg(["sum", "count"])
        lvl = first.apply(lambda r: EASY if r["sum"] == r["count"] else HARD if r["sum"] == 0 else MEDIUM, axis=1)
        lab = lvl.rename("difficulty").reset_index()
        merged = t.merge(lab, on=["model", "method", "benchmark", "problem_id"], how="inner")

    def fn(g: pd.DataFrame) -> list[dict[str, Any]]:
        out = []
        for level in LEVELS:
            s = g[g["difficulty"] == level]
            out.append({"difficulty": level, "source": source, "problems": int(s["problem_id"].nunique()),
                        "trajectories": len(s), "best_of_n": _pct(s["best_of_n"]), "pass_at_n": _pct(s["pass_at_n"]),
                        "gate_accept_rate": _pct(s[s["gate"].isin(["accept", "search"])]["gate"] == "accept")
                        if s["gate"].isin(["accept", "search"]).any() else None,
                        "calls_mean": round(float(s["n_calls"].mean()), 2) if len(s) else None})
        return out

    return _by_group(merged, fn) if len(merged) else pd.DataFrame()


def semopt_report(prep: Prepared, profile: str = DEFAULT_PROFILE) -> SemoptReport:
    t = semopt_trajectories(prep, profile)
    methods = sorted(set(t["method"])) if len(t) else []
    cands = semopt_tables.semopt_candidates(prep, methods, profile)
    critics = semopt_tables.critic_labels(cands, methods)
    table7, source = semopt_tables.table7(prep, t, profile) if len(t) else (pd.DataFrame(), "")
    return SemoptReport(t, summary_table(t), calls_distribution(t), difficulty_strata(prep, t, profile),
                        bool(len(t) and t["simulated"].any()), profile=profile, critics=critics, candidates=cands,
                        table5=semopt_tables.table5(cands), table6=semopt_tables.table6(t, critics), table7=table7,
                        table7_source=source, table8=semopt_tables.table8(t), table16=semopt_tables.table16(cands))


def _md(df: pd.DataFrame) -> str:
    if df is None or not len(df):
        return "(no rows)"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join("" if _nn(v) is None else str(v) for v in row) + " |")
    return "\n".join(lines)


# -- CLI --------------------------------------------------------------------------------------------


def load_sweep(sweep_dir: Path) -> tuple[Any, pd.DataFrame]:
    """(ledger table, plan) of a local sweep directory (``trajectories/`` and ``plan.parquet``)."""
    # deferred: only this module's CLI reads a sweep directory
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    plan_path, traj_dir = sweep_dir / "plan.parquet", sweep_dir / "trajectories"
    for p in (plan_path, traj_dir):
        if not p.exists():
            raise FileNotFoundError(f"{p}: not found (is {sweep_dir} a sweep directory?)")
    return ds.dataset(str(traj_dir), format="parquet", partitioning=None).to_table(), pq.read_table(plan_path).to_pandas()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SemOPT tables of a sweep (Pass@N, Best-of-N, gate, calls, difficulty).")
    parser.add_argument("sweep_dir", type=Path, help="<output_dir>/<sweep name>")
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here (default: stdout)")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary rows as JSON")
    args = parser.parse_args(argv)
    try:
        table, plan = load_sweep(args.sweep_dir)
        keys = {b: load_benchmark(b)[1] for b in sorted(set(plan["benchmark"]))}
        rep = semopt_report(prepare(table, keys, plan), args.profile)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        print(f"semopt report: error: {exc}", file=sys.stderr)
        return 2
    text = rep.markdown()
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    if args.json:
        args.json.write_text(json.dumps(rep.summary.to_dict(orient="records"), default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
