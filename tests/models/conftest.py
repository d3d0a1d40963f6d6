"""A tiny chat-completions server on 127.0.0.1 for backend tests (http.server in a thread).

Each request pops the next scripted step: ``(status, body_dict, delay_s)`` (raw ``bytes`` for
a body that is not JSON, e.g. a truncated one); when the script is empty the last step repeats.
Every request body and header set is recorded.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def chat_response(content: str = "hello", usage: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
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


class FakeOpenAIServer:
    def __init__(self, port: int = 0) -> None:
        self.script: list[tuple[int, dict[str, Any] | bytes, float]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(payload)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.paths.append(self.path)
                    step = server.script.pop(0) if len(server.script) > 1 else server.script[0]
                status, body, delay = step
                if delay:
                    time.sleep(delay)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


import pytest  # noqa: E402


@pytest.fixture
def fake_server():
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def make_response():
    return chat_response


# -- hand-made completions shared by the extraction and regrade tests ---------------------

COPT_LP = '''import coptpy as cp
from coptpy import COPT

env = cp.Envr()
{name} = env.createModel("lp")
x = {name}.addVar(lb=0, name="x")
y = {name}.addVar(lb=0, name="y")
{name}.addConstr(x + y <= 4)
{name}.addConstr(x + 3 * y <= 6)
{extra}
{name}.setObjective(3 * x + 2 * y, COPT.MAXIMIZE)
{name}.solve()
'''


def copt_completion(name: str = "model", infeasible: bool = False) -> str:
    """An ORLM-style completion: prose, a ```python coptpy block (optimum 12), prose."""
    extra = f"{name}.addConstr(x + y >= 5)" if infeasible else ""
    code = COPT_LP.format(name=name, extra=extra)
    return f"Let x, y be the amounts.\n\n```python\n{code}```\n\nThe model is solved above."


SYNTAX_ERROR_COMPLETION = "Here is the code:\n```python\nimport coptpy as cp\nmodel = cp.Envr().createModel(\nprint('x'\n```\n"
NO_CODE_COMPLETION = "The optimal value is 12, obtained by producing 4 units of x."


@pytest.fixture
def completions():
    return {
        "copt": copt_completion,
        "syntax_error": SYNTAX_ERROR_COMPLETION,
        "no_code": NO_CODE_COMPLETION,
    }
