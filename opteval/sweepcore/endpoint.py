"""How a worker reaches one model: an :class:`Endpoint`, and the chat client it builds.

A leaf module (no import of the serving modules, no Ray): the backends that stand an
endpoint up (``opteval.sweepcore.backends``), the Serve apps (``opteval.cluster.serve.serving``,
``opteval.cluster.serve.llm_serving``) and the workers all import it, and none of them imports another
through it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opteval.evalcore.models import make_model
from opteval.evalcore.models.base import ChatModel
from opteval.evalcore.models.openai_backend import OpenAIChatModel

# serving.route: how workers reach the apps this cluster deployed (opteval.cluster.serve.serve_handle)
HANDLE_ROUTE = "handle"  # a Serve deployment handle: no HTTP proxy on the way
HTTP_ROUTE = "http"  # the Serve HTTP proxy, as an endpoint elsewhere is reached
ROUTES = (HANDLE_ROUTE, HTTP_ROUTE)
# How long a call to an app this cluster deployed waits for a refusing HTTP route before it
# spends an attempt: Serve replaces a dead proxy after its failed health checks (about 30-40 s
# with opteval.cluster.runtime.SERVE_PATIENCE_ENV), longer than a call's four retries last.
SERVE_ROUTE_WAIT_S = 180.0


@dataclass(frozen=True)
class Endpoint:
    """How a worker reaches one model. ``base_url`` None means an in-process backend (replay)."""

    name: str
    base_url: str | None
    model_id: str
    simulated: bool = False
    api_key_env: str | None = None
    timeout_s: float = 600.0
    max_retries: int = 4
    extra_body: dict[str, Any] = field(default_factory=dict)
    model_cfg: dict[str, Any] | None = None  # only for in-process backends
    app_name: str | None = None  # the Serve application we deployed for it, if any
    backoff_s: float | None = None  # first retry delay; None = the client's default
    # (deployment, app) when workers call an app this cluster deployed through a Serve handle
    # (serving.route=handle, opteval.cluster.serve.serve_handle); None: over HTTP or in process
    handle: tuple[str, str] | None = None

    def __hash__(self) -> int:  # extra_body is a dict; identity is the name and URL
        return hash((self.name, self.base_url, self.model_id))

    def client(self, pool_shards: int = 1) -> ChatModel:
        """The chat client for this endpoint: OpenAI-compatible HTTP when it has a URL, else the
        in-process backend its flat config names (``opteval.evalcore.models.make_model``)."""
        if not self.base_url:
            return make_model(dict(self.model_cfg or {}))
        cfg: dict[str, Any] = {"name": self.name, "backend": "openai", "base_url": self.base_url,
                               "model_id": self.model_id, "api_key_env": self.api_key_env or "",
                               "timeout_s": self.timeout_s, "max_retries": self.max_retries,
                               "backoff_s": self.backoff_s, "extra_body": dict(self.extra_body or {})}
        model = make_model({k: v for k, v in cfg.items() if v is not None}, pool_shards=pool_shards)
        if self.app_name and isinstance(model, OpenAIChatModel):
            # our own Serve proxy: a refused connection is a proxy being replaced (not a model
            # config key: no YAML sets it, so no sweep's fingerprint depends on it)
            model.route_wait_s = SERVE_ROUTE_WAIT_S
        return model


def client_host(http_host: str) -> str:
    """Where a worker reaches its node's proxy: loopback unless the proxy binds one address."""
    return "127.0.0.1" if str(http_host) in ("0.0.0.0", "::", "", "localhost") else str(http_host)


def serve_url(port: int, prefix: str = "", host: str = "127.0.0.1") -> str:
    """The OpenAI base URL of a Serve route on this node's proxy."""
    return f"http://{client_host(host)}:{port}{prefix}/v1"
