"""The one fake OpenAI-compatible server of the tests: ``http.server`` on 127.0.0.1 in a thread.

``GET /v1/models`` lists ``model_id`` (with ``max_model_len`` where set, as vLLM does);
``POST /v1/chat/completions`` is recorded, then answered. Any other POST is a 404 (recorded).

Where a reply comes from, first match wins:

- ``script``: a list of ``(status, body, delay_s)`` steps; each request pops the next and the last
  repeats. ``body`` is a dict sent as JSON, or raw ``bytes`` (a body that is not JSON, e.g. a
  truncated one); the delay is spent as an engine generating (see ``slow_s``). Backend tests
  script exact statuses and bodies (:func:`chat_response` builds one);
- ``override(body, meta)``: a text for this request, or None for the policy's;
- the simulated policy (``policy``, a ``SimulatedModel``): it reads the harness and stage from the
  ``X-Opteval-*`` headers, as the simulated Serve app does, so the harnesses run normally.
  ``simulated=True`` adds the simulated ``system_fingerprint`` (``Completion.simulated``).

Ways to misbehave as real servers do (issue 27), combinable; they apply before the reply:

- ``max_model_len``: ``GET /v1/models`` reports it (unless ``report_max_model_len=False``), and a
  request whose ``max_tokens`` exceeds it is refused with HTTP 400 and vLLM's error text;
- ``die_after``: after that many chat requests the server stops listening (the request that
  crossed the line gets its connection closed without an answer), as a crashed engine;
- ``reject_after``: every chat request after that many is refused with HTTP 400 and
  ``reject_text`` (a server that accepted the preflight and then refuses every call);
- ``check_model``: a request for another model id is answered 404 (as vLLM does);
- ``slow_s``: each generated reply after the first ``slow_after`` waits that long, watching its
  connection: a client that hangs up is seen at once (vLLM aborts such a request), so ``open``
  counts requests still generating and ``aborted`` those whose client went;
- ``finish_reason``: what every generated completion reports (``length`` = truncated at max_tokens);
- ``garble``: a function of the chat request's number (1, 2, ...); where it says True the
  generated reply is a 200 whose JSON body is cut in half (a proxy or engine that dropped the
  end), counted in ``garbled``.

Every POST is recorded in ``records`` as ``{body, headers, path, meta}`` (headers lower-cased,
``meta`` the ``CallMeta`` the headers carry, or None), plus ``status`` once answered and, for a
generated reply, the ``text`` and the ``usage`` it reported. ``requests``, ``headers`` and
``paths`` are those columns; ``chats`` counts the POSTs.
"""
from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opteval.evalcore.models.base import CallMeta, Sampling
from opteval.evalcore.models.openai_backend import HARNESS_HEADER, SIMULATED_FINGERPRINT, STAGE_HEADER
from opteval.evalcore.sim.policy import SimulatedModel, content_text, count_tokens

Step = tuple[int, "dict[str, Any] | bytes", float]  # (status, JSON body or raw bytes, delay_s)
Override = Callable[[dict[str, Any], "CallMeta | None"], "str | None"]


def chat_response(content: str = "hello", usage: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A chat completion body for a scripted step (``usage`` left out unless given)."""
    body: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    body.update(extra)
    return body


def vllm_max_tokens_text(max_tokens: int, max_model_len: int) -> str:
    """vLLM's refusal of a ``max_tokens`` above the context (0.x serving_engine wording)."""
    return (f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
            f"context length is {max_model_len} tokens (max_tokens cannot be greater than max_model_len)")


def call_meta(headers: dict[str, str]) -> CallMeta | None:
    """The harness/stage side channel of a request's (lower-cased) headers."""
    harness = headers.get(HARNESS_HEADER.lower())
    return CallMeta(harness, headers.get(STAGE_HEADER.lower()) or "act") if harness else None


class FakeOpenAIServer:
    def __init__(self, *, port: int = 0, model_id: str = "fake-model", script: list[Step] | None = None,
                 override: Override | None = None, policy: SimulatedModel | None = None, simulated: bool = False,
                 max_model_len: int | None = None, report_max_model_len: bool = True,
                 die_after: int | None = None, reject_after: int | None = None,
                 reject_text: str = "seed is not supported", check_model: bool = False,
                 slow_s: float = 0.0, slow_after: int = 0, finish_reason: str = "stop",
                 garble: Callable[[int], bool] | None = None) -> None:
        self.model_id = model_id
        self.script: list[Step] = list(script or [])
        self.override = override
        self.policy = policy or SimulatedModel()
        self.simulated = simulated
        self.max_model_len = max_model_len
        self.report_max_model_len = report_max_model_len
        self.die_after = die_after
        self.reject_after = reject_after
        self.reject_text = reject_text
        self.check_model = check_model
        self.slow_s = slow_s
        self.slow_after = slow_after
        self.finish_reason = finish_reason
        self.garble = garble
        self.records: list[dict[str, Any]] = []
        self.garbled = 0
        self.rejected = 0  # 400s for max_model_len or reject_after
        self.open = 0  # requests still generating (a hung-up client's is no longer counted)
        self.aborted = 0  # requests whose client hung up before the reply
        self.dead = False
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    card: dict[str, Any] = {"id": server.model_id, "object": "model", "owned_by": "test"}
                    if server.max_model_len is not None and server.report_max_model_len:
                        card["max_model_len"] = server.max_model_len
                    self._send(200, {"object": "list", "data": [card]})
                else:
                    self._send(404, {"object": "error", "message": f"no route {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                record: dict[str, Any] = {"body": body, "headers": headers, "path": self.path, "meta": call_meta(headers)}
                with server._lock:
                    server.records.append(record)
                    n = len(server.records)
                    step = (server.script.pop(0) if len(server.script) > 1 else server.script[0]) if server.script \
                        else None
                status, payload = server._reply(n, record, step, self._generate)
                if status == 0:  # the connection is closed without an answer
                    self.close_connection = True
                    return
                record["status"] = status
                self._send_raw(status, payload)

            def _generate(self, seconds: float) -> bool:
                """Wait ``seconds`` as an engine generating; False when the client hung up first."""
                with server._lock:
                    server.open += 1
                try:
                    deadline = time.monotonic() + seconds
                    while (left := deadline - time.monotonic()) > 0:
                        ready, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                        if ready and _hung_up(self.connection):
                            with server._lock:
                                server.aborted += 1
                            return False
                    return True
                finally:
                    with server._lock:
                        server.open -= 1

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                self._send_raw(status, json.dumps(payload).encode())

            def _send_raw(self, status: int, data: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client timed out and went away
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    # -- what was received -----------------------------------------------------------------

    @property
    def chats(self) -> int:
        """POST requests received (answered or not)."""
        return len(self.records)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.records]

    @property
    def headers(self) -> list[dict[str, str]]:
        return [r["headers"] for r in self.records]

    @property
    def paths(self) -> list[str]:
        return [r["path"] for r in self.records]

    # -- the reply -------------------------------------------------------------------------

    def _reply(self, n: int, record: dict[str, Any], step: Step | None,
               generate: Callable[[float], bool]) -> tuple[int, bytes]:
        """(status, body) for the ``n``-th POST; status 0: close the connection without an answer."""
        body = record["body"]
        if not record["path"].rstrip("/").endswith("/chat/completions"):
            return _error(404, "NotFoundError", f"no route {record['path']}")
        if self.die_after is not None and n > self.die_after:
            self.die()
            return 0, b""
        limit = self.max_model_len
        if limit is not None and int(body.get("max_tokens") or 0) > limit:
            with self._lock:
                self.rejected += 1
            return _error(400, "BadRequestError", vllm_max_tokens_text(int(body["max_tokens"]), limit),
                          param="max_tokens")
        if self.reject_after is not None and n > self.reject_after:
            with self._lock:
                self.rejected += 1
            return _error(400, "BadRequestError", self.reject_text)
        if self.check_model and body.get("model") != self.model_id:
            return _error(404, "NotFoundError", f"The model `{body.get('model')}` does not exist.")
        if step is not None:
            status, payload, delay = step
            if delay and not generate(delay):
                return 0, b""
            return status, payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        if self.slow_s > 0 and n > self.slow_after and not generate(self.slow_s):
            return 0, b""
        data = json.dumps(self.answer(body, record)).encode()
        if self.garble is not None and self.garble(n):
            with self._lock:
                self.garbled += 1
            return 200, data[: len(data) // 2]
        return 200, data

    def answer(self, body: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
        """A chat completion from ``override`` or the simulated policy, its text and usage recorded."""
        meta = record["meta"]
        text = self.override(body, meta) if self.override else None
        if text is None:
            sampling = Sampling(max_tokens=int(body.get("max_tokens") or 16384))
            text = asyncio.run(self.policy.chat(body["messages"], sampling, int(body.get("seed") or 0), meta)).text
        usage = {"prompt_tokens": sum(count_tokens(content_text(m)) for m in body["messages"]),
                 "completion_tokens": count_tokens(text)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        record.update(text=text, usage=usage)
        reply: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": self.finish_reason}],
            "usage": usage}
        if self.simulated:
            reply["system_fingerprint"] = SIMULATED_FINGERPRINT
        return reply

    # -- life ------------------------------------------------------------------------------

    def die(self) -> None:
        """Stop listening, as a crashed engine: later connections are refused."""
        with self._lock:
            if self.dead:
                return
            self.dead = True
        threading.Thread(target=self._stop, daemon=True).start()

    def _stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.dead:
            self.dead = True
            self._stop()


def _error(status: int, kind: str, message: str, **extra: Any) -> tuple[int, bytes]:
    """vLLM's error body."""
    return status, json.dumps({"object": "error", "type": kind, **extra, "code": status, "message": message}).encode()


def _hung_up(conn: socket.socket) -> bool:
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
