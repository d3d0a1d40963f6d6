"""Build the sample benchmark's Pyomo programs (not imported at runtime).

Why: LLMOPT's protocol asks for Pyomo code "in the form of a class" with a main function that
prints the optimum (quao627/LLMOPT@142f3f19 ``prompts/generate_prompt.py``, ``code_suffix``), so
the simulated policy needs Pyomo programs to speak that format. They are generated, not
hand-written: each linear reference program (PuLP, PySCIPOpt, SciPy ``linprog``/``milp``,
highspy) is run in this process, its model read back (variables with bounds and types, the
linear objective, the rows), and written out as a data-driven Pyomo class solved with GLPK
(``SolverFactory('glpk')``, the solver LLMOPT's training data uses). A program is kept only when
its own solve here reproduces the sample's answer (the paper's tolerance); quadratic and
nonlinear references are skipped.

    python -m opteval.evalcore.data._pyomo_build        # rewrites evalcore/data/reference_pyomo/
"""
from __future__ import annotations

import contextlib
import io
import math
import pprint
import re
from dataclasses import dataclass, field
from typing import Any

from opteval.evalcore.data import PYOMO_DIR, REFERENCE_DIR, load_sample_rows, reference_program

INF = float("inf")


@dataclass
class Linear:
    """A linear (mixed-integer) model read back from a solved reference program."""

    sense: str  # maximize | minimize
    names: list[str] = field(default_factory=list)
    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)  # C | I | B
    cost: list[float] = field(default_factory=list)
    const: float = 0.0
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)  # (coefs, lo, hi)


def _f(x: Any) -> float:
    v = float(x)
    return v if math.isfinite(v) and abs(v) < 1e19 else (INF if v > 0 else -INF)


def _from_pulp(prob: Any) -> Linear:
    # deferred: PuLP loads only when a PuLP model is read back
    import pulp

    variables = prob.variables()
    index = {v.name: i for i, v in enumerate(variables)}
    lin = Linear("maximize" if prob.sense == pulp.LpMaximize else "minimize")
    for v in variables:
        lin.names.append(v.name)
        lin.lb.append(-INF if v.lowBound is None else float(v.lowBound))
        lin.ub.append(INF if v.upBound is None else float(v.upBound))
        lin.kind.append("B" if v.cat == pulp.LpBinary or (v.cat == pulp.LpInteger and v.lowBound == 0 and v.upBound == 1)
                        else "I" if v.cat == pulp.LpInteger else "C")
    lin.cost = [0.0] * len(variables)
    for v, c in prob.objective.items():
        lin.cost[index[v.name]] = float(c)
    lin.const = float(prob.objective.constant)
    for con in prob.constraints.values():
        coefs = {index[v.name]: float(c) for v, c in con.items()}
        rhs = -float(con.constant)
        lo, hi = {pulp.LpConstraintLE: (-INF, rhs), pulp.LpConstraintGE: (rhs, INF),
                  pulp.LpConstraintEQ: (rhs, rhs)}[con.sense]
        lin.rows.append((coefs, lo, hi))
    return lin


def _from_scip(m: Any) -> Linear:
    m.freeTransform()
    variables = m.getVars()
    index = {v.name: i for i, v in enumerate(variables)}
    lin = Linear("maximize" if m.getObjectiveSense() == "maximize" else "minimize")
    for v in variables:
        lin.names.append(v.name)
        lin.lb.append(_f(v.getLbOriginal()))
        lin.ub.append(_f(v.getUbOriginal()))
        vt = v.vtype()
        lin.kind.append({"BINARY": "B", "INTEGER": "I"}.get(vt, "C"))
        lin.cost.append(float(v.getObj()))
    lin.const = float(m.getObjoffset())
    for con in m.getConss():
        if con.getConshdlrName() != "linear":
            raise ValueError(f"not linear: {con.getConshdlrName()}")
        coefs = {index[getattr(v, "name", v)]: float(c) for v, c in m.getValsLinear(con).items()}
        lin.rows.append((coefs, _f(m.getLhs(con)), _f(m.getRhs(con))))
    return lin


def _from_highs(h: Any) -> Linear:
    # deferred: highspy loads only when a HiGHS model is read back
    import highspy

    lp = h.getLp()
    n = lp.num_col_
    lin = Linear("maximize" if lp.sense_ == highspy.ObjSense.kMaximize else "minimize")
    integ = list(lp.integrality_) or [highspy.HighsVarType.kContinuous] * n
    for j in range(n):
        lin.names.append(f"x{j + 1}")
        lin.lb.append(_f(lp.col_lower_[j]))
        lin.ub.append(_f(lp.col_upper_[j]))
        integer = integ[j] == highspy.HighsVarType.kInteger
        lin.kind.append("B" if integer and lin.lb[-1] == 0 and lin.ub[-1] == 1 else "I" if integer else "C")
        lin.cost.append(float(lp.col_cost_[j]))
    lin.const = float(lp.offset_)
    a = lp.a_matrix_
    rows: list[dict[int, float]] = [{} for _ in range(lp.num_row_)]
    for j in range(n):
        for k in range(a.start_[j], a.start_[j + 1]):
            rows[a.index_[k]][j] = float(a.value_[k])
    for i in range(lp.num_row_):
        lin.rows.append((rows[i], _f(lp.row_lower_[i]), _f(lp.row_upper_[i])))
    return lin


def _from_scipy(call: dict[str, Any], sense: int) -> Linear:
    # deferred: numpy loads only when a SciPy call is read back
    import numpy as np

    c = np.asarray(call["c"], dtype=float) * sense  # the problem's own objective
    n = len(c)
    lin = Linear("maximize" if sense == -1 else "minimize", names=[f"x{j + 1}" for j in range(n)], cost=list(c))
    integrality = np.zeros(n) if call.get("integrality") is None else np.broadcast_to(call["integrality"], (n,))
    if call["fn"] == "linprog":
        bounds = call.get("bounds")
        if bounds is None:
            bounds = [(0, None)] * n
        elif len(bounds) == 2 and not isinstance(bounds[0], (list, tuple)):
            bounds = [tuple(bounds)] * n
        lows = [(-INF if b[0] is None else float(b[0])) for b in bounds]
        highs = [(INF if b[1] is None else float(b[1])) for b in bounds]
        blocks = []
        if call.get("A_ub") is not None:
            blocks.append((np.atleast_2d(call["A_ub"]), np.full(len(call["b_ub"]), -INF), np.asarray(call["b_ub"], float)))
        if call.get("A_eq") is not None:
            b = np.asarray(call["b_eq"], float)
            blocks.append((np.atleast_2d(call["A_eq"]), b, b))
    else:  # milp
        # deferred: only a milp call needs scipy's Bounds
        from scipy.optimize import Bounds, LinearConstraint

        bd = call.get("bounds") or Bounds(0, np.inf)
        bd = bd if isinstance(bd, Bounds) else Bounds(*bd)
        lows = list(np.broadcast_to(bd.lb, (n,)).astype(float))
        highs = list(np.broadcast_to(bd.ub, (n,)).astype(float))
        cons = call.get("constraints") or []
        cons = [cons] if isinstance(cons, LinearConstraint) else cons
        blocks = []
        for lc in cons:
            a = np.atleast_2d(np.asarray(lc.A.todense() if hasattr(lc.A, "todense") else lc.A, float))
            blocks.append((a, np.broadcast_to(lc.lb, (a.shape[0],)), np.broadcast_to(lc.ub, (a.shape[0],))))
    for j in range(n):
        lin.lb.append(_f(lows[j]))
        lin.ub.append(_f(highs[j]))
        integer = bool(integrality[j])
        lin.kind.append("B" if integer and lin.lb[-1] == 0 and lin.ub[-1] == 1 else "I" if integer else "C")
    for a, lo, hi in blocks:
        for i in range(a.shape[0]):
            coefs = {j: float(a[i, j]) for j in range(n) if a[i, j] != 0}
            lin.rows.append((coefs, _f(lo[i]), _f(hi[i])))
    return lin


def read_model(src: str) -> Linear:
    """Run a reference program here and read its (last) solved linear model back."""
    # deferred: solvers load only when building, not on import
    import pulp
    import pyscipopt
    import scipy.optimize as so

    calls: list[dict[str, Any]] = []
    originals = {"linprog": so.linprog, "milp": so.milp}

    def spy(fn: str) -> Any:
        def wrapped(c: Any, *args: Any, **kwargs: Any) -> Any:
            names = {"linprog": ("A_ub", "b_ub", "A_eq", "b_eq", "bounds"), "milp": ("integrality", "bounds", "constraints")}[fn]
            calls.append({"fn": fn, "c": c, **dict(zip(names, args)), **kwargs})
            return originals[fn](c, *args, **kwargs)
        return wrapped

    g: dict[str, Any] = {"submit": lambda v: None, "__name__": "__main__"}
    so.linprog, so.milp = spy("linprog"), spy("milp")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(src, "<reference>", "exec"), g)
    finally:
        so.linprog, so.milp = originals["linprog"], originals["milp"]
    if calls:
        if calls[-1].get("integrality") is not None and calls[-1]["fn"] == "linprog":
            calls[-1]["fn"] = "linprog"
        return _from_scipy(calls[-1], int(g.get("SENSE", 1)))
    for value in reversed(list(g.values())):
        if isinstance(value, pulp.LpProblem):
            return _from_pulp(value)
        if isinstance(value, pyscipopt.Model):
            return _from_scip(value)
        if type(value).__name__ == "Highs":
            return _from_highs(value)
    raise ValueError("no solver model found")


def _num(v: float) -> float | None:
    v = float(v)  # numpy scalars print as np.float64(...)
    return None if math.isinf(v) else (int(v) if v.is_integer() else v)


def _class_name(pid: str) -> str:
    return "Sample" + re.sub(r"\D", "", pid) + "Model"


def pyomo_program(pid: str, lin: Linear) -> str:
    """The Pyomo program (a class and a main function, GLPK, printing the optimum)."""
    names = [re.sub(r"\s+", "_", n) for n in lin.names]
    domain = {"B": "Binary", "I": "Integers", "C": "Reals"}
    data = {
        "lb": {n: _num(v) for n, v in zip(names, lin.lb)},
        "ub": {n: _num(v) for n, v in zip(names, lin.ub)},
        "domain": {n: domain[k] for n, k in zip(names, lin.kind)},
        "cost": {n: _num(c) for n, c in zip(names, lin.cost) if c},
        "rows": [({names[j]: _num(c) for j, c in coefs.items()}, _num(lo), _num(hi)) for coefs, lo, hi in lin.rows],
    }
    fmt = {k: pprint.pformat(v, width=100, sort_dicts=False) for k, v in data.items()}
    const = _num(lin.const) or 0
    cls = _class_name(pid)

    def block(text: str) -> str:
        return text.replace("\n", "\n" + " " * 12)

    return f'''from pyomo.environ import *


class {cls}:
    """Five elements: Sets J (decision variables) and R (rows); Parameters cost, bounds and row
    coefficients; Variables x[j]; Objective {lin.sense} sum(cost[j] * x[j]); Constraints lo <= row <= hi."""

    def __init__(self):
        self.model = ConcreteModel()
        self._prepare_parameters()
        self._set_variables()
        self._set_objective()
        self._set_constraints()

    def _prepare_parameters(self):
        self.lb = {block(fmt["lb"])}
        self.ub = {block(fmt["ub"])}
        self.domain = {block(fmt["domain"])}
        self.cost = {block(fmt["cost"])}
        self.rows = {block(fmt["rows"])}
        self.model.J = Set(initialize=list(self.lb), ordered=True)
        self.model.R = Set(initialize=range(len(self.rows)))

    def _set_variables(self):
        domains = {{"Binary": Binary, "Integers": Integers, "Reals": Reals}}
        self.model.x = Var(self.model.J, domain=lambda m, j: domains[self.domain[j]],
                           bounds=lambda m, j: (self.lb[j], self.ub[j]))

    def _set_objective(self):
        m = self.model
        m.obj = Objective(expr=sum(c * m.x[j] for j, c in self.cost.items()) + {const}, sense={lin.sense})

    def _set_constraints(self):
        def row(m, i):
            coefs, lo, hi = self.rows[i]
            if not coefs:
                return Constraint.Skip
            return (lo, sum(c * m.x[j] for j, c in coefs.items()), hi)

        self.model.rows = Constraint(self.model.R, rule=row)

    def solve(self):
        solver = SolverFactory("glpk")
        self.results = solver.solve(self.model, tee=False, load_solutions=False)
        condition = self.results.solver.termination_condition
        if condition == TerminationCondition.optimal:
            self.model.solutions.load_from(self.results)
        return condition

    def print_solution(self, condition):
        if condition == TerminationCondition.optimal:
            for j in self.model.J:
                print(f"{{j}} = {{value(self.model.x[j])}}")
            print(f"Optimal objective value: {{value(self.model.obj)}}")
        elif condition == TerminationCondition.infeasible:
            print("The problem is infeasible.")
        elif condition == TerminationCondition.unbounded:
            print("The problem is unbounded.")
        else:
            print(f"Solver finished with termination condition: {{condition}}")


def main():
    problem = {cls}()
    condition = problem.solve()
    problem.print_solution(condition)


if __name__ == "__main__":
    main()
'''


def verify(src: str, answer: Any) -> bool:
    """Run the Pyomo program here; True when what it prints matches the sample's answer."""
    # deferred: only verify() grades a Pyomo program's output
    from opteval.evalcore.extraction import _stdout_submission
    from opteval.evalcore.grading import grade
    from opteval.evalcore.sandbox.types import ExecResult

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(src, "<pyomo>", "exec"), {"__name__": "__main__"})
    got = _stdout_submission(ExecResult(outcome="ok", stdout=out.getvalue()))
    return grade(got, answer)


def build() -> list[str]:
    PYOMO_DIR.mkdir(exist_ok=True)
    for old in PYOMO_DIR.glob("sample-*.py"):
        old.unlink()
    kept = []
    for row in load_sample_rows():
        pid = row["id"]
        src = reference_program(pid)
        if not src or row.get("kind") in ("qp", "nlp"):
            continue
        try:
            prog = pyomo_program(pid, read_model(src))
            ok = verify(prog, row["answer"])
        except Exception as exc:  # a reference this builder cannot read: skipped, said so
            print(f"{pid}: skipped ({type(exc).__name__}: {exc})")
            continue
        if not ok:
            print(f"{pid}: skipped (its Pyomo program does not reproduce {row['answer']!r})")
            continue
        header = (f"# Pyomo program for {pid} (opteval/sample), in LLMOPT's requested form: a class and a main\n"
                  "# function that prints the optimum. Generated by evalcore/data/_pyomo_build.py from\n"
                  f"# {REFERENCE_DIR.name}/{pid}.py and checked against the sample's answer with GLPK.\n")
        (PYOMO_DIR / f"{pid}.py").write_text(header + prog)
        kept.append(pid)
    return kept


if __name__ == "__main__":
    ids = build()
    print(f"wrote {len(ids)} Pyomo programs to {PYOMO_DIR}: {', '.join(ids)}")
