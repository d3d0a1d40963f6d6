"""Bad inputs end in one line naming the path, key or package, exit 2, no traceback, and
nothing committed is touched: report/regrade output paths, a plan too large to expand, a lost
plan.parquet, an extraction profile whose package is missing."""
from __future__ import annotations

import importlib.util
import json

import pytest

from tests.sweepcore.test_tracking import _sweep


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def finished(tmp_path):
    _sweep(tmp_path)  # a ledger with its plan and committed rows (sweep.name=trk)
    return tmp_path


def _report(out, *extra):
    from jobs import report

    return report.main([f"sweep.output_dir={out}", "sweep.name=trk", "tracking.enabled=false",
                        "methods=[direct,optistate]", "benchmarks=[sample,complexor]", *extra])


def test_report_out_that_cannot_be_written_names_it(finished, capsys):
    assert _report(finished, "--out", "/proc/x") == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out /proc/x" in line and "cannot write" in line


def test_report_of_a_sweep_whose_plan_was_deleted_says_so(finished, capsys):
    (finished / "trk" / "plan.parquet").unlink()
    assert _report(finished) == 2
    line = _one_line(capsys.readouterr().err)
    assert "plan.parquet is missing" in line and "never started" not in line and "re-run" in line
    assert any((finished / "trk").rglob("*.parquet"))  # the committed rows are still there


def _regrade_files(tmp_path):
    comp, ans = tmp_path / "c.jsonl", tmp_path / "a.jsonl"
    comp.write_text(json.dumps({"id": "p1", "completion": "```python\nsubmit(1)\n```"}) + "\n")
    ans.write_text(json.dumps({"id": "p1", "answer": 1}) + "\n")
    return ["--completions", str(comp), "--answers", str(ans)]


def test_regrade_details_that_cannot_be_written_names_it(tmp_path, capsys):
    from jobs import regrade

    assert regrade.main([*_regrade_files(tmp_path), "--details", "/proc/nope/x"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--details /proc/nope/x" in line and "cannot be written" in line


def test_orlm_extraction_without_coptpy_names_the_package_and_the_extra(tmp_path, monkeypatch, capsys):
    from jobs import regrade, rewards

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "coptpy" else real(name, *a))
    assert regrade.main([*_regrade_files(tmp_path), "--extraction", "orlm", "--grading", "orlm"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "coptpy" in line and "opteval[solvers]" in line
    assert rewards.main(["score", *_regrade_files(tmp_path), "--scheme", "correct", "--extraction", "orlm",
                         "--out", str(tmp_path / "r.jsonl")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "coptpy" in line and "opteval[solvers]" in line and not (tmp_path / "r.jsonl").exists()


def test_a_plan_over_the_bound_is_refused_before_expansion_with_the_estimate(tmp_path, monkeypatch, capsys):
    import tracemalloc

    from jobs import sweep

    tracemalloc.start()
    rc = sweep.main([f"sweep.output_dir={tmp_path}", "samples.default=100000000", "plan_only=true"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rc == 2
    line = _one_line(capsys.readouterr().err)
    assert "trajectories" in line and "over the bound of 50,000,000" in line and "GiB" in line
    assert peak < 500 * 2**20  # refused before the keys were built
