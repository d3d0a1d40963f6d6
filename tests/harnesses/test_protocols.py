"""Published protocols as methods: orlm, sirl (variable-type forgiveness). Real sandbox. (llmopt:
tests/harnesses/test_llmopt.py.)"""
from __future__ import annotations

import asyncio

import pytest

from opteval.evalcore.grading import grade_submission, parse_submission
from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
from opteval.evalcore.models.base import Completion, Sampling, Usage
from tests.models.conftest import copt_completion

ORLM_PROMPT = ("Below is an operations research question. Build a mathematical model and corresponding python "
               "code using `coptpy` that appropriately addresses the question.\n\n# Question:\n{q}\n\n# Response:")


class Canned:
    name = "canned"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.sent: list[list[dict]] = []

    async def chat(self, messages, sampling, seed, meta=None):
        self.sent.append(messages)
        return Completion(self.texts.pop(0), Usage(1, 1), "stop", 0.0)


def _run(harness, problem, model, executor, extraction, budgets=None):
    ctx = HarnessContext(model=model, executor=executor, sampling=Sampling(), sample=0,
                         budgets=budgets or Budgets(), method=harness, extraction=extraction)
    return asyncio.run(get_harness(harness).run(problem, ctx))


def test_orlm_sends_its_exact_template_as_the_only_message(sample, executor):
    pytest.importorskip("coptpy")
    problems, _ = sample
    spec = problems["sample-0001"]
    model = Canned(copt_completion())
    t = _run("orlm", spec, model, executor, "orlm")
    assert model.sent[0] == [{"role": "user", "content": ORLM_PROMPT.format(q=spec.question.strip())}]
    assert t.status == "submitted" and t.submission.raw == pytest.approx(12.0)


def test_orlm_method_config_has_the_300s_timeout():
    from opteval.sweepcore.config import effective_limits, load_config

    assert effective_limits(load_config([]), "orlm").wall_s == 300


GUROBI = """<think>t</think>
<model>m</model>
<python>
```python
import gurobipy as gp
from gurobipy import GRB
m = gp.Model()
m.setParam("OutputFlag", 0)
x = m.addVar(lb=0, {vtype}name="x")
m.setObjective(x, GRB.MAXIMIZE)
m.addConstr(x <= 2.5)
m.optimize()
```
</python>
"""


@pytest.mark.parametrize("vtype,first,alternate", [("vtype=GRB.INTEGER, ", 2.0, 2.5), ("", 2.5, 2.0)])
def test_sirl_runs_the_variable_type_variant_and_grading_forgives(sample, executor, vtype, first, alternate):
    pytest.importorskip("gurobipy")
    problems, _ = sample
    spec = problems["sample-0001"]
    model = Canned(GUROBI.format(vtype=vtype))
    t = _run("sirl", spec, model, executor, "sirl")
    system, user = model.sent[0]
    assert system["role"] == "system" and "<python>Provide the corresponding Gurobi Python code" in system["content"]
    assert user["content"] == f"Solve the following mathmetical modeling problem\n{spec.question}\nthink step by step."
    assert t.submission.raw == pytest.approx(first) and t.submission.alternate == pytest.approx(alternate)
    assert len(t.execs) == 2 and all(e.outcome == "ok" for e in t.execs)
    assert grade_submission(t.submission, parse_submission(first), "sirl")
    assert grade_submission(t.submission, parse_submission(alternate), "sirl")  # forgiven
    assert not grade_submission(t.submission, parse_submission(7.0), "sirl")
