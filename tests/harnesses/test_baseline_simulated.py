"""The simulated policy answers every stage of the six baselines: each runs end to end on the
sample benchmark, outputs are marked simulated, and the skill knobs make a baseline
right or wrong in the ways its stages allow. SIMULATED numbers, never a model's accuracy."""
from __future__ import annotations

import pytest

from opteval.evalcore.data import reference_program
from opteval.evalcore.grading import grade
from opteval.evalcore.harnesses import BASELINES, Budgets
from opteval.evalcore.sim.baselines import BaselineSkill, Parts, parts_of, pulp_parts, scip_lines
from opteval.evalcore.sim.policy import SimSkill, SimulatedModel

PULP = "sample-0001"  # a PuLP LP (maximize)
SCIP = "sample-0003"  # a PySCIPOpt binary program
BUDGETS = {"cafa": (1, 1), "reflexion": (5, 3), "coe": (45, 3), "optimus": (80, 4), "autoformulation": (180, 16),
           "ormind": (8, 3)}
PERFECT = BaselineSkill(p_follow_format=1, p_route=1, p_blame=1, p_checker_catch=1, p_false_alarm=0, p_revise_fix=1,
                        p_component=1, p_rank=1, p_judge=1)


def _model(policy="always_correct", skill=None, bskill=PERFECT, **kw):
    m = SimulatedModel(policy=policy, skill=skill or SimSkill(), **kw)
    m.baseline_skill = bskill
    return m


def _reference(pid: str) -> str:
    src = reference_program(pid)
    assert src is not None, f"{pid} has no reference program"
    return src


def _parts(pid: str) -> Parts:
    parts = parts_of(_reference(pid))
    assert parts is not None, f"{pid}'s reference program does not split"
    return parts


def _ok(t, key):
    return grade(t.submission.raw if t.submission else None, key[t.problem_id])


@pytest.mark.parametrize("method", sorted(BASELINES))
@pytest.mark.parametrize("pid", [PULP, SCIP])
def test_each_baseline_solves_with_a_perfect_simulated_model(method, pid, sample, run_harness):
    problems, key = sample
    calls, turns = BUDGETS[method]
    t = run_harness(method, problems[pid], _model(), budgets=Budgets(max_calls=calls, max_turns=turns))
    assert t.simulated and len(t.calls) <= calls and t.execs
    assert _ok(t, key), (method, pid, t.errors)
    assert {c.stage for c in t.calls} - {"act"} == {c.stage for c in t.calls}  # every call has its own stage


def test_decomposition_translates_between_pulp_and_scip():
    lines = "\n".join(scip_lines(_parts(PULP)))
    assert "m.addVar('sourdough', lb=100)" in lines and 'm.setObjective(3.4 * s + 2.9 * r, "maximize")' in lines
    pp = pulp_parts(_parts(SCIP))
    assert pp["sense"] == "maximize" and all(c.startswith("model += ") for c in pp["constraints"])
    assert "pulp.lpSum" in pp["objective"]


def test_ormind_counterfactual_check_catches_a_wrong_program_only_when_skilled(sample, run_harness):
    problems, key = sample
    mutant = {"policy": "always_mutant", "skill": SimSkill(mutation_ops=("flip_sense",))}
    b = Budgets(max_calls=8, max_turns=3)
    caught = run_harness("ormind", problems[PULP], _model(**mutant), budgets=b)
    assert [c.stage for c in caught.calls][-2:] == ["counterfactual", "revise"] and _ok(caught, key)
    blind = BaselineSkill(p_checker_catch=0.0, p_false_alarm=0.0)
    missed = run_harness("ormind", problems[PULP], _model(bskill=blind, **mutant), budgets=b)
    assert [c.stage for c in missed.calls][-1] == "counterfactual" and not _ok(missed, key)


def test_autoformulation_ranking_and_judging_skill_matter(sample, run_harness):
    problems, key = sample
    b = Budgets(max_calls=180, max_turns=16)
    good = run_harness("autoformulation", problems[PULP], _model(bskill=BaselineSkill(p_component=0.5, p_rank=1, p_judge=1)),
                       budgets=b)
    assert {"rank", "compare"} <= {c.stage for c in good.calls} and _ok(good, key)
    bad = run_harness("autoformulation", problems[PULP], _model(bskill=BaselineSkill(p_component=0.0)), budgets=b)
    assert not _ok(bad, key)  # no right component is ever sampled


def test_cafa_cannot_express_a_scipy_program(sample, run_harness):
    problems, key = sample
    scipy_pid = next(pid for pid in sorted(problems) if "scipy" in _reference(pid).split("\n")[0])
    t = run_harness("cafa", problems[scipy_pid], _model(), budgets=Budgets(max_calls=1, max_turns=1))
    assert len(t.calls) == 1 and not _ok(t, key)
