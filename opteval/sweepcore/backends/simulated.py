"""``backend: simulated``: the simulated policy, served on Ray Serve as an OpenAI-compatible app
(its deployer: ``opteval.cluster.serve.deployers.SimulatedDeployer``).

``SIM_MODEL_KEYS``, ``sim_keys`` and ``simulated_app_name`` live in ``sim_config``,
which ``cluster/serve/sim_serving.py`` reads too without importing this module."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opteval.sweepcore.backends.base import Backend, Where
from opteval.sweepcore.backends.sim_config import sim_keys, simulated_client_config
from opteval.sweepcore.config_errors import hint


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
