"""The simulated policy behind real Ray Serve HTTP, reached as a vLLM endpoint would be."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from opteval.cluster.serve.serving import SIMULATED_FINGERPRINT, deploy_stage, simulated_model_cfg, teardown_stage
from opteval.sweepcore.config import as_plain, model_config

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def sim_endpoint(ray_cluster):
    _, port = ray_cluster
    from opteval.sweepcore.config import load_config

    cfg = load_config([f"serving.http_port={port}", "serving.ready_timeout_s=120"])
    eps = deploy_stage([as_plain(model_config("sim-fast"))], cfg)
    yield eps["sim-fast"]
    teardown_stage(eps)


def _messages():
    from opteval.evalcore.problems import load_benchmark

    specs, _ = load_benchmark("sample")
    return [{"role": "system", "content": "Write a solver program."},
            {"role": "user", "content": f"<problem>\n{specs[0].question}\n</problem>"}]


def test_models_route_lists_the_model(sim_endpoint):
    assert sim_endpoint.base_url.endswith("/sim-fast/v1") and sim_endpoint.simulated
    r = httpx.get(f"{sim_endpoint.base_url}/models", timeout=30)
    assert r.status_code == 200
    assert [d["id"] for d in r.json()["data"]] == ["sim-fast"]


def test_chat_completions_speaks_openai_and_is_deterministic(sim_endpoint):
    body = {"model": "sim-fast", "messages": _messages(), "temperature": 0.6, "top_p": 0.95,
            "max_tokens": 4096, "seed": 43}
    a = httpx.post(f"{sim_endpoint.base_url}/chat/completions", json=body, timeout=60).json()
    b = httpx.post(f"{sim_endpoint.base_url}/chat/completions", json=body, timeout=60).json()
    assert a["system_fingerprint"] == SIMULATED_FINGERPRINT and a["model"] == "sim-fast"
    choice = a["choices"][0]
    assert choice["message"]["role"] == "assistant" and "```python" in choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    usage = a["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert "cached_tokens" in usage["prompt_tokens_details"]
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]


def test_openai_client_marks_completion_simulated(sim_endpoint):
    from opteval.cluster.actors.workers import build_client
    from opteval.evalcore.models.base import Sampling

    comp = asyncio.run(build_client(sim_endpoint).chat(_messages(), Sampling(), 42))
    assert comp.simulated is True and comp.usage.prompt_tokens and comp.text


def test_bad_request_is_a_400_naming_the_field(sim_endpoint):
    r = httpx.post(f"{sim_endpoint.base_url}/chat/completions", json={"model": "sim-fast", "messages": []}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_model_config_translates_to_simulated_model_shape():
    out = simulated_model_cfg({"name": "x", "simulated": {"p_correct": 0.3, "ttft_s": 0.1, "tokens_per_s": 5}})
    assert out == {"name": "x", "backend": "simulated", "ttft_s": 0.1, "tokens_per_s": 5, "skill": {"p_correct": 0.3}}
