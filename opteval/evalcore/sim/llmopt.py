"""The simulated policy's LLMOPT stages (``opteval.evalcore.harnesses.llmopt``). A test tool, never a
model's accuracy.

It reads the prompt formats that module exports (``RUN_INFO``, ``ID_GT_OUTPUT``) and answers
the way LLMOPT's prompts ask:

* ``formulate`` (``Q2F``): the five elements (Sets, Parameters, Variables, Objective,
  Constraints) in a plain ```` ``` ```` block, read off the reference program; the Parameters
  restate the problem, so the ``F2C`` call (which carries only the five elements) can be tied
  back to it.
* ``act`` (``F2C``): a Pyomo class with a main function that solves with GLPK and prints the
  optimum: the sample's Pyomo program (``evalcore/data/reference_pyomo``) for a correct plan; a
  mutant scales its objective; the skill's error kinds inject a syntax or runtime error; a
  problem without a Pyomo program (quadratic, nonlinear, status answers, unknown) gets a small
  generic Pyomo LP that prints a (wrong) number. Each self-correction attempt is a new seed, so a
  new plan draw: that is how it "repairs".
* ``check`` (self-correction): the code is False when the run's output shows an error or is
  empty, else both parts True (it cannot see its own semantic mistakes).
* ``extract`` (``id_gt``): the last objective value printed, as a bare number, else ``NAN``.
"""
from __future__ import annotations

import math
import re

from opteval.evalcore.data import pyomo_reference_program
from opteval.evalcore.extraction import _objective_number
from opteval.evalcore.harnesses.llmopt import ID_GT_OUTPUT, RUN_INFO
from opteval.evalcore.sim.policy import (
    Plan,
    SimProblem,
    SimulatedModel,
    StageCall,
    _rng,
    defined_names,
    formulation_for,
    inject_runtime_error,
    inject_syntax_error,
    question_hash,
    register_stage,
)

_OBJECTIVE_PRINT = re.compile(r'^(\s*)print\(f"Optimal objective value:.*$', re.M)
_ERROR = re.compile(r"Traceback \(most recent call last\)|\b\w*Error\b")


def five_element_reply(call: StageCall) -> str:
    form = formulation_for(call.problem.reference)
    sets = "\n".join(f"- {s['name']}: {s['size']} items ({s['indexes']})" for s in form["sets"]) or "- none"
    params = "\n".join(f"- {k} ({v})" for k, v in form["parameters"].items())
    variables = "\n".join(f"- {v['name']}: {v['domain']}" for v in form["variables"])
    constraints = "\n".join(f"- {c}" for c in form["constraints"])
    question = " ".join(call.problem.question.split())
    return ("Here is the five-element model.\n\n```\n"
            f"## Sets: \n{sets}\n\n"
            f"## Parameters: \n- Problem statement: {question}\n{params}\n\n"
            f"## Variables: \n{variables}\n\n"
            f"## Objective: \n{form['objective']['sense']} the objective of the problem statement\n\n"
            f"## Constraints: \n{constraints}\n```\n")


def generic_pyomo(question: str) -> str:
    """A plausible small Pyomo LP for a problem without a Pyomo program; prints a (wrong) number."""
    r = _rng("generic-pyomo", question_hash(question))
    a, b, c1, c2, cap = r.randint(2, 9), r.randint(2, 9), r.randint(1, 5), r.randint(1, 5), r.randint(20, 80)
    return f'''from pyomo.environ import *


class ProductionModel:
    def __init__(self):
        self.model = ConcreteModel()
        self.model.x = Var(domain=NonNegativeReals)
        self.model.y = Var(domain=NonNegativeReals, bounds=(0, {cap // 2}))
        self.model.obj = Objective(expr={a} * self.model.x + {b} * self.model.y, sense=maximize)
        self.model.capacity = Constraint(expr={c1} * self.model.x + {c2} * self.model.y <= {cap})

    def solve(self):
        SolverFactory("glpk").solve(self.model)

    def print_solution(self):
        print("x =", value(self.model.x), "y =", value(self.model.y))
        print(f"Optimal objective value: {{value(self.model.obj)}}")


def main():
    problem = ProductionModel()
    problem.solve()
    problem.print_solution()


if __name__ == "__main__":
    main()
'''


def pyomo_program(model: SimulatedModel, problem: SimProblem, plan: Plan, seed: int) -> str:
    src = pyomo_reference_program(problem.id)
    if src is None or plan.kind == "generic":
        return generic_pyomo(problem.question)
    if plan.base == "mutant":  # the model misreads the objective's scale
        src = src.replace("sum(c * m.x[j] for j, c in self.cost.items())",
                          "1.1 * sum(c * m.x[j] for j, c in self.cost.items())", 1)
    if plan.kind == "syntax_error":
        src = inject_syntax_error(src)
    elif plan.kind == "runtime_error":
        src = inject_runtime_error(src, defined_names(src), _rng("fault", seed, problem.id))[0]
    if plan.no_submit or model.policy == "never_submit":  # prints the solution, never its value
        src = _OBJECTIVE_PRINT.sub(r"\1pass", src)
    return src


def code_reply(model: SimulatedModel, call: StageCall) -> str:
    code = pyomo_program(model, call.problem, call.plan, call.seed)
    return "```python\n" + code.rstrip("\n") + "\n```\n"


def _prompt(call: StageCall) -> str:
    return "\n".join(str(m.get("content") or "") for m in call.messages)


def check_reply(call: StageCall) -> str:
    m = RUN_INFO.search(_prompt(call))
    info = m.group(1) if m else ""
    code_ok = bool(info.strip()) and not _ERROR.search(info)
    analysis = "The code runs and prints the optimum." if code_ok else "The run failed; the code must be fixed."
    return (f"```\nThe five-element is True.\n\nThe code is {code_ok}.\n\nAnalysis:\n{analysis}\n```\n")


def extract_reply(call: StageCall) -> str:
    m = ID_GT_OUTPUT.search(_prompt(call))
    value = None
    for line in (m.group(1) if m else "").splitlines():
        found = _objective_number(line)
        value = found if found is not None else value
    if value is None or not math.isfinite(value):
        return "NAN"
    return repr(value)


register_stage("llmopt", "formulate", lambda m, c: five_element_reply(c))
register_stage("llmopt", "act", code_reply)
register_stage("llmopt", "check", lambda m, c: check_reply(c))
register_stage("llmopt", "extract", lambda m, c: extract_reply(c))
