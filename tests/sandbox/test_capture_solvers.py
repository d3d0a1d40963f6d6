"""Model capture for gurobipy and coptpy (SIRL's self-consistency needs their
sense and variable counts) and SciPy's sense, decided from what the program submitted.
Real solvers in the real sandbox; each test skips with a reason if its solver is absent."""
from __future__ import annotations

import importlib.util
import textwrap

import pytest

from opteval.evalcore.selection import resolve_sense


def run(server, code: str):
    return server.run_program(textwrap.dedent(code))


def _need(mod: str) -> None:
    if importlib.util.find_spec(mod) is None:
        pytest.skip(f"{mod} is not installed (pip install {mod})")


def test_gurobipy_model_is_captured(server):
    _need("gurobipy")
    r = run(server, """
        import gurobipy as gp
        from gurobipy import GRB
        m = gp.Model(); m.Params.OutputFlag = 0
        x = m.addVar(vtype=GRB.INTEGER, ub=10); y = m.addVar(vtype=GRB.BINARY); z = m.addVar()
        w = m.addVar(vtype=GRB.INTEGER, lb=0, ub=1)
        m.setObjective(3 * x + 2 * y + z + w, GRB.MAXIMIZE)
        m.addConstr(x + y + z <= 5.5); m.addConstr(w <= 1)
        m.optimize()
        submit(m.ObjVal)
        """)
    assert r.outcome == "ok", r.stderr
    [g] = r.models
    assert g["library"] == "gurobipy" and g["sense"] == "max" and g["status"] == "optimal"
    # w is an integer column within [0, 1]: binary, as for PuLP and highspy
    assert (g["n_continuous"], g["n_binary"], g["n_integer"], g["n_constraints"]) == (1, 2, 1, 2)
    assert g["objective"] == pytest.approx(r.submission) == pytest.approx(16.5)


def test_coptpy_model_is_captured(server):
    _need("coptpy")
    r = run(server, """
        import coptpy as cp
        from coptpy import COPT
        env = cp.Envr(); m = env.createModel("t"); m.setParam(COPT.Param.Logging, 0)
        x = m.addVar(vtype=COPT.INTEGER, ub=10, name="x"); y = m.addVar(vtype=COPT.BINARY, name="y")
        z = m.addVar(name="z")
        m.setObjective(x + y + z, COPT.MINIMIZE)
        m.addConstr(x + y + z >= 2.5)
        m.solve()
        submit(m.objval)
        """)
    assert r.outcome == "ok", r.stderr
    [c] = r.models
    assert c["library"] == "coptpy" and c["sense"] == "min" and c["status"] == "optimal"
    assert (c["n_continuous"], c["n_binary"], c["n_integer"], c["n_constraints"]) == (1, 1, 1, 1)
    assert c["objective"] == pytest.approx(2.5) == pytest.approx(r.submission)


def test_scipy_sense_comes_from_the_submission(server):
    r = run(server, """
        from scipy.optimize import linprog
        res = linprog([-3, -2], A_ub=[[1, 1]], b_ub=[4], bounds=[(0, 3), (0, 5)])
        submit(-res.fun)   # a maximization written as min of -c
        """)
    [lp] = r.models
    assert lp["sense"] is None and lp["solver_sense"] == "min" and lp["objective"] == pytest.approx(-11.0)
    assert resolve_sense(lp, r.submission) == "max"
    assert resolve_sense(lp, -11.0) == "min"
    assert resolve_sense(lp, 5.0) is None  # submitted something else: no evidence
    assert resolve_sense({**lp, "objective": 0.0}, 0.0) is None  # 0 = -0: ambiguous
    assert resolve_sense({"library": "pulp", "sense": "max"}, 1.0) == "max"  # other solvers keep theirs
