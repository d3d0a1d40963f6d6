"""Problem-definition helpers for the sample benchmark builder (not imported at runtime).

Each problem is a `Spec`: the question a model sees, and the body of its reference
program. A library-specific footer (solve, read the solver's status, `submit`) is
appended so that every program detects infeasible/unbounded from the solver itself.
The footers also fix the conventions `_build.py --mutations` relies on to flip the
sense or relax integrality textually.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

SOURCE = "opteval/sample"


@dataclass(frozen=True)
class Spec:
    id: str
    kind: str  # lp | milp | binary | integer | qp | nlp
    library: str  # pulp | pyscipopt | scipy | highspy
    n_vars: int
    question: str
    code: str


FOOTERS = {
    "pulp": '''
prob.solve(pulp.PULP_CBC_CMD(msg=0))
status = pulp.LpStatus[prob.status]
if status == "Optimal":
    submit(round(pulp.value(prob.objective), 6))
elif status == "Infeasible":
    submit("infeasible")
elif status == "Unbounded":
    submit("unbounded")
else:
    raise RuntimeError(f"unexpected CBC status {status}")
''',
    "pyscipopt": '''
m.hideOutput()
m.optimize()
status = m.getStatus()
if status == "inforunbd":
    # presolve could not tell which; solve again without it to get a definite status
    m.freeTransform()
    m.setPresolve(SCIP_PARAMSETTING.OFF)
    m.optimize()
    status = m.getStatus()
if status == "optimal":
    submit(round(m.getObjVal(), 6))
elif status == "infeasible":
    submit("infeasible")
elif status == "unbounded":
    submit("unbounded")
else:
    raise RuntimeError(f"unexpected SCIP status {status}")
''',
    "scipy": '''
if res.status == 0:
    submit(round(SENSE * res.fun, 6))
elif res.status == 2:
    submit("infeasible")
elif res.status == 3:
    submit("unbounded")
else:
    raise RuntimeError(f"unexpected scipy status {res.status}: {res.message}")
''',
    "highspy": '''
status = h.getModelStatus()
if status == highspy.HighsModelStatus.kOptimal:
    submit(round(h.getInfo().objective_function_value, 6))
elif status == highspy.HighsModelStatus.kInfeasible:
    submit("infeasible")
elif status == highspy.HighsModelStatus.kUnbounded:
    submit("unbounded")
else:
    raise RuntimeError(f"unexpected HiGHS status {h.modelStatusToString(status)}")
''',
    "custom": "",
}


def make(num: int, kind: str, library: str, n_vars: int, question: str, body: str,
         footer: str | None = None) -> Spec:
    """Build a Spec; `footer` defaults to the library's footer ("custom" for none)."""
    foot = FOOTERS[footer or library]
    q = textwrap.dedent(question).strip()
    code = textwrap.dedent(body).strip() + "\n" + foot.lstrip("\n")
    return Spec(f"sample-{num:04d}", kind, library, n_vars, q, code)


def table(header: list[str], rows: list[list[object]]) -> str:
    """A compact whitespace-aligned table for numbers stated in a question."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells)
