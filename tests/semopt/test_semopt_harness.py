"""The semopt harness: gate, reflections, MCTS, critic, records.

A scripted in-process chat model (a fake at the model edge, labelled as such) answers each
stage from the side channel; programs run in the real local sandbox.
"""
from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
from opteval.evalcore.harnesses.semopt import Candidate, Node, SemOptParams, parse_score, pick_answer, uct
from opteval.evalcore.models.base import CallMeta, Completion, Sampling, Usage
from opteval.evalcore.problems import ProblemSpec

PROBLEM = ProblemSpec(id="p1", benchmark="unit", question="Choose x to maximize 3x subject to x <= 4.")
FENCE = re.compile(r"```python\n(.*?)```", re.S)
NUM = re.compile(r"^(?:S|M)(\d+)$", re.M)


class ScriptedModel:
    """Fake chat model for the harness's control flow: strategies ``S<k>``, models ``M<k>``,
    code ``submit(<100 s + 10 m + c>)`` from the sibling counts; the critic scores by ``critic``."""

    name = "scripted"

    def __init__(self, first: str = "submit(7)\n", critic: Callable[[str], float] = lambda code: 0.9,
                 code_for: Callable[[int, int, int], str] | None = None, repair: str | None = None) -> None:
        self.first, self.critic, self.repair = first, critic, repair
        self.code_for = code_for or (lambda s, m, c: f"submit({100 * s + 10 * m + c})\n")
        self.metas: list[CallMeta | None] = []
        self.prompts: list[str] = []

    async def chat(self, messages, sampling: Sampling, seed: int, meta: CallMeta | None = None) -> Completion:
        self.metas.append(meta)
        user = messages[-1]["content"]
        self.prompts.append(user)
        stage = meta.stage if meta else "act"
        if stage == "critic":
            text = f"Looks fine.\nScore: {self.critic(FENCE.findall(user)[-1])}"
        elif stage == "generate":
            text = f"```python\n{self.first}```"
        elif stage == "reflect":
            text = f"```python\n{self.repair or self.first}```"
        else:
            k = user.count("### Alternative ")
            if "## Math model\n" in user:
                s = int(user.split("## Modeling strategy\n")[1].split("\n")[0][1:])
                m = int(user.split("## Math model\n")[1].split("\n")[0][1:])
                text = f"```python\n{self.code_for(s, m, k)}```"
            elif "## Modeling strategy\n" in user:
                text = f"M{k}"
            else:
                text = f"S{k}"
        return Completion(text, Usage(10, 5, None), "stop", 0.0)


def _run(model, executor, **params: Any):
    base = {"iterations": 3, "expansion": 2, "reflections": 1, "tau": 0.6, "omega": 1.414}
    ctx = HarnessContext(model=model, executor=executor, sampling=Sampling(), sample=0,
                         budgets=Budgets(max_calls=200, max_turns=100), params={**base, **params})
    return asyncio.run(get_harness("semopt").run(PROBLEM, ctx))


def _candidates(t) -> list[dict]:
    return [e["semopt"] for e in t.transcript if "semopt" in e]


def test_gate_accepts_a_confident_first_program(local_executor):
    model = ScriptedModel(critic=lambda code: 0.9)
    t = _run(model, local_executor)
    assert [c.stage for c in t.calls] == ["generate", "critic"] == [m and m.stage for m in model.metas]
    assert {m and m.harness for m in model.metas} == {"semopt"}
    assert t.submission.raw == 7 and t.status == "submitted"
    (c0,) = _candidates(t)
    assert c0["gate"] == "accept" and c0["S"] == 0.9 and c0["executed"] and c0["exec"] == 0


def test_low_score_opens_the_search_and_the_best_scored_leaf_wins(local_executor):
    # C_init scores 0.3; leaves score by their submitted value: strategy 1's leaves are best
    def critic(code: str) -> float:
        m = re.search(r"submit\((\d+)\)", code)
        assert m is not None, code
        v = int(m.group(1))
        return 0.3 if v == 7 else (0.8 if v // 100 == 1 else 0.5) - 0.01 * (v % 10)
    model = ScriptedModel(critic=critic)
    t = _run(model, local_executor, iterations=4, expansion=2, omega=0.1)  # small omega: exploit
    purposes = [c.purpose for c in t.calls]
    # iteration 1: the root expands into H=2 strategies; the rollout adds a model and a code
    assert purposes[:6] == ["generate", "critic", "expand strategy", "expand strategy", "rollout model", "rollout code"]
    cands = _candidates(t)
    assert cands[0]["gate"] == "search" and len(cands) == 5  # C_init + one leaf per iteration
    assert [c["path"] for c in cands[1:3]] == [[0, 0, 0], [1, 0, 0]]  # the unvisited strategy is tried next
    # iterations 3 and 4 go back to the better strategy (1): it expands into H models, the new one is tried
    assert cands[3]["path"] == [1, 1, 0] and cands[4]["path"][0] == 1
    best = max(cands, key=lambda c: c["S"])
    assert t.submission.raw == t.execs[best["exec"]].submission and t.submission.raw // 100 == 1
    assert Counter(c.stage for c in t.calls)["critic"] == 5


def test_failing_leaf_reflects_K_times_then_scores_zero_without_a_critic_call(local_executor):
    model = ScriptedModel(first="raise ValueError('boom')\n", critic=lambda code: 0.95)
    t = _run(model, local_executor, iterations=0, reflections=2)
    assert [c.stage for c in t.calls] == ["generate", "reflect", "reflect"]  # no critic: G.1
    assert [e.outcome for e in t.execs] == ["error"] * 3
    assert "boom" in model.prompts[1] and "ValueError" in model.prompts[1]  # the error goes back to the model
    (c0,) = _candidates(t)
    assert c0["S"] == 0.0 and not c0["executed"] and c0["R"] is None and c0["gate"] == "search"
    assert (c0["first_failed"], c0["reflections"], c0["critic"]) == (True, 2, "llm")  # Table 16: not repaired
    assert t.submission is None and t.status == "no_submission"


def test_reflection_repairs_and_a_status_counts_as_an_error(local_executor):
    model = ScriptedModel(first='submit("infeasible")\n', repair="submit(5)\n", critic=lambda code: 0.7)
    t = _run(model, local_executor)
    assert [c.stage for c in t.calls] == ["generate", "reflect", "critic"]
    assert "not an objective value" in model.prompts[1]
    assert t.submission.raw == 5
    (c0,) = _candidates(t)
    assert (c0["first_failed"], c0["reflections"], c0["executed"]) == (True, 1, True)  # Table 16: repaired
    # with infeasible_is_error: false the status is an answer like any other
    t2 = _run(ScriptedModel(first='submit("infeasible")\n', critic=lambda code: 0.7), local_executor,
              infeasible_is_error=False)
    assert [c.stage for c in t2.calls] == ["generate", "critic"] and t2.submission.raw == "infeasible"


def test_no_gate_always_searches(local_executor):
    t = _run(ScriptedModel(critic=lambda code: 0.99), local_executor, gate=False, iterations=1)
    cands = _candidates(t)
    assert cands[0]["gate"] == "off" and len(cands) == 2 and "expand" in {c.stage for c in t.calls}


def test_budget_ends_the_search_but_keeps_the_best_answer(local_executor):
    model = ScriptedModel(critic=lambda code: 0.5)
    ctx = HarnessContext(model=model, executor=local_executor, sampling=Sampling(), sample=0,
                         budgets=Budgets(max_calls=5, max_turns=100), params={"iterations": 8})
    t = asyncio.run(get_harness("semopt").run(PROBLEM, ctx))
    assert len(t.calls) == 5 and t.errors[-1] == "budget spent: calls"
    assert t.submission is not None and t.submission.raw == 7  # C_init, the only scored candidate


def test_llm_critic_can_be_another_model(local_executor, monkeypatch):
    generator, judge = ScriptedModel(critic=lambda code: 0.0), ScriptedModel(critic=lambda code: 0.9)
    import opteval.evalcore.models as models

    original = models.make_model
    monkeypatch.setattr(models, "make_model", lambda cfg: judge if cfg.get("name") == "judge" else original(cfg))
    t = _run(generator, local_executor, critic={"kind": "llm", "model": {"name": "judge", "backend": "x"}})
    assert [m and m.stage for m in generator.metas] == ["generate"]
    assert [m and m.stage for m in judge.metas] == ["critic"]
    assert [c.stage for c in t.calls] == ["generate", "critic"] and _candidates(t)[0]["gate"] == "accept"


@pytest.mark.parametrize("params, msg", [
    ({"iterationz": 3}, "params: unknown key(s) ['iterationz']"),
    ({"tau": 1.5}, "params.tau must be a number in [0, 1]"),
    ({"expansion": 0}, "params.expansion must be an integer >= 1"),
    ({"critic": {"kind": "oracle"}}, "params.critic.kind: unknown 'oracle'"),
    ({"critic": {"kind": "reward_model"}}, "params.critic.url"),
])
def test_bad_params_name_the_key(params, msg):
    with pytest.raises(ValueError) as err:
        SemOptParams.from_config(params)
    assert msg in str(err.value)


def test_parse_score_and_uct_and_pick_answer():
    assert parse_score("thinking...\nScore: 0.25\nScore: 0.75") == (0.75, None)
    assert parse_score("no verdict")[0] == 0.0 and parse_score("Score: 7")[1] is not None
    root, a, b = Node(0, visits=10), Node(1, visits=5, value=4.0), Node(1, visits=0)
    assert uct(b, root.visits, 1.4) == float("inf") and uct(a, 10, 0.0) == pytest.approx(0.8)
    cs = [Candidate(0, "gate", [], "", True, 0.4, 0.4, 0, 1.0), Candidate(1, "search", [0], "", False, None, 0.0, 1, None),
          Candidate(2, "search", [1], "", True, 0.9, 0.9, 2, 3.0), Candidate(3, "search", [2], "", True, 0.9, 0.9, 3, 4.0)]
    best = pick_answer(cs)
    assert best is not None and best.index == 2  # best score, earliest of ties
    only = pick_answer([Candidate(0, "gate", [], "", False, None, 0.0, 0, "infeasible")])
    assert only is not None and only.submission == "infeasible"
