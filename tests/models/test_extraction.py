"""Extraction profiles on hand-made completions, run through the real sandbox."""
from __future__ import annotations

import pytest

from opteval.evalcore.extraction import (
    ORLM_FOOTER,
    PROFILES,
    UnknownProfileError,
    extract_code,
    extract_submission,
    fenced_python_blocks,
)
from opteval.evalcore.sandbox import run_program
from opteval.evalcore.sandbox.types import ExecResult, Limits

LIMITS = Limits(wall_s=60, cpu_s=60)


def run(completion: str, profile: str):
    code = extract_code(completion, profile)
    assert code is not None
    result = run_program(code, LIMITS)
    return result, extract_submission(result, profile)


# -- submit ------------------------------------------------------------------------------

def test_submit_takes_last_python_block_and_reads_submit():
    completion = (
        "First try:\n```python\nsubmit(1)\n```\nA JSON aside:\n```json\n{\"a\": 1}\n```\n"
        "Corrected:\n```\nvalue = sum(range(5))\nsubmit(value * 2)\n```\nDone."
    )
    code = extract_code(completion, "submit")
    assert code == "value = sum(range(5))\nsubmit(value * 2)\n"
    result, submission = run(completion, "submit")
    assert result.ok and submission == 20


def test_submit_status_word_and_no_code():
    result, submission = run("```py\nsubmit('infeasible')\n```", "submit")
    assert submission == "infeasible"
    assert extract_code("no fences here, just submit(3)", "submit") is None
    assert extract_code("```python\n   \n```", "submit") is None  # empty block is no code
    assert extract_code("```python\nsubmit(1)\n", "submit") is None  # unclosed fence


def test_printing_cannot_forge_a_submission():
    _, submission = run("```python\nprint('submit(99)')\nprint('Objective: 5')\n```", "submit")
    assert submission is None


def test_indented_fence_is_dedented():
    blocks = fenced_python_blocks("1. Code:\n   ```python\n   x = 1\n   submit(x)\n   ```\n")
    assert blocks == ["x = 1\nsubmit(x)\n"]


# -- orlm --------------------------------------------------------------------------------

def test_orlm_takes_first_python_block_and_appends_footer(completions):
    completion = completions["copt"]() + "\n```python\nprint('second block')\n```\n"
    code = extract_code(completion, "orlm")
    assert code is not None and code.endswith(ORLM_FOOTER)
    assert "second block" not in code and "createModel" in code


def test_orlm_optimal_lp(completions):
    result, submission = run(completions["copt"](), "orlm")
    assert result.ok, result.stderr
    assert "Just print the best solution: 12" in result.stdout
    assert submission == pytest.approx(12.0)


def test_orlm_footer_finds_a_model_not_named_model(completions):
    _, submission = run(completions["copt"](name="m"), "orlm")
    assert submission == pytest.approx(12.0)


def test_orlm_footer_finds_a_model_built_inside_a_function(completions):
    code = completions["copt"](name="mdl")
    body = code.split("```python\n")[1].split("```")[0]
    wrapped = "def build():\n" + "".join("    " + line + "\n" for line in body.splitlines())
    wrapped += "    return mdl\n\nkeep = [build()]\n"
    _, submission = run(f"```python\n{wrapped}```", "orlm")
    assert submission == pytest.approx(12.0)


def test_orlm_infeasible_is_no_best_solution(completions):
    result, submission = run(completions["copt"](infeasible=True), "orlm")
    assert result.ok, result.stderr
    assert "No Best Solution" in result.stdout
    assert submission == "infeasible"


def test_orlm_syntax_error_and_no_model(completions):
    result, submission = run(completions["syntax_error"], "orlm")
    assert result.outcome == "error" and submission is None
    result, submission = run("```python\nprint('Objective: 3')\n```", "orlm")
    assert result.ok and submission is None  # no coptpy model: the footer prints nothing
    assert "no coptpy Model found" in result.stderr


def test_orlm_only_python_tagged_fences_and_no_code(completions):
    assert extract_code(completions["no_code"], "orlm") is None
    assert extract_code("```\nprint(1)\n```", "orlm") is None  # ORLM looks for ```python only
    unclosed = extract_code("```python\nx = 1\n", "orlm")  # ORLM's slice drops the last char
    assert unclosed is not None and unclosed.startswith("\nx = 1") and unclosed[: -len(ORLM_FOOTER)] == "\nx = 1"


def test_orlm_needs_a_clean_exit():
    crashed = ExecResult(outcome="error", stdout="Just print the best solution: 5\n", exit_code=1)
    assert extract_submission(crashed, "orlm") is None
    ok = ExecResult(outcome="ok", stdout="Just print the best solution: 5.5\nbye\n", exit_code=0)
    assert extract_submission(ok, "orlm") == 5.5


# -- stdout ------------------------------------------------------------------------------

@pytest.mark.parametrize("line, expected", [
    ("Optimal objective value: 123.4", 123.4),
    ("Total cost = 5", 5.0),
    ("Objective: -3e2", -300.0),
    ("Total profit is $1,234.50", 1234.5),
    ("Minimum cost: 42", 42.0),
    ("The problem is infeasible.", "infeasible"),
    ("Model is UNBOUNDED", "unbounded"),
])
def test_stdout_objective_lines(line, expected):
    result = ExecResult(outcome="ok", stdout=f"setting up\n{line}\n", exit_code=0)
    assert extract_submission(result, "stdout") == expected


def test_stdout_ignores_unlabelled_numbers_and_ambiguous_status():
    out = "x = 4\ny = 0\nTotal elapsed time = 0.01s\nObjective range  [2e+00, 3e+00]\nModel is infeasible or unbounded\n"
    assert extract_submission(ExecResult(outcome="ok", stdout=out), "stdout") is None


def test_stdout_gurobi_program_last_objective_wins():
    program = (
        "```python\nimport gurobipy as gp\nfrom gurobipy import GRB\n"
        "m = gp.Model()\nx = m.addVar(name='x')\ny = m.addVar(name='y')\n"
        "m.addConstr(x + y <= 4)\nm.addConstr(x + 3 * y <= 6)\n"
        "m.setObjective(3 * x + 2 * y, GRB.MAXIMIZE)\nm.optimize()\n"
        "print('x =', x.X)\nprint(f'Total profit = {m.ObjVal}')\n```"
    )
    result, submission = run(program, "stdout")
    assert result.ok, result.stderr
    assert submission == pytest.approx(12.0)


def test_stdout_infeasible_copt(completions):
    code = completions["copt"](infeasible=True).replace(
        "The model is solved above.", "")
    status = "print('Status: infeasible' if model.status == COPT.INFEASIBLE else 'Objective: 0')\n"
    code = code.replace("model.solve()\n", "model.solve()\n" + status)
    _, submission = run(code, "stdout")
    assert submission == "infeasible"


# -- registry ----------------------------------------------------------------------------

def test_unknown_profile_names_it_and_the_known_ones():
    with pytest.raises(UnknownProfileError) as err:
        extract_code("```python\nx=1\n```", "orml")
    assert "'orml'" in str(err.value) and "orlm" in str(err.value)
    # the built-in five (llmopt: its released infer_code slicing), plus the released reward schemes' two
    # once opteval.evalcore.rewards is imported
    assert {"submit", "orlm", "sirl", "stdout", "llmopt"} <= set(PROFILES) <= {
        "submit", "orlm", "sirl", "stdout", "llmopt", "sirl-train", "orr1-train"}


def test_sirl_profile_reads_like_sirls_evaluation():
    from opteval.evalcore.extraction import sirl_flip_variable_types
    from opteval.evalcore.sandbox.types import ExecResult

    text = "<python>\n```python\nm = gp.Model()\nx = m.addVar(lb=0)\nm.optimize()\n```\n</python>"
    code = extract_code(text, "sirl")
    assert code is not None and code.startswith("m = gp.Model()") and "if m.status == GRB.OPTIMAL:" in code
    assert "Just print the best solution: {m.ObjVal}" in code
    assert extract_code("no code", "sirl") is None
    assert (extract_code("```python\nm.solve()\n```", "sirl") or "").count("COPT.OPTIMAL") == 1  # coptpy variant
    ok = ExecResult(outcome="ok", stdout="Just print the best solution: 12.5\n")
    assert extract_submission(ok, "sirl") == 12.5
    assert extract_submission(ExecResult(outcome="ok", stdout="Model is infeasible"), "sirl") == "infeasible"
    assert extract_submission(ExecResult(outcome="error", stdout="Just print the best solution: 1"), "sirl") is None
    # SIRL's change_variable_types: swap INTEGER/CONTINUOUS when vtype is given, else add integer vtype
    assert sirl_flip_variable_types("x = m.addVar(vtype=GRB.INTEGER)\n") == "x = m.addVar(vtype=GRB.CONTINUOUS)\n"
    assert sirl_flip_variable_types("x = m.addVar(vtype=GRB.CONTINUOUS)\n") == "x = m.addVar(vtype=GRB.INTEGER)\n"
    assert sirl_flip_variable_types("x = m.addVars(3, lb=0)\n") == "x = m.addVars(3, lb=0, vtype=GRB.INTEGER)\n"
    assert sirl_flip_variable_types("x = m.addVar(vtype='B')\n") is None
