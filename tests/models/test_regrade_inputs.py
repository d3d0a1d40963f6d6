"""jobs/regrade.py: every bad input is one line naming the file (and line), exit 2; --help
documents each extraction profile's completion format; no_submission says why."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REGRADE = REPO / "jobs" / "regrade.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REGRADE), *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)


@pytest.fixture
def answers(tmp_path) -> Path:
    p = tmp_path / "A.jsonl"
    p.write_text('{"id": "a", "answer": 3}\n')
    return p


BAD = {
    "non_utf8": (b'{"id": "a", "completion": "x"}\n{"id": "b", "completion": "\xff\xfe"}\n', ":2: not UTF-8"),
    "deep": (b'{"id": "a", "completion": ' + b"[" * 100000 + b"]" * 100000 + b"}\n", ":1: JSON nested too deeply"),
    "huge_int": (b'{"id": "a", "completion": "x", "sample": ' + b"9" * 5000 + b"}\n", ":1: bad JSON value"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_completions_name_file_and_line(tmp_path, answers, kind):
    data, expect = BAD[kind]
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(data)
    proc = _run("--completions", str(path), "--answers", str(answers))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "Traceback" not in proc.stderr
    assert f"{path}{expect}" in proc.stderr


def test_bad_answers_directory_and_corrupt_parquet(tmp_path, answers):
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(BAD["deep"][0])
    good = tmp_path / "C.jsonl"
    good.write_text('{"id": "a", "completion": "x"}\n')
    proc = _run("--completions", str(good), "--answers", str(deep))
    assert proc.returncode == 2 and f"{deep}:1: JSON nested too deeply" in proc.stderr
    proc = _run("--completions", str(tmp_path), "--answers", str(answers))
    assert proc.returncode == 2 and f"{tmp_path}: is a directory" in proc.stderr
    pq = tmp_path / "C.parquet"
    pq.write_bytes(b"PAR1 not really")
    proc = _run("--completions", str(pq), "--answers", str(answers))
    assert proc.returncode == 2 and f"{pq}: not a readable Parquet file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_documents_every_profile_with_an_example():
    proc = _run("--help")
    assert proc.returncode == 0
    for profile in ("submit", "orlm", "stdout"):
        assert f"\n  {profile} " in proc.stdout
    assert proc.stdout.count('{"id": "p1", "completion":') == 3 and "coptpy" in proc.stdout


def test_no_submission_says_why(tmp_path, answers):
    code = "```python\nprint('Objective value: 3')\n```"
    comp = tmp_path / "C.jsonl"
    comp.write_text(json.dumps({"id": "a", "completion": code}) + "\n")
    details = tmp_path / "D.jsonl"
    proc = _run("--completions", str(comp), "--answers", str(answers), "--extraction", "orlm",
                "--details", str(details))
    assert proc.returncode == 0 and "no_submission 1" in proc.stdout
    assert "regrade: no_submission a (sample 0): orlm footer:" in proc.stderr
    row = json.loads(details.read_text())
    assert row["reason"] == "no_submission" and row["why"].startswith("orlm footer:")
    proc = _run("--completions", str(comp), "--answers", str(answers), "--extraction", "submit")
    assert "never called submit" in proc.stderr
