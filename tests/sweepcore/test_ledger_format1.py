"""A format-1 ledger (tests/data/ledger_format1, written by the format-1 code) keeps resuming in format 1,
and reports, views and shows with the numbers its rows hold; the same rows in a format-2 ledger give
the same report. Fast tier: no Ray, no subprocess (the jobs' ``main`` in process)."""
from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from opteval.evalcore.ledger_detail import calls_of, error_message, execs_of, transcript_of
from opteval.evalcore.records import LEDGER_SCHEMA, LEDGER_SCHEMA_V1, CallRecord, ExecRecord, Submission, Trajectory
from opteval.jobs import report, show, view
from opteval.sweepcore.ledger import Ledger, error_row, trajectory_row

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "ledger_format1" / "fmt1"
TIMEOUT = "trajectory timeout after 0.15s"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the format-1 ledger (the tests write into it); returns the output dir."""
    shutil.copytree(FIXTURE, tmp_path / "fmt1")
    return tmp_path


def _rows(out: Path) -> list[dict[str, Any]]:
    return Ledger.open_existing(str(out), "fmt1").read_table().to_pylist()


def _file_schemas(out: Path) -> list[pa.Schema]:
    return [pq.read_schema(p) for p in sorted((out / "fmt1" / "trajectories").rglob("*.parquet"))]


def _traj(method: str, problem: str, sample: int, turns: int) -> Trajectory:
    t = Trajectory(model="sim-small", method=method, benchmark="sample", problem_id=problem, sample=sample,
                   seed=7, status="submitted", submission=Submission(raw=3.0), simulated=True,
                   errors=["turn 1: submission refused: try again"])
    sent: list[dict[str, Any]] = [{"role": "system", "content": "solve"}, {"role": "user", "content": "problem"}]
    for i in range(turns):
        t.calls.append(CallRecord(i, "generate", 10 + i, 5, None, 0.25, "stop", "act"))
        t.transcript.append({"call": i, "turn": i, "purpose": "generate", "stage": "act",
                             "messages": [dict(m) for m in sent], "completion": f"reply {i}", "finish_reason": "stop"})
        t.execs.append(ExecRecord(i, "ok", 0.1, 0.1, 0, submission=3.0, code=f"submit({i})"))
        sent += [{"role": "assistant", "content": f"reply {i}"}, {"role": "user", "content": f"output {i}"}]
    return t


def test_the_fixture_is_format_1_and_its_detail_decodes(old: Path):
    led = Ledger.open_existing(str(old), "fmt1")
    assert led.format == 1 and led.schema == LEDGER_SCHEMA_V1
    table = led.read_table()
    assert table.schema.field("calls").type == pa.string() and table.num_rows == 24
    for r in table.to_pylist():
        calls, entries = calls_of(r["calls"]), transcript_of(r["calls"], r["transcript"])
        assert len(calls) == len(entries) == r["n_calls"] and len(execs_of(r["execs"])) == r["n_execs"]
        assert entries == json.loads(r["transcript"])  # format 1: the entries as stored
    errors = [r for r in table.to_pylist() if r["status"] == "error"]
    assert len(errors) == 6 and {error_message(r["error"]) for r in errors} == {TIMEOUT}
    assert max(r["n_calls"] for r in table.to_pylist() if r["method"] == "opticycle") >= 3


def test_a_format_1_ledger_resumes_in_format_1(old: Path):
    man = json.loads((old / "fmt1" / "manifest.json").read_text())
    plan = pq.read_table(old / "fmt1" / "plan.parquet")
    led = Ledger.open(str(old), "fmt1", man["config"], man["fingerprint"])
    assert led.format == 1 and len(led.committed_keys()) == 24
    led.record_plan([SimpleNamespace(**p) for p in plan.to_pylist()]
                    + [SimpleNamespace(key=f"extra/{i}", model="sim-small", method="opticycle", benchmark="sample",
                                       problem_id="sample-0009", sample=i) for i in range(2)])
    traj = _traj("opticycle", "sample-0009", 0, turns=3)
    item = SimpleNamespace(key="extra/1", model="sim-small", method="opticycle", benchmark="sample",
                           problem_id="sample-0009", sample=1, fingerprint="f")
    led.commit([trajectory_row(traj, key="extra/0", correct=True, profile="optagentbench", fingerprint="f",
                               sweep="fmt1", parsed=3.0),
                error_row(item, "worker 3 failed: ActorDiedError: gone", 3, sweep="fmt1")])
    assert led.compact(min_files=2) > 0  # the merge keeps format 1 too
    led.close()
    assert all(s.field("calls").type == pa.string() and s.field("error").type == pa.string()
               for s in _file_schemas(old))
    assert json.loads((old / "fmt1" / "manifest.json").read_text())["format"] == 1
    rows = {r["key"]: r for r in _rows(old)}
    assert len(rows) == 26
    new = rows["extra/0"]
    assert json.loads(new["transcript"]) == traj.transcript  # today's JSON text, exactly
    assert transcript_of(new["calls"], new["transcript"]) == traj.transcript
    assert error_message(new["error"]) == "turn 1: submission refused: try again"
    assert rows["extra/1"]["error"] == "worker 3 failed: ActorDiedError: gone"


def _report(out: Path, dest: Path) -> dict[str, pd.DataFrame]:
    assert report.main(["sweep.name=fmt1", f"sweep.output_dir={out}", "--out", str(dest), "--bootstrap", "100"]) == 0
    tables = {name: pd.read_csv(dest / "tables" / f"{name}.csv") for name in ("latency", "costs", "missing")}
    tables["summary"] = pd.DataFrame(json.loads((dest / "summary.json").read_text())["records"])
    return tables


def test_a_format_1_ledger_reports_what_its_rows_say(old: Path, tmp_path: Path):
    got = _report(old, tmp_path / "rep")
    rows = pd.DataFrame(_rows(old))
    for method, g in rows.groupby("method"):
        summary = got["summary"]
        [rec] = summary[(summary["method"] == method) & (summary["benchmark"] == "sample")].to_dict("records")
        assert rec["n_planned"] == len(g) and rec["correct"] == int(g["correct"].sum())
        assert rec["missing"] == int((g["status"] == "error").sum()) == 2
        [lat] = got["latency"][got["latency"]["method"] == method].to_dict("records")
        latencies = [c["latency_s"] for v in g["calls"] for c in calls_of(v)]
        assert lat["call_median_s"] == pytest.approx(statistics.median(latencies))
        assert lat["calls_per_traj"] == pytest.approx(sum(len(calls_of(v)) for v in g["calls"]) / len(g))
        assert lat["execs_per_traj"] == pytest.approx(sum(len(execs_of(v)) for v in g["execs"]) / len(g))
    assert set(got["missing"]["reason"]) == {TIMEOUT} and len(got["missing"]) == 6


def test_the_same_rows_in_format_2_report_the_same(old: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Format 1's rows committed into a new (format-2) ledger: the report's tables and show's page are equal."""
    man = json.loads((old / "fmt1" / "manifest.json").read_text())
    new_out = tmp_path / "f2"
    led = Ledger.open(str(new_out), "fmt1", man["config"], man["fingerprint"])
    assert led.format == 2
    led.record_plan([SimpleNamespace(**p) for p in pq.read_table(old / "fmt1" / "plan.parquet").to_pylist()])
    led.commit(_rows(old))
    led.close()
    shutil.copytree(old / "fmt1" / "models", new_out / "fmt1" / "models")
    assert all(s.field("calls").type == LEDGER_SCHEMA.field("calls").type for s in _file_schemas(new_out))
    one, two = _report(old, tmp_path / "r1"), _report(new_out, tmp_path / "r2")
    for name in one:
        pd.testing.assert_frame_equal(one[name], two[name], check_like=True)
    before = {r["key"]: r for r in _rows(old)}
    for r in _rows(new_out):
        assert transcript_of(r["calls"], r["transcript"]) == json.loads(before[r["key"]]["transcript"])
        assert error_message(r["error"]) == before[r["key"]]["error"]
    key = max(before.values(), key=lambda x: x["n_calls"])["key"]
    shown = []
    capsys.readouterr()
    for out in (old, new_out):
        assert show.main([key, "sweep.name=fmt1", f"sweep.output_dir={out}"]) == 0
        shown.append(capsys.readouterr().out)
    assert shown[0] == shown[1] and shown[0].count("\ncall ") >= 3


def test_a_format_1_ledger_views(old: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert view.main(["sweep.name=fmt1", f"sweep.output_dir={old}", "--out", str(tmp_path / "view")]) == 0
    assert "(24 trajectories, 24 pages, 6 errors, 0 missing)" in capsys.readouterr().out
    pages = "".join(p.read_text() for p in (tmp_path / "view").rglob("*.html"))
    for r in _rows(old):  # every call's reply is on its trajectory's page (a plain run of it: HTML escapes)
        for e in transcript_of(r["calls"], r["transcript"]):
            assert max(re.findall(r"[A-Za-z0-9_ ]{12,}", e["completion"]), key=len) in pages
    assert TIMEOUT in pages


def test_a_format_1_ledger_shows(old: Path, capsys: pytest.CaptureFixture[str]):
    rows = _rows(old)
    r = max(rows, key=lambda x: x["n_calls"])
    assert show.main([r["key"], "sweep.name=fmt1", f"sweep.output_dir={old}"]) == 0
    out = capsys.readouterr().out
    entries = transcript_of(r["calls"], r["transcript"])
    assert out.count("\ncall ") == len(entries) == r["n_calls"]
    for i, (e, c) in enumerate(zip(entries, calls_of(r["calls"]))):
        assert f"call {i} · turn {e['turn']} · {e['purpose']}" in out and e["completion"].strip()[:60] in out
        assert f"tokens {c['prompt_tokens']}/{c['completion_tokens']}" in out
    err = next(x for x in rows if x["status"] == "error")
    assert show.main([err["key"], "sweep.name=fmt1", f"sweep.output_dir={old}"]) == 0
    assert TIMEOUT in capsys.readouterr().out
