"""The preflight's request shape (the largest max_tokens a stage sends, budget-capped) and its
checks against a misbehaving local fake server (tests/servers/openai_fake.py), without Ray."""
from __future__ import annotations

import asyncio

import pytest

from opteval.cluster.driver import preflight as preflight_mod
from opteval.cluster.driver.preflight import EndpointUnanswered, PreflightError, max_model_len, preflight, request_shape
from opteval.cluster.driver.prepare import prepare
from opteval.sweepcore.config import load_config
from opteval.sweepcore.endpoint import Endpoint
from tests.servers.openai_fake import FakeOpenAIServer

LONG = ("name: long\nharness: direct\nextraction: submit\nbudgets: {max_output_tokens: 6000}\n"
        "stages: {act: {max_tokens: 9000, temperature: 0.1}}\n")


def _prep(tmp_path, configs_with, base_url: str, *extra: str):
    configs_with({"methods/long.yaml": LONG})
    model = (f"[{{name: pre, backend: openai, openai: {{base_url: '{base_url}', model_id: fake-model, "
             "api_key_env: OPTEVAL_TEST_NO_KEY, max_retries: 0}}]")
    cfg = load_config([f"models={model}", "methods=[direct,long]", "limit_problems=2", "samples.default=1",
                       f"sweep.output_dir={tmp_path / 'out'}", "tracking.enabled=false", *extra])
    return prepare(cfg, read_only=True)


def _ep(server: FakeOpenAIServer) -> Endpoint:
    return Endpoint("pre", server.base_url, server.model_id, api_key_env="OPTEVAL_TEST_NO_KEY", max_retries=0)


def test_the_shape_is_the_largest_stage_request_capped_by_the_budget(tmp_path, configs_with):
    prep = _prep(tmp_path, configs_with, "http://127.0.0.1:9/v1", "sampling.max_tokens=4000")
    shape = request_shape(prep, "pre")
    # long's act stage asks 9000, its budget caps at 6000: above direct's 4000
    assert shape.sampling.max_tokens == 6000 and shape.sampling.temperature == 0.1
    assert shape.where == "method long, stage act" and shape.seed == 42


def test_models_endpoint_then_one_request(tmp_path, configs_with):
    with FakeOpenAIServer(max_model_len=8192) as server:
        prep = _prep(tmp_path, configs_with, server.base_url)
        assert asyncio.run(max_model_len(_ep(server))) == 8192
        with pytest.raises(PreflightError, match=r"^model 'pre': max_tokens=16384 > max_model_len=8192: "):
            asyncio.run(preflight(prep, {"pre": _ep(server)}))
        assert server.chats == 0
    with FakeOpenAIServer(max_model_len=8192) as server:
        prep = _prep(tmp_path / "b", configs_with, server.base_url, "sampling.max_tokens=2000")
        asyncio.run(preflight(prep, {"pre": _ep(server)}))  # fits: one request, answered
        assert server.chats == 1
        body = server.records[0]["body"]
        assert body["max_tokens"] == 6000 and body["seed"] == 42 and body["temperature"] == 0.1
        # the longest problem of the plan is the prompt; no answer is in it
        longest = max((p.question for p in prep.problems.values()), key=len)
        assert longest in body["messages"][0]["content"]


def test_a_server_that_is_down_stops_the_sweep_as_unanswered_not_bad_input(tmp_path, configs_with, monkeypatch, capsys):
    monkeypatch.setattr(preflight_mod, "PREFLIGHT_PAUSE_S", 0.05)
    server = FakeOpenAIServer()
    url = server.base_url
    server.httpd.server_close()  # never started: connection refused
    prep = _prep(tmp_path, configs_with, url)
    with pytest.raises(EndpointUnanswered, match=r"^model 'pre': the endpoint did not answer properly .*"
                                                 r"3 tries.*connection error") as err:
        asyncio.run(preflight(prep, {"pre": Endpoint("pre", url, "fake-model", max_retries=0)}))
    assert not isinstance(err.value, PreflightError)
    assert capsys.readouterr().out.count("no proper answer") == 2  # tried again twice, one line each


def test_a_garbled_preflight_reply_is_tried_again_and_passes(tmp_path, configs_with, monkeypatch):
    monkeypatch.setattr(preflight_mod, "PREFLIGHT_PAUSE_S", 0.05)
    with FakeOpenAIServer(garble=lambda n: n <= 2) as server:  # the first two replies truncated
        prep = _prep(tmp_path, configs_with, server.base_url)
        asyncio.run(preflight(prep, {"pre": _ep(server)}))  # max_retries=0: the preflight's own tries
        assert server.chats == 3 and server.garbled == 2


def test_a_refusal_other_than_400_is_still_bad_input(tmp_path, configs_with):
    with FakeOpenAIServer(model_id="other", check_model=True) as server:  # 404: no such model
        prep = _prep(tmp_path, configs_with, server.base_url)
        ep = Endpoint("pre", server.base_url, "fake-model", api_key_env="OPTEVAL_TEST_NO_KEY", max_retries=2)
        with pytest.raises(PreflightError, match=r"^model 'pre': the sweep's first request failed.*HTTP 404"):
            asyncio.run(preflight(prep, {"pre": ep}))
        assert server.chats == 1  # a refusal is not tried again
