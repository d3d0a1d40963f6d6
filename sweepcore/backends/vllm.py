"""``backend: vllm``: one ``ray.serve.llm`` application per model (and per extra replica group)
on this cluster's GPUs, and its stand-in (``serving.standin``): the same placement answered by
the simulated policy. An app per model, so the continuous schedule tears one model down while
the others keep serving."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sweepcore.backends.base import Backend, Where

if TYPE_CHECKING:
    from sweepcore.endpoint import Endpoint

LLM_APP_NAME = "opteval-llm"


class VllmBackend(Backend):
    name = "vllm"
    asks_server = True
    section = "vllm"
    serve = True
    on_gpus = True
    standin = False  # whether the replicas answer with the simulated policy

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        if not dict(model.get("vllm") or {}).get("source"):
            raise where.error("vllm.source", "the vllm backend needs vllm.source")

    def for_serving(self, serving: Any) -> Backend:
        return STANDIN if serving is not None and bool(serving.standin) else self

    def gpus(self, model: Mapping[str, Any]) -> int:
        from cluster.serve.llm_serving import stage_gpus

        return stage_gpus(model)

    def preflight(self) -> None:
        from cluster.serve.llm_serving import require_vllm

        require_vllm()

    def apps(self, models: Sequence[Mapping[str, Any]]) -> list[str]:
        from cluster.serve.llm_serving import llm_app_name

        return [llm_app_name(str(m["name"])) for m in models]

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        eps: dict[str, Endpoint] = {}
        for m in models:
            eps.update(self.deploy_group(m, cfg, 0))
        return eps

    def deploy_group(self, model: dict[str, Any], cfg: Any, group: int) -> dict[str, Endpoint]:
        """One replica group of one model as its own app (group 0: the model's first)."""
        from cluster.serve import llm_serving  # vLLM itself only when the app is built
        from sweepcore.endpoint import client_host

        name = str(model["name"])
        return llm_serving.deploy_stage([model], cfg, app_name=llm_serving.llm_app_name(name, group),
                                        route_prefix=llm_serving.llm_route_prefix(name, group), standin=self.standin,
                                        host=client_host(str(cfg.serving.http_host)))


class StandinBackend(VllmBackend):
    """The vLLM placement (GPUs, CPUs, strategy, replicas) with simulated answers: rehearses
    stages, placement, readiness and teardown on fake GPUs, without vLLM."""

    name = "standin"
    asks_server = False  # the simulated stand-in never refuses
    simulated = True
    standin = True

    def preflight(self) -> None:
        """Stand-ins need no vLLM."""

    def handle_target(self, ep: Endpoint) -> tuple[str, str] | None:
        """Each model's StandinServer replica directly, past the stand-in ingress."""
        from cluster.serve.llm_serving import server_deployment_name

        return (server_deployment_name(ep.model_id), ep.app_name) if ep.app_name else None


STANDIN = StandinBackend()
