"""Every backbone YAML becomes an LLMConfig that Ray's own pydantic classes accept, and a
stage becomes the Serve application spec (serve config / RayService serveConfigV2) we expect.

Without vLLM, ``ray.serve.llm`` itself cannot be imported (its OpenAI protocol models come
from vLLM), so validation uses ``LLMConfig`` from the module that defines it (the public
class is an empty subclass) and Serve's own ``ServeDeploySchema``. Where vLLM is installed
the public builder runs too and its deployments are compared with ``stage_deployments``.
"""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml

from opteval.cluster.serve import llm_serving as ls
from opteval.sweepcore.config import ServingSection, as_plain, model_config

REPO = Path(__file__).resolve().parents[2]
QWEN = ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B", "Qwen3.5-0.8B", "Qwen3.5-2B",
        "Qwen3.5-4B", "Qwen3.5-9B", "Qwen3.5-27B", "Qwen3.6-27B"]
OTHERS = ["Phi-4-reasoning", "Magistral-Small-2509", "GPT-OSS-20B", "DeepSeek-R1-Distill-Llama-8B"]
BACKBONES = QWEN + OTHERS
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def _cfg(name: str) -> dict:
    return as_plain(model_config(name))


def _ray_llm_config_cls():
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    return LLMConfig


@pytest.mark.parametrize("name", BACKBONES)
def test_backbone_yaml_is_a_valid_llm_config(name):
    m = _cfg(name)  # the sweep's schema accepts it (unknown keys would fail here)
    assert m["backend"] == "vllm" and m["name"] == name
    c = ls.llm_config(m)
    assert isinstance(c, _ray_llm_config_cls())
    assert c.model_id == name and c.model_loading_config.model_source == m["vllm"]["source"]
    ek = c.engine_kwargs
    assert ek["enable_prefix_caching"] is True
    assert ek["enable_prompt_tokens_details"] is True  # cached tokens show up in usage
    assert ek["max_model_len"] >= 16384 + 4096  # the paper's output budget plus a prompt
    assert 0.5 <= ek["gpu_memory_utilization"] <= 0.95
    assert ek["tensor_parallel_size"] == m["vllm"]["gpus_per_replica"] == ls.gpus_per_replica(m)
    assert ek.get("reasoning_parser")
    auto = c.deployment_config["autoscaling_config"]
    assert 1 <= auto["min_replicas"] <= auto["max_replicas"]
    assert c.accelerator_type == m["vllm"]["accelerator_type"]
    s = m["sampling"]
    assert (s["temperature"], s["top_p"], s["top_k"], s["max_tokens"], s["base_seed"]) == (0.6, 0.95, 20, 16384, 42)


def test_tensor_parallel_grows_with_size():
    sizes = {n: (_cfg(n)["size_b"], ls.gpus_per_replica(_cfg(n))) for n in BACKBONES}
    assert all(tp == 1 for s, tp in sizes.values() if s <= 21)
    assert all(tp >= 2 for s, tp in sizes.values() if s >= 24)


@pytest.mark.parametrize("name", QWEN)
def test_qwen_reasoning_is_on(name):
    m = _cfg(name)
    assert m["family"].startswith("Qwen")
    assert m["vllm"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert m["vllm"]["engine_kwargs"]["reasoning_parser"] == "qwen3"


def test_ray_rejects_bad_values():
    base = _cfg("Qwen3-4B")
    bad_accel = copy.deepcopy(base)
    bad_accel["vllm"]["accelerator_type"] = "H1000"
    with pytest.raises(ls.ModelConfigError, match="Unsupported accelerator type"):
        ls.llm_config(bad_accel)
    bad_auto = copy.deepcopy(base)
    bad_auto["vllm"]["deployment"]["autoscaling_config"]["min_replicas"] = 5
    bad_auto["vllm"]["deployment"]["autoscaling_config"]["max_replicas"] = 2
    with pytest.raises(ls.ModelConfigError, match="Qwen3-4B"):  # Ray's DeploymentConfig check
        ls.llm_config(bad_auto)


def test_typos_are_refused_with_their_key():
    base = _cfg("Qwen3-4B")
    typo = copy.deepcopy(base)
    typo["vllm"]["deployment"]["autoscaling_config"]["max_replica"] = 3
    with pytest.raises(ls.ModelConfigError, match="autoscaling_config.max_replica"):
        ls.llm_config(typo)
    extra = copy.deepcopy(base)
    extra["vllm"]["engine"] = {}
    with pytest.raises(ls.ModelConfigError, match="vllm.engine"):
        ls.llm_config_dict(extra)
    tp = copy.deepcopy(base)
    tp["vllm"]["gpus_per_replica"] = 2
    with pytest.raises(ls.ModelConfigError, match="gpus_per_replica=2"):
        ls.llm_config_dict(tp)
    short = copy.deepcopy(base)  # the short spelling 'autoscaling' is accepted and renamed
    short["vllm"]["deployment"]["autoscaling"] = short["vllm"]["deployment"].pop("autoscaling_config")
    assert ls.llm_config(short).deployment_config["autoscaling_config"]["max_replicas"] == 8


def test_prefix_cache_router_option():
    m = _cfg("Qwen3-8B")
    plain = ls.llm_config(m, ServingSection(prefix_cache_routing=False))
    assert "request_router_config" not in plain.deployment_config
    routed = ls.llm_config(m, ServingSection(prefix_cache_routing=True,
                                             prefix_router_kwargs={"imbalanced_threshold": 8}))
    rr = routed.deployment_config["request_router_config"]
    assert rr["request_router_class"] == ls.PREFIX_ROUTER_CLASS
    # Ours over Ray's: eviction on (Ray's default keeps every prefix forever), the user's on top.
    assert rr["request_router_kwargs"] == {**ls.PREFIX_ROUTER_DEFAULTS, "imbalanced_threshold": 8}
    assert rr["request_router_kwargs"]["do_eviction"] is True
    # Ray's DeploymentConfig imported the class while validating; it is the public router's base.
    from ray.serve._private.config import DeploymentConfig

    dc = DeploymentConfig(**routed.deployment_config)
    cls = dc.request_router_config.get_request_router_class()
    assert cls.__name__ == "PrefixCacheAffinityRouter"
    ray_spec = importlib.util.find_spec("ray")
    assert ray_spec is not None and ray_spec.origin is not None
    public = Path(ray_spec.origin).parent / "serve" / "llm" / "request_router.py"
    src = public.read_text()
    assert "class PrefixCacheAffinityRouter(_PrefixCacheAffinityRouter)" in src
    assert ls.PREFIX_ROUTER_CLASS.split(":")[0] in src


def test_stage_app_spec_is_a_valid_serve_config():
    from ray.serve.schema import ServeDeploySchema

    models = [_cfg("Qwen3-4B"), _cfg("Qwen3.5-27B")]
    spec = ls.serve_app_config(models, ServingSection(prefix_cache_routing=True))
    schema = ServeDeploySchema(applications=[spec])  # type: ignore[list-item]  # pydantic validates the dict  # Serve's own schema of a config file
    app = schema.applications[0]
    assert app.import_path == "ray.serve.llm:build_openai_app" and app.route_prefix == "/"
    ids = [c["model_loading_config"]["model_id"] for c in app.args["llm_configs"]]
    assert ids == ["Qwen3-4B", "Qwen3.5-27B"]
    for c in app.args["llm_configs"]:  # each args entry is an LLMConfig Ray accepts
        assert _ray_llm_config_cls()(**c).model_id in ids
    # the spec survives a YAML round trip unchanged (what a RayService carries)
    assert yaml.safe_load(yaml.safe_dump(spec)) == spec
    with pytest.raises(ls.ModelConfigError, match="duplicate"):
        ls.serving_args([models[0], models[0]])


def test_stage_deployments_and_autoscaling():
    models = [_cfg("Qwen3-4B"), _cfg("Qwen3.6-27B")]
    deps = ls.stage_deployments(models, ServingSection(prefix_cache_routing=True))
    assert set(deps) == {"LLMServer:Qwen3-4B", "LLMServer:Qwen3_6-27B", "OpenAiIngress"}
    assert deps["OpenAiIngress"]["routes"] == ["/v1/models", "/v1/chat/completions", "/v1/completions"]
    big = deps["LLMServer:Qwen3_6-27B"]
    assert big["gpus_per_replica"] == 2
    assert big["autoscaling_config"] == models[1]["vllm"]["deployment"]["autoscaling_config"]
    assert big["request_router_class"] == ls.PREFIX_ROUTER_CLASS


def test_build_app_uses_ray_serve_llm_or_names_the_gpu_extra(monkeypatch):
    """Build only: never starts or joins a Ray cluster, with or without vLLM."""
    import ray

    was_up = ray.is_initialized()
    models = [_cfg("Qwen3-0.6B"), _cfg("Qwen3.5-0.8B")]
    if not HAVE_VLLM:
        from opteval.sweepcore.vllm_env import install_hint  # the hint for this machine: GPU extra or CPU build

        with pytest.raises(ls.VLLMNotInstalled) as err:
            ls.build_llm_app(models, ServingSection(prefix_cache_routing=True))
        assert install_hint() in str(err.value)
        assert ray.is_initialized() == was_up
        return
    print("vLLM present: building the real ray.serve.llm application")
    # Ray's LLMServer.get_deployment_options merges the driver's runtime env, read with
    # ray.get_runtime_context(), whose first use starts (or joins) a cluster: the driver here has
    # none (an empty runtime env), and Ray's auto-connect is off, so nothing can start one.
    import ray._private.auto_init_hook as auto_init

    monkeypatch.setattr(auto_init, "enable_auto_connect", False)
    if not was_up:
        monkeypatch.setattr(ray, "get_runtime_context", lambda: type("NoCluster", (), {"runtime_env": {}})())
    app = ls.build_llm_app(models, ServingSection(prefix_cache_routing=True))
    built = ls.describe_built_app(app)
    assert ray.is_initialized() == was_up  # built without a cluster
    want = ls.stage_deployments(models, ServingSection(prefix_cache_routing=True))
    assert set(built) == set(want)
    for name, w in want.items():
        if name == ls.INGRESS_DEPLOYMENT:
            assert built[name]["ingress"]
            continue
        got = built[name]
        for k, v in w["autoscaling_config"].items():
            assert got["autoscaling_config"][k] == v, (name, k)
        assert got["max_ongoing_requests"] == w["max_ongoing_requests"]
        assert got["request_router_class"].endswith("PrefixCacheAffinityRouter")
        assert sum(b.get("GPU", 0) for b in got["placement_group_bundles"]) == w["gpus_per_replica"]
