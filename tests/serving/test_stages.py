"""Stage packing: as many vLLM models per stage as the GPUs hold (gpus per replica x min replicas)."""
from __future__ import annotations

import copy

import pytest

from cluster import llm_serving as ls
from cluster.config import as_plain, model_config


def _m(name: str, min_replicas: int | None = None) -> dict:
    m = copy.deepcopy(as_plain(model_config(name)))
    if min_replicas is not None:
        m["vllm"]["deployment"]["autoscaling_config"]["min_replicas"] = min_replicas
        m["vllm"]["deployment"]["autoscaling_config"]["max_replicas"] = max(
            min_replicas, m["vllm"]["deployment"]["autoscaling_config"]["max_replicas"])
    return m


PAPER = ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B", "Qwen3.5-0.8B", "Qwen3.5-2B",
         "Qwen3.5-4B", "Qwen3.5-9B", "Qwen3.5-27B", "Qwen3.6-27B"]


def test_paper_backbones_on_8_gpus_fit_two_stages_in_order():
    models = [_m(n) for n in PAPER]
    need = sum(ls.stage_gpus(m) for m in models)  # nine 1-GPU models + two 2-GPU models = 13
    assert need == 13
    stages = ls.pack_stages(models, 8)
    assert [n for s in stages for n in s] == PAPER  # every model once, config order kept
    assert len(stages) == 2
    for s in stages:
        assert sum(ls.stage_gpus(_m(n)) for n in s) <= 8


def test_everything_fits_one_stage_when_gpus_suffice():
    models = [_m(n) for n in PAPER]
    assert ls.pack_stages(models, 13) == [PAPER]
    assert len(ls.pack_stages(models, 12)) == 2


def test_one_gpu_runs_one_small_model_per_stage():
    names = ["Qwen3-0.6B", "Qwen3-4B", "Qwen3.5-9B"]
    assert ls.pack_stages([_m(n) for n in names], 1) == [[n] for n in names]


def test_first_fit_fills_gaps_left_by_big_models():
    # 2-GPU model, 2-GPU model, 1-GPU model on 3 GPUs: the small one joins the first stage.
    stages = ls.pack_stages([_m("Qwen3.5-27B"), _m("Qwen3.6-27B"), _m("Qwen3-4B")], 3)
    assert stages == [["Qwen3.5-27B", "Qwen3-4B"], ["Qwen3.6-27B"]]


def test_min_replicas_count_towards_the_stage():
    m = _m("Qwen3-8B", min_replicas=3)
    assert ls.stage_gpus(m) == 3
    assert ls.pack_stages([m, _m("Qwen3-4B")], 4) == [["Qwen3-8B", "Qwen3-4B"]]
    assert ls.pack_stages([m, _m("Qwen3-4B", min_replicas=2)], 4) == [["Qwen3-8B"], ["Qwen3-4B"]]


def test_a_model_too_big_for_the_cluster_is_named():
    with pytest.raises(ls.StagePackingError, match=r"'Qwen3\.6-27B' needs 2 GPUs .* has 1"):
        ls.pack_stages([_m("Qwen3-4B"), _m("Qwen3.6-27B")], 1)
    with pytest.raises(ls.StagePackingError, match="Qwen3-0.6B"):
        ls.pack_stages([_m("Qwen3-0.6B")], 0)


def test_non_vllm_models_are_refused():
    with pytest.raises(ls.ModelConfigError, match="sim-small"):
        ls.pack_stages([as_plain(model_config("sim-small"))], 8)
