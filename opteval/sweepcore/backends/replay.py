"""``backend: replay``: recorded completions, answered inside the worker (no endpoint)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opteval.sweepcore.backends.base import Backend, Where


class ReplayBackend(Backend):
    name = "replay"
    section = "replay"
    in_process = True

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        if not dict(model.get("replay") or {}).get("path"):
            raise where.error("replay.path", "the replay backend needs replay.path")

    def client_config(self, model: Mapping[str, Any]) -> dict[str, Any]:
        out = super().client_config(model)
        out.update({k: v for k, v in dict(model.get("replay") or {}).items() if v is not None})
        return out
