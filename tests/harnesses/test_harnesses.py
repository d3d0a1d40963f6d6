"""The three harnesses against the simulated policy, in process, with the real local sandbox."""
from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from opteval.evalcore.data import reference_program
from opteval.evalcore.grading import grade
from opteval.evalcore.harnesses import HARNESSES, Budgets, HarnessContext, get_harness
from opteval.evalcore.harnesses.optistate import check_formulation
from opteval.evalcore.models.base import ModelError, Sampling
from opteval.evalcore.records import STATUS_NO_SUBMISSION, STATUS_SUBMITTED, STATUSES
from opteval.evalcore.sim.policy import SimSkill, SimulatedModel, count_tokens, split_program

FIRST = "sample-0001"  # a PuLP LP (maximize): its sense flip changes the optimum
ONLY: dict[str, Any] = {"p_correct": 0.0, "p_mutant": 0.0, "p_syntax_error": 0.0, "p_runtime_error": 0.0,
                        "p_no_submit": 0.0, "p_bad_formulation": 0.0}


def _graded(traj, key) -> bool:
    return grade(traj.submission.raw if traj.submission else None, key[traj.problem_id])


def test_registry():
    assert set(HARNESSES) == {"direct", "opticycle", "optistate", "orlm", "sirl", "sirl_roles", "llmopt"}
    assert get_harness("opticycle").name == "opticycle"
    assert get_harness("semopt").name == "semopt" and get_harness("cafa").name == "cafa"
    with pytest.raises(KeyError, match="known"):
        get_harness("nope")


def test_direct_submits_correct_answer_and_fails_on_a_mutant(sample, run_harness):
    problems, key = sample
    good = run_harness("direct", problems[FIRST], SimulatedModel(policy="always_correct"))
    assert good.status == STATUS_SUBMITTED and _graded(good, key)
    assert len(good.calls) == 1 and len(good.execs) == 1 and good.execs[0].outcome == "ok"
    mutant_model = SimulatedModel(policy="always_mutant", skill=SimSkill(mutation_ops=("flip_sense",)))
    bad = run_harness("direct", problems[FIRST], mutant_model)
    assert bad.simulated and len(bad.calls) == 1
    assert not _graded(bad, key)
    assert "LpMinimize" in bad.transcript[0]["completion"]  # the maximisation was flipped


def test_direct_without_submit_has_no_submission(sample, run_harness):
    problems, key = sample
    model = SimulatedModel(policy="never_submit")
    t = run_harness("direct", problems[FIRST], model)
    assert t.status == STATUS_NO_SUBMISSION and t.submission is None and t.execs[0].outcome == "ok"


def test_opticycle_repairs_after_an_error_and_resumes_from_earlier_objects(sample, run_harness, executor):
    problems, key = sample
    model = SimulatedModel(skill=SimSkill(**{**ONLY, "p_runtime_error": 1.0, "p_repair": 1.0}))
    t = run_harness("opticycle", problems[FIRST], model)
    assert [e.outcome for e in t.execs] == ["ok", "error", "ok"]
    assert "Error" in t.execs[1].stderr_tail  # NameError or KeyError, reported
    assert t.status == STATUS_SUBMITTED and _graded(t, key)
    reference = reference_program(FIRST)
    assert reference is not None
    cut = split_program(reference)
    assert cut is not None
    build = cut[0]
    repaired = t.transcript[-1]["completion"]
    # the repaired cell uses `prob` without building it: the interpreter kept turn 1's objects
    assert "prob.solve" in repaired and "LpProblem" not in repaired and "LpProblem" in build
    # the error's output reached the model in the next prompt, the answer did not
    assert "Error" in t.transcript[2]["messages"][1]["content"]
    assert executor.opened == 1 and executor.closed == 1


def test_opticycle_without_a_shared_interpreter_cannot_resume(sample, local_executor):
    """Control for the test above: with a fresh interpreter per cell, the solve cell fails."""
    problems, key = sample

    class Forgetful:
        async def run(self, code, limits=None):
            return await local_executor.run(code, limits)

        async def open_session(self):
            class H:
                async def run_cell(self, code, limits=None):
                    return await local_executor.run(code, limits)

                async def close(self):
                    return None
            return H()

    model = SimulatedModel(policy="always_correct")
    ctx = HarnessContext(model=model, executor=Forgetful(), sampling=Sampling(), sample=0,
                         budgets=Budgets(max_turns=3))
    t = asyncio.run(get_harness("opticycle").run(problems[FIRST], ctx))
    assert t.execs[0].outcome == "ok" and t.execs[1].outcome == "error"
    assert "NameError" in t.execs[1].stderr_tail


def test_optistate_refuses_a_formulation_missing_its_constraints(sample, run_harness):
    problems, key = sample
    model = SimulatedModel(skill=SimSkill(**{**ONLY, "p_correct": 1.0, "p_bad_formulation": 1.0}))
    t = run_harness("optistate", problems[FIRST], model)
    purposes = [c.purpose for c in t.calls]
    assert purposes[0] == "formulate" and t.calls[0].turn == 0
    refused = [e for e in t.errors if "refused" in e]
    assert len(refused) == 1 and "constraints" in refused[0]
    # the refused submission was not final: the model fixed the formulation and resubmitted
    assert t.status == STATUS_SUBMITTED and _graded(t, key)
    assert [e.submission is not None for e in t.execs] == [False, True, True]
    later = t.transcript[-1]["messages"][1]["content"]
    assert "refused" in later and "INCOMPLETE" in later
    assert len(t.calls) == 4 and len(t.execs) == 3


def test_optistate_accepts_a_complete_formulation_first_time(sample, run_harness):
    problems, key = sample
    t = run_harness("optistate", problems[FIRST], SimulatedModel(policy="always_correct"))
    assert t.status == STATUS_SUBMITTED and _graded(t, key) and not t.errors
    assert [c.purpose for c in t.calls] == ["formulate", "generate", "revise"]


def test_check_formulation():
    assert check_formulation(None)[1]
    assert "not valid JSON" in check_formulation("{sets: }")[1][0]
    assert "JSON object" in check_formulation("[1]")[1][0]
    ok = '{"sets": [], "parameters": {}, "variables": [{"name": "x"}], "objective": {"sense": "max"}, "constraints": ["x<=1"]}'
    assert check_formulation(ok)[1] == []
    assert "constraints" in check_formulation(ok.replace('["x<=1"]', "[]"))[1][0]
    assert "constraints" in check_formulation(ok.replace(', "constraints": ["x<=1"]', ""))[1][0]


@pytest.mark.parametrize("method", ["opticycle", "optistate"])
def test_turn_budget_stops_a_policy_that_never_submits(sample, run_harness, method, executor):
    problems, _ = sample
    t = run_harness(method, problems[FIRST], SimulatedModel(policy="never_submit"), budgets=Budgets(max_turns=3))
    assert t.status == STATUS_NO_SUBMISSION and t.submission is None
    assert len(t.execs) == 3 and all(e.submission is None for e in t.execs)
    assert any("turns" in e for e in t.errors)
    assert t.budgets["max_turns"] == 3
    assert executor.opened == executor.closed == 1


def test_call_and_token_budgets_stop_a_policy_that_never_submits(sample, run_harness):
    problems, _ = sample
    model = SimulatedModel(policy="never_submit")
    t = run_harness("opticycle", problems[FIRST], model, budgets=Budgets(max_calls=2))
    assert len(t.calls) == 2 and t.status == STATUS_NO_SUBMISSION and any("calls" in e for e in t.errors)
    t = run_harness("opticycle", problems[FIRST], model, budgets=Budgets(max_total_tokens=2500))
    assert t.status == STATUS_NO_SUBMISSION and any("tokens" in e for e in t.errors)
    assert 2500 <= t.prompt_tokens + t.completion_tokens
    spent_before_last = sum(c.prompt_tokens + c.completion_tokens for c in t.calls[:-1])
    assert spent_before_last < 2500  # the last call was made only while budget remained


@pytest.mark.parametrize("method", ["direct", "opticycle", "optistate"])
def test_transcript_and_token_sums_match_the_calls(sample, run_harness, method):
    problems, _ = sample
    model = SimulatedModel(skill=SimSkill(**{**ONLY, "p_syntax_error": 1.0, "p_repair": 1.0}))
    t = run_harness(method, problems["sample-0003"], model, sample=5)
    assert len(t.transcript) == len(t.calls) >= 1
    for i, (entry, call) in enumerate(zip(t.transcript, t.calls)):
        assert entry["call"] == i and entry["turn"] == call.turn and entry["purpose"] == call.purpose
        assert call.prompt_tokens == sum(count_tokens(m["content"]) for m in entry["messages"])
        assert call.completion_tokens == count_tokens(entry["completion"])
        assert call.latency_s >= 0 and call.finish_reason == "stop"
    assert t.prompt_tokens == sum(c.prompt_tokens for c in t.calls)
    assert t.completion_tokens == sum(c.completion_tokens for c in t.calls)
    assert t.cached_prompt_tokens is None  # not reported stays missing
    assert t.simulated and t.wall_s > 0 and t.seed == 47 and t.method == method
    if method != "direct":
        assert len(t.calls) > 2  # the syntax error was seen and repaired


def test_missing_usage_stays_missing(sample, run_harness):
    problems, key = sample
    t = run_harness("opticycle", problems[FIRST], SimulatedModel(policy="always_correct", report_usage=False))
    assert t.status == STATUS_SUBMITTED and t.calls
    assert all(c.prompt_tokens is None for c in t.calls) and t.prompt_tokens is None


def _answer_forms(answer) -> set[str]:
    if isinstance(answer, str):
        return {answer}
    forms = {repr(answer), str(answer), f"{answer:g}", f"{answer:.2f}", f"{answer:,.2f}", f"{answer:.6g}"}
    if float(answer).is_integer():
        forms |= {str(int(answer)), f"{int(answer):,}"}
    return {f for f in forms if len(f.replace(",", "").replace(".", "").lstrip("-0")) >= 3}


def test_no_answer_text_appears_in_any_prompt(sample, run_many):
    problems, key = sample
    ids = sorted(problems)[:8]
    models = [SimulatedModel(), SimulatedModel(skill=SimSkill(p_runtime_error=0.5, p_repair=0.5), name="sim-e")]
    items = [(m, problems[pid], model, 1) for m in HARNESSES for pid in ids for model in models]
    trajs = run_many(items)
    checked = 0
    for t in trajs:
        question = problems[t.problem_id].question
        answer = key[t.problem_id]
        if isinstance(answer, str):
            forms = set()  # status words appear in every system prompt by design
        else:
            forms = {f for f in _answer_forms(answer) if f not in question}
        # a program the model wrote may print the optimum it computed, and a protocol may show it
        # that output again (LLMOPT's self-correction and id_gt): that is the model's text, no leak
        own = "\n".join(e.stdout_tail + e.stderr_tail for e in t.execs)
        forms = {f for f in forms if f not in own}
        for entry in t.transcript:
            for msg in entry["messages"]:
                for f in forms:
                    assert not re.search(r"(?<![\d.])" + re.escape(f) + r"(?![\d])", msg["content"]), (t.problem_id, f)
                checked += 1
    assert checked > 60


def test_same_seed_same_trajectory(sample, run_harness):
    problems, key = sample
    for method in ("direct", "opticycle", "optistate"):
        a = run_harness(method, problems["sample-0002"], SimulatedModel(), sample=3)
        b = run_harness(method, problems["sample-0002"], SimulatedModel(), sample=3)
        assert [e["completion"] for e in a.transcript] == [e["completion"] for e in b.transcript]
        assert a.status == b.status and [e.outcome for e in a.execs] == [e.outcome for e in b.execs]
        assert (a.submission.raw if a.submission else None) == (b.submission.raw if b.submission else None)


def test_model_error_propagates_and_the_session_is_closed(sample, executor):
    problems, _ = sample

    class Broken:
        name = "broken"

        def __init__(self):
            self.inner = SimulatedModel(policy="always_correct")
            self.n = 0

        async def chat(self, messages, sampling, seed, meta=None):
            self.n += 1
            if self.n == 2:
                raise ModelError("endpoint returned 503 three times")
            return await self.inner.chat(messages, sampling, seed, meta)

    for method in ("opticycle", "optistate"):
        ctx = HarnessContext(model=Broken(), executor=executor, sampling=Sampling(), sample=0)
        with pytest.raises(ModelError):
            asyncio.run(get_harness(method).run(problems[FIRST], ctx))
    assert executor.opened == executor.closed == 2


def test_all_harnesses_end_to_end_on_the_whole_sample_benchmark(sample, run_many):
    problems, key = sample
    model = SimulatedModel()
    items = [(m, problems[pid], model, 0) for m in HARNESSES for pid in sorted(problems)]
    trajs = run_many(items, concurrency=6)
    acc = {}
    for method in HARNESSES:
        ts = [t for t in trajs if t.method == method]
        assert len(ts) == len(problems)
        for t in ts:
            assert t.status in STATUSES and t.status != "error"
            assert t.simulated and t.calls and t.execs and len(t.transcript) == len(t.calls)
            assert (t.status == STATUS_SUBMITTED) == (t.submission is not None)
        acc[method] = sum(_graded(t, key) for t in ts) / len(ts)
    # default skill: ~0.6 correct at the first attempt, some mutants coincide with the optimum
    assert 0.4 <= acc["direct"] <= 0.85, acc
    # interaction repairs errors: the multi-turn harnesses do at least as well as direct
    assert acc["opticycle"] >= acc["direct"] and acc["optistate"] >= acc["direct"] - 0.05, acc


def test_budgets_from_config_overrides_and_rejects_unknown_keys():
    b = Budgets.from_config({"max_turns": 3, "exec_limits": {"wall_s": 5}})
    assert b.max_turns == 3 and b.exec_limits.wall_s == 5 and b.max_calls == Budgets().max_calls
    with pytest.raises(ValueError, match="max_turn"):
        Budgets.from_config({"max_turn": 3})
    with pytest.raises(ValueError, match="wal_s"):
        Budgets.from_config({"exec_limits": {"wal_s": 3}})
    with pytest.raises(ValueError, match="max_calls"):
        Budgets.from_config({"max_calls": -1})
