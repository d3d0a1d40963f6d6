"""Error classes of OpenAIChatModel against a real local HTTP server (tests/servers/openai_fake.py).

A 4xx that refuses the request (context overflow, invalid field) is the model's failure for
that call: the harness sees an empty completion marked ``rejected``, nothing is retried, the
trajectory may end with no submission (wrong, never missing). 408, 429, 5xx and connection
errors, and a 200 whose body is not a completion (truncated JSON), are infrastructure: retried
with backoff, then EndpointFailure, a ModelError (the worker's status=error with the reason).
Other 4xx (404 wrong model/URL, 401 key) are configuration: ModelError at once.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from opteval.evalcore.harnesses.direct import Direct
from opteval.evalcore.models import ModelError, OpenAIChatModel, Sampling
from opteval.evalcore.models.base import EndpointFailure

MESSAGES = [{"role": "user", "content": "Solve it."}]
OVERFLOW = {"object": "error", "type": "BadRequestError", "code": 400,
            "message": "This model's maximum context length is 40960 tokens. However, you requested 41000 tokens."}


def _model(url: str, **kw) -> OpenAIChatModel:
    kw.setdefault("backoff_s", 0.01)
    return OpenAIChatModel(name="m", base_url=url, model_id="served-m", api_key_env="OPTEVAL_TEST_NO_KEY", **kw)


def _chat(model):
    return asyncio.run(model.chat(MESSAGES, Sampling(), 42))


@pytest.mark.parametrize("status", [400, 413, 422])
def test_refused_request_is_the_models_failure_not_retried(fake_server, status):
    fake_server.script = [(status, OVERFLOW, 0)]
    comp = _chat(_model(fake_server.base_url, max_retries=3))
    assert len(fake_server.requests) == 1
    assert comp.text == "" and comp.finish_reason.startswith(f"rejected: HTTP {status}")
    assert "maximum context length" in comp.finish_reason
    assert comp.usage.prompt_tokens is None  # nothing reported, nothing invented


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_infrastructure_statuses_are_retried_then_error(fake_server, status):
    fake_server.script = [(status, {"error": {"message": "busy"}}, 0)]
    with pytest.raises(EndpointFailure, match=f"failed after 3 attempt.*HTTP {status}"):
        _chat(_model(fake_server.base_url, max_retries=2))
    assert len(fake_server.requests) == 3


TRUNCATED = b'{"id": "cmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"ro'


@pytest.mark.parametrize("body", [TRUNCATED, {"id": "cmpl-1", "object": "chat.completion"}],
                         ids=["truncated-json", "no-choices"])
def test_a_malformed_200_is_retried_within_the_call(fake_server, make_response, body):
    """One garbled body costs one retried request, not the call (nor the trajectory)."""
    fake_server.script = [(200, body, 0), (200, make_response("ok"), 0)]
    comp = _chat(_model(fake_server.base_url, max_retries=2))
    assert comp.text == "ok" and len(fake_server.requests) == 2


def test_malformed_on_every_attempt_is_an_endpoint_failure(fake_server):
    fake_server.script = [(200, TRUNCATED, 0)]
    with pytest.raises(EndpointFailure, match="failed after 3 attempt.*malformed response"):
        _chat(_model(fake_server.base_url, max_retries=2))
    assert len(fake_server.requests) == 3


def test_408_then_success_recovers(fake_server, make_response):
    fake_server.script = [(408, {"error": "Request timed out"}, 0), (200, make_response("ok"), 0)]
    assert _chat(_model(fake_server.base_url)).text == "ok"


@pytest.mark.parametrize("status", [401, 404])
def test_configuration_4xx_is_an_error_at_once(fake_server, status):
    fake_server.script = [(status, {"error": {"message": "The model `x` does not exist."}}, 0)]
    with pytest.raises(ModelError, match=f"HTTP {status}.*not retried") as err:
        _chat(_model(fake_server.base_url, max_retries=3))
    assert len(fake_server.requests) == 1
    assert not isinstance(err.value, EndpointFailure)  # a refusal, not a transient


def test_connection_refused_is_retried_then_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    with pytest.raises(ModelError, match="failed after 3 attempt.*connection error"):
        _chat(_model(f"http://127.0.0.1:{port}/v1", max_retries=2))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refusing_route_is_waited_for_without_spending_an_attempt(make_response):
    """Issue 42: a call to a Serve route of this cluster (route_wait_s > 0) that meets a refused
    connection (its proxy died and is being replaced) waits for the route to come back; the
    refusal costs no attempt, so even max_retries=0 ends with the answer."""
    from tests.servers.openai_fake import FakeOpenAIServer

    port = _free_port()
    started: list[FakeOpenAIServer] = []

    def come_back() -> None:
        time.sleep(1.5)
        server = FakeOpenAIServer(port=port)
        server.script = [(200, make_response("back"), 0)]
        started.append(server.__enter__())

    threading.Thread(target=come_back, daemon=True).start()
    try:
        t0 = time.monotonic()
        comp = _chat(_model(f"http://127.0.0.1:{port}/v1", max_retries=0, route_wait_s=30))
        assert comp.text == "back" and 1.0 < time.monotonic() - t0 < 20
        assert len(started[0].requests) == 1
    finally:
        for server in started:
            server.__exit__(None, None, None)


def test_a_route_that_stays_refused_spends_its_attempts_after_the_wait():
    t0 = time.monotonic()
    with pytest.raises(EndpointFailure, match="failed after 2 attempt.*connection error"):
        _chat(_model(f"http://127.0.0.1:{_free_port()}/v1", max_retries=1, route_wait_s=1.0))
    assert time.monotonic() - t0 < 15


def test_client_timeout_is_infrastructure(fake_server, make_response):
    fake_server.script = [(200, make_response("late"), 1.0)]
    with pytest.raises(ModelError, match="timeout after 0.2s"):
        _chat(_model(fake_server.base_url, max_retries=1, timeout_s=0.2))


def test_direct_harness_sees_a_rejected_call_and_ends_without_submission(fake_server):
    """The whole trajectory: a context overflow is recorded in the call, no submission, no error."""
    from opteval.evalcore.harnesses.base import Budgets, HarnessContext
    from opteval.evalcore.problems import load_benchmark

    fake_server.script = [(400, OVERFLOW, 0)]
    spec = load_benchmark("sample")[0][0]

    class NoExec:
        async def run(self, code, limits=None):  # never reached: no code was written
            raise AssertionError("nothing to execute")

        async def open_session(self):
            raise AssertionError("no session")

    ctx = HarnessContext(model=_model(fake_server.base_url), executor=NoExec(), sampling=Sampling(), sample=0,
                         budgets=Budgets(), model_name="m", method="direct", extraction="submit")
    traj = asyncio.run(Direct().run(spec, ctx))
    assert traj.status != "error" and traj.submission is None
    assert len(traj.calls) == 1 and (traj.calls[0].finish_reason or "").startswith("rejected: HTTP 400")
