"""Dependencies that keep scores comparable: the solver libraries a model's programs call are
bounded below their next major (PuLP 4 drops ``LpVariable`` and ``PULP_CBC_CMD``), the sandbox
runs the PuLP major the papers used, and every sweep can say which versions it ran with."""
from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from opteval.evalcore.sandbox import run_program
from opteval.sweepcore.dependencies import resolved_versions

REPO = Path(__file__).resolve().parents[2]
DEPS = {Requirement(r).name.lower(): Requirement(r)
        for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}


def test_pulp_4_is_refused_by_the_requirement():
    spec = DEPS["pulp"].specifier
    assert not spec.contains("4.0.0") and not spec.contains("4.2.0")
    assert spec.contains("3.3.2")


def test_pyscipopt_bounded_below_its_next_untested_major():
    spec = DEPS["pyscipopt"].specifier
    assert spec.contains("6.3.0") and not spec.contains("7.0.0")


def test_every_core_dependency_has_a_lower_bound():
    unbounded = [name for name, req in DEPS.items() if not any(s.operator in (">=", "==", "~=") for s in req.specifier)]
    assert not unbounded


def test_the_sandbox_runs_pulp_major_3_with_the_api_the_papers_programs_use():
    code = ("import pulp\n"
            "x = pulp.LpVariable('x', 0, 4)\n"
            "m = pulp.LpProblem('m', pulp.LpMaximize)\n"
            "m += x\n"
            "m.solve(pulp.PULP_CBC_CMD(msg=0))\n"
            "submit(int(pulp.__version__.split('.')[0]) * 100 + pulp.value(x))\n")
    result = run_program(code)
    assert result.outcome == "ok", result.stderr
    assert result.submission == 304  # major 3, and CBC solved x = 4


def test_resolved_versions_name_every_declared_dependency():
    versions = resolved_versions()
    assert versions["python"]
    assert str(versions["pulp"]).startswith("3.")
    assert {"ray", "mlflow", "pyarrow", "pandas", "pyscipopt"} <= set(versions)
