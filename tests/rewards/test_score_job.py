"""``python jobs/rewards.py score``: bad input exits 2 with one line (before Ray starts); one real run."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "jobs" / "rewards.py"
COPT = ('```python\nimport coptpy as cp\nfrom coptpy import COPT\nenv = cp.Envr()\nmodel = env.createModel("lp")\n'
        'x = model.addVar(lb=0)\ny = model.addVar(lb=0)\nmodel.addConstr(x + y <= 4)\nmodel.addConstr(x + 3 * y <= 6)\n'
        'model.setObjective(3 * x + 2 * y, COPT.MAXIMIZE)\nmodel.solve()\n```\n')


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)  # always a local Ray of its own
    return subprocess.run([sys.executable, str(JOB), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def score_args(c: Path, a: Path, out: Path, scheme: str = "correct") -> list[str]:
    return ["score", "--completions", str(c), "--answers", str(a), "--scheme", scheme, "--extraction", "orlm",
            "--grading", "orlm", "--out", str(out)]


@pytest.mark.parametrize("completions, answers, expected", [
    (['{"id": "a", "completion": "x"}', '{"id": "b", "completion": '], [{"id": "a", "answer": 1}],
     "C.jsonl:2: bad JSON"),
    ([{"id": "a", "completion": "x"}, {"id": "b", "completion": "y"}], [{"id": "a", "answer": 1}],
     "1 completion id(s) have no answer: 'b'"),
    ([{"id": "a", "completion": "x"}], [{"id": "a", "answer": 1}, {"id": "b", "answer": "lots"}],
     "A.jsonl:2: answer 'lots' for id 'b' is neither a number nor a status"),
    ([{"id": "a"}], [{"id": "a", "answer": 1}], "C.jsonl:1: missing key 'completion'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, completions, answers, expected):
    c = write_jsonl(tmp_path / "C.jsonl", completions)
    a = write_jsonl(tmp_path / "A.jsonl", answers)
    out = run(*score_args(c, a, tmp_path / "R.jsonl"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rewards: error: ") and expected in lines[0], out.stderr
    assert not (tmp_path / "R.jsonl").exists()


def test_unknown_scheme_and_busy_port_exit_2(tmp_path):
    out = run("score", "--completions", "x", "--answers", "y", "--scheme", "nope", "--out", "z")
    assert out.returncode == 2 and "unknown scheme 'nope'" in out.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        out = run("serve", "--port", str(busy))
    assert out.returncode == 2 and f"--port {busy}" in out.stderr and "already in use" in out.stderr


@pytest.mark.ray
def test_score_runs_on_executor_actors_and_writes_one_row_per_completion(tmp_path):
    c = write_jsonl(tmp_path / "C.jsonl", [
        {"id": "p", "completion": "## Constraints:\n" + COPT},
        {"id": "p", "completion": COPT},
        {"id": "q", "completion": "no code"},
    ])
    a = write_jsonl(tmp_path / "A.jsonl", [{"id": "p", "answer": 12}])  # orr1 needs no answer for q
    out = run(*score_args(c, a, tmp_path / "R.jsonl", scheme="orr1"), timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "scored 3 completions: mean reward 1.5000, correct 2/3"
    rows = [json.loads(line) for line in (tmp_path / "R.jsonl").read_text().splitlines()]
    assert [(r["id"], r["sample"]) for r in rows] == [("p", 0), ("p", 1), ("q", 0)]
    assert rows[0]["parts"] == {"format": pytest.approx(2 / 6), "code": 1.0, "voting": 1.0}
    assert rows[1]["parts"] == {"format": pytest.approx(1 / 6), "code": 1.0, "voting": 1.0}
    assert rows[2] == {"id": "q", "reward": 0.0, "correct": None, "parts": {"format": 0.0, "code": 0.0, "voting": 0.0},
                       "answer_source": "no_submission", "sample": 0}
    assert [r["answer_source"] for r in rows[:2]] == ["solve", "solve"]  # coptpy's solve is captured
