"""The Serve-handle route to in-cluster models against the HTTP route (real local Ray and Serve).

The handle route must be invisible to the model and to the ledger: the replica receives the
byte-identical request and the same side channel, error answers fall in the same classes
(the model's failure for the call vs infrastructure), and a sweep through either route
commits the same trajectories.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from opteval.cluster.driver import run_sweep
from opteval.sweepcore.config import load_config

pytestmark = pytest.mark.ray

APP = "opteval-test-recorder"
PREFIX = "/recorder"
OUTCOME = ["model", "method", "problem_id", "sample", "status", "submission", "correct",
           "prompt_tokens", "completion_tokens", "n_calls", "n_execs", "exec_ok", "first_exec_outcome",
           "simulated", "error", "transcript", "fingerprint"]


def _recorder_app() -> Any:
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import Response

    from opteval.cluster.serve.serving import call_meta

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Recorder:
        """Answers by the body's last message: ``ok``, ``status:<n>`` or ``raise``; records what it got."""

        def __init__(self) -> None:
            self.seen: list[tuple[str, bytes, Any]] = []

        def records(self) -> list[tuple[str, bytes, Any]]:
            return self.seen

        def clear(self) -> None:
            self.seen = []

        def _answer(self, route: str, raw: bytes, meta: Any) -> tuple[int, bytes]:
            self.seen.append((route, raw, meta))
            what = json.loads(raw)["messages"][-1]["content"]
            if what == "raise":
                raise RuntimeError("the replica failed")
            if what.startswith("status:"):
                return int(what.split(":")[1]), b'{"error": {"message": "refused"}}'
            return 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": "hello"},
                                                 "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 7, "completion_tokens": 1}}).encode()

        async def __call__(self, request: Request) -> Response:
            status, body = self._answer("http", await request.body(), call_meta(request.headers))
            return Response(body, status_code=status, media_type="application/json")

        async def respond(self, raw: bytes, meta: Any = None) -> tuple[int, bytes]:
            return self._answer("handle", raw, meta)

    return Recorder.bind()  # type: ignore[attr-defined]  # a Deployment at runtime


@pytest.fixture(scope="module")
def recorder(ray_cluster):
    from ray import serve

    _, port = ray_cluster
    handle = serve.run(_recorder_app(), name=APP, route_prefix=PREFIX)
    yield handle, f"http://127.0.0.1:{port}{PREFIX}/v1"
    serve.delete(APP)


def _clients(base_url: str) -> tuple[Any, Any]:
    from opteval.cluster.serve.serve_handle import ServeHandleChatModel
    from opteval.evalcore.models.openai_backend import OpenAIChatModel

    common: dict[str, Any] = {"timeout_s": 30, "max_retries": 1, "backoff_s": 0.01,
                              "extra_body": {"chat_template_kwargs": {"enable_thinking": False}, "top_k": None}}
    http = OpenAIChatModel(name="rec", base_url=base_url, model_id="rec-model", api_key_env="", **common)
    handle = ServeHandleChatModel(name="rec", model_id="rec-model", deployment="Recorder", app=APP, **common)
    return http, handle


def test_the_replica_sees_the_same_bytes_and_meta_on_both_routes(recorder):
    from opteval.evalcore.models.base import CallMeta, Sampling

    rec, base_url = recorder
    http, handle = _clients(base_url)
    messages = [{"role": "system", "content": "Résous le problème — ünïcode"}, {"role": "user", "content": "ok"}]
    sampling = Sampling(extra_body={"min_p": 0.05})
    meta = CallMeta("optistate", "formulate")

    async def both() -> list[Any]:
        return [await m.chat(messages, sampling, 43, meta) for m in (http, handle)]

    rec.clear.remote().result()
    got = asyncio.run(both())
    seen = rec.records.remote().result()
    assert [s[0] for s in seen] == ["http", "handle"]
    assert seen[0][1] == seen[1][1]  # byte-identical request body
    body = json.loads(seen[1][1])
    assert body["seed"] == 43 and "top_k" not in body and body["min_p"] == 0.05 and body["model"] == "rec-model"
    assert seen[0][2] == seen[1][2] == meta
    for c in got:
        assert (c.text, c.finish_reason, c.usage.prompt_tokens, c.usage.completion_tokens) == ("hello", "stop", 7, 1)


@pytest.mark.parametrize("what, rejected", [("status:400", True), ("status:422", True),
                                            ("status:404", False), ("status:503", False), ("raise", False)])
def test_error_classes_match_the_http_route(recorder, what, rejected):
    """400/422: the model's failure for this call (an empty 'rejected' completion); 404: a
    configuration fault; 503 and a replica that raises: infrastructure after retries."""
    from opteval.evalcore.models.base import ModelError, Sampling

    _, base_url = recorder
    outcomes = []
    for model in _clients(base_url):
        try:
            comp = asyncio.run(model.chat([{"role": "user", "content": what}], Sampling(), 42))
        except ModelError as exc:
            outcomes.append(("ModelError", "not retried" in str(exc), "after 2 attempt(s)" in str(exc)))
        else:
            outcomes.append(("completion", comp.text, comp.finish_reason.split(":")[0]))
    assert outcomes[0] == outcomes[1], outcomes
    if rejected:
        assert outcomes[0] == ("completion", "", "rejected")
    else:
        assert outcomes[0][0] == "ModelError"
        assert outcomes[0][1] == (what == "status:404")  # a 404 is not retried, the rest are


def test_a_sweep_commits_the_same_trajectories_through_either_route(ray_cluster, h, tmp_path):
    _, port = ray_cluster
    frames = {}
    for route in ("http", "handle"):
        name = f"route-{route}"
        cfg = load_config(h.sweep_args(tmp_path, name, port, f"serving.route={route}", "tracking.enabled=false",
                                       methods="[direct,opticycle]", limit=2, samples=1))
        assert run_sweep(cfg) == 0
        df = h.ledger_frame(tmp_path, name)
        cols = [c for c in OUTCOME if c in df.columns]
        assert len(cols) >= 8, sorted(df.columns)
        # keys differ only by the sweep's name (hashed into them); fingerprint: serving is not in it
        frames[route] = df[cols].sort_values(["method", "problem_id", "sample"]).astype(str).reset_index(drop=True)
    assert len(frames["http"]) == 2 * 2
    assert (frames["http"]["status"] != "error").all(), frames["http"].to_string()
    for col in frames["http"].columns:
        assert frames["http"][col].equals(frames["handle"][col]), (col, frames["http"][col].tolist(),
                                                                  frames["handle"][col].tolist())


def test_a_bad_route_is_a_config_error_naming_the_key(tmp_path):
    """Checked when the config is loaded, before any cluster starts."""
    from opteval.sweepcore.config import ConfigError

    with pytest.raises(ConfigError, match=r"serving.route: 'carrier-pigeon' is not one of handle, http"):
        load_config([f"sweep.output_dir={tmp_path}", "serving.route=carrier-pigeon"])


def test_a_negative_standin_latency_is_a_config_error_naming_the_key(tmp_path):
    from opteval.sweepcore.config import ConfigError

    with pytest.raises(ConfigError, match=r"serving.standin_ttft_s"):
        load_config([f"sweep.output_dir={tmp_path}", "serving.standin_ttft_s=-0.5"])


def test_a_standin_replica_answers_the_same_through_its_handle(ray_cluster):
    """serving.standin: the handle goes to the model's StandinServer (the name ray.serve.llm
    gives its LLMServer), past the ingress; it answers what the ingress answers over HTTP, each
    answer after serving.standin_ttft_s as a real replica's would take time."""
    from types import SimpleNamespace

    from ray import serve

    from opteval.cluster.serve.llm_serving import server_deployment_name
    from opteval.cluster.serve.serve_handle import handle_client
    from opteval.cluster.serve.serving import Endpoint, standin_app, with_routes
    from opteval.evalcore.models.base import CallMeta, Sampling
    from opteval.evalcore.models.openai_backend import OpenAIChatModel
    from opteval.sweepcore.backends import by_backend

    _, port = ray_cluster
    app, model = "opteval-test-standin", "stand-in-m"
    placement = {"model": model, "replicas": 1, "bundles": [{"CPU": 0.01}], "strategy": "PACK"}
    ttft_s = 0.4
    serve.run(standin_app([placement], {}, ttft_s=ttft_s), name=app, route_prefix="/standin-test")
    try:
        base = Endpoint(name=model, base_url=f"http://127.0.0.1:{port}/standin-test/v1", model_id=model,
                        simulated=True, api_key_env="", app_name=app)
        models = [{"name": model, "backend": "vllm"}]
        standin_on = SimpleNamespace(route="handle", standin=True)
        ep = with_routes({model: base}, by_backend(models, standin_on), standin_on)[model]
        assert ep.handle == (server_deployment_name(model), app)  # the chat below proves it is the replica's name
        standin_off = SimpleNamespace(route="handle", standin=False)  # a real vLLM app keeps its HTTP route
        assert with_routes({model: base}, by_backend(models, standin_off), standin_off)[model].handle is None
        http = OpenAIChatModel(name=model, base_url=str(base.base_url), model_id=model, api_key_env="", max_retries=0)
        messages = [{"role": "user", "content": "Minimize x subject to x >= 3. Write a program."}]
        meta = CallMeta("direct", "act")

        async def both() -> list[Any]:
            return [await m.chat(messages, Sampling(), 42, meta) for m in (http, handle_client(ep))]

        t0 = time.monotonic()
        a, b = asyncio.run(both())
        assert time.monotonic() - t0 >= 2 * ttft_s  # two answers, each held for the stand-in's ttft
        assert a.text and a.simulated and b.simulated
        assert (a.text, a.finish_reason, a.usage) == (b.text, b.finish_reason, b.usage)
    finally:
        serve.delete(app)
