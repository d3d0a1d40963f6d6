"""Chat-model backends and the factory that builds one from a model config.

``make_model(cfg)`` dispatches on ``cfg["backend"]``:

- ``openai``: ``OpenAIChatModel`` -- keys ``name, base_url, model_id, api_key_env,
  timeout_s, max_retries, backoff_s, extra_body``;
- ``replay``: ``ReplayModel.from_file`` -- keys ``name, path``;
- ``simulated``: ``SimulatedModel.from_config(cfg)`` (imported only when used; it
  validates its own keys).

Keys a backend does not take are an error naming them, so a misspelled key never
fails silently. Deployment settings for the cluster (``serving``, ``engine_kwargs``,
``deployment``) and free text (``description``) are ignored here.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalcore.models.base import CallMeta, ChatModel, Completion, Message, ModelError, Sampling, Usage
from evalcore.models.openai_backend import OpenAIChatModel
from evalcore.models.replay import BoundReplayModel, ReplayModel

__all__ = [
    "CallMeta", "ChatModel", "Completion", "Message", "ModelError", "Sampling", "Usage",
    "OpenAIChatModel", "ReplayModel", "BoundReplayModel", "make_model", "BACKENDS",
]

BACKENDS = ("openai", "replay", "simulated")
IGNORED_KEYS = frozenset({"serving", "engine_kwargs", "deployment", "description"})
_OPENAI_KEYS = frozenset({"base_url", "model_id", "api_key_env", "timeout_s", "max_retries", "backoff_s", "extra_body"})
_REPLAY_KEYS = frozenset({"path"})


def make_model(model_cfg: Mapping[str, Any] | Any) -> ChatModel:
    """Build the ChatModel a model config describes (a dict or an OmegaConf DictConfig)."""
    cfg = _plain(model_cfg)
    name = str(cfg.get("name") or "<unnamed>")
    backend = cfg.get("backend")
    if backend == "simulated":
        from evalcore.models.simulated import SimulatedModel  # lazy: tests/demo only

        return SimulatedModel.from_config(cfg)
    if backend == "openai":
        kwargs = _backend_kwargs(cfg, name, backend, _OPENAI_KEYS, required=("base_url", "model_id"))
        return OpenAIChatModel(name=name, **kwargs)
    if backend == "replay":
        kwargs = _backend_kwargs(cfg, name, backend, _REPLAY_KEYS, required=("path",))
        return ReplayModel.from_file(kwargs["path"], name=name)
    raise ValueError(
        f"model {name!r}: unknown backend {backend!r} (config key 'backend'); expected one of {list(BACKENDS)}"
    )


def _plain(model_cfg: Any) -> dict[str, Any]:
    if isinstance(model_cfg, Mapping) and not hasattr(model_cfg, "_metadata"):
        return dict(model_cfg)
    from omegaconf import OmegaConf  # DictConfig -> plain dict, interpolations resolved

    plain = OmegaConf.to_container(model_cfg, resolve=True)
    if not isinstance(plain, dict):
        raise TypeError(f"model config must be a mapping, got {type(plain).__name__}")
    return plain


def _backend_kwargs(
    cfg: dict[str, Any], name: str, backend: str, allowed: frozenset[str], required: tuple[str, ...]
) -> dict[str, Any]:
    unknown = sorted(set(cfg) - allowed - IGNORED_KEYS - {"name", "backend"})
    if unknown:
        raise ValueError(
            f"model {name!r}: unknown key(s) {unknown} for backend {backend!r}; allowed: {sorted(allowed)}"
        )
    missing = [key for key in required if cfg.get(key) in (None, "")]
    if missing:
        raise ValueError(f"model {name!r}: backend {backend!r} needs key(s) {missing}")
    return {key: cfg[key] for key in allowed if key in cfg and cfg[key] is not None}
