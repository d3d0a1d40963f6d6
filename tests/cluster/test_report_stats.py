"""Issue 17 on a real sweep: Direct and OptiCycle over the sample benchmark, 4 samples per
problem (simulated policy, real Serve, workers, sandbox and ledger), then ``jobs/report.py``.
``summary.json``'s intervals must agree within 0.03 with a percentile cluster bootstrap over
problems computed here from the ledger with numpy. Kept small (8 problems) for the 2-core
test run; tests/report/test_summary_json.py does the same on all 46 problems from a ledger
built in memory."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from opteval.cluster.driver import run_sweep
from opteval.sweepcore.config import load_config

pytestmark = pytest.mark.ray

K, LIMIT = 4, 8


def _report_module():
    path = Path(__file__).resolve().parents[2] / "jobs" / "report.py"
    spec = importlib.util.spec_from_file_location("report_job_stats", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _numpy_bootstrap(correct: np.ndarray, k: int, conf: float = 0.95, b: int = 20000, seed: int = 2024):
    idx = np.random.default_rng(seed).integers(0, len(correct), (b, len(correct)))
    reps = correct[idx].sum(1) / (k * len(correct))
    a = (1 - conf) / 2
    return np.quantile(reps, [a, 1 - a])


def test_summary_json_intervals_on_a_real_sweep(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    args = h.sweep_args(tmp_path, "stats", port, methods="[direct,opticycle]", limit=LIMIT, samples=K)
    assert run_sweep(load_config(args)) == 0
    df = h.ledger_frame(tmp_path, "stats")
    assert len(df) == 2 * LIMIT * K

    capsys.readouterr()
    report = _report_module()
    rargs = [a for a in args if not a.startswith(("serving.", "progress."))]
    assert report.main([*rargs, "--compare", "direct,opticycle", "--bootstrap", "2000", "--seed", "1"]) == 0
    out = tmp_path / "stats" / "report"
    js = json.loads((out / "summary.json").read_text())
    assert js["interval"]["n_resamples"] == 2000 and js["interval"]["seed"] == 1
    recs = {(r["method"], r["benchmark"]): r for r in js["records"]}
    for method in ("direct", "opticycle"):
        r = recs[(method, "sample")]
        sub = df[df["method"] == method]
        per = sub.groupby("problem_id")["correct"].sum().to_numpy(float)
        assert (r["n_problems"], r["n_planned"], r["missing"]) == (LIMIT, LIMIT * K, 0)
        assert r["correct"] == int(sub["correct"].sum())
        lo, hi = _numpy_bootstrap(per, K)
        assert abs(r["ci_low"] - lo) <= 0.03 and abs(r["ci_high"] - hi) <= 0.03, (method, r, lo, hi)
        assert recs[(method, "Macro")]["accuracy"] == pytest.approx(r["accuracy"])

    md = (out / "report.md").read_text()
    assert "percentile cluster bootstrap over problems (B=2000, seed 1)" in md
    assert "Paired by problem" in md and "paired cluster bootstrap over problems" in md

    # docs/results.md's summary.json snippet runs as written on this file
    readme = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "summary.json" in b)
    ns: dict = {}
    exec(snippet.replace("results/try1/report/summary.json", str(out / "summary.json")), ns)
    assert isinstance(ns["recs"], pd.DataFrame) and set(ns["recs"]["benchmark"]) == {"sample", "Macro"}
