"""Every mutation operator of SemOPT's Table 9 (opteval.evalcore.mutation) on programs of the embedded
sample benchmark and small ones written here: the mutant differs from the original where the
operator says, still runs in the real sandbox and submits a number, and that number differs from
the original's -- except where the mathematics says it must not (a bound that does not bind)."""
from __future__ import annotations

import random

import pytest

from opteval.evalcore.data import reference_program
from opteval.evalcore.grading import grade
from opteval.evalcore.mutation import MUTATION_OPS, SIM_MUTATION_OPS, TABLE9_ADDED_OPS, apply_operator
from opteval.evalcore.sandbox import run_program

BOUNDED = """import pulp
prob = pulp.LpProblem("t", pulp.LpMaximize)
x = pulp.LpVariable("x", lowBound=0, upBound=4)
y = pulp.LpVariable("y", lowBound=0)
prob += 3 * x + 2 * y
prob += x + y <= 10, "capacity"
prob.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(prob.objective))
"""  # 24 at x = 4, y = 6; without x <= 4: 30

# (operator, program, the changed line's text after mutation, for every seed 0..2)
CASES = [
    ("remove_bounds", BOUNDED, ["upBound=None"]),  # the only bound besides x, y >= 0: it binds
    ("remove_bounds", "sample-0004", ["bounds=[(None, None)] * 3"]),  # SciPy: the zero lower bound
    ("negate_coefficient", "sample-0001", ["(-3.4) * s", "(-2.9) * r"]),
    ("negate_coefficient", "sample-0003", ["(-"]),  # an entry of the score vector
    ("drop_objective_term", "sample-0002", ["prob += 7300 * hawk\n", "prob += 2900 * sparrow\n"]),
    ("drop_objective_term", "sample-0010", ["0"]),  # one route's cost set to zero
    ("swap_variables", "sample-0002", ["4 * sparrow + 1.5 * hawk >= 37"]),
    ("swap_variables", "sample-0003", ["x[0] <= x[6]"]),
    ("index_mismatch", "sample-0010", ["demand[j - 1]", "supply[i - 1]"]),
    ("index_mismatch", "sample-0003", ["x[6] <= x[1]", "x[1] + x[0] <= 1", "x[0] + x[4] <= 1"]),
    ("flip_sense", "sample-0002", ["pulp.LpMaximize"]),
    ("relax_integrality", "sample-0002", ['cat="Continuous"']),
    ("change_comparator", "sample-0001", [">= 220", ">= 2400"]),
    ("drop_constraint", "sample-0001", ["pass\n"]),
    ("perturb_coefficient", "sample-0002", ["3480 * sparrow", "8760 * hawk"]),
    ("perturb_rhs", "sample-0001", ["<= 2880", "<= 264"]),
]
# seeds whose mutant keeps the optimum, as the mathematics says it must
SAME_OPTIMUM = {
    ("index_mismatch", "sample-0003", 1),  # x1 + x0 <= 1 does not bind at the optimum either
    ("negate_coefficient", "sample-0003", 0),  # item 7 is not packed: a negative score keeps it out
}


def _source(program: str) -> str:
    if "\n" in program:
        return program
    src = reference_program(program)
    assert src is not None, program
    return src


def test_table_9_is_covered():
    assert set(TABLE9_ADDED_OPS) == {"remove_bounds", "negate_coefficient", "drop_objective_term", "swap_variables",
                                     "index_mismatch"}
    assert set(MUTATION_OPS) == set(SIM_MUTATION_OPS) | set(TABLE9_ADDED_OPS) == {op for op, _, _ in CASES}


@pytest.mark.parametrize("op, program, marks", CASES, ids=[f"{c[0]}-{c[1][:12].strip()}" for c in CASES])
def test_operator_mutant_differs_runs_and_changes_the_objective(op, program, marks):
    src = _source(program)
    original = run_program(src)
    assert original.ok and isinstance(original.submission, (int, float))
    for seed in range(3):
        mutant = apply_operator(src, op, random.Random(seed))
        assert mutant is not None and mutant != src, (op, program, seed)
        changed = [ln for ln in mutant.splitlines(keepends=True) if ln not in src.splitlines(keepends=True)]
        assert changed and any(m in "".join(changed) for m in marks), (op, seed, changed)
        result = run_program(mutant)
        assert result.ok and isinstance(result.submission, (int, float)), (op, seed, result.outcome, result.stderr[-300:])
        if (op, program, seed) in SAME_OPTIMUM:
            assert grade(result.submission, original.submission)
        else:
            assert not grade(result.submission, original.submission), (op, program, seed, result.submission)


def test_remove_bounds_leaves_binaries_and_can_leave_the_optimum():
    # a binary's bounds are its type: nothing to remove (relax_integrality's business)
    binary = _source("sample-0003")
    assert apply_operator(binary, "remove_bounds", random.Random(0)) is None
    # sample-0001's bounds other than rye >= 0 do not bind: the mutant runs and the optimum stays
    src = _source("sample-0001")
    mutant = apply_operator(src, "remove_bounds", random.Random(0))
    assert mutant is not None and mutant != src
    assert grade(run_program(mutant).submission, run_program(src).submission)


def test_swap_variables_refuses_a_swap_that_changes_nothing():
    symmetric = BOUNDED.replace("prob += 3 * x + 2 * y\n", "prob += 3 * x + 2 * y\nprob += x + y >= 1\n")
    mutant = apply_operator(symmetric.replace('prob += x + y <= 10, "capacity"\n', ""), "swap_variables",
                            random.Random(0))
    assert mutant is None  # x + y >= 1 is the same constraint as y + x >= 1


@pytest.mark.parametrize("op", TABLE9_ADDED_OPS)
def test_not_applicable_is_none_not_another_edit(op):
    plain = "value = 3\nsubmit(value)\n"  # no model: no bound, objective, constraint or index to touch
    assert apply_operator(plain, op, random.Random(0)) is None
