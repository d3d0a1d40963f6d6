"""The simulated backend's names and client config, a leaf both ``opteval.sweepcore.backends.simulated``
and ``cluster/serve/sim_serving.py`` (the Serve app, which that backend imports to deploy) read, so
they do not import each other. Ray-free."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

# Keys of a model config's ``simulated`` section that are SimulatedModel settings (latency
# and policy) rather than SimSkill fields.
SIM_MODEL_KEYS = ("ttft_s", "tokens_per_s", "policy", "report_usage")


def simulated_app_name(model: str) -> str:
    """The Serve application of one simulated model."""
    return f"opteval-sim-{model}"


def sim_keys() -> set[str]:
    """Every key the ``simulated`` section takes: SimSkill's fields and the model settings."""
    # the simulator is a test double: imported only when a simulated model's config is checked,
    # so reading a config or planning a real model loads none of it
    from opteval.evalcore.sim.skill import SimSkill

    return {f.name for f in fields(SimSkill)} | set(SIM_MODEL_KEYS)


def simulated_client_config(model: Mapping[str, Any]) -> dict[str, Any]:
    """``{name, backend: simulated, skill: {SimSkill fields}, ttft_s, tokens_per_s, policy,
    report_usage}`` from a model config's ``simulated`` section (plain data)."""
    out: dict[str, Any] = {"name": str(model["name"]), "backend": "simulated"}
    sim = dict(model.get("simulated") or {})
    out.update({k: sim.pop(k) for k in SIM_MODEL_KEYS if k in sim})
    if sim:
        out["skill"] = sim
    return out
