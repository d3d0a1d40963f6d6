"""What a real model cannot show on demand, through Ray's real LLMServer, builder, OpenAI ingress
and Serve proxy with the FAKE engine of ``tests/vllm/fake_engine.py`` in place of vLLM's (Ray's
``RAYLLM_VLLM_ENGINE_CLS``, set in the model's ``vllm.runtime_env.env_vars``): placement refusal,
readiness after a slow start, the ingress timeout above ``serving.request_timeout_s``, the error
classes, and a failed engine start reaching one clear line.

One fake app (``fake_app``) serves most tests; its slowest check (a reply delayed past the
ingress timeout, about a minute) runs in the background from the start and is collected last.
"""
from __future__ import annotations

import copy
import threading
import time
from typing import Any

import httpx
import pytest
import yaml

from tests.vllm.conftest import MODEL, serve_apps, wait_for

pytestmark = pytest.mark.vllm
ENGINE_CLS = "tests.vllm.fake_engine:FakeEngine"  # a FAKE engine, labelled as one in that module
FINGERPRINT = "fake-engine"
START_DELAY_S = 6.0
REQUEST_TIMEOUT_S = 4.0  # serving.request_timeout_s: the ingress then waits 4 + 60 s


def fake_model(name: str, **env: str) -> dict[str, Any]:
    """The smollm2 CPU config with the fake engine in its replicas (no weights read)."""
    from opteval.sweepcore.config import as_plain, model_config

    m = copy.deepcopy(as_plain(model_config(MODEL)))
    m["name"] = name
    m["vllm"]["source"] = "fake/no-weights"
    m["vllm"]["runtime_env"] = {"env_vars": {"RAYLLM_VLLM_ENGINE_CLS": ENGINE_CLS, **env}}
    return m


def serving_cfg(port: int, **extra: Any) -> Any:
    from opteval.sweepcore.config import ServingSection

    return ServingSection(http_port=port, ready_timeout_s=180, request_timeout_s=REQUEST_TIMEOUT_S, **extra)


def chat(base_url: str, model: str, timeout: float = 120, **xargs: Any) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "max_tokens": 5, "seed": 3,
                            "messages": [{"role": "user", "content": "hi"}]}
    if xargs:
        body["vllm_xargs"] = xargs
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=timeout)


class FakeApp:
    def __init__(self, base_url: str, model: str, deploy_s: float, probes: list[tuple[float, str | None]],
                 returned_at: float) -> None:
        self.base_url, self.model, self.deploy_s, self.probes, self.returned_at = (base_url, model, deploy_s,
                                                                                   probes, returned_at)
        self.late: dict[str, Any] = {}
        self.late_thread: threading.Thread | None = None


@pytest.fixture(scope="module")
def fake_app(tier_ray: tuple[str, int]) -> Any:
    """The fake engine deployed through ``deploy_stage`` with a slow start, every readiness probe
    recorded; a request delayed past the ingress timeout is sent at once, in the background."""
    from opteval.cluster.serve import llm_serving as ls
    from opteval.cluster.serve import serve_apps as sa

    _, port = tier_ray
    name = "fake-slow-start"
    probes: list[tuple[float, str | None]] = []
    real_probe = sa.probe_model

    def recording_probe(base_url: str, model_id: str, timeout_s: float = 120.0) -> str | None:
        got = real_probe(base_url, model_id, timeout_s)
        probes.append((time.time(), got))
        return got

    sa.probe_model = recording_probe
    try:
        t0 = time.monotonic()
        eps = ls.deploy_stage([fake_model(name, FAKE_ENGINE_START_DELAY_S=str(START_DELAY_S))], serving_cfg(port),
                              app_name=ls.llm_app_name(name), route_prefix=ls.llm_route_prefix(name))
        app = FakeApp(str(eps[name].base_url), name, time.monotonic() - t0, probes, time.time())
    finally:
        sa.probe_model = real_probe

    def late() -> None:
        t = time.monotonic()
        r = chat(app.base_url, name, timeout=300, fake_delay_s=ls.ingress_timeout_s(serving_cfg(port)) + 15)
        app.late.update(status=r.status_code, text=r.text, seconds=time.monotonic() - t)

    app.late_thread = threading.Thread(target=late, daemon=True)
    app.late_thread.start()
    yield app
    ls.teardown(ls.llm_app_name(name))


def test_placement_refusal_names_the_model_and_what_it_asks(tier_ray):
    from opteval.cluster.serve import llm_serving as ls

    _, port = tier_ray
    for name, bundles, gpus, what in (("fake-too-big", [{"CPU": 64}], 0, "64 CPU"),
                                      ("fake-wants-gpu", [{"GPU": 1, "CPU": 1}], 1, "1 GPU")):
        m = fake_model(name)
        m["vllm"]["placement_group_config"] = {"bundles": bundles, "strategy": "PACK"}
        m["vllm"]["gpus_per_replica"] = gpus
        t0 = time.monotonic()
        with pytest.raises(ls.UnplaceableModel, match=name) as err:
            ls.deploy_stage([m], serving_cfg(port), app_name=ls.llm_app_name(name),
                            route_prefix=ls.llm_route_prefix(name))
        assert what in str(err.value) and time.monotonic() - t0 < 30
        assert ls.llm_app_name(name) not in serve_apps()


def test_readiness_waits_for_the_slow_engine_start(fake_app):
    assert fake_app.deploy_s >= START_DELAY_S  # deploy_stage did not return before the engine started
    answered = [t for t, why in fake_app.probes if why is None]
    assert answered and answered[0] <= fake_app.returned_at  # a 1-token answer came before the return
    r = chat(fake_app.base_url, fake_app.model)  # and the first request after it is served
    assert r.status_code == 200 and r.json()["system_fingerprint"] == FINGERPRINT
    echo = r.json()["choices"][0]["message"]["content"]
    assert '"seed": 3' in echo and '"max_tokens": 5' in echo  # the request's fields reached the engine


def test_a_reply_slower_than_the_client_limit_survives_the_ingress(fake_app):
    from opteval.evalcore.models.base import ModelError, Sampling
    from opteval.evalcore.models.openai_backend import OpenAIChatModel

    r = chat(fake_app.base_url, fake_app.model, fake_delay_s=REQUEST_TIMEOUT_S + 4)  # the ingress lets it through
    assert r.status_code == 200 and r.json()["system_fingerprint"] == FINGERPRINT
    client = OpenAIChatModel(fake_app.model, fake_app.base_url, fake_app.model, api_key_env=None,
                             timeout_s=REQUEST_TIMEOUT_S, max_retries=0,
                             extra_body={"vllm_xargs": {"fake_delay_s": REQUEST_TIMEOUT_S + 4}})
    with pytest.raises(ModelError, match="Timeout"):  # ours fires first: the client's per-call limit
        import asyncio

        asyncio.run(client.chat([{"role": "user", "content": "hi"}], Sampling(max_tokens=5), seed=1))


@pytest.mark.parametrize("status, kind", [(400, "model"), (408, "infrastructure"), (429, "infrastructure"),
                                          (500, "infrastructure"), (503, "infrastructure"), (404, "configuration")])
def test_error_classes_through_the_real_ingress(fake_app, status, kind):
    import asyncio

    from opteval.evalcore.models.base import ModelError, Sampling
    from opteval.evalcore.models.openai_backend import OpenAIChatModel

    assert chat(fake_app.base_url, fake_app.model, fake_status=status).status_code == status  # Ray passes it on
    client = OpenAIChatModel(fake_app.model, fake_app.base_url, fake_app.model, api_key_env=None, timeout_s=60,
                             max_retries=1, backoff_s=0.05, extra_body={"vllm_xargs": {"fake_status": status}})
    call = client.chat([{"role": "user", "content": "hi"}], Sampling(max_tokens=5), seed=1)
    if kind == "model":  # the model's failure for this call: an empty completion, the trajectory goes on
        done = asyncio.run(call)
        assert done.text == "" and str(done.finish_reason).startswith(f"rejected: HTTP {status}")
    elif kind == "infrastructure":  # retried, then an error the driver retries and records
        with pytest.raises(ModelError, match=rf"failed after 2 attempt\(s\); last: HTTP {status}"):
            asyncio.run(call)
    else:
        with pytest.raises(ModelError, match=rf"HTTP {status}.*not retried"):
            asyncio.run(call)


def test_a_failed_engine_start_is_one_line_naming_the_model_and_the_cause(tier_ray, tmp_path, capsys):
    """Through ``opteval sweep``: vLLM-style, the cause is only in the replica's log (the replica
    raises "See root cause above"); the sweep prints one line with it, exits 2, and tears down."""
    from opteval.cluster.serve import llm_serving as ls
    from opteval.jobs.sweep import main as sweep

    _, port = tier_ray
    name = "fake-broken"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(fake_model(name, FAKE_ENGINE_FAIL_START="the weights are corrupt (test)")))
    rc = sweep([f"models=[{path}]", "methods=[direct]", "benchmarks=[sample]", "limit_problems=1",
                "samples.default=1", f"sweep.output_dir={tmp_path / 'out'}", "sweep.name=broken",
                f"serving.http_port={port}", "tracking.enabled=false", "serving.ready_timeout_s=240",
                "cluster.executors=1"])
    err = capsys.readouterr().err.strip().splitlines()
    mine = [line for line in err if line.startswith("model error:")]
    assert rc == 2 and len(mine) == 1, err[-20:]
    assert name in mine[0] and "FakeEngineError: the weights are corrupt (test)" in mine[0], mine[0]
    assert not any(line.startswith("Traceback") for line in err)
    assert ls.llm_app_name(name) not in serve_apps()


def test_a_reply_past_the_ingress_timeout_is_408_at_request_timeout_plus_margin(fake_app):
    """Sent when the app came up: Ray's ingress ends it with 408 after request_timeout_s + 60 s
    (``RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT`` in the ingress's runtime env), not Ray's 600 s default."""
    from opteval.cluster.serve import llm_serving as ls

    assert fake_app.late_thread is not None
    fake_app.late_thread.join(timeout=240)
    limit = ls.ingress_timeout_s(serving_cfg(0))
    assert fake_app.late.get("status") == 408, fake_app.late
    assert limit - 2 <= fake_app.late["seconds"] <= limit + 30, fake_app.late


def test_a_replica_lost_mid_request_is_infrastructure(fake_app):
    """The replica process exits with the request in flight (its connection to the ingress drops):
    the client gets a 5xx, retries, then reports an infrastructure error, never a model's failure."""
    import asyncio

    from opteval.evalcore.models.base import ModelError, Sampling
    from opteval.evalcore.models.openai_backend import OpenAIChatModel

    client = OpenAIChatModel(fake_app.model, fake_app.base_url, fake_app.model, api_key_env=None, timeout_s=60,
                             max_retries=1, backoff_s=0.05, extra_body={"vllm_xargs": {"fake_die": 1}})
    with pytest.raises(ModelError, match=r"failed after 2 attempt\(s\); last: (HTTP 5\d\d|.*(Error|closed))"):
        asyncio.run(client.chat([{"role": "user", "content": "hi"}], Sampling(max_tokens=5), seed=1))
    # Serve restarts the replica (the fake engine's slow start again); the app answers once more
    wait_for(lambda: chat(fake_app.base_url, fake_app.model).status_code == 200, 180, "the replica to come back", 2)

