"""A FAKE vLLM engine (a test double: no model, no weights) behind Ray's real ``LLMServer``.

Ray Serve LLM takes its engine class from ``RAYLLM_VLLM_ENGINE_CLS`` (read by ``LLMServer`` in
the replica, Ray 2.60 ``ray/llm/_internal/serve/core/server/llm_server.py``), so a model YAML's
``vllm.runtime_env.env_vars`` can put this class there: the real builder, OpenAI ingress, Serve
proxy, routing, placement and readiness run, and only the engine is ours. It implements Ray's
engine protocol (``ray/llm/_internal/serve/core/engine/protocol.py``: ``LLMEngine``) the way Ray's
own test engine does (``python/ray/llm/tests/serve/mocks/mock_vllm_engine.py``): ``chat`` yields
one ``ChatCompletionResponse`` (or SSE strings when streaming, or one ``ErrorResponse``).

What a real model cannot show on demand, switched per deployment (environment variables of the
replica) or per request (``vllm_xargs``, vLLM's request field for extensions):

- ``FAKE_ENGINE_START_DELAY_S``: the engine's start takes this long (weights loading slowly);
- ``FAKE_ENGINE_FAIL_START``: the start fails with this message, the way vLLM's does (the root
  cause printed to the replica's stderr, then ``RuntimeError: Engine core initialization failed.
  See root cause above.``);
- ``vllm_xargs.fake_delay_s``: the answer comes after this many seconds;
- ``vllm_xargs.fake_status``: the engine answers with this HTTP error status instead;
- ``vllm_xargs.fake_die``: the replica process exits mid-request (the connection it held drops).

Every answer is marked ``system_fingerprint: fake-engine``, echoes the request fields it got
(JSON in ``content``) and reports a fixed usage (``USAGE``), so a test can tell what travelled.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any

from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorInfo,
    ErrorResponse,
)
from ray.llm._internal.serve.core.engine.protocol import LLMEngine

FINGERPRINT = "fake-engine"
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
START_DELAY_ENV = "FAKE_ENGINE_START_DELAY_S"
FAIL_START_ENV = "FAKE_ENGINE_FAIL_START"
ROOT_CAUSE_PREFIX = "FakeEngineError: "


class FakeEngine(LLMEngine):
    """See the module docstring. Stateless apart from ``started``."""

    def __init__(self, llm_config: Any) -> None:
        self.llm_config = llm_config
        self.started = False

    async def start(self) -> None:
        delay = float(os.environ.get(START_DELAY_ENV) or 0)
        if delay:
            await asyncio.sleep(delay)
        failure = os.environ.get(FAIL_START_ENV)
        if failure:
            # vLLM's engine core dies in its own process, prints the cause there and the
            # replica raises a generic error: the cause is only in the replica's log.
            print(f"{ROOT_CAUSE_PREFIX}{failure}", file=sys.stderr, flush=True)
            raise RuntimeError("Engine core initialization failed. See root cause above. "
                               "Failed core proc(s): {'EngineCore_DP0': 1}")
        self.started = True

    def routing_stats(self) -> dict[str, Any]:
        return {}

    async def resolve_lora(self, lora_model: Any) -> None:
        return None

    async def reset_prefix_cache(self) -> None:
        return None

    async def check_health(self) -> None:
        if not self.started:
            raise RuntimeError("fake engine not started")

    @staticmethod
    def _xargs(request: Any) -> dict[str, Any]:
        return dict(getattr(request, "vllm_xargs", None) or {})

    async def _switches(self, request: Any) -> ErrorResponse | None:
        xargs = self._xargs(request)
        if xargs.get("fake_delay_s"):
            await asyncio.sleep(float(xargs["fake_delay_s"]))
        if xargs.get("fake_die"):
            os._exit(1)  # the replica dies with the request in flight
        status = int(xargs.get("fake_status") or 0)
        if status:
            return ErrorResponse(error=ErrorInfo(message=f"fake engine: status {status} as asked",
                                                 type="FakeEngineError", code=status))
        return None

    def _echo(self, request: Any) -> str:
        fields = ("model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stream")
        got = {f: getattr(request, f, None) for f in fields}
        got["messages"] = len(getattr(request, "messages", None) or [])
        got["chat_template_kwargs"] = getattr(request, "chat_template_kwargs", None)
        return json.dumps(got, sort_keys=True, default=str)

    # Ray declares the request methods as coroutines (abstract bodies without a yield); engines,
    # Ray's own included, implement them as async generators: hence the override ignores.
    async def chat(self, request: ChatCompletionRequest,  # type: ignore[override]
                   raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        error = await self._switches(request)
        if error is not None:
            yield error
            return
        text = self._echo(request)
        model = request.model or self.llm_config.model_id
        if request.stream:
            for i, piece in enumerate((text[: len(text) // 2], text[len(text) // 2:])):
                chunk = {"id": "fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                         "system_fingerprint": FINGERPRINT,
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": piece},
                                      "finish_reason": "stop" if i else None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
            return
        yield ChatCompletionResponse(model=model, system_fingerprint=FINGERPRINT, usage=dict(USAGE),
                                     choices=[{"index": 0, "message": {"role": "assistant", "content": text},
                                               "finish_reason": "stop"}])

    async def completions(self, request: CompletionRequest,  # type: ignore[override]
                          raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        error = await self._switches(request)
        if error is not None:
            yield error
            return
        yield CompletionResponse(model=request.model or self.llm_config.model_id, usage=dict(USAGE),
                                 choices=[{"index": 0, "text": self._echo(request), "finish_reason": "stop"}])

    async def embeddings(self, request: Any,  # type: ignore[override]
                         raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        yield ErrorResponse(error=ErrorInfo(message="the fake engine has no embeddings", type="NotFound", code=404))

    async def transcriptions(self, request: Any,  # type: ignore[override]
                             raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        yield ErrorResponse(error=ErrorInfo(message="the fake engine has no transcriptions", type="NotFound", code=404))
