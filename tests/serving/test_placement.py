"""Placement without deadlock, checked without Ray: executor slots, the LLMConfig's and the ingress's
resources, and the refusal of a stage the cluster cannot place (names the model, what it asks, what
is offered). The planner itself: tests/sweepcore/test_placement.py."""
from __future__ import annotations

import copy

import pytest

from opteval.cluster.runtime import EXECUTOR_RESOURCE, executor_slots
from opteval.cluster.serve import llm_serving as ls
from opteval.sweepcore.config import ServingSection, as_plain, model_config


def _m(name: str) -> dict:
    return copy.deepcopy(as_plain(model_config(name)))


def _cfg(**over) -> ServingSection:
    return ServingSection(**over)


def test_executor_resource_name_is_pinned():
    assert EXECUTOR_RESOURCE == "opteval_executor"  # the KubeRay manifests use this name


def test_executor_slots_come_from_the_resource_never_from_gpu_nodes():
    head: dict[str, float] = {"CPU": 0}
    cpu_node: dict[str, float] = {"CPU": 8, EXECUTOR_RESOURCE: 8}
    gpu_node: dict[str, float] = {"CPU": 32, "GPU": 8}
    assert executor_slots([head, cpu_node, gpu_node], 1.0, gpu_serving=True) == 8
    assert executor_slots([head, cpu_node, gpu_node], 2.0, gpu_serving=True) == 4  # CPUs cap the offer
    assert executor_slots([gpu_node], 1.0, gpu_serving=True) == 0  # no offer, no executor


def test_single_node_with_gpus_keeps_serving_cpus_free():
    """The embedded cluster offers every CPU; a GPU sweep leaves cpus_per_gpu x GPUs + the ingress."""
    node: dict[str, float] = {"CPU": 16, "GPU": 2, EXECUTOR_RESOURCE: 16}
    assert executor_slots([node], 1.0, cpus_per_gpu=2, ingress_cpus=1, gpu_serving=True) == 16 - 2 * 2 - 1
    assert executor_slots([node], 1.0, gpu_serving=False) == 16  # simulated sweeps need no reserve


def test_llm_config_carries_the_same_placement_and_no_replica_cpu():
    c = ls.llm_config(_m("Qwen3.5-27B"), _cfg(accelerator_type="H200"))
    assert c.placement_group_config == {"bundles": [{"GPU": 1, "CPU": 1.0, "accelerator_type:H200": 0.001}] * 2,
                                        "strategy": "STRICT_PACK"}
    assert c.accelerator_type == "H200"  # serving.accelerator_type overrides the model's
    assert c.deployment_config["ray_actor_options"]["num_cpus"] == 0


def test_wrong_accelerator_type_is_refused_naming_model_request_and_offer():
    gpu_node = {"CPU": 4, "GPU": 4, "accelerator_type:H200": 4}
    with pytest.raises(ls.UnplaceableModel) as err:
        ls.check_placement([_m("Qwen3-4B")], _cfg(accelerator_type="H100"), nodes=[gpu_node])
    msg = str(err.value)
    for part in ("'Qwen3-4B'", "1 GPU(s)", "1 CPU(s)", "accelerator_type H100", "PACK", "GPU=4",
                 "accelerator_type=H200"):
        assert part in msg, (part, msg)


def test_ingress_gets_its_cpus_and_a_timeout_above_the_per_call_one():
    args = ls.serving_args([_m("Qwen3-4B")], _cfg(request_timeout_s=1800, ingress_cpus=0.5))
    rao = args["ingress_deployment_config"]["ray_actor_options"]
    assert rao["num_cpus"] == 0.5
    assert float(rao["runtime_env"]["env_vars"]["RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT"]) == 1800 + ls.INGRESS_TIMEOUT_MARGIN_S
    from ray.serve.schema import RayActorOptionsSchema

    RayActorOptionsSchema(**rao)  # Serve's own schema accepts the ingress options


def test_a_replica_is_refused_only_when_no_node_or_node_type_could_hold_it():
    from opteval.cluster.serve.capacity import can_ever_place, describe_need, elapsed, replica_request

    cpu_head = {"CPU": 2.0, EXECUTOR_RESOURCE: 2.0}
    gpu_group = {"CPU": 8.0, "GPU": 4.0, "accelerator_type:H200": 1.0}  # an autoscaler node type, 0 nodes now
    bundles, strategy = replica_request({"ray_actor_options": {"num_cpus": 1, "num_gpus": 1}})
    assert not can_ever_place(bundles, strategy, [cpu_head])
    assert can_ever_place(bundles, strategy, [cpu_head, gpu_group])  # waits for the scale-up instead
    assert can_ever_place(*replica_request({"ray_actor_options": {"num_cpus": 0}}), [cpu_head])  # needs nothing
    tp2 = [{"GPU": 1.0, "CPU": 1.0}] * 2
    assert not can_ever_place(tp2, "STRICT_PACK", [{"CPU": 4, "GPU": 1}] * 2)  # never split across nodes
    assert can_ever_place(tp2, "PACK", [{"CPU": 4, "GPU": 1}] * 2)
    assert describe_need(bundles) == "1 GPU + 1 CPU" and describe_need(tp2) == "2 GPUs + 2 CPUs"
    assert elapsed(130) == "2 m 10 s" and elapsed(9) == "9 s"


def test_a_stage_that_fits_an_autoscaler_node_type_is_not_refused():
    gpu_type = {"CPU": 4, "GPU": 4, "accelerator_type:H200": 4}
    ls.check_placement([_m("Qwen3-4B")], _cfg(accelerator_type="H200"), nodes=[{"CPU": 2}, gpu_type])
