"""Where replicas go, planned without Ray (``opteval.sweepcore.placement``): one replica's bundles and
strategy, and first-fit placement of a stage onto node shapes that refuses what cannot fit."""
from __future__ import annotations

import copy

from opteval.sweepcore.config import ServingSection, as_plain, model_config
from opteval.sweepcore.placement import placement, plan_placement


def _m(name: str) -> dict:
    return copy.deepcopy(as_plain(model_config(name)))


def _cfg(**over) -> ServingSection:
    return ServingSection(**over)


def test_tp2_replica_is_strict_pack_with_cpus_per_gpu_and_the_accelerator_hint():
    pl = placement(_m("Qwen3.5-27B"), _cfg(cpus_per_gpu=2, accelerator_type="H200"))
    assert pl["strategy"] == "STRICT_PACK" and pl["gpus"] == 2 and pl["cpus"] == 4
    assert pl["bundles"] == [{"GPU": 1, "CPU": 2.0, "accelerator_type:H200": 0.001}] * 2
    one = placement(_m("Qwen3-4B"), _cfg())
    assert one["strategy"] == "PACK" and one["bundles"] == [{"GPU": 1, "CPU": 1.0}] and one["accelerator_type"] is None


def test_stage_that_fits_plans_cleanly():
    gpu_node = {"CPU": 4, "GPU": 4, "accelerator_type:H200": 4}
    assert plan_placement([_m("Qwen3-4B"), _m("Qwen3.5-27B")], _cfg(accelerator_type="H200"), [gpu_node]) == []


def test_tensor_parallel_is_never_split_across_nodes():
    two_small = [{"CPU": 4, "GPU": 1}, {"CPU": 4, "GPU": 1}]
    problems = plan_placement([_m("Qwen3.5-27B")], _cfg(), two_small)
    assert problems and "STRICT_PACK" in problems[0] and "Qwen3.5-27B" in problems[0]


def test_gpu_node_without_cpus_for_serving_is_refused():
    """The old deadlock: GPUs free, CPUs taken (by executors): refused before deploying."""
    starved = [{"CPU": 0, "GPU": 4}]
    problems = plan_placement([_m("Qwen3-4B")], _cfg(), starved)
    assert problems and "'Qwen3-4B'" in problems[0]
    enough_for_replica = [{"CPU": 1, "GPU": 4}]  # the replica fits, the ingress does not
    problems = plan_placement([_m("Qwen3-4B")], _cfg(), enough_for_replica)
    assert problems == ["the OpenAI ingress asks for 1 CPU(s)"]
    routed = plan_placement([_m("Qwen3-4B")], _cfg(prefix_cache_routing=True), [{"CPU": 3, "GPU": 1}])
    assert routed == [] and plan_placement([_m("Qwen3-4B")], _cfg(prefix_cache_routing=True),
                                              [{"CPU": 2, "GPU": 1}]) == \
        ["the prefix-tree actor of 'Qwen3-4B' asks for 1 CPU(s)"]


def test_min_replicas_all_need_room():
    m = _m("Qwen3-4B")
    m["vllm"]["deployment"]["autoscaling_config"]["min_replicas"] = 3
    assert plan_placement([m], _cfg(), [{"CPU": 8, "GPU": 2}])
    assert plan_placement([m], _cfg(), [{"CPU": 8, "GPU": 3}]) == []
