"""A real model through ray.serve.llm: runs wherever vLLM is installed, on a GPU or on its CPU build.

On a GPU: Qwen3-0.6B (``OPTEVAL_VLLM_TEST_MODEL`` may name a local copy or another hub id).
Without one (vLLM's CPU build, the vllm tier ``.ci/vllm``): ``configs/models/smollm2-135m-cpu.yaml``
with the SmolLM2 directory ``opteval models build smollm2`` makes (built here when absent).
Without vLLM it is skipped with the reason printed (the one allowed skip of this folder).
"""
from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import subprocess

import pytest

from opteval.cluster.serve import llm_serving as ls
from opteval.sweepcore.config import ServingSection, as_plain, model_config


def _vllm_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install -e '.[gpu]' on a GPU; bash .ci/vllm for its CPU build)"
    return None


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        subprocess.run(["nvidia-smi", "-L"], check=True, capture_output=True, timeout=30)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def _model() -> tuple[dict, bool]:
    """(model config, whether the model reports reasoning-style prompt details) for this machine."""
    if not _has_gpu():
        from opteval.evalcore.models import builds

        builds.build("smollm2")
        return copy.deepcopy(as_plain(model_config("smollm2-135m-cpu"))), False
    m = copy.deepcopy(as_plain(model_config("Qwen3-0.6B")))
    m["vllm"]["source"] = os.environ.get("OPTEVAL_VLLM_TEST_MODEL", "Qwen/Qwen3-0.6B")
    m["vllm"]["accelerator_type"] = None  # whatever GPU this machine has
    m["vllm"]["engine_kwargs"].update(max_model_len=4096, gpu_memory_utilization=0.5, enforce_eager=True)
    m["vllm"]["deployment"]["autoscaling_config"].update(min_replicas=1, max_replicas=1)
    return m, True


@pytest.mark.gpu
def test_deploy_query_teardown_real_model(tmp_path):
    reason = _vllm_reason()
    if reason:
        print(f"SKIP vLLM integration: {reason}")
        pytest.skip(reason)
    import httpx
    import ray

    m, qwen = _model()
    name = m["name"]
    serving = ServingSection(http_port=8000, ready_timeout_s=900, prefix_cache_routing=True)
    # on a CPU the replica's bundle, the ingress and the prefix tree take a CPU each
    ray.init(ignore_reinit_error=True, num_cpus=None if qwen else max(4, os.cpu_count() or 1))
    try:
        eps = ls.deploy_stage([m], serving)
        ep = eps[name]
        body = {"model": ep.model_id, "messages": [{"role": "user", "content": "Say OK."}],
                "max_tokens": 64, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 42}
        if qwen:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        r = httpx.post(f"{ep.base_url}/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert "prompt_tokens_details" in usage  # enable_prompt_tokens_details took effect
        models = httpx.get(f"{ep.base_url}/models", timeout=30).json()
        assert name in {d["id"] for d in models["data"]}
    finally:
        try:
            ls.teardown()
        finally:
            ray.shutdown()
