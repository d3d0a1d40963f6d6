"""The backend registry: how each model is configured, placed and called (Ray-free specs).

``backend_of(model, serving)`` is the one place a model's ``backend`` key is looked at;
everything else asks the backend it returns (``simulated``, ``serve``, ``on_gpus``, ``gpus``,
``client_config`` ...). Backends: ``simulated`` (the simulated policy on Serve),
``openai`` (an external OpenAI-compatible URL), ``vllm`` (``ray.serve.llm`` on this cluster's
GPUs), ``replay`` (recorded completions, in the worker) and the stand-in (``serving.standin``:
the vLLM placement answered by the simulated policy; not a ``backend`` value of its own).
Standing a model's endpoint up is its deployer's: ``opteval.cluster.serve.deployers.DEPLOYERS`` has one
per name here (docs/extending.md: a new backend is a spec here plus a deployer there).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opteval.evalcore.models import BACKEND_KEY
from opteval.sweepcore.backends.base import Backend, Where
from opteval.sweepcore.backends.openai import OpenAIBackend
from opteval.sweepcore.backends.replay import ReplayBackend
from opteval.sweepcore.backends.simulated import SimulatedBackend
from opteval.sweepcore.backends.vllm import STANDIN, StandinBackend, VllmBackend

__all__ = ["BACKEND_KEY", "BACKENDS", "STANDIN", "Backend", "OpenAIBackend", "ReplayBackend", "SimulatedBackend",
           "StandinBackend", "VllmBackend", "Where", "backend_of", "by_backend", "is_simulated",
           "serves_on_gpus"]

BACKENDS: dict[str, Backend] = {b.name: b for b in (SimulatedBackend(), OpenAIBackend(), VllmBackend(),
                                                    ReplayBackend())}


def backend_of(model: Mapping[str, Any], serving: Any = None) -> Backend:
    """The backend serving ``model`` (a model config, plain or DictConfig) under ``serving`` (the
    sweep's ``serving`` section; None: as configured, no stand-in)."""
    name = str(model[BACKEND_KEY])
    if name not in BACKENDS:
        raise KeyError(f"model {model.get('name')!r}: unknown backend {name!r}; known: {sorted(BACKENDS)}")
    return BACKENDS[name].for_serving(serving)


def by_backend(models: list[dict[str, Any]], serving: Any) -> list[tuple[Backend, list[dict[str, Any]]]]:
    """Models grouped by the backend that serves them, in order of first appearance."""
    groups: dict[str, tuple[Backend, list[dict[str, Any]]]] = {}
    for m in models:
        b = backend_of(m, serving)
        groups.setdefault(b.name, (b, []))[1].append(m)
    return list(groups.values())


def is_simulated(model: Mapping[str, Any]) -> bool:
    """Whether the model's configured backend is the simulated policy (its rows say so); a config
    without a known backend (an old manifest's) is not."""
    backend = BACKENDS.get(str(model.get(BACKEND_KEY)))
    return backend is not None and backend.simulated


def serves_on_gpus(models: list[Mapping[str, Any]]) -> bool:
    """Whether any of these models is served on this cluster's GPUs (vLLM or its stand-in)."""
    return any(backend_of(m).on_gpus for m in models)
