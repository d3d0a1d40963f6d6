"""Chain-of-Experts and ORMind through the real harness and the real sandbox, scripted model."""
from __future__ import annotations

import json

from opteval.evalcore.harnesses import Budgets
from opteval.evalcore.harnesses.coe import EXPERTS, parse_expert
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED
from tests.harnesses.scripted import Reply, ScriptedModel, crash, program, user_of

P = ProblemSpec(id="t-2", benchmark="test", question="Minimize x + y with x + y >= 2, x, y >= 0.")
EXPERT_STAGES = {e.lower().replace(" ", "_"): f"comment of {e}" for e in EXPERTS}


def test_parse_expert_prefers_the_longer_name():
    assert parse_expert("Next: Programming Example Provider", list(EXPERTS)) == "Programming Example Provider"
    assert parse_expert("programming expert", list(EXPERTS)) == "Programming Expert"
    assert parse_expert("nobody", list(EXPERTS)) is None


def test_coe_one_trial_on_success(run_harness):
    model = ScriptedModel({"conductor": ["Modeling Expert", "Programming Expert", "Code Reviewer"],
                           **EXPERT_STAGES, "reducer": program(2)})
    t = run_harness("coe", P, model, budgets=Budgets(max_calls=45, max_turns=3))
    assert model.stages == ["conductor", "modeling_expert", "conductor", "programming_expert", "conductor",
                            "code_reviewer", "reducer"]
    # the conductor only offers experts not used yet in this trial; the pool grows
    offered = user_of(model.calls[4][2])
    assert "- Modeling Expert" not in offered and "- Programming Expert" not in offered and "- Code Reviewer" in offered
    assert "comment of Modeling Expert" in user_of(model.calls[-1][2])
    assert t.status == STATUS_SUBMITTED and t.submission.raw == 2 and len(t.execs) == 1


def test_coe_backward_lifo_replaces_the_claimed_comment_and_last_reducer_wins(run_harness):
    claims: list[Reply] = [json.dumps({"is_caused_by_you": False, "reason": "not me", "refined_result": ""}),
                        json.dumps({"is_caused_by_you": True, "reason": "my code", "refined_result": "REFINED PROGRAM COMMENT"})]
    model = ScriptedModel({"conductor": "gibberish", **EXPERT_STAGES, "reducer": [crash(), crash(), program(5)],
                           "backward": claims + claims + claims})
    t = run_harness("coe", P, model, budgets=Budgets(max_calls=45, max_turns=3))
    per_trial = ["conductor", None, "conductor", None, "conductor", None, "reducer"]
    assert len(t.execs) == 3 and [e.outcome for e in t.execs] == ["error", "error", "ok"]
    assert model.stages.count("reducer") == 3 and model.stages.count("backward") == 4  # 2 per failed trial: LIFO until a claim
    assert len(model.stages) == 3 * len(per_trial) + 4 <= 45
    assert "REFINED PROGRAM COMMENT" in user_of(model.calls[model.stages.index("reducer", 8)][2])
    assert any("picked" in e and "at random" in e for e in t.errors)  # unparseable conductor -> seeded random
    assert t.submission.raw == 5


def test_coe_stops_after_three_trials(run_harness):
    no = json.dumps({"is_caused_by_you": False, "reason": "", "refined_result": ""})
    model = ScriptedModel({"conductor": "Code Reviewer", **EXPERT_STAGES, "reducer": crash(), "backward": no})
    t = run_harness("coe", P, model, budgets=Budgets(max_calls=45, max_turns=3))
    assert model.stages.count("reducer") == 3 and len(t.calls) == 3 * 7 + 2 * 3 <= 45
    assert t.status != STATUS_SUBMITTED


ORMIND_BASE = {"encode": '{"a": {"Type": "int", "Definition": "x"}}',
               "formalize": '{"VARIABLES": [], "CONSTRAINTS": [], "OBJECTIVE": ""}',
               "compile": program(1)}
OK_CHECK = "```python\ndef check(variables, objective):\n    return \"Don't need to modify any constraints!\"\n```"
BAD_CHECK = "```python\ndef check(variables, objective):\n    return ['x too small: ' + str(variables.get('x'))]\n```"


def test_ormind_clean_run_with_a_passing_check(run_harness):
    model = ScriptedModel({**ORMIND_BASE, "supervise": "Attention: none\n" + program(2, 'print("VARIABLES: {\\"x\\": 2}")\n'),
                           "counterfactual": OK_CHECK})
    t = run_harness("ormind", P, model, budgets=Budgets(max_calls=8, max_turns=3))
    assert model.stages == ["encode", "formalize", "compile", "supervise", "counterfactual"]
    assert t.submission.raw == 2 and len(t.execs) == 2  # the program and the checker


def test_ormind_one_repair_one_counterfactual_revision_last_run_wins(run_harness):
    model = ScriptedModel({**ORMIND_BASE, "supervise": crash(), "diagnose": "root cause: ValueError",
                           "revise": [program(3, 'print("VARIABLES: {\\"x\\": 1}")\n'), program(4)],
                           "counterfactual": BAD_CHECK})
    t = run_harness("ormind", P, model, budgets=Budgets(max_calls=8, max_turns=3))
    assert model.stages == ["encode", "formalize", "compile", "supervise", "diagnose", "revise", "counterfactual", "revise"]
    assert len(t.calls) == 8
    # the checker saw the returned variable values, and its complaint reached the revision
    assert "x too small: 1" in user_of(model.calls[-1][2])
    assert [e.outcome for e in t.execs] == ["error", "ok", "ok", "ok"] and t.submission.raw == 4


def test_ormind_stops_after_one_failed_repair(run_harness):
    model = ScriptedModel({**ORMIND_BASE, "supervise": crash(), "diagnose": "d", "revise": crash()})
    t = run_harness("ormind", P, model, budgets=Budgets(max_calls=8, max_turns=3))
    assert model.stages == ["encode", "formalize", "compile", "supervise", "diagnose", "revise"]
    assert t.status != STATUS_SUBMITTED and "after 1 repair" in t.errors[-1]
