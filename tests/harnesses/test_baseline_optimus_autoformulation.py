"""OptiMUS and AutoFormulation through the real harness and the real sandbox, scripted model."""
from __future__ import annotations

import json
import re

import pytest

from opteval.evalcore.harnesses import Budgets
from opteval.evalcore.harnesses.autoformulation import N_SAMPLES, dedup
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED
from tests.harnesses.scripted import ScriptedModel, crash, user_of

P = ProblemSpec(id="t-3", benchmark="test", question="Minimize x subject to x >= 2.5 (x continuous).")


def _optimus_script(code_reply: str) -> dict:
    return {
        "parameters": json.dumps({"lb": {"shape": [], "definition": "lower limit", "value": 2.5}}),
        "objective": json.dumps({"description": "minimize x", "sense": "minimize"}),
        "constraints": json.dumps(["x is at least lb", "x is at most 100"]),
        "redundancy": lambda msgs: user_of(msgs).split("## Constraints\n")[1].split("\n\nRemove")[0],
        "confidence": ["5 OUT OF 5", "2 OUT OF 5"],
        "modify": json.dumps({"action": "no"}),
        "formulate": json.dumps({"formulation": "x \\ge lb",
                                 "new_variables": [{"symbol": "x", "shape": [], "type": "continuous"}],
                                 "auxiliary_constraints": []}),
        "check": "yes",
        "formulate_objective": json.dumps({"formulation": "\\min x", "sense": "minimize", "new_variables": []}),
        "code": code_reply,
        "code_objective": "```python\nmodel.setObjective(x)\n```",
        "debug": crash("still broken"),
    }


def test_optimus_staged_pipeline_template_and_first_success(run_harness):
    model = ScriptedModel(_optimus_script("```python\nmodel += x >= lb\n```"))
    t = run_harness("optimus", P, model, budgets=Budgets(max_calls=80, max_turns=4))
    assert model.stages == ["parameters", "objective", "constraints", "redundancy", "confidence", "confidence", "modify",
                            "formulate", "check", "formulate_objective", "code", "code_objective"]
    assert t.status == STATUS_SUBMITTED and abs(t.submission.raw - 2.5) < 1e-6 and len(t.execs) == 1
    # the numbers stay in the data: later prompts name the parameter, never its value
    assert all("2.5" not in user_of(m).split("</problem>")[-1] for _, s, m in model.calls[1:])


def test_optimus_whole_program_debug_at_most_three(run_harness):
    model = ScriptedModel(_optimus_script("```python\nmodel += y >= lb\n```"))  # y is undefined
    t = run_harness("optimus", P, model, budgets=Budgets(max_calls=80, max_turns=4))
    assert model.stages[-3:] == ["debug"] * 3 and model.stages.count("debug") == 3
    assert [e.outcome for e in t.execs] == ["error"] * 4 and t.status != STATUS_SUBMITTED
    assert "NameError" in user_of(model.calls[model.stages.index("debug")][2])


def test_optimus_debug_fix_is_the_answer(run_harness):
    script = _optimus_script("```python\nmodel += y >= lb\n```")
    script["debug"] = "```python\nsubmit(2.5)\n```"
    t = run_harness("optimus", P, ScriptedModel(script), budgets=Budgets(max_calls=80, max_turns=4))
    assert [e.outcome for e in t.execs] == ["error", "ok"] and t.submission.raw == 2.5


def test_dedup_rules():
    assert dedup("inequalities", ["model += x >= a", "model += a <= x", "model += x >= a + 1"]) == [
        "model += x >= a", "model += x >= a + 1"]
    assert dedup("parameters", ["a = 1", "a = 2", "a = 2"]) == ["a = 2"]  # the most common
    assert len(dedup("objective", ["model.setObjective(2*x + y)", "model.setObjective(y + 2*x)"])) == 1


AF = {
    "parameters": "```python\na = 2.5\n```",
    "variables": "```python\nx = pulp.LpVariable('x', lowBound=0)\n```",
    "objective": "```python\nmodel.sense = pulp.LpMinimize\nmodel.setObjective(x)\n```",
    "equalities": "```python\n# none\n```",
}


def _cand(msgs) -> int:
    m = re.search(r"## Candidate (\d+) of", user_of(msgs))
    assert m is not None, "not a candidate prompt"
    return int(m.group(1))


def test_autoformulation_equivalent_candidates_collapse_to_one_chain(run_harness):
    model = ScriptedModel({**AF, "inequalities": lambda m: "```python\nmodel += x >= a\n```" if _cand(m) % 2
                           else "```python\nmodel += a <= x\n```"})
    t = run_harness("autoformulation", P, model, budgets=Budgets(max_calls=180, max_turns=16))
    # 5 levels x 8 samples, no ranking (one distinct child each), the single terminal run once
    assert len(model.stages) == 5 * N_SAMPLES and "rank" not in model.stages and "group" not in model.stages
    assert len(t.execs) == 1 and abs(t.submission.raw - 2.5) < 1e-6


def test_autoformulation_prior_ranking_and_pairwise_comparison(run_harness):
    ineq = {1: "x >= a", 2: "x >= a + 1", 3: "x >= a + 2", 4: "x >= a + 3"}
    model = ScriptedModel({
        **AF,
        "inequalities": lambda m: f"```python\nmodel += {ineq[(_cand(m) - 1) % 4 + 1]}\n```",
        "rank": "[0.1, 0.9, 0.5, 0.2]",  # top 3 kept: a + 1, a + 2, a + 3
        "compare": "A",
    })
    t = run_harness("autoformulation", P, model, budgets=Budgets(max_calls=180, max_turns=16))
    assert model.stages.count("rank") == 1 and len(t.execs) == 3  # three terminals, each run once
    assert "compare" not in model.stages  # all three became the baselines (reward 0.5)
    # equal rewards: the first solved terminal (highest prior) is the answer
    assert abs(t.submission.raw - 3.5) < 1e-6


def test_autoformulation_pairwise_comparison_and_call_budget(run_harness):
    objectives = {1: "x", 2: "2 * x", 3: "3 * x", 4: "4 * x"}
    model = ScriptedModel({
        **AF,
        "objective": lambda m: ("```python\nmodel.sense = pulp.LpMinimize\n"
                                f"model.setObjective({objectives[(_cand(m) - 1) % 4 + 1]})\n```"),
        "inequalities": lambda m: "```python\nmodel += x >= a + " + str((_cand(m) - 1) % 2) + "\n```",
        "rank": lambda m: json.dumps([0.5] * len(re.findall(r"^### Candidate", user_of(m), re.M))),
        "compare": "A",
    })
    t = run_harness("autoformulation", P, model, budgets=Budgets(max_calls=180, max_turns=16))
    # 3 objectives x 2 inequalities = 6 terminals: the 4th-6th are compared with the 3 baselines, both orders
    assert len(t.execs) == 6 and model.stages.count("compare") == 3 * 3 * 2
    assert t.status == STATUS_SUBMITTED and len(t.calls) <= 180
    small = ScriptedModel(dict(model.script))
    t = run_harness("autoformulation", P, small, budgets=Budgets(max_calls=45, max_turns=16))
    assert len(t.calls) == 45 and any("budget spent: calls" in e for e in t.errors)
    assert len(t.execs) == 1 and t.status == STATUS_SUBMITTED  # the one terminal reached so far answers


# -- the calibrated budgets' params (configs/methods/*.yaml, docs/calibration.md) ------------------


def test_optimus_without_confidence_review_and_check(run_harness):
    model = ScriptedModel(_optimus_script("```python\nmodel += x >= lb\n```"))
    t = run_harness("optimus", P, model, budgets=Budgets(max_calls=40, max_turns=4),
                    params={"confidence_review": False, "check": False})
    # 6 + 2C calls: the low-confidence "modify: no" never runs, so both constraints are formulated and coded
    assert model.stages == ["parameters", "objective", "constraints", "redundancy", "formulate", "formulate",
                            "formulate_objective", "code", "code", "code_objective"]
    assert t.status == STATUS_SUBMITTED and abs(t.submission.raw - 2.5) < 1e-6


def test_autoformulation_search_width_from_params(run_harness):
    ineq = {1: "x >= a", 2: "x >= a + 1"}
    model = ScriptedModel({**AF, "inequalities": lambda m: f"```python\nmodel += {ineq[_cand(m)]}\n```",
                           "rank": "[0.2, 0.8]"})
    t = run_harness("autoformulation", P, model, budgets=Budgets(max_calls=16, max_turns=1),
                    params={"candidates": 2, "top": 2, "baselines": 3})
    # one rollout, 2 candidates per level: 5 x 2 samples + one ranking (only the inequalities differ)
    assert model.stages.count("rank") == 1 and len(model.stages) == 5 * 2 + 1
    assert all("of 2" in user_of(m) for _, s, m in model.calls if s != "rank")
    assert len(t.execs) == 1 and abs(t.submission.raw - 3.5) < 1e-6  # the higher-ranked child: x >= a + 1
    top1 = ScriptedModel(dict(model.script))
    t = run_harness("autoformulation", P, top1, budgets=Budgets(max_calls=180, max_turns=16),
                    params={"candidates": 2, "top": 1})
    assert len(t.execs) == 1  # one child kept per level: a single terminal, however many rollouts


def test_search_and_pipeline_params_are_checked():
    from opteval.evalcore.harnesses.autoformulation import AutoFormulation
    from opteval.evalcore.harnesses.optimus import OptiMUS

    harnesses: dict[str, type[AutoFormulation] | type[OptiMUS]] = {"autoformulation": AutoFormulation,
                                                                    "optimus": OptiMUS}
    AutoFormulation.check_params({"candidates": 2, "top": 2})
    OptiMUS.check_params({"check": False})
    cases: list[tuple[str, dict[str, object], str]] = [
        ("autoformulation", {"candidates": 0}, "params.candidates must be an integer >= 1"),
        ("autoformulation", {"rollouts": 2}, "unknown key(s) ['rollouts']"),
        ("optimus", {"check": "no"}, "params.check must be true or false"),
        ("optimus", {"debug": 1}, "unknown key(s) ['debug']")]
    for name, params, msg in cases:
        with pytest.raises(ValueError) as err:
            harnesses[name].check_params(params)
        assert msg in str(err.value)
