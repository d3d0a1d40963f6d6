"""CAFA and Reflexion through the real harness and the real sandbox, with a scripted model."""
from __future__ import annotations

import json

import pytest

from opteval.evalcore.harnesses import Budgets
from opteval.evalcore.harnesses.cafa import clean_code, simplify_code
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_NO_SUBMISSION, STATUS_SUBMITTED
from tests.harnesses.scripted import ScriptedModel, crash, program, user_of

P = ProblemSpec(id="t-1", benchmark="test", question="Maximize 3x + 2y with x + y <= 4, x <= 3, x, y >= 0.")
LINES = ('x = m.addVar(name="x", lb=0)\ny = m.addVar(name="y", lb=0)\nm.setObjective(3 * x + 2 * y, "maximize")\n'
         'm.addCons(x + y <= 4)\nm.addCons(x <= 3)')


def test_cafa_one_call_lines_wrapped_and_run(run_harness):
    model = ScriptedModel({"generate": json.dumps({"code": "```python\nimport gurobipy\n" + LINES + "  # lines\n```"})})
    t = run_harness("cafa", P, model, budgets=Budgets(max_calls=1, max_turns=1))
    assert model.stages == ["generate"] and len(t.calls) == 1 and t.calls[0].stage == "generate"
    assert len(t.execs) == 1 and t.execs[0].outcome == "ok"
    assert t.status == STATUS_SUBMITTED and t.submission.raw == pytest.approx(11.0)


def test_cafa_an_exception_is_no_answer(run_harness):
    model = ScriptedModel({"generate": json.dumps({"code": LINES + "\nm.addCons(z <= 1)"})})
    t = run_harness("cafa", P, model, budgets=Budgets(max_calls=1, max_turns=1))
    assert len(t.calls) == 1 and t.execs[0].outcome == "error"
    assert t.status == STATUS_NO_SUBMISSION and "NameError" in t.errors[0]


def test_cafa_clean_up_and_sympy_ratio():
    cleaned = clean_code("```python\nimport pulp\n# c\nm.addCons(x < 3)m.addCons(y > 1)\nm.addCons(x == y)\n```")
    assert cleaned.splitlines() == ["m.addCons(x <= 3)", "m.addCons(y >= 1)", "m.addCons(x == y)"]  # == kept (paper)
    out = simplify_code("m.addCons(x / (x + y) >= 0.3)\nm.setObjective((x + y) / 2, \"maximize\")\n").splitlines()
    assert out[0].startswith("m.addCons(") and "/" not in out[0] and ">= 0" in out[0]
    assert out[1] == 'm.setObjective(x/2 + y/2, "maximize")'  # expanded into coefficients


def test_reflexion_stops_at_the_first_success(run_harness):
    model = ScriptedModel({"generate": program(7.5)})
    t = run_harness("reflexion", P, model, budgets=Budgets(max_calls=5, max_turns=3))
    assert model.stages == ["generate"] and t.submission.raw == 7.5 and len(t.execs) == 1


def test_reflexion_reflects_and_retries_with_memory(run_harness):
    model = ScriptedModel({"generate": crash("first"), "reflect": ["R1: check names", "R2: check data"],
                           "regenerate": [crash("second"), program(9)]})
    t = run_harness("reflexion", P, model, budgets=Budgets(max_calls=5, max_turns=3))
    assert model.stages == ["generate", "reflect", "regenerate", "reflect", "regenerate"]
    assert [e.outcome for e in t.execs] == ["error", "error", "ok"] and t.submission.raw == 9
    last = user_of(model.calls[-1][2])  # every reflection and every error so far is in the last prompt
    assert "R1: check names" in last and "R2: check data" in last and "first" in last and "second" in last


def test_reflexion_budget_three_trials_five_calls(run_harness):
    model = ScriptedModel({"generate": crash(), "reflect": "R", "regenerate": crash()})
    t = run_harness("reflexion", P, model, budgets=Budgets(max_calls=5, max_turns=3))
    assert len(t.calls) == 5 and len(t.execs) == 3 and t.status == STATUS_NO_SUBMISSION
    assert "no trial succeeded in 3 trials" in t.errors


def test_reflexion_a_status_answer_is_feedback_and_kept_as_last_resort(run_harness):
    model = ScriptedModel({"generate": program("infeasible"), "reflect": "R", "regenerate": program("infeasible")})
    t = run_harness("reflexion", P, model, budgets=Budgets(max_calls=5, max_turns=3))
    assert len(t.execs) == 3 and t.submission.raw == "infeasible"


def test_sympy_never_evaluates_model_text():
    from opteval.evalcore.harnesses._baseline import to_sympy

    assert to_sympy("exit()") is None and to_sympy("open(1).read") is None and to_sympy("x.__class__") is None
    assert simplify_code("m.addCons(exit() / x <= 1)\n") == "m.addCons(exit() / x <= 1)\n"  # kept as written
    assert str(to_sympy("x / (x + y) - 0.3")) == "x/(x + y) - 3/10"
