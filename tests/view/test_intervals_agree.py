"""The sweep's printed results table and `opteval report` give the same 95% interval for every
cell: one computation (same problems, seed and resamples), also with planned trajectories missing."""
from __future__ import annotations

import json
import shutil

import pyarrow.compute as pc

from opteval.sweepcore.ledger import Ledger
from opteval.sweepcore.tracking import summarize_ledger
from tests.view.conftest import SWEEP, args, opteval


def _report_cells(out, name: str) -> dict:
    done = opteval("report", f"sweep.name={name}", f"sweep.output_dir={out}", "tracking.enabled=false")
    assert done.returncode == 0, done.stderr
    records = json.loads((out / name / "report" / "summary.json").read_text())["records"]
    return {(r["model"], r["method"], r["benchmark"]): (r["ci_low"], r["ci_high"]) for r in records
            if r["benchmark"] != "Macro"}


def _sweep_cells(out, name: str) -> dict:
    led = Ledger.open_existing(str(out), name)
    summary = summarize_ledger(led.read_table(), led.read_plan())
    return {(r["model"], r["method"], r["benchmark"]): (r["ci_low"], r["ci_high"]) for r in summary.to_dict("records")}


def test_the_sweep_table_and_the_report_agree(demo):
    sweep, report = _sweep_cells(demo, SWEEP), _report_cells(demo, SWEEP)
    assert sweep.keys() == report.keys() and sweep
    for cell, (low, high) in sweep.items():
        assert (round(low, 12), round(high, 12)) == (round(report[cell][0], 12), round(report[cell][1], 12)), cell
    printed = opteval("report", *args(demo), "--summary")
    assert "B=2000, seed 0" in printed.stdout


def test_they_agree_with_missing_trajectories(demo, tmp_path):
    shutil.copytree(demo / SWEEP, tmp_path / SWEEP)
    led = Ledger.open_existing(str(tmp_path), SWEEP)
    table = led.read_table()
    # drop one committed trajectory: the plan still holds it, so both count it as a wrong sample
    gone = table.column("key")[0].as_py()
    parts = [p for p in (tmp_path / SWEEP / "trajectories").rglob("*.parquet")]
    import pyarrow.parquet as pq

    for path in parts:
        t = pq.read_table(path)
        if gone in t.column("key").to_pylist():
            pq.write_table(t.filter(pc.invert(pc.equal(t.column("key"), gone))), path)
    sweep, report = _sweep_cells(tmp_path, SWEEP), _report_cells(tmp_path, SWEEP)
    assert sweep.keys() == report.keys()
    for cell, (low, high) in sweep.items():
        assert (round(low, 12), round(high, 12)) == (round(report[cell][0], 12), round(report[cell][1], 12)), cell
