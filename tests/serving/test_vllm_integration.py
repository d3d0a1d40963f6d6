"""A real model through ray.serve.llm: runs only where vLLM and a GPU are present.

Elsewhere it is skipped with the reason printed (the one allowed skip of this folder).
Set OPTEVAL_VLLM_TEST_MODEL to a local path or hub id reachable from the machine
(default Qwen/Qwen3-0.6B).
"""
from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import subprocess

import pytest

from cluster.serve import llm_serving as ls
from sweepcore.config import ServingSection, as_plain, model_config


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install -e '.[gpu]')"
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU (nvidia-smi not found)"
    try:
        subprocess.run(["nvidia-smi", "-L"], check=True, capture_output=True, timeout=30)
    except (subprocess.SubprocessError, OSError) as exc:
        return f"nvidia-smi failed: {exc}"
    return None


@pytest.mark.gpu
def test_deploy_query_teardown_real_model(tmp_path):
    reason = _gpu_reason()
    if reason:
        print(f"SKIP vLLM integration: {reason}")
        pytest.skip(reason)
    import httpx
    import ray

    m = copy.deepcopy(as_plain(model_config("Qwen3-0.6B")))
    m["vllm"]["source"] = os.environ.get("OPTEVAL_VLLM_TEST_MODEL", "Qwen/Qwen3-0.6B")
    m["vllm"]["accelerator_type"] = None  # whatever GPU this machine has
    m["vllm"]["engine_kwargs"].update(max_model_len=4096, gpu_memory_utilization=0.5, enforce_eager=True)
    m["vllm"]["deployment"]["autoscaling_config"].update(min_replicas=1, max_replicas=1)
    serving = ServingSection(http_port=8000, ready_timeout_s=900, prefix_cache_routing=True)
    ray.init(ignore_reinit_error=True)
    try:
        eps = ls.deploy_stage([m], serving)
        ep = eps["Qwen3-0.6B"]
        body = {"model": ep.model_id, "messages": [{"role": "user", "content": "Say OK."}],
                "max_tokens": 64, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 42,
                "chat_template_kwargs": {"enable_thinking": False}}
        r = httpx.post(f"{ep.base_url}/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert "prompt_tokens_details" in usage  # enable_prompt_tokens_details took effect
        models = httpx.get(f"{ep.base_url}/models", timeout=30).json()
        assert "Qwen3-0.6B" in {d["id"] for d in models["data"]}
    finally:
        try:
            ls.teardown()
        finally:
            ray.shutdown()
