"""``backend: simulated``: the simulated policy, served on Ray Serve as an OpenAI-compatible app.

``SIM_MODEL_KEYS``, ``sim_keys`` and ``simulated_app_name`` live in ``sim_config``,
which ``cluster/serve/sim_serving.py`` reads too without importing this module."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sweepcore.backends.base import Backend, Where
from sweepcore.backends.sim_config import sim_keys, simulated_app_name, simulated_client_config
from sweepcore.config_errors import hint

if TYPE_CHECKING:
    from sweepcore.endpoint import Endpoint

class SimulatedBackend(Backend):
    name = "simulated"
    section = "simulated"
    simulated = True
    serve = True

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        allowed = sim_keys()
        for key in dict(model.get("simulated") or {}):
            if key not in allowed:
                raise where.error(f"simulated.{key}", f"unknown key{hint(str(key), sorted(allowed))}")

    def client_config(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """``{name, backend, skill: {SimSkill fields}, ttft_s, tokens_per_s, policy, report_usage}``."""
        return simulated_client_config(model)

    def apps(self, models: Sequence[Mapping[str, Any]]) -> list[str]:
        return [simulated_app_name(str(m["name"])) for m in models]

    def handle_target(self, ep: Endpoint) -> tuple[str, str] | None:
        from cluster.serve.sim_serving import SimulatedOpenAI

        return (SimulatedOpenAI.name, ep.app_name) if ep.app_name else None  # type: ignore[attr-defined]

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        from cluster.serve.sim_serving import deploy_simulated  # Serve: imported when a stage deploys

        return {str(m["name"]): deploy_simulated(m, int(cfg.serving.http_port),
                                                 timeout_s=float(cfg.serving.request_timeout_s),
                                                 http_host=str(cfg.serving.http_host)) for m in models}
