"""Missing trajectories in the exports (no Ray): a planned key never committed, or committed with
status error, is a sample with an error scored wrong, still in the denominator; batch-output rows
name their line when malformed."""
from __future__ import annotations

import json

import pytest
from inspect_ai.log import read_eval_log

from opteval.evalcore.exports import lm_eval
from opteval.evalcore.exports.cells import group_cells
from opteval.evalcore.exports.inspect_log import write_logs
from opteval.evalcore.models.batch import response_row
from opteval.evalcore.models.replay import ReplayFileError, load_records

PLAN = [{"key": f"m/direct/b/p{i}/0/{i:012x}", "model": "m", "method": "direct", "benchmark": "b",
         "problem_id": f"p{i}", "sample": 0} for i in range(3)]
CALL = {"messages": [{"role": "user", "content": "solve it"}], "completion": "42"}
ROWS = [
    {"key": PLAN[0]["key"], "status": "submitted", "correct": True, "submission": "42", "prompt_tokens": 5,
     "completion_tokens": 3, "transcript": json.dumps([CALL]), "grading_profile": "optagentbench"},
    {"key": PLAN[1]["key"], "status": "error", "correct": False, "error": "worker died", "transcript": None},
]  # PLAN[2]: never committed


def test_missing_trajectories_are_errors_scored_wrong_in_the_inspect_log(tmp_path):
    [path] = write_logs(group_cells(PLAN, ROWS), "s", tmp_path)
    log = read_eval_log(str(path))
    samples, results = log.samples or [], log.results
    assert results is not None
    assert [(s.scores or {})["correct"].value for s in samples] == ["C", "I", "I"]
    assert samples[0].error is None and samples[0].model_usage["m"].input_tokens == 5
    errors = [s.error.message if s.error else "" for s in samples]
    assert "worker died" in errors[1] and "not run" in errors[2]
    assert results.scores[0].metrics["accuracy"].value == pytest.approx(1 / 3)
    assert results.total_samples == 3 and results.completed_samples == 1


def test_missing_trajectories_count_in_lm_evals_denominator(tmp_path):
    lm_eval.write(group_cells(PLAN, ROWS), tmp_path, sweep="s", git_hash="abc")
    [res] = (tmp_path / "m__direct").glob("results_*.json")
    task = json.loads(res.read_text())["results"]["b"]
    assert task["acc,none"] == pytest.approx(1 / 3) and task["sample_len"] == 3


def test_batch_output_rows_become_replay_records_by_key_and_call(tmp_path):
    key = str(PLAN[0]["key"])
    path = tmp_path / "out.jsonl"
    rows = [response_row(key, "first", {"prompt_tokens": 7, "completion_tokens": 2}),
            response_row(f"{key}#1", "second"),
            {"custom_id": "p9", "response": None, "error": {"code": "x", "message": "boom"}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = load_records(path)
    assert [(r.id, r.sample, r.call, r.completion) for r in recs] == [("p0", 0, 0, "first"), ("p0", 0, 1, "second"),
                                                                      ("p9", 0, 0, "")]
    assert recs[0].usage.prompt_tokens == 7 and recs[2].finish_reason == "error"
    path.write_text(json.dumps({"custom_id": "p1", "response": {"status_code": 200, "body": {}}}) + "\n")
    with pytest.raises(ReplayFileError, match=r"out.jsonl:1: .*choices\[0\]"):
        load_records(path)


def test_bad_export_input_is_one_line_and_exit_2(tmp_path, capsys):
    from opteval.jobs import export

    assert export.main(["parquet", "sweep.name=x"]) == 2
    assert "unknown format 'parquet' (formats: inspect, lm-eval, batch-input)" in capsys.readouterr().err
    assert export.main(["inspect", "sweep.name=nope", f"sweep.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "Traceback" not in err
