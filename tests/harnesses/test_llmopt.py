"""LLMOPT's released protocol (evalcore/harnesses/llmopt.py) through the real sandbox.

Upstream: quao627/LLMOPT@142f3f193b29dcc5b329707bdf0fe9c9dcf7cd1b prompts/generate_prompt.py and
prompts/self_correction_prompt.py, @3cb8710ef32f9926661ce0ee98cedac02c6154f7
inference/inference_q2f2c.py. The golden strings below are transcribed from those files."""
from __future__ import annotations

import pytest

from opteval.evalcore.extraction import extract_code
from opteval.evalcore.grading import grade
from opteval.evalcore.harnesses import Budgets
from opteval.evalcore.harnesses._common import load_prompt, render
from opteval.evalcore.harnesses.llmopt import ATTEMPT_SEED_STRIDE, five_elements, read_optimum, verdict
from opteval.evalcore.sim import SimulatedModel
from tests.harnesses.scripted import ScriptedModel

# generate_prompt.py @142f3f19: code_suffix and the head of F2C / Q2F, verbatim
CODE_SUFFIX = (
    "Please write the corresponding Pyomo code. Please add `from pyomo.environ import *` at the beginning of "
    "your code (You can add other `import` as well). Please print the optimal solution and the value of the "
    "objective function. Please do not output the running log. You need to write it in the form of a class and "
    "add a main function: \n\n```python\n[write your code here]\n```\n"
)
F2C_HEAD = ("The five-element model is the abstraction of an optimization problem, which transforms specific "
            "problem scenarios into formal mathematical problems. You need to write the corresponding Pyomo code "
            "based on the five-element model provided. The following is the five-element model of an optimization "
            "problem: \n```\n")
Q2F_HEAD = ("In mathematics, any optimization problem can be modeled as the following expression "
            "$\\\\min_{\\\\boldsymbol{x} \\\\in \\\\mathcal{X}} f(\\\\boldsymbol{x})")

PYOMO_OK = """```python
from pyomo.environ import *

class Model:
    def __init__(self):
        self.m = ConcreteModel()
        self.m.x = Var(domain=NonNegativeReals, bounds=(0, 4))
        self.m.o = Objective(expr=3 * self.m.x, sense=maximize)

    def solve(self):
        SolverFactory("glpk").solve(self.m)
        print("Optimal objective value:", value(self.m.o))

def main():
    Model().solve()

if __name__ == "__main__":
    main()
```"""
PYOMO_BROKEN = PYOMO_OK.replace("NonNegativeReals", "NonNegativeRealz")
FIVE = "Here it is.\n```text\n## Sets: \nnone\n\n## Variables: \nx\n```\n"


def test_prompts_are_llmopts_strings():
    f2c = render(load_prompt("llmopt", "f2c"), five="FIVE")
    assert f2c == F2C_HEAD + "FIVE\n```\n" + CODE_SUFFIX
    q2f = render(load_prompt("llmopt", "q2f"), question="Q?")
    assert q2f.startswith(Q2F_HEAD)
    assert "The problem description is as follows: \n\n```\nQ?\n```\nPlease write the corresponding five-element" in q2f
    assert q2f.endswith("## Constraints: \n[You need to fill in]\n```\n")
    check = render(load_prompt("llmopt", "self_correction"), question="Q", five="F", code="C", output="O", error="E")
    assert check.startswith("For the following optimization problem, modeling is performed, and pyomo code is")
    assert "Run the code and get the following running information. \n\n        O\n        E\n\n" in check
    assert check.endswith("        The code is [Fill in True/False here].\n\n        Analysis:\n"
                          "        [Fill in your analysis here]\n        ```")
    id_gt = render(load_prompt("llmopt", "id_gt"), output="OUT")
    assert id_gt.startswith("Identify the optimal value corresponding to the solution of the problem")
    assert id_gt.endswith('please output "NAN". \nHere is the problem:\nOUT')


def test_readings_follow_the_released_code():
    # infer_five_elem: ```text first, then ```plaintext, then any fence
    assert five_elements("a\n```plaintext\nP\n```\n```text\nT\n```") == "\nT\n"
    assert five_elements("```\nB\n```") == "\nB\n"
    assert five_elements("no block") is None
    # infer_code: the first ```python block after unescaping, print("\\<newline> repaired
    assert extract_code("x ```python\nprint(1)\n``` ```python\nprint(2)\n```", "llmopt") == "\nprint(1)\n"
    assert extract_code('```python\nprint("\\\\\nhi")\n```', "llmopt") == '\nprint("hi")\n'
    assert extract_code("```py\nprint(1)\n```", "llmopt") is None
    assert verdict("The five-element is True.\n\nThe code is False.") == (True, False)
    assert verdict("The five-element is **False**. The code is True") == (False, True)
    assert verdict("looks fine") == (True, True)
    assert read_optimum(" 1,234.5 ") == 1234.5 and read_optimum("-3e2.") == -300.0
    assert read_optimum("NAN") is None and read_optimum("about 12") is None


def test_simulated_policy_gets_graded_submissions_from_its_pyomo_programs(sample, executor, run_harness):
    problems, key = sample
    for pid in ("sample-0001", "sample-0002", "sample-0003", "sample-0004"):
        t = run_harness("llmopt", problems[pid], SimulatedModel(policy="always_correct"), extraction="llmopt")
        assert [c.stage for c in t.calls] == ["formulate", "act", "check", "extract"], (pid, t.errors)
        assert all(m["role"] == "user" for e in t.transcript for m in e["messages"])  # user-only, as LLMOPT
        [run] = t.execs
        assert run.outcome == "ok" and "from pyomo.environ import *" in run.code and "class " in run.code
        assert 'SolverFactory("glpk")' in run.code and "Optimal objective value:" in run.stdout_tail
        assert t.status == "submitted" and t.simulated
        assert grade(t.submission.raw, key[pid]), (pid, t.submission.raw, key[pid])
        assert run.submission == t.submission.raw


def test_a_problem_without_a_pyomo_program_gets_a_wrong_generic_one(sample, executor, run_harness):
    problems, key = sample
    t = run_harness("llmopt", problems["sample-0007"], SimulatedModel(policy="always_correct"),  # a QP
                    extraction="llmopt")
    assert t.status == "submitted" and t.execs[0].outcome == "ok"
    assert not grade(t.submission.raw, key["sample-0007"])


def test_self_correction_regenerates_code_after_a_failing_program(sample, executor, run_harness):
    problems, _ = sample
    model = ScriptedModel({
        "formulate": FIVE,
        "act": [PYOMO_BROKEN, PYOMO_OK],
        "check": ["```\nThe five-element is True.\n\nThe code is False.\n\nAnalysis:\nNameError\n```",
                  "```\nThe five-element is True.\n\nThe code is True.\n\nAnalysis:\nfine\n```"],
        "extract": "12.0",
    })
    t = run_harness("llmopt", problems["sample-0001"], model, extraction="llmopt")
    assert model.stages == ["formulate", "act", "check", "act", "check", "extract"]
    assert [e.outcome for e in t.execs] == ["error", "ok"]
    # what self-correction feeds back: question, five elements, code, the run's stdout and stderr
    first_check = model.calls[2][2][0]["content"]
    assert problems["sample-0001"].question in first_check and "## Sets:" in first_check
    assert "NonNegativeRealz" in first_check and "NameError" in first_check
    # the code was redone from the same five elements, with a new draw (seed)
    assert model.calls[3][2] == model.calls[1][2]
    assert model.seeds[3] == model.seeds[1] + ATTEMPT_SEED_STRIDE
    assert "Optimal objective value: 12.0" in model.calls[5][2][0]["content"]
    assert t.submission.raw == 12.0 and t.status == "submitted"


def test_a_wrong_formulation_restarts_from_q2f_and_attempts_are_capped(sample, executor, run_harness):
    problems, _ = sample
    model = ScriptedModel({
        "formulate": FIVE, "act": PYOMO_OK,
        "check": "```\nThe five-element is False.\n\nThe code is True.\n```", "extract": "NAN",
    })
    t = run_harness("llmopt", problems["sample-0001"], model, extraction="llmopt",
                    budgets=Budgets(max_turns=2, max_calls=20))
    assert model.stages == ["formulate", "act", "check", "formulate", "act", "extract"]
    assert len(t.execs) == 2 and t.submission is None
    assert any("read no optimum" in e for e in t.errors)


def test_the_method_config_is_the_released_protocol():
    from opteval.sweepcore.config import method_config

    cfg = method_config("llmopt")
    assert cfg.harness == "llmopt" and cfg.extraction == "llmopt"
    turns = cfg.budgets.max_turns
    assert turns is not None and cfg.budgets.max_calls == 3 * turns + 1


@pytest.mark.parametrize("extraction", ["submit", "stdout"])
def test_other_extractions_are_refused(sample, executor, run_harness, extraction):
    problems, _ = sample
    with pytest.raises(ValueError, match="llmopt"):
        run_harness("llmopt", problems["sample-0001"], SimulatedModel(), extraction=extraction)
