"""The chat clients, one per backend name, and the flat configs they take.

A flat client config is ``{name, backend, <the backend's keys>}`` (``opteval.sweepcore.config``
builds it from a model YAML with ``flat_backend_config``; harness parameters such as
SemOPT's critic give one directly). Each :class:`Client` owns its keys, the ones it needs,
and how it builds its ``ChatModel``; a key it does not take is an error naming it. The
cluster's backend registry (``opteval.sweepcore.backends``) stands endpoints up; this is only the
calling side, so it needs no Ray.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from opteval.evalcore.models.base import ChatModel
from opteval.evalcore.models.openai_backend import OpenAIChatModel, OpenAISection
from opteval.evalcore.registry import resolve


@dataclass
class ReplaySection:
    """A model config's ``replay`` section."""

    path: str | None = None  # recorded completions (opteval.evalcore.models.replay), JSONL or Parquet


def _openai(cfg: dict[str, Any], pool_shards: int) -> ChatModel:
    kwargs = {k: v for k, v in cfg.items() if k not in ("name", "backend") and v is not None}
    return OpenAIChatModel(name=str(cfg["name"]), pool_shards=pool_shards, **kwargs)


def _replay(cfg: dict[str, Any], pool_shards: int) -> ChatModel:
    # deferred, no saving: models/__init__ imports replay itself
    from opteval.evalcore.models.replay import ReplayModel

    return ReplayModel.from_file(str(cfg["path"]), name=str(cfg["name"]))


def _simulated(cfg: dict[str, Any], pool_shards: int) -> ChatModel:
    # the test double, resolved by name only when a simulated model is built: an import statement
    # here would close a cycle (opteval.evalcore.sim.policy reads the harnesses' prompt formats, which
    # import opteval.evalcore.models)
    simulated_model = resolve("opteval.evalcore.sim.policy:SimulatedModel")
    model: ChatModel = simulated_model.from_config(cfg)
    return model  # it checks its own keys (SimSkill's fields)


@dataclass(frozen=True)
class Client:
    """One backend's calling side: its flat keys (None: the builder checks them), the keys it
    cannot do without, and the builder."""

    backend: str
    keys: frozenset[str] | None
    required: tuple[str, ...]
    build: Callable[[dict[str, Any], int], ChatModel]

    def check(self, cfg: Mapping[str, Any]) -> None:
        """Unknown or missing keys of a flat config: a ValueError naming the model and keys."""
        name = str(cfg.get("name") or "<unnamed>")
        if self.keys is not None:
            unknown = sorted(set(cfg) - self.keys - {"name", "backend"})
            if unknown:
                raise ValueError(f"model {name!r}: unknown key(s) {unknown} for backend {self.backend!r}; "
                                 f"allowed: {sorted(self.keys)}")
        missing = [k for k in self.required if cfg.get(k) in (None, "")]
        if missing:
            raise ValueError(f"model {name!r}: backend {self.backend!r} needs key(s) {missing}")

    def make(self, cfg: dict[str, Any], pool_shards: int = 1) -> ChatModel:
        self.check(cfg)
        return self.build(cfg, pool_shards)


def _keys(section: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(section))


CLIENTS: dict[str, Client] = {
    # extra_body: request fields the model always sends (vLLM's chat_template_kwargs, or
    # ``{top_k: null}`` for a hosted API that rejects top_k); the model YAML gives it as
    # ``sampling.extra_body``.
    "openai": Client("openai", _keys(OpenAISection) | {"extra_body"}, ("base_url", "model_id"), _openai),
    "replay": Client("replay", _keys(ReplaySection), ("path",), _replay),
    "simulated": Client("simulated", None, (), _simulated),
}
