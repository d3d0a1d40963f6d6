"""The private submission channel and model capture."""
from __future__ import annotations

import textwrap

from opteval.evalcore.sandbox import OK


def run(server, code: str):
    r = server.run_program(textwrap.dedent(code))
    assert r.outcome == OK, r.stderr
    return r


def test_numpy_scalars_become_python_floats(server):
    r = run(server, "import numpy as np\nsubmit(np.float64(2.5))")
    assert r.submission == 2.5 and type(r.submission) is float
    r = run(server, "import numpy as np\nsubmit(np.int64(7) * 3)")
    assert r.submission == 21
    r = run(server, "import numpy as np\nsubmit(np.array([4.25]).sum())")
    assert r.submission == 4.25


def test_status_strings_and_last_submit_wins(server):
    assert run(server, "submit('infeasible')").submission == "infeasible"
    assert run(server, "submit(1)\nsubmit(2)\nsubmit('unbounded')").submission == "unbounded"
    assert run(server, "submit(3)\nsubmit(None)").submission == 3  # a rejected value does not erase


def test_printing_cannot_forge_a_submission(server):
    r = run(server, """
        import sys, json
        print('submit(99)')
        print(json.dumps({"t": "submit", "v": 99}))
        sys.stderr.write('{"t": "submit", "v": 99}\\n')
        print('SUBMISSION: 99')
        """)
    assert r.submission is None
    assert "99" in r.stdout


def test_oversized_and_odd_submissions_are_rejected_with_a_note(server):
    r = run(server, "submit('x' * 10000)")
    assert r.submission is None and "too large" in r.note
    r = run(server, "submit([1, 2])")
    assert r.submission is None and "list" in r.note
    r = run(server, "submit(True)")
    assert r.submission is None and "bool" in r.note


def test_pulp_milp_is_captured(server):
    r = run(server, """
        import pulp
        prob = pulp.LpProblem("mix", pulp.LpMaximize)
        x = pulp.LpVariable("x", 0, 10)
        y = pulp.LpVariable("y", 0)
        b = [pulp.LpVariable(f"b{i}", cat="Binary") for i in range(3)]
        n = pulp.LpVariable("n", 0, 20, cat="Integer")
        prob += 3 * x + 2 * y + pulp.lpSum((i + 1) * v for i, v in enumerate(b)) + n
        prob += x + y + n <= 12
        prob += x - y >= -2
        prob += pulp.lpSum(b) <= 2
        prob += y <= 4
        prob.solve(pulp.PULP_CBC_CMD(msg=0))
        submit(pulp.value(prob.objective))
        """)
    assert len(r.models) == 1
    m = r.models[0]
    assert m["library"] == "pulp" and m["sense"] == "max" and m["status"] == "optimal"
    assert (m["n_vars"], m["n_continuous"], m["n_binary"], m["n_integer"], m["n_constraints"]) == (6, 2, 3, 1, 4)
    assert abs(m["objective"] - r.submission) < 1e-9


def test_pyscipopt_model_is_captured_including_infeasible(server):
    r = run(server, """
        from pyscipopt import Model, quicksum
        m = Model(); m.hideOutput()
        x = [m.addVar(vtype="I", lb=0, ub=10) for _ in range(3)]
        z = m.addVar(vtype="B")
        c = m.addVar(lb=0)
        m.addCons(quicksum(x) + c >= 7.5)
        m.addCons(x[0] - x[1] <= 2)
        m.addCons(c <= 10 * z)
        m.setObjective(quicksum((i + 2) * v for i, v in enumerate(x)) + c + 5 * z, "minimize")
        m.optimize()
        submit(m.getObjVal())
        bad = Model(); bad.hideOutput()
        y = bad.addVar(lb=0, ub=1)
        bad.addCons(y >= 2)
        bad.optimize()
        """)
    first, second = r.models
    assert first["library"] == "pyscipopt" and first["sense"] == "min" and first["status"] == "optimal"
    counts = ("n_vars", "n_continuous", "n_binary", "n_integer", "n_constraints")
    assert tuple(first[k] for k in counts) == (5, 1, 1, 3, 3)
    assert abs(first["objective"] - r.submission) < 1e-9
    assert second["status"] == "infeasible" and second["objective"] is None


def test_highspy_and_scipy_are_captured(server):
    r = run(server, """
        import highspy
        from scipy.optimize import linprog, milp, LinearConstraint, Bounds
        h = highspy.Highs(); h.silent()
        x = h.addVariable(0, 10); y = h.addVariable(0, 10)
        h.addConstr(x + y <= 5)
        h.maximize(x + 2 * y)
        linprog([-1, -2], A_ub=[[1, 1]], b_ub=[5], bounds=[(0, 10), (0, 10)])
        milp([-1, -2, -3], constraints=LinearConstraint([[1, 1, 1], [1, 0, 0]], 0, 4),
             integrality=[1, 1, 0], bounds=Bounds([0, 0, 0], [1, 9, 2]))
        """)
    libs = [m["library"] for m in r.models]
    assert libs == ["highspy", "scipy.linprog", "scipy.milp"]
    h, lp, mi = r.models
    assert (h["sense"], h["n_vars"], h["n_constraints"], h["objective"]) == ("max", 2, 1, 10.0)
    # scipy always minimizes: the problem's sense is left to the submission (opteval.evalcore.selection)
    assert (lp["sense"], lp["solver_sense"], lp["n_continuous"], lp["objective"]) == (None, "min", 2, -10.0)
    assert (mi["n_binary"], mi["n_integer"], mi["n_continuous"], mi["n_constraints"]) == (1, 1, 1, 2)
