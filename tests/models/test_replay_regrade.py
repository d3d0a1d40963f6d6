"""ReplayModel and jobs/regrade.py with the orlm profile on hand-made coptpy completions."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from opteval.evalcore.models import ModelError, ReplayModel, Sampling, make_model
from opteval.evalcore.models.replay import ReplayFileError, load_records

REPO = Path(__file__).resolve().parents[2]
REGRADE = REPO / "jobs" / "regrade.py"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def published(tmp_path, completions):
    """Five completions in ORLM's published shape and their answers."""
    rows = [
        {"id": "lp-opt", "completion": completions["copt"]()},
        {"id": "lp-infeasible", "completion": completions["copt"](infeasible=True)},
        {"id": "syntax", "completion": completions["syntax_error"]},
        {"id": "prose", "completion": completions["no_code"]},
        {"id": "lp-wrong", "completion": completions["copt"](name="m")},
    ]
    answers: list[dict] = [
        {"id": "lp-opt", "answer": 12},
        {"id": "lp-infeasible", "answer": "No Best Solution"},
        {"id": "syntax", "answer": 7},
        {"id": "prose", "answer": 12},
        {"id": "lp-wrong", "answer": "100"},
        {"id": "unused", "answer": 1},
    ]
    return write_jsonl(tmp_path / "C.jsonl", rows), write_jsonl(tmp_path / "A.jsonl", answers)


def run_regrade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REGRADE), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def test_regrade_orlm_prints_reasons_then_accuracy(published):
    completions, answers = published
    proc = run_regrade("--completions", str(completions), "--answers", str(answers),
                       "--extraction", "orlm", "--grading", "orlm", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "no_code 1",
        "exec_error 1",
        "no_submission 0",
        "unparseable 0",
        "wrong 1",
        "correct_solve 2",  # both correct answers are the objective of a captured coptpy solve
        "correct_unsolved 0",
        "accuracy 2/5 = 40.00%",
    ]
    assert "1 answer(s) have no completion" in proc.stderr


def test_regrade_details_in_process(published, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("regrade_job", REGRADE)  # same entry point, in process
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = job  # dataclasses look their module up there
    spec.loader.exec_module(job)
    main = job.main

    completions, answers = published
    details = tmp_path / "details.jsonl"
    assert main(["--completions", str(completions), "--answers", str(answers), "--extraction", "orlm",
                 "--grading", "orlm", "--details", str(details)]) == 0
    rows = {r["id"]: r for r in map(json.loads, details.read_text().splitlines())}
    assert rows["lp-opt"]["reason"] == "correct" and rows["lp-opt"]["submission"] == pytest.approx(12.0)
    assert rows["lp-infeasible"]["submission"] == "infeasible"
    assert rows["syntax"]["outcome"] == "error" and rows["prose"]["outcome"] is None


def test_regrade_missing_answer_is_an_error_naming_it(published, tmp_path):
    completions, _ = published
    answers = write_jsonl(tmp_path / "A2.jsonl", [{"id": "lp-opt", "answer": 12}])
    proc = run_regrade("--completions", str(completions), "--answers", str(answers), "--extraction", "orlm")
    assert proc.returncode == 2
    for missing in ("'lp-infeasible'", "'syntax'", "'prose'", "'lp-wrong'"):
        assert missing in proc.stderr
    assert proc.stdout == ""


def test_regrade_bad_json_names_file_and_line(published, tmp_path):
    completions, answers = published
    bad = tmp_path / "bad.jsonl"
    bad.write_text(completions.read_text().splitlines()[0] + "\n{not json\n")
    proc = run_regrade("--completions", str(bad), "--answers", str(answers))
    assert proc.returncode == 2 and f"{bad}:2" in proc.stderr
    bad_answers = tmp_path / "badA.jsonl"
    bad_answers.write_text('{"id": "x", "answer": 1}\n\n{"id": "y"}\n')
    proc = run_regrade("--completions", str(completions), "--answers", str(bad_answers))
    assert proc.returncode == 2 and f"{bad_answers}:3" in proc.stderr


# -- ReplayModel -------------------------------------------------------------------------

def test_replay_bound_model_returns_recorded_calls(tmp_path):
    path = write_jsonl(tmp_path / "rec.jsonl", [
        {"id": "p1", "completion": "a0"},
        {"id": "p1", "completion": "a1"},  # no sample: the 2nd row of p1 is sample 1
        {"id": "p2", "sample": 3, "call": 0, "completion": "first",
         "usage": {"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 8}},
         "finish_reason": "length"},
        {"id": "p2", "sample": 3, "call": 1, "completion": "second", "simulated": True},
    ])
    model = ReplayModel.from_file(path, name="published")

    async def calls():
        bound = model.for_problem("p2", 3)
        first = await bound.chat([], Sampling(), 45)
        second = await bound.chat([], Sampling(), 45)
        with pytest.raises(ModelError, match=r"p2.*sample=3 call=2"):
            await bound.chat([], Sampling(), 45)
        return first, second, await model.for_problem("p1", 1).chat([], Sampling(), 43)

    first, second, p1 = asyncio.run(calls())
    assert first.text == "first" and first.finish_reason == "length"
    assert (first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.cached_prompt_tokens) == (10, 4, 8)
    assert second.text == "second" and second.simulated and second.usage.prompt_tokens is None
    assert p1.text == "a1" and p1.usage.completion_tokens is None
    with pytest.raises(ModelError, match="for_problem"):
        asyncio.run(model.chat([], Sampling(), 42))


def test_replay_parquet_and_make_model(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rec.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "sample": [0, 1], "completion": ["x", "y"]}), path)
    model = make_model({"name": "r", "backend": "replay", "path": str(path)})
    assert isinstance(model, ReplayModel)
    assert asyncio.run(model.for_problem("b", 1).chat([], Sampling(), 0)).text == "y"
    with pytest.raises(ValueError, match="'path'"):
        make_model({"name": "r", "backend": "replay"})


def test_replay_file_errors_name_file_and_line(tmp_path):
    dup = write_jsonl(tmp_path / "dup.jsonl", [{"id": "a", "sample": 0, "completion": "x"},
                                               {"id": "a", "sample": 0, "completion": "y"}])
    with pytest.raises(ReplayFileError, match=rf"{dup}:2: duplicate id='a'.*first at {dup}:1"):
        load_records(dup)
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"id": "a"}])
    with pytest.raises(ReplayFileError, match=rf"{missing}:1: missing key 'completion'"):
        load_records(missing)
    bad_sample = write_jsonl(tmp_path / "s.jsonl", [{"id": "a", "sample": -1, "completion": "x"}])
    with pytest.raises(ReplayFileError, match=rf"{bad_sample}:1: key 'sample'"):
        load_records(bad_sample)
