"""A small OpenAI-compatible server on 127.0.0.1 that misbehaves the ways real servers do.

Why: the simulated policy never refuses a request, never truncates and never dies; a real
vLLM does all three (issue 27). Modes, combinable:

- ``max_model_len``: ``GET /v1/models`` reports it (as vLLM does), and a chat request whose
  ``max_tokens`` exceeds it is refused with HTTP 400 and vLLM's error text;
- ``die_after``: after that many chat requests the server stops listening (the request that
  crossed the line gets its connection closed without an answer), as a crashed engine;
- ``reject_after``: every chat request after that many is refused with HTTP 400 and
  ``reject_text`` (a server that accepted the preflight and then refuses every call);
- ``slow_s``: each reply after the first ``slow_after`` waits that long, watching its connection:
  a client that hangs up is seen at once (vLLM aborts such a request), so ``open`` counts
  requests still generating;
- ``finish_reason``: what every completion reports (``length`` = truncated at max_tokens);
- ``garble``: a function of the chat request's number (1, 2, ...); where it says True the reply
  is a 200 whose JSON body is cut in half (a proxy or engine that dropped the end), counted in
  ``garbled``;
- ``check_model``: a request for another model id is answered 404 (as vLLM does).

Replies come from the simulated policy (it reads the harness and stage from the headers), so
the harnesses run normally; every request body is recorded in ``records``.
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
from opteval.evalcore.models.openai_backend import HARNESS_HEADER, STAGE_HEADER
from opteval.evalcore.sim.policy import SimulatedModel, content_text, count_tokens


def vllm_max_tokens_text(max_tokens: int, max_model_len: int) -> str:
    """vLLM's refusal of a ``max_tokens`` above the context (0.x serving_engine wording)."""
    return (f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
            f"context length is {max_model_len} tokens (max_tokens cannot be greater than max_model_len)")


class MisbehavingServer:
    def __init__(self, *, max_model_len: int | None = None, die_after: int | None = None,
                 slow_s: float = 0.0, slow_after: int = 0, finish_reason: str = "stop",
                 model_id: str = "misbehaving", report_max_model_len: bool = True,
                 reject_after: int | None = None, reject_text: str = "seed is not supported",
                 garble: Callable[[int], bool] | None = None, check_model: bool = False) -> None:
        self.max_model_len = max_model_len
        self.report_max_model_len = report_max_model_len
        self.die_after = die_after
        self.slow_s = slow_s
        self.slow_after = slow_after
        self.reject_after = reject_after
        self.reject_text = reject_text
        self.finish_reason = finish_reason
        self.garble = garble
        self.garbled = 0
        self.check_model = check_model
        self.model_id = model_id
        self.policy = SimulatedModel()
        self.records: list[dict[str, Any]] = []
        self.rejected = 0
        self.open = 0  # chat requests still generating (a hung-up client's is no longer counted)
        self.aborted = 0  # requests whose client hung up before the reply
        self.dead = False
        self._chats = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
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
                with server._lock:
                    server._chats += 1
                    n = server._chats
                    server.records.append({"body": body, "headers": headers})
                if server.die_after is not None and n > server.die_after:
                    server.die()
                    self.close_connection = True
                    return
                limit = server.max_model_len
                if limit is not None and int(body.get("max_tokens") or 0) > limit:
                    with server._lock:
                        server.rejected += 1
                    self._send(400, {"object": "error", "type": "BadRequestError", "param": "max_tokens", "code": 400,
                                     "message": vllm_max_tokens_text(int(body["max_tokens"]), limit)})
                    return
                if server.reject_after is not None and n > server.reject_after:
                    with server._lock:
                        server.rejected += 1
                    self._send(400, {"object": "error", "type": "BadRequestError", "code": 400,
                                     "message": server.reject_text})
                    return
                if server.check_model and body.get("model") != server.model_id:
                    self._send(404, {"object": "error", "type": "NotFoundError", "code": 404,
                                     "message": f"The model `{body.get('model')}` does not exist."})
                    return
                if server.slow_s > 0 and n > server.slow_after and not self._generate(server.slow_s):
                    return
                reply = server.answer(body, headers)
                if server.garble is not None and server.garble(n):
                    with server._lock:
                        server.garbled += 1
                    data = json.dumps(reply).encode()
                    self._send_raw(200, data[: len(data) // 2])
                    return
                self._send(200, reply)

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
                            self.close_connection = True
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
                except OSError:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def chats(self) -> int:
        return self._chats

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        harness = headers.get(HARNESS_HEADER.lower())
        meta = CallMeta(harness, headers.get(STAGE_HEADER.lower()) or "act") if harness else None
        sampling = Sampling(max_tokens=int(body.get("max_tokens") or 16384))
        text = asyncio.run(self.policy.chat(body["messages"], sampling, int(body.get("seed") or 0), meta)).text
        usage = {"prompt_tokens": sum(count_tokens(content_text(m)) for m in body["messages"]),
                 "completion_tokens": count_tokens(text)}
        return {"id": "chatcmpl-mis", "object": "chat.completion", "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": self.finish_reason}],
                "usage": usage}

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

    def __enter__(self) -> MisbehavingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.dead:
            self.dead = True
            self._stop()


def _hung_up(conn: socket.socket) -> bool:
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
