"""A recording HTTP relay between the sweep and Ray Serve (a test tool, not a fake: every byte is
the real server's). The sweep's ``serving.http_port`` names the relay; Serve listens on another
port, started first (``ensure_serve`` leaves a running Serve alone), so every request the sweep
makes (readiness probes, preflight, trajectory calls) passes through here and is recorded with
the server's answer: what vLLM reported, read from its responses, not recomputed."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


@dataclass
class Exchange:
    """One request and the server's answer."""

    t_sent: float
    t_answered: float
    method: str
    path: str
    headers: dict[str, str]
    request: Any  # the JSON body, or None
    status: int
    response: Any  # the JSON answer, or the text


@dataclass
class RecordingProxy:
    upstream: str  # http://127.0.0.1:<serve port>
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> int:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet
                return

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                t0 = time.time()
                try:
                    r = httpx.request(self.command, proxy.upstream + self.path, content=body, headers=headers,
                                      timeout=httpx.Timeout(3600.0, connect=30.0))
                    status, content = r.status_code, r.content
                    out_headers = {k: v for k, v in r.headers.items() if k.lower() not in HOP_HEADERS}
                except httpx.HTTPError as exc:
                    status, content, out_headers = 502, f"relay: {exc}".encode(), {}
                proxy.record(Exchange(t0, time.time(), self.command, self.path, dict(self.headers.items()),
                                      _json(body), status, _json(content) if content else None))
                self.send_response(status)
                for k, v in out_headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return int(self.server.server_address[1])

    def record(self, ex: Exchange) -> None:
        with self.lock:
            self.exchanges.append(ex)

    def chats(self) -> list[Exchange]:
        with self.lock:
            return [e for e in self.exchanges if e.path.endswith("/chat/completions")]

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
