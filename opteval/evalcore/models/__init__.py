"""Chat-model backends and the factory that builds one from a flat client config.

``make_model(cfg)`` looks ``cfg["backend"]`` up in ``opteval.evalcore.models.clients.CLIENTS``:

- ``openai``: ``OpenAIChatModel`` -- keys ``name, base_url, model_id, api_key_env,
  timeout_s, max_retries, backoff_s, extra_body``;
- ``replay``: ``ReplayModel.from_file`` -- keys ``name, path``;
- ``simulated``: ``SimulatedModel.from_config(cfg)`` (imported only when used; it
  validates its own keys).

A key a backend does not take is an error naming it, so a misspelled key never fails
silently.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opteval.evalcore.models.base import CallMeta, ChatModel, Completion, Message, ModelError, Sampling, Usage
from opteval.evalcore.models.clients import CLIENTS
from opteval.evalcore.models.openai_backend import OpenAIChatModel
from opteval.evalcore.models.replay import BoundReplayModel, ReplayModel

__all__ = [
    "CallMeta", "ChatModel", "Completion", "Message", "ModelError", "Sampling", "Usage",
    "OpenAIChatModel", "ReplayModel", "BoundReplayModel", "make_model", "BACKENDS",
]

BACKENDS = tuple(CLIENTS)
BACKEND_KEY = "backend"  # the flat config's key naming its entry of CLIENTS


def make_model(model_cfg: Mapping[str, Any] | Any, *, pool_shards: int = 1) -> ChatModel:
    """Build the ChatModel a flat config describes (a dict or an OmegaConf DictConfig).

    ``pool_shards`` spreads an HTTP client's requests over that many connection pools
    (``OpenAIChatModel``); in-process backends ignore it."""
    cfg = _plain(model_cfg)
    name = str(cfg.get("name") or "<unnamed>")
    backend = cfg.get(BACKEND_KEY)
    client = CLIENTS.get(str(backend)) if backend is not None else None
    if client is None:
        raise ValueError(
            f"model {name!r}: unknown backend {backend!r} (config key 'backend'); expected one of {list(BACKENDS)}"
        )
    return client.make(cfg, pool_shards)


def _plain(model_cfg: Any) -> dict[str, Any]:
    if isinstance(model_cfg, Mapping) and not hasattr(model_cfg, "_metadata"):
        return dict(model_cfg)
    from omegaconf import OmegaConf  # DictConfig -> plain dict, interpolations resolved

    plain = OmegaConf.to_container(model_cfg, resolve=True)
    if not isinstance(plain, dict):
        raise TypeError(f"model config must be a mapping, got {type(plain).__name__}")
    return {str(k): v for k, v in plain.items()}
