"""The semantic reward model R(P, C) of SemOPT (section 3 of "SemOPT: Fixing Semantic Errors in
LLM-based Optimization Modeling via Reward-Guided Search") as a Ray Serve app.

R is a sequence-classification model with a scalar value head (``num_labels = 1``): the
problem and the solver code go in as a text pair, the raw value comes out, and a sigmoid turns
it into the confidence in [0, 1] the gate and the search use (3: "normalized with a sigmoid").
It loads from a local path or a hub id (``from_pretrained``); on this project's machines only
local paths work (no hub access), which is what the tests use.

    POST <route>  {"problem": str, "code": str}  ->  {"score": sigmoid(raw), "raw": raw, "tokens": n}

Requests are batched per replica (``serve.batch``). ``scorer`` names another factory
(``"module:callable"``, called with ``source`` and ``max_length``, returning an object with
``score(pairs) -> [(raw, tokens)]``), or is that callable -- how a test puts a labelled fake
behind the real Serve route without torch. The semopt harness reaches the route with ``params.critic: {kind:
reward_model, url: ...}``. Start one with::

    python -m opteval.cluster.serve.critic_serving --model /path/to/rm --port 8100   # prints the URL, serves until killed
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from opteval.cluster.runtime import connect
from opteval.cluster.serve.serve_apps import start_serve  # waits out a slow proxy on a busy machine

CRITIC_APP = "opteval-critic"
ROUTE = "/critic"
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}


def sigmoid(x: float) -> float:
    """Numerically safe logistic function."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class Scorer(Protocol):
    def score(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int]]: ...


class SequenceClassifierScorer:
    """A Hugging Face sequence-classification model with one output, on CPU or the replica's GPU."""

    def __init__(self, source: str, max_length: int = 4096) -> None:
        # deferred: extra opteval[models]; a fake scorer needs neither
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.model = AutoModelForSequenceClassification.from_pretrained(source)
        labels = int(getattr(self.model.config, "num_labels", 0))
        if labels != 1:
            raise ValueError(f"reward model {source!r}: num_labels must be 1 (a scalar value head), got {labels}")
        if self.tokenizer.pad_token is None:  # decoder-only backbones: pad with EOS
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model.to(self.device).eval()
        self.max_length = int(max_length)

    def score(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int]]:
        enc = self.tokenizer([p for p, _ in pairs], [c for _, c in pairs], truncation="longest_first",
                             max_length=self.max_length, padding=True, return_tensors="pt").to(self.device)
        with self.torch.no_grad():
            raw = self.model(**enc).logits[:, 0].float().tolist()
        tokens = enc["attention_mask"].sum(dim=1).tolist()
        return [(float(r), int(n)) for r, n in zip(raw, tokens)]


def make_scorer(source: str, max_length: int, scorer: str | Callable[..., Scorer] | None = None) -> Scorer:
    """The default Hugging Face scorer, or ``scorer`` (``"module:callable"`` or the callable)."""
    if not scorer:
        return SequenceClassifierScorer(source, max_length)
    if callable(scorer):
        return scorer(source, max_length)
    module, _, name = scorer.partition(":")
    if not module or not name:
        raise ValueError(f"scorer {scorer!r}: expected 'module:callable'")
    return getattr(importlib.import_module(module), name)(source, max_length)


def _json(status: int, content: Any) -> Response:
    return Response(json.dumps(content), status_code=status, media_type="application/json")


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class RewardModelCritic:
    """One replica holds one reward model; concurrent requests are scored in batches."""

    def __init__(self, source: str, max_length: int = 4096, scorer: str | Callable[..., Any] | None = None) -> None:
        self._scorer = make_scorer(source, max_length, scorer)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def _score(self, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
        out = self._scorer.score(pairs)
        return [{"score": sigmoid(raw), "raw": raw, "tokens": n} for raw, n in out]

    async def __call__(self, request: Request) -> Response:
        if request.method != "POST":
            return _json(405, {"error": "POST {\"problem\": str, \"code\": str}"})
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _json(400, {"error": "request body is not JSON"})
        if not isinstance(body, dict):
            return _json(400, {"error": "request body must be a JSON object"})
        for key in ("problem", "code"):
            if not isinstance(body.get(key), str):
                return _json(400, {"error": f"'{key}' must be a string", "param": key})
        return _json(200, await self._score((body["problem"], body["code"])))


def deploy_critic(source: str, http_port: int, route: str = ROUTE, replicas: int = 1, num_gpus: float = 0,
                  max_length: int = 4096, scorer: str | Callable[..., Any] | None = None,
                  app_name: str = CRITIC_APP) -> str:
    """Deploy the reward model on the running Ray cluster's Serve; returns the URL to POST to."""
    start_serve("0.0.0.0", int(http_port), QUIET_LOGS)
    options: dict[str, Any] = {"num_replicas": max(1, int(replicas))}
    if num_gpus:
        options["ray_actor_options"] = {"num_cpus": 0, "num_gpus": float(num_gpus)}
    app = RewardModelCritic.options(**options).bind(source, max_length, scorer)  # type: ignore[attr-defined]  # serve.deployment's stub returns the class; it is a Deployment
    serve.run(app, name=app_name, route_prefix=route, logging_config=QUIET_LOGS)
    return f"http://127.0.0.1:{int(http_port)}{route}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a SemOPT reward model (POST {problem, code}).")
    parser.add_argument("--model", required=True, help="local path or hub id of a 1-label sequence classifier")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--route", default=ROUTE)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--num-gpus", type=float, default=0)
    parser.add_argument("--max-length", type=int, default=4096)
    args = parser.parse_args(argv)
    connect(None)
    url = deploy_critic(args.model, args.port, args.route, args.replicas, args.num_gpus, args.max_length)
    print(f"reward model {args.model} at {url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
