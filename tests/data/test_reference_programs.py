"""Every reference program, run through the sandbox, submits a value that grades correct.

Each program goes through `opteval.evalcore.sandbox.run_program` exactly as a model's program would
(warm fork server, limits, `submit` builtin), so this also proves the sandbox can run every
solver library the sample benchmark uses.
"""
from __future__ import annotations

import pytest

from opteval.evalcore.data import load_sample_rows, reference_program
from opteval.evalcore.grading import grade
from opteval.evalcore.sandbox import Limits, run_program

ROWS = load_sample_rows()
LIMITS = Limits(wall_s=60.0, cpu_s=60.0)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_reference_program_grades_correct_in_the_sandbox(row):
    code = reference_program(row["id"])
    assert code is not None, row["id"]
    result = run_program(code, LIMITS)
    assert result.outcome == "ok", (result.outcome, result.note, result.stderr[-2000:])
    got = result.submission
    assert grade(got, row["answer"], profile="optagentbench"), (got, row["answer"])


def test_a_wrong_submission_does_not_grade_correct():
    assert not grade(1468.8, 1468.5714)  # 0.23 > max(1e-2, 1e-4*1468.8) = 0.147
    assert grade(1468.65, 1468.5714)  # 0.079 <= 0.147
    assert not grade(0.02, 0)  # absolute floor 1e-2
    assert grade(0.009, 0)
    assert not grade("infeasible", "unbounded")
    assert not grade(None, 0)
