"""The model YAMLs' batch sizes are the KV-cache rule's (sweepcore/batch_size.py), recomputed here."""
from __future__ import annotations

import pytest
import yaml

from opteval.sweepcore import batch_size as bs


@pytest.mark.parametrize("path", bs.vllm_model_files(), ids=lambda p: p.stem)
def test_yaml_batch_sizes_are_the_rules(path):
    cfg = yaml.safe_load(path.read_text())
    derived = bs.derive(cfg)
    assert bs.configured(cfg) == (derived.max_num_seqs, derived.max_ongoing_requests), (
        f"{path.name}: run python -m opteval.sweepcore.batch_size --write")
    auto = cfg["vllm"]["deployment"]["autoscaling_config"]
    assert auto["target_ongoing_requests"] == derived.target_ongoing_requests


def test_rule_follows_memory_and_model_size():
    small, big = bs.derive({"name": "Qwen3-0.6B"}), bs.derive({"name": "Qwen3-14B"})
    assert small.max_num_seqs > big.max_num_seqs  # weights eat the KV budget
    roomy = bs.derive({"name": "Qwen3-14B"}, gpu_gb=141.0)
    assert roomy.max_num_seqs > 2 * big.max_num_seqs  # budget after weights more than doubles
    # Qwen3-4B by hand: 80 x 0.9 - 8 - 4 = 60 GB; 12,288 x 2 x 36 x 8 x 128 x 2 B = 1.81 GB -> 33 -> 32
    four = bs.derive({"name": "Qwen3-4B", "vllm": {"engine_kwargs": {"gpu_memory_utilization": 0.9}}})
    assert (four.kv_budget_gb, four.max_num_seqs) == (60.0, 32)
    short = bs.derive({"name": "Qwen3-4B", "vllm": {"engine_kwargs": {"max_model_len": 4096}}})
    assert short.max_num_seqs > four.max_num_seqs  # a short context holds more sequences


def test_unknown_model_is_named():
    with pytest.raises(KeyError, match="no-such-model"):
        bs.derive({"name": "no-such-model"})
