"""Ledger format 2: nested detail columns, a transcript of distinct messages that grows linearly with the
turns, and a classified ``error`` (docs/errors.md "Error kinds"). Fast tier: no Ray, no subprocess."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from opteval.evalcore import ledger_detail as D
from opteval.evalcore.records import LEDGER_SCHEMA, MESSAGE_TYPE, CallRecord, ExecRecord, Submission, Trajectory
from opteval.jobs.regrade_ledger import ledger_rows
from opteval.sweepcore.ledger import LEDGER_FORMAT, Ledger, error_row, trajectory_row
from tests.sweepcore.test_ledger import _setup

REPO = Path(__file__).resolve().parents[2]


def conversation(turns: int, method: str = "opticycle") -> Trajectory:
    """A growing conversation: each call is sent every message so far (system, problem, then each
    reply and the output it got), so format 1 stored turns^2 messages."""
    t = Trajectory(model="m", method=method, benchmark="sample", problem_id="p0", sample=0, seed=1,
                   status="submitted", submission=Submission(raw="infeasible"), simulated=True,
                   budgets={"max_calls": 16})
    sent: list[dict[str, Any]] = [{"role": "system", "content": "You write solver code."},
                                  {"role": "user", "content": "Minimize x + y subject to x >= 1, y >= 2."}]
    for i in range(turns):
        t.calls.append(CallRecord(i, "generate" if i == 0 else "revise", 100 + 40 * i, 30, None if i else 0,
                                  0.5 + i, "length" if i == 3 else "stop", "act"))
        t.transcript.append({"call": i, "turn": i, "purpose": t.calls[-1].purpose, "stage": "act",
                             "messages": [dict(m) for m in sent], "completion": f"```python\nsubmit({i})\n```",
                             "finish_reason": t.calls[-1].finish_reason})
        t.execs.append(ExecRecord(i, "ok" if i % 2 else "error", 0.2, 0.1, 0 if i % 2 else 1,
                                  submission=None if i % 2 == 0 else {"value": i},
                                  models=[{"status": "optimal", "objective": 3.0, "form": {"big": 1}}],
                                  stdout_tail=f"out {i}", code=f"submit({i})"))
        sent += [{"role": "assistant", "content": f"```python\nsubmit({i})\n```"},
                 {"role": "user", "content": f"The program printed: out {i}. Revise it."}]
    return t


def _row(t: Trajectory, key: str = "k0", **kw: Any) -> dict[str, Any]:
    return trajectory_row(t, key=key, correct=False, profile="optagentbench", fingerprint="f", sweep="s",
                          parsed="infeasible", **kw)


def _commit(tmp_path: Path, rows: list[dict[str, Any]], fmt: int = LEDGER_FORMAT) -> Ledger:
    _, res, fp, _ = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, new_format=fmt)
    led.commit(rows)
    return led


def test_a_new_ledger_writes_exactly_the_format_2_schema(tmp_path):
    led = _commit(tmp_path, [_row(conversation(3))])
    assert led.format == 2 == LEDGER_FORMAT
    [path] = list((tmp_path / "demo" / "trajectories").rglob("*.parquet"))
    assert pq.read_schema(path).remove_metadata().equals(LEDGER_SCHEMA)
    calls = LEDGER_SCHEMA.field("calls").type.value_type
    assert [f.name for f in calls] == ["turn", "purpose", "stage", "prompt_tokens", "completion_tokens",
                                       "cached_prompt_tokens", "latency_s", "finish_reason", "prompt", "completion",
                                       "extra"]
    assert calls.field("prompt").type == pa.list_(pa.int32()) and calls.field("completion").type == pa.int32()
    assert LEDGER_SCHEMA.field("transcript").type == pa.list_(MESSAGE_TYPE)
    assert [f.name for f in MESSAGE_TYPE] == ["role", "content", "extra"]
    assert LEDGER_SCHEMA.field("error").type == pa.struct([("kind", pa.string()), ("where", pa.string()),
                                                          ("message", pa.string())])
    assert LEDGER_SCHEMA.field("budgets").type == pa.string()
    led.compact(min_files=1)  # a merge writes the same schema
    assert all(pq.read_schema(p).remove_metadata().equals(LEDGER_SCHEMA)
               for p in (tmp_path / "demo" / "trajectories").rglob("*.parquet"))


def test_a_multi_turn_trajectory_round_trips_to_the_format_1_structure(tmp_path):
    t = conversation(6)
    t.transcript[2]["semopt"] = {"candidate": 0, "R": 0.5}  # an entry's extra key (SemOPT's annotation)
    t.transcript[4]["messages"].append({"role": "tool", "content": None, "tool_call_id": "c1"})
    t.transcript[5]["messages"].insert(0, {"role": "user", "content": [{"type": "text", "text": "hi"}]})
    led = _commit(tmp_path, [_row(t)])
    table = led.read_table()
    want_calls = [dataclasses.asdict(c) for c in t.calls]
    want_execs = [{**dataclasses.asdict(e), "models": [{"status": "optimal", "objective": 3.0}]} for e in t.execs]
    for row in (table.to_pylist()[0], table.to_pandas().iloc[0].to_dict()):  # Python lists, numpy arrays
        assert D.transcript_of(row["calls"], row["transcript"]) == t.transcript
        assert D.calls_of(row["calls"]) == want_calls
        assert D.execs_of(row["execs"]) == want_execs
        assert json.loads(row["budgets"]) == {"max_calls": 16}
    # and back: a format-1 ledger given the format-2 values stores today's JSON text
    f1 = D.encode_row(table.to_pylist()[0], 1)
    assert json.loads(f1["transcript"]) == t.transcript and json.loads(f1["calls"]) == want_calls


def test_the_stored_transcript_grows_linearly_with_the_turns():
    sizes = {}
    for turns in (10, 20):
        row = _row(conversation(turns))
        calls, messages = D.encode_calls_transcript(row["calls"], row["transcript"])
        sent = sum(len(e["messages"]) for e in row["transcript"])
        # distinct messages: system, problem, each reply and each output but the last one's
        assert len(messages) == 2 + 2 * turns - 1 and sent == turns * (turns + 1)
        assert all(max(c["prompt"]) < c["completion"] for c in calls)
        text = pa.array([messages], LEDGER_SCHEMA.field("transcript").type).nbytes
        indices = pa.array([calls], LEDGER_SCHEMA.field("calls").type).nbytes
        sizes[turns] = (len(D.encode_row(row, 1)["transcript"]), text, text + indices)
    assert sizes[20][0] / sizes[10][0] > 3.5  # format 1: quadratic in the messages' text
    assert sizes[20][1] / sizes[10][1] < 2.2  # format 2: the messages' text is linear
    # (each call's prompt indices are 4 bytes a message sent: the only quadratic part, and small)
    assert sizes[20][2] / sizes[10][2] < 2.5 and sizes[20][2] * 2 < sizes[20][0]


def test_rows_hold_logical_values_and_the_commit_encodes_per_format(tmp_path):
    row = _row(conversation(2))
    assert isinstance(row["calls"], list) and isinstance(row["transcript"], list) and isinstance(row["budgets"], dict)
    assert row["error"] is None
    f1 = _commit(tmp_path / "one", [row], fmt=1).read_table()
    f2 = _commit(tmp_path / "two", [row], fmt=2).read_table()
    assert f1.schema.field("calls").type == pa.string() and f2.schema.field("calls").type != pa.string()
    a, b = f1.to_pylist()[0], f2.to_pylist()[0]
    assert D.transcript_of(a["calls"], a["transcript"]) == D.transcript_of(b["calls"], b["transcript"])
    assert D.execs_of(a["execs"]) == D.execs_of(b["execs"]) and D.calls_of(a["calls"]) == D.calls_of(b["calls"])


# -- error kinds --------------------------------------------------------------------------------------

ITEM = SimpleNamespace(key="k9", model="m", method="opticycle", benchmark="sample", problem_id="p", sample=0,
                       fingerprint="f")
# (a reason as its producer writes it, kind, where): cluster/driver/dispatch.py, cluster/actors/workers.py
INFRA = [
    ("trajectory timeout after 10800s", "timeout", "driver"),
    ("worker 3 failed: RayActorError: The actor died unexpectedly", "worker_lost", "worker"),
    ("driver could not grade/record: KeyError: 'sample-0001'", "internal", "driver"),
    ("executor lost: executor 1 died: ActorDiedError", "executor_lost", "executor"),
    ("endpoint unreachable: HTTP 503 after 3 tries", "endpoint", "model"),
    ("harness crashed: ValueError: bad reply", "harness_crash", "worker"),
    ("harness reported an infrastructure error", "infrastructure", "worker"),
    ("not attempted", "infrastructure", "worker"),
]


@pytest.mark.parametrize(("reason", "kind", "where"), INFRA)
def test_an_error_row_is_classified_by_its_producer(reason, kind, where):
    row = error_row(ITEM, reason, 3, sweep="s")
    assert row["error"] == {"kind": kind, "where": where, "message": reason}
    assert kind in D.KINDS
    assert D.error_of(reason, status="error") == row["error"]  # a format-1 row's text, classified on read


def test_the_kinds_table_matches_its_producers():
    """Each infrastructure pattern starts a reason the driver or a worker actor really writes."""
    sources = (REPO / "opteval/cluster/driver/dispatch.py").read_text() + \
        (REPO / "opteval/cluster/actors/workers.py").read_text()
    for prefix in ("trajectory timeout after ", "worker {idx} failed: ", "driver could not grade/record: ",
                   "executor lost: ", "endpoint unreachable: ", "harness crashed: "):
        assert prefix in sources, prefix
    assert {k for _, k, _ in INFRA} | {D.HARNESS} == set(D.KINDS)


def test_a_graded_rows_error_is_its_last_harness_note(tmp_path):
    t = conversation(2, method="optistate")
    t.errors = ["turn 0: first", "turn 1: submission refused: constraints missing"]
    row = _row(t)
    assert row["error"] == {"kind": "harness", "where": "optistate",
                            "message": "turn 1: submission refused: constraints missing"}
    rows = [row, error_row(ITEM, "worker 0 failed: X", 2, sweep="s")]
    got = {r["key"]: r for r in _commit(tmp_path / "two", rows).read_table().to_pylist()}
    assert got["k0"]["error"] == row["error"] and got["k9"]["error"]["kind"] == "worker_lost"
    old = {r["key"]: r for r in _commit(tmp_path / "one", rows, fmt=1).read_table().to_pylist()}
    assert old["k0"]["error"] == row["error"]["message"]  # format 1: the text, exactly
    assert [D.error_message(got[k]["error"]) for k in got] == [old[k]["error"] for k in got]


def test_a_regraded_rows_note_is_a_harness_note_and_its_completion_kept(tmp_path):
    v = SimpleNamespace(id="p1", sample=0, submission=None, reason="no_code", outcome=None, why="no code block",
                        verification=None)
    [row] = ledger_rows([v], {("p1", 0): "the published answer"}, sweep="s", model="M", method="published",
                        benchmark="sample", profile="optagentbench", extraction="submit", fingerprint="f")
    assert row["error"] == {"kind": "harness", "where": "published", "message": "no code block"}
    [back] = _commit(tmp_path, [row]).read_table().to_pylist()
    assert D.calls_of(back["calls"]) == []  # the entry has no call of its own
    assert D.transcript_of(back["calls"], back["transcript"]) == [{"published_completion": "the published answer"}]


@pytest.mark.parametrize("value", [None, float("nan"), "", "[]"])
def test_absent_values_decode_as_empty(value):
    assert D.calls_of(value) == D.execs_of(value) == D.transcript_of(value, value) == []
    assert D.error_message(value if value != "[]" else None) is None


def test_without_exec_text_nulls_only_the_program_and_its_output(tmp_path):
    rows = [_row(conversation(3), key="k0"), _row(conversation(1), key="k1"), _row(conversation(4), key="k2")]
    rows[1]["execs"] = None  # a row that ran nothing
    led = _commit(tmp_path, rows)
    [batch] = led.read_table().to_batches()
    execs = batch.column("execs")  # and a null list beside them, as an older writer may leave
    nulled = pa.array([None if i == 1 else v for i, v in enumerate(execs.to_pylist())], type=execs.type)
    batch = batch.set_column(batch.schema.get_field_index("execs"), "execs", nulled)
    for part in (batch, batch.slice(1), batch.slice(1, 1), batch.slice(2)):  # a slice's offsets do not start at 0
        slim = D.without_exec_text(part)
        assert slim.schema.equals(part.schema)
        for before, after in zip(part.column("execs").to_pylist(), slim.column("execs").to_pylist()):
            if not before:  # no run: None or [] stays what it was
                assert after == before
                continue
            assert [{k: v for k, v in e.items() if k not in D.EXEC_TEXT} for e in before] == \
                   [{k: v for k, v in e.items() if k not in D.EXEC_TEXT} for e in after]
            assert all(e[k] is None for e in after for k in D.EXEC_TEXT)
            assert any(e["code"] for e in before)  # there was text to drop
    # format 1 (JSON text) is left as it is
    f1 = _commit(tmp_path / "f1", [_row(conversation(2))], fmt=1).read_table().to_batches()[0]
    assert D.without_exec_text(f1) is f1


def test_scan_reads_file_by_file_in_order_with_absent_columns_null(tmp_path):
    led = _commit(tmp_path, [_row(conversation(1), key=f"k{i}") for i in range(3)])
    for i in range(3, 9):
        led.commit([_row(conversation(1), key=f"k{i}")])
    want = led.read_table(columns=["key"]).column("key").to_pylist()
    got = [k for b in led.scan(["key", "execs"], batch_rows=2) for k in b.column("key").to_pylist()]
    assert got == want and len(got) == 9
    picked = [k for b in led.scan(["key"], filter=pa.compute.field("key").isin(["k1", "k7"]))
              for k in b.column("key").to_pylist()]
    assert sorted(picked) == ["k1", "k7"]
