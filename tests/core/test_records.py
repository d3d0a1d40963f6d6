"""Trajectory keys, token sums, round-trips and the ledger's Arrow schema."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from opteval.evalcore import records as R

KEY_ARGS: dict[str, Any] = {"sweep": "s1", "model": "qwen", "method": "direct", "benchmark": "nl4opt",
                            "problem_id": "nl4opt-0001", "sample": 3, "fingerprint": "abc"}


def test_trajectory_key_is_stable():
    assert R.trajectory_key(**KEY_ARGS) == R.trajectory_key(**dict(KEY_ARGS))
    assert R.trajectory_key(**KEY_ARGS).startswith("qwen/direct/nl4opt/nl4opt-0001/3/")


@pytest.mark.parametrize("field", sorted(KEY_ARGS))
def test_any_field_change_changes_the_key(field):
    changed = dict(KEY_ARGS)
    changed[field] = 4 if field == "sample" else KEY_ARGS[field] + "x"
    assert R.trajectory_key(**changed) != R.trajectory_key(**KEY_ARGS)


def test_key_fields_do_not_run_together():
    a = R.trajectory_key(**{**KEY_ARGS, "sweep": "s1", "model": "qwen"})
    b = R.trajectory_key(**{**KEY_ARGS, "sweep": "s1q", "model": "wen"})
    assert a.rsplit("/", 1)[1] != b.rsplit("/", 1)[1]


def test_config_fingerprint_ignores_key_order_not_values():
    assert R.config_fingerprint({"a": 1, "b": [1, 2]}) == R.config_fingerprint({"b": [1, 2], "a": 1})
    assert R.config_fingerprint({"a": 1}) != R.config_fingerprint({"a": 2})


def _call(pt, ct, cached=None):
    return R.CallRecord(turn=0, purpose="generate", prompt_tokens=pt, completion_tokens=ct,
                        cached_prompt_tokens=cached, latency_s=0.5, finish_reason="stop")


def _traj(**kw):
    return R.Trajectory(model="m", method="direct", benchmark="nl4opt", problem_id="nl4opt-0001", sample=0, seed=42, **kw)


def test_token_sums_missing_is_none_not_zero():
    t = _traj(calls=[_call(10, 5, 2), _call(7, None, 0)])
    assert t.prompt_tokens == 17 and t.completion_tokens is None
    assert _traj(calls=[_call(0, 0, 0)]).completion_tokens == 0  # recorded zeros stay zeros
    assert _traj(calls=[_call(10, 5, None)]).cached_prompt_tokens is None


def test_to_dict_from_dict_round_trip_through_json():
    t = _traj(
        status=R.STATUS_SUBMITTED,
        submission=R.Submission(raw="infeasible", extraction="submit"),
        calls=[_call(10, 5, None)],
        execs=[R.ExecRecord(turn=0, outcome="ok", wall_s=0.1, cpu_s=0.05, exit_code=0, submission=3.0,
                            models=[{"sense": "min", "n_bin": 2}])],
        transcript=[{"role": "user", "content": "q"}],
        errors=["x"], budgets={"turns": 4}, simulated=True, wall_s=1.5, key="k",
    )
    back = R.Trajectory.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t
    assert isinstance(back.calls[0], R.CallRecord) and isinstance(back.submission, R.Submission)


def test_empty_table_has_the_ledger_schema():
    t = R.empty_table()
    assert t.num_rows == 0 and t.schema.equals(R.LEDGER_SCHEMA)


def test_a_ledger_row_builds_an_arrow_table():
    row: dict[str, Any] = {f.name: None for f in R.LEDGER_SCHEMA}
    row.update(key="k", model="m", method="direct", benchmark="nl4opt", problem_id="p", sample=0,
               status=R.STATUS_SUBMITTED, correct=True, simulated=False, prompt_tokens=None,
               committed_at=datetime.now(UTC), transcript=json.dumps([{"role": "user"}]))
    table = pa.Table.from_pylist([row], schema=R.LEDGER_SCHEMA_V1)  # format 1: the detail as JSON text
    assert table.num_rows == 1 and table.column("prompt_tokens").null_count == 1
    assert json.loads(table.column("transcript")[0].as_py()) == [{"role": "user"}]
    nested = pa.Table.from_pylist([{**row, "transcript": [{"role": "user", "content": "hi", "extra": None}],
                                    "error": {"kind": "harness", "where": "direct", "message": "x"}}],
                                  schema=R.LEDGER_SCHEMA)  # format 2
    assert nested.column("transcript")[0].as_py() == [{"role": "user", "content": "hi", "extra": None}]
    assert R.LEDGER_SCHEMA.names == R.LEDGER_SCHEMA_V1.names and R.ledger_schema(1) is R.LEDGER_SCHEMA_V1
    for schema in (R.LEDGER_SCHEMA, R.LEDGER_SCHEMA_V1):
        assert not schema.field("correct").nullable and schema.field("prompt_tokens").nullable
