"""What every backend's spec owns: its model-config section, its checks, its GPUs, its client config
and the flags the driver branches on.

A backend spec is stateless; the registry (``opteval.sweepcore.backends``) holds one instance of each.
None of it needs Ray (``plan_only`` runs and ``opteval.sweepcore.config`` use it); standing an endpoint up
does, so that half of a backend is its deployer in ``opteval.cluster.serve.deployers`` (``DEPLOYERS``,
keyed by the same name).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from opteval.sweepcore.config_errors import ConfigError


@dataclass(frozen=True)
class Where:
    """Where a model config came from, so an error names the key there:
    ``openai.base_url [configs/models/x.yaml]: ...`` for a model file, ``models[0].openai.base_url:
    ... [command line]`` for a model given in the sweep config."""

    source: str
    prefix: str = ""  # "models[i]." for a model given in the sweep config

    def error(self, key: str, msg: str) -> ConfigError:
        if not self.prefix:
            return ConfigError(f"{key} [{self.source}]: {msg}")
        return ConfigError(f"{self.prefix}{key}: {msg} [{self.source}]")


class Backend:
    """One way of reaching a model. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    section: ClassVar[str | None] = None  # the model config's section this backend reads
    simulated: ClassVar[bool] = False  # its answers are the simulated policy's (outputs say so)
    serve: ClassVar[bool] = False  # stands a Ray Serve app up in this cluster
    on_gpus: ClassVar[bool] = False  # its replicas hold GPUs: staged by GPU packing, deployed last
    in_process: ClassVar[bool] = False  # no endpoint at all: the worker calls it in its own process
    # its endpoint is an OpenAI-compatible server that may refuse a request shape: checked by the
    # driver's preflight before the model's first trajectory (cluster/driver/preflight.py)
    asks_server: ClassVar[bool] = False

    # -- configuration ----------------------------------------------------------------------

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        """Refuse, at config load, a model config this backend cannot use (``model`` is plain data,
        already typed by ``opteval.sweepcore.config.ModelConfig``)."""

    def client_config(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """The flat config ``opteval.evalcore.models.make_model`` takes for this model."""
        return {"name": str(model["name"]), "backend": self.name}

    def for_serving(self, serving: Any) -> Backend:
        """The backend that actually serves under these ``serving`` settings (vLLM -> stand-in)."""
        return self

    # -- resources ----------------------------------------------------------------------------

    def gpus(self, model: Mapping[str, Any]) -> int:
        """GPUs the model holds while its stage runs."""
        return 0
