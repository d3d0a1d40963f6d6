"""``summary.json`` and the problem-level intervals on a sweep-shaped ledger.

A Direct and an OptiCycle sweep over the embedded sample benchmark (46 problems x 4 samples),
with problem-level difficulty so samples of one problem are correlated, as a real model's
are. Every interval in ``summary.json`` is checked against a percentile cluster bootstrap
computed here, independently, from the ledger rows with numpy (another seed, more draws).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from opteval.evalcore.grading import grade, submission_fields
from opteval.evalcore.metrics import wilson_interval
from opteval.evalcore.problems import load_benchmark
from opteval.evalcore.records import LEDGER_SCHEMA_V1, empty_table
from opteval.evalcore.reporting import build_report

K = 4
METHODS = ("direct", "opticycle")


def _sweep_rows(seed: int = 11) -> tuple[list[dict], dict, dict]:
    _, key = load_benchmark("sample")
    rng = np.random.default_rng(seed)
    pids = sorted(key.answers)
    ease = rng.beta(0.6, 0.6, size=len(pids))  # most problems easy or hard: strong clustering
    rows = []
    for mi, method in enumerate(METHODS):
        for pid, p in zip(pids, ease):
            for s in range(K):
                if method == "opticycle" and pid == pids[3] and s == 3:
                    continue  # one planned trajectory never ran: missing, counts as wrong
                ans = key.answers[pid]
                right = rng.random() < min(1.0, p + 0.1 * mi)
                sub = ans if right else (12345.0 if not isinstance(ans, str) else 1.0)
                rows.append({**dict.fromkeys(empty_table().schema.names),
                             "key": f"m/{method}/sample/{pid}/{s}", "sweep": "t", "model": "m", "method": method,
                             "benchmark": "sample", "problem_id": pid, "sample": s, "seed": s,
                             "status": "submitted", **submission_fields(sub), "correct": grade(sub, ans),
                             "grading_profile": "optagentbench", "prompt_tokens": 10, "completion_tokens": 5,
                             "n_calls": 1, "n_execs": 1, "exec_ok": 1, "first_exec_outcome": "ok", "wall_s": 1.0,
                             "simulated": True, "attempts": 1, "calls": "[]", "execs": "[]", "transcript": "[]",
                             "budgets": "{}"})
    planned = {("m", m, "sample"): len(pids) * K for m in METHODS}
    return rows, {"sample": key}, planned


def independent_bootstrap(df: pd.DataFrame, n_problems_planned: int, k: int, seed: int = 12345,
                          b: int = 20000, conf: float = 0.95) -> tuple[float, float]:
    """From the ledger rows alone: correct per problem (absent rows are wrong), k planned
    samples per problem, problems resampled with numpy."""
    per = df.groupby("problem_id")["correct"].sum()
    correct = np.zeros(n_problems_planned)
    correct[: len(per)] = per.to_numpy(float)
    idx = np.random.default_rng(seed).integers(0, n_problems_planned, (b, n_problems_planned))
    reps = correct[idx].sum(1) / (k * n_problems_planned)
    a = (1 - conf) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return float(lo), float(hi)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    rows, keys, planned = _sweep_rows()
    df = pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA_V1).to_pandas()
    out = tmp_path_factory.mktemp("rep")
    rep = build_report(df, keys, planned, compare=("direct", "opticycle"), out_dir=out, n_resamples=2000, seed=0)
    return df, rep, json.loads((out / "summary.json").read_text()), out


def test_summary_json_records_and_intervals_match_an_independent_bootstrap(swept):
    df, rep, js, _ = swept
    assert js["interval"]["method"] == "percentile cluster bootstrap over problems"
    assert js["interval"]["n_resamples"] == 2000 and js["grading_profile"] == "optagentbench"
    recs = {(r["method"], r["benchmark"]): r for r in js["records"]}
    assert set(recs) == {(m, b) for m in METHODS for b in ("sample", "Macro")}
    need = {"model", "method", "benchmark", "n_problems", "n_planned", "correct", "accuracy", "ci_low", "ci_high",
            "missing"}
    for method in METHODS:
        r = recs[(method, "sample")]
        assert need <= set(r)
        sub = df[df["method"] == method]
        assert (r["n_problems"], r["n_planned"]) == (46, 46 * K)
        assert r["correct"] == int(sub["correct"].sum()) and r["accuracy"] == pytest.approx(r["correct"] / (46 * K))
        assert r["missing"] == (1 if method == "opticycle" else 0)
        lo, hi = independent_bootstrap(sub, 46, K)
        assert abs(r["ci_low"] - lo) <= 0.03 and abs(r["ci_high"] - hi) <= 0.03, (method, r, lo, hi)
        # one benchmark: Macro is the benchmark itself (same draws, same interval)
        m = recs[(method, "Macro")]
        assert (m["accuracy"], m["ci_low"], m["ci_high"]) == pytest.approx((r["accuracy"], r["ci_low"], r["ci_high"]))
        assert m["n_benchmarks"] == 1 and m["n_planned"] == r["n_planned"]
        # problem-level uncertainty is wider than a Wilson interval over 184 "independent" samples
        wl, wh = wilson_interval(r["correct"], r["n_planned"])
        assert (r["ci_high"] - r["ci_low"]) > 1.3 * (wh - wl)
    # the main table shows the same numbers as summary.json
    row = rep.main_table[rep.main_table["method"] == "direct"].iloc[0]
    assert (row["sample:low"], row["sample:high"]) == pytest.approx(
        (recs[("direct", "sample")]["ci_low"], recs[("direct", "sample")]["ci_high"]))


def test_intervals_are_seeded_and_b_is_configurable(swept):
    df, rep, js, _ = swept
    rows, keys, planned = _sweep_rows()
    again = build_report(df, keys, planned, n_resamples=2000, seed=0)
    pd.testing.assert_frame_equal(again.main_table, rep.main_table)
    other = build_report(df, keys, planned, n_resamples=500, seed=7)
    a, b = rep.main_table.iloc[0], other.main_table.iloc[0]
    assert a["sample"] == b["sample"] and abs(a["sample:low"] - b["sample:low"]) < 0.05
    assert other.summary_json()["interval"]["n_resamples"] == 500
    with pytest.raises(ValueError, match="at least 100 resamples"):
        build_report(df, keys, planned, n_resamples=10)


def test_paired_k4_uses_the_paired_bootstrap_by_problem(swept):
    df, rep, _, _ = swept
    p = rep.paired[rep.paired["benchmark"] == "sample"].iloc[0]
    assert p["n"] == 46 and p["k"] == "4" and "bootstrap" in p["test"]
    # independent: the same per-problem differences resampled with numpy, 90%
    ca = df[df.method == "direct"].groupby("problem_id")["correct"].sum()
    cb = df[df.method == "opticycle"].groupby("problem_id")["correct"].sum().reindex(ca.index, fill_value=0)
    d = (ca - cb).to_numpy(float)
    assert p["net_gain"] == pytest.approx(d.sum() / (46 * K))
    reps = d[np.random.default_rng(3).integers(0, 46, (20000, 46))].sum(1) / (46 * K)
    assert abs(p["low"] - np.quantile(reps, 0.05)) <= 0.03 and abs(p["high"] - np.quantile(reps, 0.95)) <= 0.03
    assert 0 <= p["p_value"] <= 1


def test_report_header_names_the_tolerance_reading_and_the_interval_method(swept):
    _, rep, _, out = swept
    md = (Path(out) / "report.md").read_text()
    head = md.split("## Main table")[0]
    assert "max(1e-2, 1e-4*max(|a|,|b|))" in head and "larger of the two" in head and "optagentbench_numpy" in head
    assert "percentile cluster bootstrap over problems (B=2000, seed 0)" in md
    assert "cluster-bootstrap intervals" in (Path(out) / "main_table.tex").read_text()
    # both tolerance readings side by side in the sensitivity table
    assert {"sample[optagentbench]", "sample[optagentbench_numpy]"} <= set(rep.sensitivity.columns)
