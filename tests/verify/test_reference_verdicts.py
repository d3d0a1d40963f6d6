"""Issue 36: verdicts against the embedded sample's reference programs, answer_source in the
reward schemes (require_solve), and the ledger's model store."""
from __future__ import annotations

import pytest

from opteval.evalcore.data import reference_ids, reference_models, reference_program
from opteval.evalcore.formulation import fingerprint, reference_from_models, verify
from opteval.evalcore.reward_registry import RewardItem
from opteval.evalcore.rewards import score
from opteval.evalcore.sandbox import run_program


def test_every_kept_reference_matches_itself():
    checked = 0
    for pid in reference_ids():
        models = reference_models(pid)
        assert models is not None, pid
        ref = reference_from_models(models)
        if ref.form is None:  # nonlinear (SCIP) or no solve: the reason says so
            assert ref.reason, pid
            continue
        answer = ref.objective if ref.objective is not None else models[-1]["status"]  # infeasible, unbounded
        v = verify([{"models": models}], answer, "optagentbench", ref)
        assert v.answer_source == "solve" and v.reference_match == "same", pid
        if models[-1]["status"] != "optimal":  # no decision vector to check
            assert v.reference_feasible is None and "no decision vector" in v.reason, pid
            continue
        assert (v.reference_feasible, v.reference_violation) == (True, 0.0), (pid, v.reason)
        checked += 1
    assert checked >= 30  # 33 of 46: the rest are infeasible, unbounded, nonlinear or solve nothing


@pytest.mark.parametrize("pid", ["sample-0001", "sample-0010"])
def test_kept_reference_models_are_what_the_sandbox_captures(pid):
    result = run_program(reference_program(pid) or "")
    assert result.outcome == "ok"
    kept = reference_from_models(reference_models(pid) or [])
    assert fingerprint(result.models[-1]["form"]) == kept.fingerprint


def test_a_dropped_constraint_is_different_and_infeasible():
    ref = reference_from_models(reference_models("sample-0001") or [])
    code = (reference_program("sample-0001") or "").replace('prob += 6 * s + 4 * r <= 2400, "oven"\n', "")
    assert "oven" not in code
    wrong = run_program(code)
    assert wrong.outcome == "ok"
    v = verify([wrong], float(wrong.submission), "optagentbench", ref)
    assert v.answer_source == "solve" and v.reference_match == "different"
    assert v.reference_feasible is False and v.reference_violation == pytest.approx(240.0)  # 6 * 440 - 2400
    assert v.reference_gap is not None and v.reason == "mapped by name"
    same = run_program(reference_program("sample-0001") or "")
    v = verify([same], float(same.submission), "optagentbench", ref)
    assert (v.reference_match, v.reference_feasible, v.reference_violation) == ("same", True, 0.0)


def test_no_mapping_is_unknown_with_a_reason():
    ref = reference_from_models(reference_models("sample-0001") or [])
    other = run_program("""
import pulp
p = pulp.LpProblem("q", pulp.LpMaximize)
a = pulp.LpVariable("alpha", 0, 5)
b = pulp.LpVariable("beta", 0, 5)
p += a + b
p += a + 2 * b <= 6
p.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(p.objective))
""")
    v = verify([other], float(other.submission), "optagentbench", ref)
    assert v.reference_match == "different" and v.reference_feasible is None
    assert v.reason.startswith("no variable mapping")


def test_require_solve_takes_the_accuracy_reward_from_a_typed_answer():
    typed = "```python\nsubmit(1468.571439)\n```"
    solved = "```python\n" + (reference_program("sample-0001") or "") + "```"
    items = [RewardItem("p", typed, 1468.571439), RewardItem("p", solved, 1468.571439)]
    results = [run_program("submit(1468.571439)\n"), run_program(reference_program("sample-0001") or "")]
    assert results[1].submission == pytest.approx(1468.571439)
    plain = score("correct", items, results, "submit", "optagentbench")
    assert [r.reward for r in plain] == [1.0, 1.0]  # the paper's rule: the number alone
    assert [r.answer_source for r in plain] == ["unsolved", "solve"]
    strict = score("correct", items, results, "submit", "optagentbench", require_solve=True)
    assert [r.reward for r in strict] == [0.0, 1.0]
    assert [r.correct for r in strict] == [True, True]  # still graded correct: only the reward changes
    sirl = score("sirl-stage1", items, results, "submit", "optagentbench", require_solve=True)
    assert sirl[0].parts["accuracy"] == 0.0 and sirl[1].parts["accuracy"] == 2.0
    assert sirl[0].to_json("p")["answer_source"] == "unsolved"
