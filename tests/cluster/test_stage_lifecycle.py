"""Stage lifecycle on the real local Ray + Serve: placement refusal within seconds, readiness
that needs a real answer, DEPLOY_FAILED noticed, teardown of failed stages and of the prefix
router's detached actor, a taken port named, executors counted from their resource."""
from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import ray
from ray import serve

from opteval.cluster.serve import llm_serving as ls
from opteval.cluster.serve import serving as sv
from opteval.sweepcore.config import as_plain, load_config, model_config

pytestmark = pytest.mark.ray


def _cfg(port: int, *extra: str):
    return load_config([f"serving.http_port={port}", *extra])


def _apps() -> set[str]:
    return set(serve.status().applications)


def test_unplaceable_replica_is_refused_within_seconds(ray_cluster):
    _, port = ray_cluster
    cfg = _cfg(port, "models=[Qwen3-4B]", "serving.standin=true", "serving.accelerator_type=H200")
    t0 = time.monotonic()
    with pytest.raises(ls.UnplaceableModel) as err:
        sv.deploy_stage([as_plain(model_config("Qwen3-4B"))], cfg)
    assert time.monotonic() - t0 < 15
    msg = str(err.value)
    for part in ("'Qwen3-4B'", "1 GPU(s)", "accelerator_type H200", "PACK", "GPU=0"):
        assert part in msg, (part, msg)
    assert ls.APP_NAME not in _apps()


def test_executor_count_comes_from_the_executor_resource(ray_cluster):
    from opteval.cluster.driver.run import executor_count
    from opteval.cluster.runtime import PlacementError

    assert ray.cluster_resources().get("opteval_executor") == 2  # the embedded cluster offers its CPUs
    assert executor_count(load_config([])) == 2
    with pytest.raises(PlacementError, match="cluster.executors=3 but the cluster holds 2"):
        executor_count(load_config(["cluster.executors=3"]))


def test_readiness_needs_an_answer_not_just_running(ray_cluster):
    _, port = ray_cluster
    cfg = _cfg(port)
    eps = sv.deploy_stage([as_plain(model_config("sim-fast"))], cfg)
    try:
        ep = eps["sim-fast"]
        assert ep.app_name is not None and ep.base_url is not None
        assert ls.app_state(ep.app_name)[0] == "RUNNING"
        assert ls.probe_model(ep.base_url, "sim-fast") is None
        wrong = ep.base_url.replace("/sim-fast/", "/nothing-here/")  # RUNNING app, but no answer there
        t0 = time.monotonic()
        with pytest.raises(ls.ModelNotReady, match="HTTP 404"):
            ls.wait_app_ready(ep.app_name, wrong, ["sim-fast"], 3.0, poll_s=0.5)
        assert time.monotonic() - t0 >= 3.0
    finally:
        assert sv.teardown_stage(eps) == [sv.simulated_app_name("sim-fast")]
    assert sv.simulated_app_name("sim-fast") not in _apps()


def test_failed_deploy_is_noticed_and_torn_down(ray_cluster, monkeypatch):
    _, port = ray_cluster
    cfg = _cfg(port, "serving.ready_timeout_s=120")
    broken = {**as_plain(model_config("sim-fast")), "name": "sim-broken",
              "simulated": {"p_correct": "not a number"}}  # the replica's constructor fails
    t0 = time.monotonic()
    with pytest.raises(ls.ModelNotReady, match="failed to deploy") as err:
        sv.deploy_stage([broken], cfg)
    assert time.monotonic() - t0 < 120
    assert sv.simulated_app_name("sim-broken") not in _apps()
    # one line naming the model and the replica's own exception; Serve's whole message kept aside
    msg = str(err.value)
    assert "\n" not in msg and "sim-broken" in msg, msg
    cause = ls.last_exception(err.value.detail)
    assert cause and cause in msg and len(err.value.detail) > len(cause), (msg, err.value.detail[-500:])


@ray.remote(num_cpus=0)
class _Tree:
    def ping(self) -> bool:
        return True


def test_teardown_removes_the_prefix_tree_actor(ray_cluster):
    app = "opteval-llm-teardown-test"
    ns = f"{ls.SERVE_NAMESPACE}::{app}::LLMServer:m"
    tree_cls: Any = _Tree  # ray.remote classes have .options at run time only
    tree = tree_cls.options(name=ls.PREFIX_TREE_ACTOR, namespace=ns, lifetime="detached").remote()
    other = tree_cls.options(name=ls.PREFIX_TREE_ACTOR, namespace=f"{ls.SERVE_NAMESPACE}::another-app::x",
                             lifetime="detached").remote()
    assert ray.get([tree.ping.remote(), other.ping.remote()]) == [True, True]
    assert ls.prefix_tree_actors(app) == [(ls.PREFIX_TREE_ACTOR, ns)]
    ls.teardown(app)  # no such Serve app: deleting it is a no-op, the detached actor still goes
    assert ls.prefix_tree_actors(app) == []
    assert ray.get(other.ping.remote())  # another app's tree is left alone
    ray.kill(other)


def test_port_taken_by_another_process_is_an_error_naming_it(ray_cluster, monkeypatch):
    monkeypatch.setattr(sv, "_serve_running", lambda: False)  # as if Serve were not started yet
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(sv.ServingError, match=f"serving.http_port: 127.0.0.1:{port} is already in use"):
            sv.ensure_serve(port, "127.0.0.1")
