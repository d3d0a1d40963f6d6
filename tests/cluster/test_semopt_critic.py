"""SemOPT's reward-model critic as a real Ray Serve deployment.

Two tiers: (1) always: the real Serve route, batching and HTTP protocol, and the semopt harness
scoring through it, with a labelled fake scorer (a keyword rule) where the model would be;
(2) when ``torch`` and ``transformers`` are installed: a tiny randomly initialised
sequence-classification model (one label) built by the test, loaded from its path, scored on CPU.
``pip install torch transformers`` enables tier 2 (not in the default install: the PyPI torch
wheel brings several GB of CUDA libraries).
"""
from __future__ import annotations

import asyncio
import importlib.util
import math

import httpx
import pytest

from opteval.cluster.serve.critic_serving import deploy_critic, sigmoid

HAVE_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def _keyword_scorer(source: str, max_length: int):
    class KeywordScorer:  # the labelled fake: +2 for code submitting 7, -2 otherwise
        def score(self, pairs):
            return [(2.0 if "submit(7)" in code else -2.0, len(problem.split()) + len(code.split()))
                    for problem, code in pairs]

    return KeywordScorer()


def test_sigmoid_is_the_logistic_function():
    assert sigmoid(0.0) == 0.5 and sigmoid(2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert sigmoid(-800.0) == 0.0 and sigmoid(800.0) == 1.0  # no overflow


def test_reward_model_route_and_the_harness_scoring_through_it(ray_cluster):
    from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
    from opteval.evalcore.models.base import Sampling
    from opteval.evalcore.sandbox import LocalExecutor
    from tests.semopt.test_semopt_harness import PROBLEM, ScriptedModel

    _, port = ray_cluster
    url = deploy_critic("fake-keyword", port, route="/semopt-critic-fake", scorer=_keyword_scorer,
                        app_name="semopt-critic-fake")
    r = httpx.post(url, json={"problem": "max x", "code": "submit(7)"}, timeout=60)
    assert r.status_code == 200 and r.json() == {"score": sigmoid(2.0), "raw": 2.0, "tokens": 3}
    bad = httpx.post(url, json={"problem": "max x"}, timeout=60)
    assert bad.status_code == 400 and bad.json()["param"] == "code"

    for first, accepted in (("submit(7)\n", True), ("submit(8)\n", False)):
        model = ScriptedModel(first=first, critic=lambda code: 0.0)  # the LLM critic is never asked
        ctx = HarnessContext(model=model, executor=LocalExecutor(), sampling=Sampling(), sample=0,
                             budgets=Budgets(max_calls=40, max_turns=40),
                             params={"iterations": 1, "expansion": 2, "critic": {"kind": "reward_model", "url": url}})
        t = asyncio.run(get_harness("semopt").run(PROBLEM, ctx))
        critic_calls = [c for c in t.calls if c.stage == "critic"]
        assert critic_calls and "critic" not in [m.stage for m in model.metas if m is not None]
        assert critic_calls[0].prompt_tokens is not None and len(t.transcript) == len(t.calls)
        first_entry = next(e["semopt"] for e in t.transcript if "semopt" in e)
        assert first_entry["R"] == pytest.approx(sigmoid(2.0 if accepted else -2.0))
        assert first_entry["gate"] == ("accept" if accepted else "search")


@pytest.mark.skipif(not HAVE_TORCH, reason="torch/transformers not installed (pip install torch transformers)")
def test_tiny_random_sequence_classifier_served_on_cpu(ray_cluster, tmp_path):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "max", "min", "x", "submit", "(", ")", "7", "<=", "4"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32, num_labels=1))
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    _, port = ray_cluster
    url = deploy_critic(str(tmp_path / "rm"), port, route="/semopt-critic-tiny", app_name="semopt-critic-tiny",
                        max_length=32)
    outs = [httpx.post(url, json={"problem": "max x", "code": code}, timeout=120).json()
            for code in ("submit ( 7 )", "x <= 4 submit ( 4 )")]
    for out in outs:
        assert 0.0 < out["score"] < 1.0 and out["score"] == pytest.approx(sigmoid(out["raw"])) and out["tokens"] > 3
    assert outs[0]["raw"] != outs[1]["raw"]  # the value head reads the code
