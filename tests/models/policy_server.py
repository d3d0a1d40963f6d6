"""An OpenAI-compatible chat server on 127.0.0.1 that answers with the simulated policy and
records every request (body and headers) and the usage it reported.

Why not the Serve app: tests of what a sweep *sends* need a server outside Ray that sees the
raw HTTP requests. It reads the harness/stage side channel from the ``X-Opteval-*`` headers,
exactly as the simulated Serve app does; ``override(body, meta)`` may script a reply instead.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opteval.evalcore.models.base import CallMeta, Sampling
from opteval.evalcore.models.openai_backend import HARNESS_HEADER, SIMULATED_FINGERPRINT, STAGE_HEADER
from opteval.evalcore.sim.policy import SimulatedModel, content_text, count_tokens

Override = Callable[[dict[str, Any], "CallMeta | None"], "str | None"]


class PolicyServer:
    def __init__(self, policy: SimulatedModel | None = None, override: Override | None = None) -> None:
        self.policy = policy or SimulatedModel()
        self.override = override
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server.answer(body, headers)
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        harness = headers.get(HARNESS_HEADER.lower())
        meta = CallMeta(harness, headers.get(STAGE_HEADER.lower()) or "act") if harness else None
        text = self.override(body, meta) if self.override else None
        if text is None:
            sampling = Sampling(max_tokens=int(body.get("max_tokens") or 16384))
            text = asyncio.run(self.policy.chat(body["messages"], sampling, int(body.get("seed") or 0), meta)).text
        usage = {"prompt_tokens": sum(count_tokens(content_text(m)) for m in body["messages"]),
                 "completion_tokens": count_tokens(text)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self._lock:
            self.records.append({"body": body, "headers": headers, "meta": meta, "usage": usage, "text": text})
        return {"id": "chatcmpl-rec", "object": "chat.completion", "model": body.get("model"),
                "system_fingerprint": SIMULATED_FINGERPRINT,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage}

    def __enter__(self) -> PolicyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
