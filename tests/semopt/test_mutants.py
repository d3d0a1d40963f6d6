"""opteval.evalcore.mutation + jobs/mutants.py: hard negatives that run and change the answer."""
from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from opteval.evalcore.data import load_sample_rows, reference_program
from opteval.evalcore.grading import grade
from opteval.evalcore.mutation import MUTATION_OPS, apply_operator
from opteval.evalcore.sandbox import run_program
from tests.cli_runner import run

IDS = ("sample-0001", "sample-0002")  # a continuous LP and an integer program of the sample benchmark


def _programs_file(tmp_path: Path, extra: Sequence[str] = ()) -> Path:
    rows = {r["id"]: r for r in load_sample_rows()}
    lines = [json.dumps({"id": i, "question": rows[i]["question"], "code": reference_program(i)}) for i in IDS]
    path = tmp_path / "programs.jsonl"
    path.write_text("\n".join(lines + list(extra)) + "\n")
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run("mutants", *args, timeout=300)


def test_apply_operator_is_one_named_operator_or_none():
    src = reference_program("sample-0001")
    assert src is not None
    flipped = apply_operator(src, "flip_sense", random.Random(0))
    assert flipped is not None and flipped != src and "LpMinimize" in flipped
    # no objective sense to flip and no fallback: None, never another operator's edit
    assert apply_operator("x = 1\nsubmit(x)\n", "flip_sense", random.Random(0)) is None
    with pytest.raises(ValueError, match="unknown mutation operator"):
        apply_operator(src, "nope", random.Random(0))


def test_pairs_run_and_differ_from_their_originals(tmp_path):
    out = tmp_path / "pairs.jsonl"
    proc = _run("--programs", str(_programs_file(tmp_path)), "--out", str(out), "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    counts = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines() if not line.startswith("op "))
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert int(counts["programs"]) == 2 and int(counts["pairs"]) == len(pairs) >= 4
    assert {p["problem_id"] for p in pairs} == set(IDS)
    assert {p["operator"] for p in pairs} <= set(MUTATION_OPS)
    for p in pairs:  # re-run independently: each mutant executes, submits a number, and it differs
        assert set(p) == {"problem_id", "problem", "faithful", "mutant", "operator", "faithful_result", "mutant_result"}
        assert p["faithful"] == reference_program(p["problem_id"]) and p["mutant"] != p["faithful"]
        orig, mut = run_program(p["faithful"]), run_program(p["mutant"])
        assert mut.ok and mut.submission == p["mutant_result"]
        assert not grade(mut.submission, orig.submission)


def test_status_answers_are_skipped_and_counted(tmp_path):
    rows = {r["id"]: r for r in load_sample_rows()}
    path = tmp_path / "p.jsonl"  # sample-0005's answer is "infeasible": no number to differ from
    path.write_text(json.dumps({"id": "sample-0005", "question": rows["sample-0005"]["question"],
                                "code": reference_program("sample-0005")}) + "\n")
    proc = _run("--programs", str(path), "--out", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 0 and "originals_not_numeric 1" in proc.stdout and "pairs 0" in proc.stdout
    assert (tmp_path / "o.jsonl").read_text() == ""


@pytest.mark.parametrize("case, expect", [
    ("badjson", ":3: bad JSON"),
    ("nokey", ":3: missing or non-string key(s) ['code']"),
    ("missing", "no such file"),
    ("badop", "--ops: unknown operator(s) ['nope']"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, expect):
    if case == "badjson":
        args = ["--programs", str(_programs_file(tmp_path, ["{not json"]))]
    elif case == "nokey":
        args = ["--programs", str(_programs_file(tmp_path, [json.dumps({"id": "x", "question": "q"})]))]
    elif case == "missing":
        args = ["--programs", str(tmp_path / "nope.jsonl")]
    else:
        args = ["--programs", str(_programs_file(tmp_path)), "--ops", "flip_sense,nope"]
    proc = _run(*args, "--out", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and expect in proc.stderr, proc.stderr
