"""The simulated policy on its own: determinism, skill rates, mutations, protocol, tokens."""
from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

from opteval.evalcore.data import reference_program
from opteval.evalcore.extraction import extract_code
from opteval.evalcore.harnesses._common import fenced_blocks, load_prompt, render
from opteval.evalcore.models.base import CallMeta, ChatModel, Sampling
from opteval.evalcore.sim.policy import (
    MUTATION_OPS,
    SimSkill,
    SimulatedModel,
    count_tokens,
    formulation_for,
    mutate,
    split_program,
)


def _reference(pid: str) -> str:
    src = reference_program(pid)
    assert src is not None, f"{pid} has no reference program"
    return src


def _direct_messages(question: str) -> list[dict]:
    return [
        {"role": "system", "content": load_prompt("direct", "system")},
        {"role": "user", "content": render(load_prompt("direct", "user"), question=question)},
    ]


def test_is_a_chat_model_and_marks_simulated(sample):
    problems, _ = sample
    model = SimulatedModel()
    assert isinstance(model, ChatModel)
    q = next(iter(problems.values())).question
    c = asyncio.run(model.chat(_direct_messages(q), Sampling(), 42))
    assert c.simulated is True and c.finish_reason == "stop"


def test_same_messages_and_seed_give_the_same_text_and_seeds_vary(sample):
    problems, _ = sample
    model = SimulatedModel()
    texts = {}
    for pid, spec in list(problems.items())[:10]:
        msgs = _direct_messages(spec.question)
        for seed in (42, 43, 44):
            a = model.respond(msgs, seed)
            assert a == SimulatedModel().respond(msgs, seed)  # a fresh instance agrees
            texts[(pid, seed)] = a
    assert len(set(texts.values())) > 10  # seeds and problems change the answer


def test_identifies_problems_by_question_hash_whitespace_insensitive(sample):
    problems, _ = sample
    model = SimulatedModel()
    for pid, spec in problems.items():
        noisy = "  " + spec.question.replace(" ", "  \n ") + "\n"
        found = model.identify(_direct_messages(noisy))
        assert found is not None and found.id == pid
        # without the tags it falls back to substring search
        found = model.identify([{"role": "user", "content": "Solve this: " + spec.question}])
        assert found is not None and found.id == pid


def test_always_correct_writes_the_reference_program(sample):
    problems, _ = sample
    model = SimulatedModel(policy="always_correct")
    for pid, spec in problems.items():
        code = extract_code(model.respond(_direct_messages(spec.question), 7), "submit")
        assert code is not None and code.strip() == _reference(pid).strip()


def test_skill_rates_hold_over_the_sample_benchmark(sample):
    problems, _ = sample
    skill = SimSkill(p_correct=0.5, p_mutant=0.2, p_syntax_error=0.1, p_runtime_error=0.2, p_no_submit=0.1)
    model = SimulatedModel(skill=skill)
    plans = [model.plan(pid, 42 + j) for pid in problems for j in range(60)]
    n = len(plans)
    assert n >= 2000
    for kind, p in skill.kind_weights.items():
        rate = sum(pl.kind == kind for pl in plans) / n
        assert abs(rate - p) < 0.04, (kind, rate, p)
    assert abs(sum(pl.no_submit for pl in plans) / n - 0.1) < 0.03
    errs = [pl for pl in plans if pl.kind in ("syntax_error", "runtime_error")]
    assert abs(sum(pl.base == "correct" for pl in errs) / len(errs) - 0.5 / 0.7) < 0.06


def test_skill_validation_names_the_field():
    with pytest.raises(ValueError, match="p_repair"):
        SimSkill(p_repair=1.5)
    with pytest.raises(ValueError, match="mutation_ops"):
        SimSkill(mutation_ops=("nope",))
    with pytest.raises(ValueError, match="must be > 0"):
        SimSkill(p_correct=0, p_mutant=0, p_syntax_error=0, p_runtime_error=0)


def test_from_config_builds_and_rejects_unknown_keys():
    m = SimulatedModel.from_config({
        "name": "sim-a", "backend": "simulated", "policy": "always_mutant",
        "skill": {"p_correct": 0.9, "mutation_ops": ["flip_sense"]}, "ttft_s": 0.0,
    })
    assert m.name == "sim-a" and m.policy == "always_mutant"
    assert m.skill.p_correct == 0.9 and m.skill.mutation_ops == ("flip_sense",)
    with pytest.raises(ValueError, match="description"):  # a key no schema has is refused, not ignored
        SimulatedModel.from_config({"name": "sim-a", "backend": "simulated", "description": "x"})
    with pytest.raises(ValueError, match="polcy"):
        SimulatedModel.from_config({"polcy": "skill"})
    with pytest.raises(ValueError, match="p_corect"):
        SimulatedModel.from_config({"skill": {"p_corect": 1}})
    with pytest.raises(ValueError, match="policy"):
        SimulatedModel.from_config({"policy": "oracle"})


@pytest.mark.parametrize("op", MUTATION_OPS)
def test_each_mutation_operator_changes_some_reference_program(sample, op):
    problems, _ = sample
    changed = 0
    for pid in problems:
        src = _reference(pid)
        out, used = mutate(src, random.Random(0), (op,))
        compile(out, pid, "exec")  # mutants stay valid Python
        assert out != src
        changed += used == op
    assert changed >= 5, (op, changed)


def test_mutants_differ_from_the_reference_for_every_problem_and_seed(sample):
    problems, _ = sample
    model = SimulatedModel(policy="always_mutant")
    for pid, spec in problems.items():
        for seed in (1, 2):
            code = extract_code(model.respond(_direct_messages(spec.question), seed), "submit")
            assert code is not None and code.strip() != _reference(pid).strip()


def test_every_reference_program_splits_into_build_and_solve_cells(sample):
    problems, _ = sample
    for pid in problems:
        src = _reference(pid)
        cut = split_program(src)
        assert cut is not None, pid
        assert cut[0] + cut[1] == src and "submit(" in cut[1] and "submit(" not in cut[0]


def test_formulation_has_required_fields_or_lacks_constraints_when_asked(sample):
    problems, _ = sample
    for pid in problems:
        full = formulation_for(_reference(pid))
        assert set(full) == {"sets", "parameters", "variables", "objective", "constraints"}
        assert full["variables"] and full["constraints"] and full["objective"]["sense"] in ("minimize", "maximize")
        assert "constraints" not in formulation_for(_reference(pid), complete=False)


def test_optistate_formulate_step_answers_with_a_json_formulation(sample):
    problems, _ = sample
    spec = next(iter(problems.values()))
    msgs = [
        {"role": "system", "content": load_prompt("optistate", "system")},
        {"role": "user", "content": render(load_prompt("optistate", "formulate"), question=spec.question)},
    ]
    text = SimulatedModel(policy="always_correct").respond(msgs, 1, CallMeta("optistate", "formulate"))
    (block,) = fenced_blocks(text, "formulation")
    assert json.loads(block)["constraints"]
    assert extract_code(text, "submit") is None  # no code at the formulation step


def test_unknown_problem_gets_a_generic_program(sample):
    model = SimulatedModel()
    text = model.respond(_direct_messages("A farmer grows wheat and corn on 40 acres. Maximize profit."), 3)
    code = extract_code(text, "submit")
    assert code is not None and "pulp" in code and "submit(" in code
    assert text == model.respond(_direct_messages("A farmer grows wheat and corn on 40 acres. Maximize profit."), 3)


def test_tokens_follow_the_fixed_rule_and_usage_can_be_withheld(sample):
    problems, _ = sample
    msgs = _direct_messages(next(iter(problems.values())).question)
    c = asyncio.run(SimulatedModel().chat(msgs, Sampling(), 1))
    assert c.usage.prompt_tokens == sum(count_tokens(m["content"]) for m in msgs)
    assert c.usage.completion_tokens == count_tokens(c.text)
    assert c.usage.cached_prompt_tokens is None
    c2 = asyncio.run(SimulatedModel(report_usage=False).chat(msgs, Sampling(), 1))
    assert c2.usage.prompt_tokens is None and c2.usage.completion_tokens is None and c2.text == c.text


def test_max_tokens_truncates_with_finish_reason_length(sample):
    problems, _ = sample
    msgs = _direct_messages(next(iter(problems.values())).question)
    c = asyncio.run(SimulatedModel().chat(msgs, Sampling(max_tokens=10), 1))
    assert c.finish_reason == "length" and c.usage.completion_tokens == 10 and len(c.text) == 40


def test_simulated_latency(sample):
    problems, _ = sample
    msgs = _direct_messages(next(iter(problems.values())).question)
    model = SimulatedModel(ttft_s=0.05, tokens_per_s=10_000)
    t0 = time.perf_counter()
    c = asyncio.run(model.chat(msgs, Sampling(), 1))
    assert c.usage.completion_tokens is not None
    expected = 0.05 + c.usage.completion_tokens / 10_000
    assert time.perf_counter() - t0 >= expected * 0.95 and c.latency_s >= expected * 0.95
