"""Model prompt contracts, post-trained checkpoints' configs and the figure4 / extra_backbones sweeps."""
from __future__ import annotations

import asyncio

import pytest

from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.models.contract import PromptContract
from opteval.evalcore.sim.policy import SimulatedModel
from opteval.sweepcore.config import ConfigError, load_config, methods_for, model_config
from opteval.sweepcore.plan import expand_plan, plan_counts

MSGS = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "USER"}]


def test_contract_modes():
    assert PromptContract().apply(MSGS) == MSGS
    assert PromptContract(system="into_user").apply(MSGS) == [{"role": "user", "content": "SYS\n\nUSER"}]
    assert PromptContract(system_prefix="MINE\n").apply(MSGS)[0] == {"role": "system", "content": "MINE\n\nSYS"}
    assert PromptContract(system_prefix="MINE").apply([MSGS[1]])[0] == {"role": "system", "content": "MINE"}
    with pytest.raises(ValueError, match="prompt.system"):
        PromptContract(system="drop")
    with pytest.raises(ValueError, match="unknown key"):
        PromptContract.from_config({"sytem": "keep"})


def test_the_model_sees_and_the_transcript_records_the_contracted_messages(sample, executor):
    problems, _ = sample
    seen = []

    class Spy(SimulatedModel):
        async def chat(self, messages, sampling, seed, meta=None):
            seen.append(messages)
            return await super().chat(messages, sampling, seed, meta)

    ctx = HarnessContext(model=Spy(policy="always_correct"), executor=executor, sampling=Sampling(), sample=0,
                         budgets=Budgets(), prompt_contract=PromptContract(system="into_user"))
    t = asyncio.run(get_harness("opticycle").run(problems["sample-0001"], ctx))
    assert t.status == "submitted"
    assert all(all(m["role"] != "system" for m in msgs) for msgs in seen)
    assert seen[0][0]["content"].startswith("You are an expert in operations research")
    assert [e["messages"] for e in t.transcript] == seen


@pytest.mark.parametrize("name,hub", [("ORLM-LLaMA-3-8B", "CardinalOperations/ORLM-LLaMA-3-8B"),
                                      ("SIRL-Qwen2.5-7B-Gurobi", "chenyitian-shanshu/SIRL-Gurobi"),
                                      ("LLMOPT-Qwen2.5-14B", "ant-opt/LLMOPT-Qwen2.5-14B"),
                                      ("StepORLM-Qwen3-8B", "Chenyu-Zhou/StepORLM-Qwen3-8B")])
def test_post_trained_checkpoints_have_configs(name, hub):
    cfg = model_config(name)
    assert cfg.backend == "vllm" and cfg.vllm.source == hub
    assert cfg.sampling.max_tokens + 1024 <= cfg.vllm.engine_kwargs.max_model_len


def test_extra_backbones_carry_their_prompt_contracts():
    assert model_config("DeepSeek-R1-Distill-Llama-8B").prompt.system == "into_user"
    assert "[THINK]" in model_config("Magistral-Small-2509").prompt.system_prefix
    assert model_config("GPT-OSS-20B").sampling.extra_body.reasoning_effort in ("low", "medium", "high")


def test_figure4_pairs_each_model_with_its_own_protocol():
    cfg = load_config(["configs/sweeps/figure4.yaml"])
    assert methods_for(cfg, "Qwen3-8B") == ["opticycle", "optistate"]
    assert methods_for(cfg, "ORLM-LLaMA-3-8B") == ["orlm"] and methods_for(cfg, "SIRL-Qwen2.5-7B-Gurobi") == ["sirl"]
    ids = {b: ["p1", "p2"] for b in cfg.benchmarks}
    pairs = set(plan_counts(expand_plan(cfg, ids)))
    assert pairs == {("Qwen3-8B", "opticycle"), ("Qwen3-8B", "optistate"), ("ORLM-LLaMA-3-8B", "orlm"),
                     ("SIRL-Qwen2.5-7B-Gurobi", "sirl"), ("LLMOPT-Qwen2.5-14B", "llmopt"),
                     ("StepORLM-Qwen3-8B", "direct")}
    extra = load_config(["configs/sweeps/extra_backbones.yaml"])
    assert list(extra.models) == ["DeepSeek-R1-Distill-Llama-8B", "Phi-4-reasoning", "Magistral-Small-2509",
                                  "GPT-OSS-20B"] and list(extra.methods) == ["direct", "opticycle", "optistate"]


def test_model_methods_names_a_bad_entry():
    with pytest.raises(ConfigError, match=r"model_methods\.sim-small"):
        load_config(["models=[sim-small]", "methods=[direct]", "model_methods={sim-small: [opticycle]}"])
