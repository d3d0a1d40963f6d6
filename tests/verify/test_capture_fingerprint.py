"""Issue 36: the same MILP and LP, written by hand in PuLP, PySCIPOpt, highspy, SciPy (linprog,
milp), Pyomo, gurobipy and coptpy, run in the real sandbox: each library's captured formulation
gets the same fingerprint per problem; renamed, reordered, row-scaled and sense-flipped copies
keep it; one changed coefficient, bound, sense, right-hand side or integrality changes it."""
from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import pytest

from opteval.evalcore.formulation import fingerprint, listing, verify
from opteval.evalcore.sandbox import run_program
from tests.verify.programs import LP, LP_OPT, MILP, MILP_OPT


@pytest.fixture(scope="module")
def captured() -> dict[tuple[str, str], dict]:
    """(problem, library) -> the last captured model of that program (both problems, all libraries)."""
    jobs = [(p, lib, code) for p, progs in (("milp", MILP), ("lp", LP)) for lib, code in progs.items()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: run_program(j[2]), jobs))
    out = {}
    for (p, lib, _), r in zip(jobs, results, strict=True):
        assert r.outcome == "ok", (p, lib, r.stderr[-500:])
        assert r.submission == pytest.approx(MILP_OPT if p == "milp" else LP_OPT), (p, lib)
        assert r.models, (p, lib)
        out[(p, lib)] = r.models[-1]
    return out


@pytest.mark.parametrize("problem", ["milp", "lp"])
def test_same_fingerprint_in_all_seven_libraries(captured, problem):
    libs = sorted(MILP)
    assert len(libs) == 8  # seven libraries, SciPy's two entry points
    for lib in libs:
        m = captured[(problem, lib)]
        assert m["capture"] == "ok", (lib, m.get("capture_reason"))
        assert m["form"]["x"] is not None, lib
    fps = {lib: fingerprint(captured[(problem, lib)]["form"]) for lib in libs}
    assert len(set(fps.values())) == 1, fps
    other = "lp" if problem == "milp" else "milp"
    assert fingerprint(captured[(other, "pulp")]["form"]) != fps["pulp"]


def test_decision_vectors_agree(captured):
    for lib in MILP:
        assert captured[("milp", lib)]["form"]["x"] == pytest.approx([2, 0, 1], abs=1e-6), lib
        assert captured[("lp", lib)]["form"]["x"] == pytest.approx([2.5, 1.5], abs=1e-6), lib


def _base(captured):
    return copy.deepcopy(captured[("milp", "pulp")]["form"])


def test_invariances(captured):
    form = _base(captured)
    fp = fingerprint(form)
    renamed = copy.deepcopy(form)
    for k, v in enumerate(renamed["vars"]):
        v[0] = f"v{k}_renamed"
    assert fingerprint(renamed) == fp
    # reorder variables (permute the columns everywhere) and rows
    perm = [2, 0, 1]  # new index of old column j
    moved = copy.deepcopy(form)
    moved["vars"] = [form["vars"][perm.index(k)] for k in range(3)]
    moved["rows"] = [[[perm[j] for j in idx], coef, s, rhs] for idx, coef, s, rhs in reversed(form["rows"])]
    moved["obj"] = [[perm[j] for j in form["obj"][0]], form["obj"][1]]
    assert fingerprint(moved) == fp
    scaled = copy.deepcopy(form)
    idx, coef, s, rhs = scaled["rows"][0]
    scaled["rows"][0] = [idx, [2.5 * a for a in coef], s, 2.5 * rhs]
    assert fingerprint(scaled) == fp
    flipped = copy.deepcopy(form)
    idx, coef, s, rhs = flipped["rows"][1]
    flipped["rows"][1] = [idx, [-a for a in coef], ">=", -rhs]
    assert fingerprint(flipped) == fp
    as_min = copy.deepcopy(form)
    as_min["sense"], as_min["obj"] = "min", [form["obj"][0], [-c for c in form["obj"][1]]]
    assert fingerprint(as_min) == fp


def test_any_change_changes_it(captured):
    form = _base(captured)
    fp = fingerprint(form)
    changes = {
        "coefficient": lambda f: f["rows"][0][1].__setitem__(0, 2.01),
        "rhs": lambda f: f["rows"][2].__setitem__(3, 9.0),
        "sense": lambda f: f["rows"][1].__setitem__(2, ">="),
        "bound": lambda f: f["vars"][2].__setitem__(3, 4.0),
        "integrality": lambda f: f["vars"][2].__setitem__(1, "I"),
        "objective": lambda f: f["obj"][1].__setitem__(0, 6.0),
        "objective sense": lambda f: f.__setitem__("sense", "min"),
    }
    for what, change in changes.items():
        g = copy.deepcopy(form)
        change(g)
        assert fingerprint(g) != fp, what


def test_listing_is_algebraic(captured):
    text = "\n".join(listing(captured[("milp", "gurobipy")]["form"]))
    assert "maximize 5 x + 4 y + 3 z" in text
    assert "2 x + 3 y + z <= 5" in text
    assert "integer x, y" in text
    assert "solution x = 2, y = 0, z = 1" in text


def test_answer_source_solve_unsolved_no_submission():
    typed = run_program("import pulp\nsubmit(13)\n")
    assert verify([typed], 13.0, "optagentbench").answer_source == "unsolved"
    solved = run_program(MILP["pulp"])
    v = verify([solved], 13.0, "optagentbench")
    assert v.answer_source == "solve" and v.fingerprint
    negated = run_program(MILP["scipy.milp"])  # SciPy's maximise-by-negation: -res.fun is a solve
    assert verify([negated], 13.0, "optagentbench").answer_source == "solve"
    shifted = run_program(MILP["pulp"].replace("submit(pulp.value(p.objective))",
                                                "submit(pulp.value(p.objective) + 100)"))
    v = verify([shifted], 113.0, "optagentbench")
    assert v.answer_source == "unsolved" and v.fingerprint  # the last solve's model is still named
    nothing = run_program("x = 1\n")
    v = verify([nothing], None, "optagentbench")
    assert v.answer_source == "no_submission" and v.fingerprint == ""


def test_unsupported_and_capped_are_recorded_not_failures():
    quad = run_program("""
import gurobipy as gp
m = gp.Model(); m.Params.OutputFlag = 0
x = m.addVar(0, 4, name="x")
m.setObjective(x * x - 2 * x, gp.GRB.MINIMIZE)
m.optimize()
submit(m.ObjVal)
""")
    assert quad.outcome == "ok" and quad.submission == pytest.approx(-1.0)
    m = quad.models[-1]
    assert m["capture"] == "unsupported" and "quadratic" in m["capture_reason"] and "form" not in m
    assert verify([quad], -1.0, "optagentbench").n_unsupported == 1
    big = run_program("""
import pulp
p = pulp.LpProblem("big", pulp.LpMinimize)
xs = [pulp.LpVariable(f"x{i}", 0, 1) for i in range(3000)]
p += pulp.lpSum(xs)
p += pulp.lpSum(xs) >= 2
p.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(p.objective))
""", )
    assert big.outcome == "ok" and big.submission == pytest.approx(2.0)
    m = big.models[-1]
    assert m["capture"] == "capped" and m["n_vars"] == 3000 and "form" not in m
