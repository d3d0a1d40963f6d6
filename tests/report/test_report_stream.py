"""Issue 44: ``opteval report`` streams the ledger in record batches, reduced as they are read.

Its output is the whole-table path's, whatever the batch size; the transcript column is read only
for SemOPT methods (a non-SemOPT ledger whose transcripts are garbage still reports, and its
transcripts are never asked for)."""
from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import pytest

from opteval.evalcore.problems import load_benchmark
from opteval.evalcore.records import CallRecord, ExecRecord, Submission, Trajectory
from opteval.evalcore.reporting import build_report
from opteval.jobs import report as report_job
from opteval.jobs.report import report_rows
from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import Ledger, error_row, trajectory_row
from opteval.sweepcore.plan import expand_plan

PIDS = [p.id for p in load_benchmark("sample")[0][:3]]  # the embedded benchmark's: the report regrades them


def _trajectory(p, i: int) -> Trajectory:
    n = 1 + i % 3
    finish = ["stop", "length", "rejected: HTTP 400: too long"][i % 3]
    calls = [CallRecord(t, "generate", 10 + t, 5, t, 0.1 * (t + 1) + 0.01 * i, finish if t == n - 1 else "stop",
                        ["generate", "reflect", "critic"][t % 3]) for t in range(n)]
    ok = i % 4 != 3
    sub = float(i % 2) if ok else None
    execs = [ExecRecord(t, "ok" if (ok or t < n - 1) else "error", 0.2, 0.1, 0, sub if t == n - 1 else None,
                        [{"objective": 1.0, "sense": "min", "n_binary": t, "n_integer": 1,
                          "status": "infeasible" if i % 5 == 4 else "optimal"}],
                        contained=i % 7 != 0) for t in range(n)]
    transcript = [{"call": t, "messages": [{"role": "user", "content": "x" * 50}]} for t in range(n)]
    if p.method == "semopt":
        transcript += [{"semopt": {"candidate": c, "exec": c, "R": 0.5 + 0.1 * c, "critic": "llm", "executed": True,
                                   "phase": "init" if c == 0 else "search", **({"gate": "search"} if c == 0 else {})}}
                       for c in range(n)]
    return Trajectory(model=p.model, method=p.method, benchmark=p.benchmark, problem_id=p.problem_id,
                      sample=p.sample, seed=0, status="submitted" if ok else "no_submission",
                      submission=Submission(raw=sub) if ok else None, calls=calls, execs=execs, transcript=transcript)


def _sweep(tmp_path: Path, methods: str, garbage_transcripts: bool = False) -> tuple[Ledger, Any]:
    cfg = load_config([f"sweep.output_dir={tmp_path}", "sweep.name=st", f"methods=[{methods}]", "samples.default=3",
                       "models=[sim-small]"])
    res = resolved(cfg)
    plan = expand_plan(cfg, {"sample": PIDS})
    led = Ledger.open(str(tmp_path), "st", res, sweep_fingerprint(res))
    led.record_plan(plan)
    rows = []
    for i, p in enumerate(plan):
        if i % 11 == 5:
            continue  # planned, never run
        if i % 13 == 6:
            rows.append(error_row(p, "worker lost", 3, sweep="st", seed=0, simulated=True, profile="optagentbench",
                                  fingerprint=p.fingerprint))
            continue
        t = _trajectory(p, i)
        row = trajectory_row(t, key=p.key, correct=t.submission is not None and t.submission.raw == 1.0,
                             profile="optagentbench", fingerprint=p.fingerprint, sweep="st",
                             parsed=None if t.submission is None else t.submission.raw)
        if garbage_transcripts:
            row["transcript"] = "\x01{not json" * 7
        rows.append(row)
    for k in range(0, len(rows), 5):  # several commits: several part files, several batches
        led.commit(rows[k:k + 5])
    led.close()
    return Ledger.open_existing(str(tmp_path), "st"), plan


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.suffix != ".png")


def _write(table, plan_df, out: Path) -> None:
    build_report(table, {}, plan_df, n_resamples=100, compare=("direct", "semopt") if "semopt" in set(
        plan_df["method"]) else None).write(out)


@pytest.mark.parametrize("batch_rows", [1, 4, 2048])
def test_stream_matches_whole_table(tmp_path, batch_rows):
    led, _ = _sweep(tmp_path / "l", "direct,opticycle,semopt")
    plan = led.read_plan()
    assert plan is not None
    plan_df = plan.to_pandas()
    methods = sorted(plan_df["method"].unique())
    _write(led.read_table().to_pandas(), plan_df, tmp_path / "whole")
    streamed = report_rows(led, methods, batch_rows=batch_rows)
    assert not {"calls", "execs", "transcript"} & set(streamed.columns)
    _write(streamed, plan_df, tmp_path / "stream")
    files = _files(tmp_path / "whole")
    assert files and files == _files(tmp_path / "stream")
    assert Path("tables/semopt_summary.csv") in files  # the SemOPT section is there
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "whole", tmp_path / "stream", [str(f) for f in files],
                                           shallow=False)
    assert not mismatch and not errors


def test_transcripts_never_read_without_semopt(tmp_path, monkeypatch, capsys):
    led, plan = _sweep(tmp_path, "direct,opticycle", garbage_transcripts=True)
    asked: list[list[str]] = []
    for name in ("scan", "read_table"):
        orig = getattr(Ledger, name)

        def spy(self, columns=None, *a, _orig=orig, **kw):
            asked.append(list(columns) if columns is not None else ["<every column>"])
            return _orig(self, columns, *a, **kw)

        monkeypatch.setattr(Ledger, name, spy)
    out = tmp_path / "out"
    rc = report_job.main([f"sweep.output_dir={tmp_path}", "sweep.name=st", "--out", str(out), "--bootstrap", "100"])
    assert rc == 0, capsys.readouterr().err
    assert asked and not [cols for cols in asked if "transcript" in cols or "<every column>" in cols]
    summary = json.loads((out / "summary.json").read_text())
    assert sum(r["n_planned"] for r in summary["records"] if r["benchmark"] != "Macro") == len(plan)


def test_a_ledger_too_large_for_memory_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    _sweep(tmp_path, "direct")

    def no_memory(*a, **kw):
        raise MemoryError

    monkeypatch.setattr(report_job, "report_rows", no_memory)
    rc = report_job.main([f"sweep.output_dir={tmp_path}", "sweep.name=st", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "does not fit in this process's memory" in err[0]


def test_an_unreadable_ledger_file_is_one_line_exit_2(tmp_path, capsys):
    led, _ = _sweep(tmp_path, "direct")
    part = sorted(led.files())[-1]
    Path(part).write_bytes(b"PAR1 garbage, not a Parquet file PAR1")
    rc = report_job.main([f"sweep.output_dir={tmp_path}", "sweep.name=st", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "Traceback" not in err[0]
