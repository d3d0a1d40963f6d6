"""Where the reward service's executors may go (fast: the rules, no Ray started).

The spread itself, on a 3-node cluster, is tests/multinode/test_rewards_nodes.py."""
from __future__ import annotations

import pytest

from opteval.cluster.runtime import EXECUTOR_RESOURCE
from opteval.cluster.serve.rewards_app import ServiceConfig, build_app

CPU_NODE = {"CPU": 4.0, EXECUTOR_RESOURCE: 3.0}
GPU_NODE = {"CPU": 16.0, "GPU": 8.0}
HEAD = {"CPU": 0.0}


def test_capacity_counts_cpus_slots_and_the_per_node_cap():
    free = ServiceConfig(max_executors=32)
    assert free.capacity([CPU_NODE, GPU_NODE, HEAD]) == 4 + 16  # CPUs only: the GPU node's too
    slots = ServiceConfig(max_executors=32, executor_resource=True)
    assert slots.capacity([CPU_NODE, GPU_NODE, HEAD]) == 3  # only where executor slots are offered
    capped = ServiceConfig(max_executors=32, executor_resource=True, executors_per_node=2)
    assert capped.capacity([CPU_NODE, CPU_NODE, GPU_NODE]) == 4
    half = ServiceConfig(max_executors=32, executor_cpus=0.5)
    assert half.capacity([{"CPU": 2.0}]) == 4


def test_actor_options_ask_for_a_slot_only_when_told():
    assert ServiceConfig().actor_options() == {"num_cpus": 1.0}
    assert ServiceConfig(executor_resource=True).actor_options() == {"num_cpus": 1.0,
                                                                     "resources": {EXECUTOR_RESOURCE: 1}}


def test_executors_per_node_reaches_serve_and_is_validated():
    with pytest.raises(ValueError, match="executors_per_node"):
        ServiceConfig(executors_per_node=0)
    app = build_app(ServiceConfig(max_executors=6, executors_per_node=2, executor_resource=True))
    runner = next(d for d in _deployments(app) if d.name == "SandboxRunner")
    assert runner._replica_config.max_replicas_per_node == 2
    assert runner.ray_actor_options["resources"] == {EXECUTOR_RESOURCE: 1}
    plain = build_app(ServiceConfig())
    assert next(d for d in _deployments(plain) if d.name == "SandboxRunner")._replica_config.max_replicas_per_node is None


def _deployments(app):
    """The deployments bound into ``app`` (the ingress and the runner it was given)."""
    ingress = app._bound_deployment
    return [ingress, *(a._bound_deployment for a in ingress.init_args if hasattr(a, "_bound_deployment"))]
