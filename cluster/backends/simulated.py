"""``backend: simulated``: the simulated policy, served on Ray Serve as an OpenAI-compatible app."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from cluster.backends.base import Backend, Where

if TYPE_CHECKING:
    from cluster.endpoint import Endpoint

# Keys of a model config's ``simulated`` section that are SimulatedModel settings (latency
# and policy) rather than SimSkill fields.
SIM_MODEL_KEYS = ("ttft_s", "tokens_per_s", "policy", "report_usage")


def simulated_app_name(model: str) -> str:
    """The Serve application of one simulated model."""
    return f"opteval-sim-{model}"


def sim_keys() -> set[str]:
    """Every key the ``simulated`` section takes: SimSkill's fields and the model settings."""
    from evalcore.models.simulated import SimSkill

    return {f.name for f in fields(SimSkill)} | set(SIM_MODEL_KEYS)


class SimulatedBackend(Backend):
    name = "simulated"
    section = "simulated"
    simulated = True
    serve = True

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        allowed = sim_keys()
        for key in dict(model.get("simulated") or {}):
            if key not in allowed:
                from cluster.config import _hint

                raise where.error(f"simulated.{key}", f"unknown key{_hint(str(key), sorted(allowed))}")

    def client_config(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """``{name, backend, skill: {SimSkill fields}, ttft_s, tokens_per_s, policy, report_usage}``."""
        out = super().client_config(model)
        sim = dict(model.get("simulated") or {})
        out.update({k: sim.pop(k) for k in SIM_MODEL_KEYS if k in sim})
        if sim:
            out["skill"] = sim
        return out

    def apps(self, models: Sequence[Mapping[str, Any]]) -> list[str]:
        return [simulated_app_name(str(m["name"])) for m in models]

    def handle_target(self, ep: Endpoint) -> tuple[str, str] | None:
        from cluster.sim_serving import SimulatedOpenAI

        return (SimulatedOpenAI.name, ep.app_name) if ep.app_name else None  # type: ignore[attr-defined]

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        from cluster.sim_serving import deploy_simulated  # Serve: imported when a stage deploys

        return {str(m["name"]): deploy_simulated(m, int(cfg.serving.http_port),
                                                 timeout_s=float(cfg.serving.request_timeout_s),
                                                 http_host=str(cfg.serving.http_host)) for m in models}
