"""OpenAIChatModel against a local chat-completions server on 127.0.0.1."""
from __future__ import annotations

import asyncio
import time

import pytest

from opteval.evalcore.models import ModelError, OpenAIChatModel, Sampling, make_model

MESSAGES = [{"role": "user", "content": "Solve it."}]


def _model(server, **kw) -> OpenAIChatModel:
    kw.setdefault("backoff_s", 0.01)
    return OpenAIChatModel(name="m", base_url=server.base_url, model_id="served-m", api_key_env="OPTEVAL_TEST_NO_KEY", **kw)


def _chat(model, sampling=None, seed=42):
    return asyncio.run(model.chat(MESSAGES, sampling or Sampling(), seed))


def test_usage_reported_including_cached_tokens(fake_server, make_response):
    usage = {"prompt_tokens": 120, "completion_tokens": 37, "total_tokens": 157,
             "prompt_tokens_details": {"cached_tokens": 64}}
    fake_server.script = [(200, make_response("```python\nsubmit(1)\n```", usage), 0)]
    completion = _chat(_model(fake_server))
    assert completion.text == "```python\nsubmit(1)\n```"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens,
            completion.usage.cached_prompt_tokens) == (120, 37, 64)
    assert completion.finish_reason == "stop"
    assert completion.latency_s > 0
    assert completion.simulated is False
    assert fake_server.paths == ["/v1/chat/completions"]
    assert "authorization" not in fake_server.headers[0]  # no key in env: no auth header


def test_usage_missing_is_none_not_zero(fake_server, make_response):
    fake_server.script = [(200, make_response("hi"), 0)]
    usage = _chat(_model(fake_server)).usage
    assert usage.prompt_tokens is None and usage.completion_tokens is None and usage.cached_prompt_tokens is None


def test_usage_without_cache_details(fake_server, make_response):
    fake_server.script = [(200, make_response("hi", {"prompt_tokens": 5, "completion_tokens": 0}), 0)]
    usage = _chat(_model(fake_server)).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) == (5, 0, None)


def test_500_then_success_is_retried(fake_server, make_response):
    fake_server.script = [(500, {"error": "boom"}, 0), (503, {"error": "busy"}, 0),
                          (200, make_response("ok", {"prompt_tokens": 1, "completion_tokens": 2}), 0)]
    completion = _chat(_model(fake_server, max_retries=4))
    assert completion.text == "ok"
    assert len(fake_server.requests) == 3
    assert fake_server.requests[0] == fake_server.requests[2]  # same body on retry (same seed)


def test_429_is_retried(fake_server, make_response):
    fake_server.script = [(429, {"error": "slow down"}, 0), (200, make_response("ok"), 0)]
    assert _chat(_model(fake_server)).text == "ok"
    assert len(fake_server.requests) == 2


def test_400_is_not_retried(fake_server):
    """A 400 is the model's failure for the call (tests/models/test_error_classes.py): one request only."""
    fake_server.script = [(400, {"error": {"message": "max_tokens is too large"}}, 0)]
    model = _model(fake_server, max_retries=4)
    comp = _chat(model)
    assert len(fake_server.requests) == 1
    assert comp.text == "" and comp.finish_reason.startswith("rejected") and "max_tokens is too large" in comp.finish_reason


def test_persistent_500_names_model_url_and_status(fake_server):
    fake_server.script = [(502, {"error": "bad gateway"}, 0)]
    model = _model(fake_server, max_retries=2)
    with pytest.raises(ModelError) as err:
        _chat(model)
    assert len(fake_server.requests) == 3  # 1 + max_retries
    assert "502" in str(err.value) and model.url in str(err.value) and "3 attempt" in str(err.value)


def test_timeout_raises_model_error_after_bounded_retries(fake_server, make_response):
    fake_server.script = [(200, make_response("late"), 2.0)]
    model = _model(fake_server, timeout_s=0.25, max_retries=1)
    start = time.monotonic()
    with pytest.raises(ModelError) as err:
        _chat(model)
    elapsed = time.monotonic() - start
    assert "timeout" in str(err.value) and "2 attempt" in str(err.value)
    assert len(fake_server.requests) == 2
    assert elapsed < 1.9  # both attempts gave up well before the server's 2 s delay


def test_connection_refused_is_model_error():
    model = OpenAIChatModel("m", "http://127.0.0.1:9/v1", "x", max_retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(ModelError, match="connection error"):
        _chat(model)


def test_request_body_carries_sampling_seed_and_extras(fake_server, make_response):
    fake_server.script = [(200, make_response("ok"), 0)]
    sampling = Sampling(temperature=0.6, top_p=0.95, top_k=20, max_tokens=1234,
                        extra_body={"chat_template_kwargs": {"enable_thinking": False}, "min_p": 0.05})
    model = _model(fake_server, extra_body={"repetition_penalty": 1.05, "min_p": 0.0})
    _chat(model, sampling, seed=47)
    body = fake_server.requests[0]
    assert body["model"] == "served-m" and body["messages"] == MESSAGES
    assert (body["seed"], body["top_k"], body["max_tokens"]) == (47, 20, 1234)
    assert (body["temperature"], body["top_p"]) == (0.6, 0.95)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["repetition_penalty"] == 1.05
    assert body["min_p"] == 0.05  # the sampling's extra_body wins over the model's


def test_none_in_extra_body_removes_field(fake_server, make_response):
    fake_server.script = [(200, make_response("ok"), 0)]
    _chat(_model(fake_server, extra_body={"top_k": None}))
    assert "top_k" not in fake_server.requests[0]


def test_simulated_fingerprint_and_reasoning(fake_server, make_response):
    body = make_response("final answer", system_fingerprint="opteval-simulated")
    body["choices"][0]["message"]["reasoning_content"] = "let me think"
    fake_server.script = [(200, body, 0)]
    completion = _chat(_model(fake_server))
    assert completion.simulated is True
    assert completion.text == "final answer" and completion.reasoning == "let me think"


def test_api_key_sent_as_bearer(fake_server, make_response, monkeypatch):
    monkeypatch.setenv("OPTEVAL_TEST_KEY", "sk-test")
    fake_server.script = [(200, make_response("ok"), 0)]
    model = OpenAIChatModel("m", fake_server.base_url, "x", api_key_env="OPTEVAL_TEST_KEY")
    _chat(model)
    assert fake_server.headers[0]["authorization"] == "Bearer sk-test"
    assert "sk-test" not in repr(model)


def test_many_concurrent_calls_share_one_client(fake_server, make_response):
    fake_server.script = [(200, make_response("ok", {"prompt_tokens": 3, "completion_tokens": 1}), 0.05)]
    model = _model(fake_server)

    async def many():
        out = await asyncio.gather(*(model.chat(MESSAGES, Sampling(), 42 + i) for i in range(40)))
        await model.aclose()
        return out

    results = asyncio.run(many())
    assert [r.text for r in results] == ["ok"] * 40
    assert sorted(r["seed"] for r in fake_server.requests) == list(range(42, 82))


def test_pool_shards_spread_concurrent_calls_over_several_clients(fake_server, make_response):
    fake_server.script = [(200, make_response("ok", {"prompt_tokens": 3, "completion_tokens": 1}), 0.02)]
    model = OpenAIChatModel("m", fake_server.base_url, "x", pool_shards=4)
    used = []

    async def many():
        real = model._client_for_loop

        def spy():
            client = real()
            used.append(id(client))
            return client

        model._client_for_loop = spy  # type: ignore[method-assign]
        out = await asyncio.gather(*(model.chat(MESSAGES, Sampling(), 42 + i) for i in range(20)))
        clients = list(model._clients)
        await model.aclose()
        return out, clients

    results, clients = asyncio.run(many())
    assert [r.text for r in results] == ["ok"] * 20
    assert len(set(used)) == 4 and len(clients) == 4 and all(c.is_closed for c in clients)
    with pytest.raises(ValueError, match="pool_shards"):
        OpenAIChatModel("m", fake_server.base_url, "x", pool_shards=0)


def test_make_model_openai_and_errors(fake_server):
    model = make_model({"name": "qwen", "backend": "openai", "base_url": fake_server.base_url,
                        "model_id": "Qwen/Qwen3-8B", "max_retries": 2})
    assert isinstance(model, OpenAIChatModel) and model.max_retries == 2 and model.name == "qwen"
    with pytest.raises(ValueError, match=r"'qwen'.*'backend'"):
        make_model({"name": "qwen", "backend": "nope"})
    with pytest.raises(ValueError, match=r"base_urll"):
        make_model({"name": "qwen", "backend": "openai", "base_urll": "x", "model_id": "y"})
    with pytest.raises(ValueError, match=r"base_url"):
        make_model({"name": "qwen", "backend": "openai", "model_id": "y"})


def test_make_model_accepts_dictconfig(fake_server):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"name": "q", "backend": "openai", "base_url": fake_server.base_url,
                            "model_id": "${name}-served", "extra_body": {"min_p": 0.1}})
    model = make_model(cfg)
    assert isinstance(model, OpenAIChatModel)
    assert model.model_id == "q-served" and model.extra_body == {"min_p": 0.1}
