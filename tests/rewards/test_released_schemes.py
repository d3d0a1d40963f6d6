"""The released-code reward schemes (opteval.evalcore.rewards_released) on golden cases transcribed from
the upstream functions:

* ``sirl-released``: Cardinal-Operations/SIRL@8caaad14 ``SIRLTrain/reward_func/batch_score_gurobi.py``
  (``format_reward``, ``answer_reward``, ``code_reward``, ``compute_score``), with
  ``content_utils.py`` (``extract_code_block``, ``insert_print``, ``extract_obj``) and
  ``executor.py`` (``PythonExecutor.execute``) of the same commit;
* ``orr1-released``: SCUTE-ZZ/OR-R1@baea665 ``02_grpo_train_8b.py`` (``run_code``,
  ``compile_script``, ``reward_with_reference``).

Each expected number is what the upstream function returns on the same input (worked by hand
from its code, quoted beside the case). The OR-R1 cases of issue 30 also go through
``opteval rewards score`` with real sandbox runs (executors replaced by the local sandbox, no Ray).
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import opteval.jobs.rewards
from opteval.evalcore.rewards import RewardItem, score
from opteval.evalcore.rewards_released import (
    ORR1_ADD_SCRIPT,
    extraction_for,
    orr1_program,
    orr1_vote,
    sirl_answer,
    sirl_format,
    sirl_program,
)
from opteval.evalcore.sandbox.types import ERROR, OK, ExecResult
from opteval.jobs.cli import main as opteval_cli

GOOD = "<think>plan</think>\n<model>max 3x+2y</model>\n<python>\n```python\nm.optimize()\n```\n</python>"


def ran(stdout: str, outcome: str = OK, wall_s: float = 0.1) -> ExecResult:
    return ExecResult(outcome=outcome, stdout=stdout, wall_s=wall_s)


def obj(v: str) -> ExecResult:
    return ran(f"Just print the best obj: {v}\nJust print the best sol:[1.0,2.0,]\n")


def sirl(rows, results):
    return score("sirl-released", [RewardItem(*r) for r in rows], results, "sirl-train", "sirl")


# -- SIRL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    (GOOD, 2.0),  # every tag once, in order
    # no </python>: count -1/4; find() = -1 so python_start > python_end: -1/3
    (GOOD.replace("</python>", ""), 2 - 1 / 4 - 1 / 3),
    # no tags: 4 x 1/8 + 2 x 1/4, and order_set[4] (-1) <= max(order_set[:4]) (-1): -1/3
    ("plain text", 2 - 1 - 1 / 3),
    # a second think pair: counts 2 != 1 (exact counts), 2 x -1/8; find() takes the first ones, in order
    ("<think>a</think>" + GOOD, 2 - 1 / 4),
    # python before model: </model> after <python>, so order_set[4] <= max(order_set[:4]): -1/3
    ("<think>t</think><python>p</python><model>m</model>", 2 - 1 / 3),
])
def test_sirl_format_is_graded_with_exact_tag_counts(text, expected):
    assert sirl_format(text) == pytest.approx(expected)


@pytest.mark.parametrize("solver, ans, done, expected", [
    (1000.0005, 1000.0, True, True),  # |1000 - 1000.0005| / 1001 = 5.0e-7 < 1e-6
    (1000.002, 1000.0, True, False),  # 2.0e-6
    (0.0, 0.0, True, False),  # ans 0 is falsy: abs_err stays 1
    (0.0, 5e-7, True, True),  # solver 0 is falsy: abs_err = |ans| = 5e-7
    (None, 12.0, True, False),  # no objective printed: abs_err = |ans|
    (None, None, True, True),  # no ground truth and no objective, code Done: abs_err 0
    (None, None, False, False),
])
def test_sirl_answer_reward_verbatim(solver, ans, done, expected):
    assert sirl_answer(solver, ans, done) is expected


def test_sirl_released_sums_half_format_answer_and_code():
    rows = [("a", GOOD, 12), ("b", GOOD, 12), ("c", GOOD, 1200), ("d", GOOD, "infeasible"), ("e", GOOD, 12),
            ("f", GOOD, 12), ("g", "no tags", 12)]
    results = [
        obj("12.0"),  # 0.5 x 2 + 1 + 1
        ran(""),  # silent program: the executor's exec(list) retry raises, so not Done
        obj("1.2e+03"),  # extract_obj's -?\d+\.?\d* reads 1.2
        ran("No optimal solution found, status: 3\n"),  # no ground truth, no objective, Done: answer 1
        ran("Just print the best obj: 12.0\n", outcome=ERROR),  # raised after printing: result ""
        ran("Just print the best obj: 12.0\n", wall_s=6.0),  # PythonExecutor's 5 s timeout
        None,  # no code block: extract_code_block None
    ]
    got = sirl(rows, results)
    assert [r.reward for r in got] == pytest.approx([3.0, 1.0, 2.0, 3.0, 1.0, 1.0, (2 - 4 / 3) / 2])
    assert got[0].parts == {"format": 1.0, "answer": 1.0, "code": 1.0}
    assert "bonus" not in got[0].parts  # the released batch scorer has no stage-2 bonus
    assert got[2].parts == {"format": 1.0, "answer": 0.0, "code": 1.0}


def test_sirl_program_is_extract_code_block_with_gurobi_insert_print():
    code = sirl_program("<python>\n```python\nfrom gurobipy import *\nm = Model()\nm.optimize()\n```\n</python>")
    assert code == ("from gurobipy import *\nm = Model()\nm.optimize()\n"
                    "if m.status == GRB.OPTIMAL:\n"
                    "    print(f'Just print the best obj: {m.ObjVal}')\n"
                    "    print('Just print the best sol:[', end = '')\n"
                    "    for var in m.getVars():\n"
                    "        print(f'{var.X}', end = ',')\n"
                    "    print(']')\n"
                    "else:\n"
                    "    print('No optimal solution found, status:', m.status)")
    assert sirl_program("```python\nm.solve()\n```") == "m.solve()"  # a COPT model gets no print (gurobi only)
    assert sirl_program("no code") is None
    assert "RuntimeError" in (sirl_program("```python\nx = input()\n```") or "")  # GenericRuntime refuses


def test_sirl_program_runs_in_the_sandbox_and_scores(local_executor):
    fake = ("<think>t</think><model>m</model><python>\n```python\nclass GRB:\n    OPTIMAL = 2\n"
            "class V:\n    X = 3.0\nclass M:\n    status = 2\n    ObjVal = 12.0\n    def optimize(self): pass\n"
            "    def getVars(self): return [V()]\nm = M()\nm.optimize()\n```\n</python>")
    result = asyncio.run(local_executor.run(sirl_program(fake) or ""))
    assert "Just print the best obj: 12.0" in result.stdout and "Just print the best sol:[3.0,]" in result.stdout
    assert [r.reward for r in sirl([("a", fake, 12)], [result])] == [3.0]


# -- OR-R1 --------------------------------------------------------------------------------------


def best(v: str) -> ExecResult:
    return ran(f"Just print the best solution: {v}\n")


def orr1(results, ids=None):
    ids = ids or ["p"] * len(results)
    return score("orr1-released", [RewardItem(i, "```python\n", None) for i in ids], results, "orr1-train", "orlm")


def test_orr1_eight_distinct_answers_reward_none():
    got = orr1([best(str(v)) for v in range(1, 9)])
    assert [r.parts["voting"] for r in got] == [0.0] * 8  # each value once: max_count stays 1
    assert [r.parts["code"] for r in got] == [1.0] * 8


def test_orr1_four_10_3_and_four_10_7_reward_all_eight():
    got = orr1([best("10.3")] * 4 + [best("10.7")] * 4)
    assert [r.parts["voting"] for r in got] == [1.0] * 8  # int(10.3) == int(10.7) == 10


def test_orr1_vote_needs_two_and_the_first_tie_wins():
    assert orr1_vote(["5", "5", "7", "7"]) == 5  # dict order, strict '>'
    assert orr1_vote(["5", None, "No Best Solution", "abc"]) is None  # one numeric vote is not enough
    assert orr1_vote(["-2.5", "-2.9"]) == -2  # int() truncates toward zero


def test_orr1_valid_code_is_the_footer_printing():
    got = orr1([best("3"), best("3"), ran("No Best Solution\n"), ran("Just print the best solution: 3\n",
                                                                         outcome=ERROR),
                ran("hello\n"), ran("Just print the best solution: 3\n", wall_s=11.0), best("abc"), None])
    assert [r.parts["code"] for r in got] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert [r.parts["voting"] for r in got] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_orr1_votes_in_chunks_of_eight_per_id():
    got = orr1([best(str(v)) for v in range(8)] + [best("9"), best("9")] + [best("1")] * 2, ids=["p"] * 10 + ["q"] * 2)
    assert [r.parts["voting"] for r in got] == [0.0] * 8 + [1.0, 1.0] + [1.0, 1.0]


def test_orr1_program_is_run_code():
    assert orr1_program("x ```python\nprint(1)\n``` y") == "\nprint(1)\n" + ORR1_ADD_SCRIPT
    assert orr1_program("```python\nprint(1)\n") == "\nprint(1)" + ORR1_ADD_SCRIPT  # find() -1: drops the last char
    assert orr1_program("no code") is None


def test_released_schemes_own_their_extraction():
    assert extraction_for("orr1-released", None) == "orr1-train"
    assert extraction_for("correct", None) == "submit"
    with pytest.raises(ValueError, match="extraction 'sirl-train'"):
        extraction_for("sirl-released", "submit")


HEADINGS = ("## Mathematical Model:\n## Decision Variables:\n## Objective Function:\n## Constraints:\n"
            "## Python Code Solution Using `coptpy`:\n")


def fake_copt(value: float) -> str:
    """A completion whose program defines the ``model`` and ``COPT`` OR-R1's footer reads."""
    return (HEADINGS + "```python\nclass COPT:\n    OPTIMAL = 1\nclass M:\n    status = 1\n"
            f"    objval = {value}\nmodel = M()\n```\n")


def test_orr1_released_through_opteval_rewards_score(tmp_path, monkeypatch, local_executor, capsys):
    """Issue 30's two cases through the CLI; the programs run in the local sandbox."""
    async def run_all(codes):
        return [None if c is None else await local_executor.run(c) for c in codes]

    monkeypatch.setattr(opteval.jobs.rewards, "run_programs", lambda codes, executors, limits: asyncio.run(run_all(codes)))
    rows = ([{"id": "distinct", "completion": fake_copt(v)} for v in range(1, 9)]
            + [{"id": "ints", "completion": fake_copt(v)} for v in [10.3] * 4 + [10.7] * 4])
    c = tmp_path / "C.jsonl"
    c.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    a = tmp_path / "A.jsonl"
    a.write_text("", encoding="utf-8")
    out = tmp_path / "R.jsonl"
    rc = opteval_cli(["rewards", "score", "--completions", str(c), "--answers", str(a), "--scheme", "orr1-released",
                  "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    got = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert [g["parts"]["voting"] for g in got] == [0.0] * 8 + [1.0] * 8
    assert [g["parts"]["code"] for g in got] == [1.0] * 16
    assert [g["reward"] for g in got] == [2.0] * 8 + [3.0] * 8


def test_another_extraction_for_a_released_scheme_exits_2(tmp_path, capsys):
    c = tmp_path / "C.jsonl"
    c.write_text(json.dumps({"id": "a", "completion": GOOD}) + "\n", encoding="utf-8")
    a = tmp_path / "A.jsonl"
    a.write_text(json.dumps({"id": "a", "answer": 1}) + "\n", encoding="utf-8")
    rc = opteval_cli(["rewards", "score", "--completions", str(c), "--answers", str(a), "--scheme", "sirl-released",
                  "--extraction", "submit", "--out", str(tmp_path / "R.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--extraction submit: scheme 'sirl-released'" in err[0]
    assert not (tmp_path / "R.jsonl").exists()


def test_the_service_request_takes_the_released_schemes_own_extraction():
    from opteval.cluster.serve.rewards_app import RequestError, parse_request

    scheme, extraction, _, _ = parse_request({"scheme": "orr1-released", "items": [{"id": "a", "completion": "x"}]})
    assert (scheme, extraction) == ("orr1-released", "orr1-train")
    with pytest.raises(RequestError, match="extraction 'orr1-train'"):
        parse_request({"scheme": "orr1-released", "extraction": "orlm", "items": [{"id": "a", "completion": "x"}]})
