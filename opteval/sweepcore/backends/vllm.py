"""``backend: vllm``: one ``ray.serve.llm`` application per model (and per extra replica group)
on this cluster's GPUs, and its stand-in (``serving.standin``): the same placement answered by
the simulated policy. An app per model, so the continuous schedule tears one model down while
the others keep serving. The apps themselves are ``opteval.cluster.serve.deployers.VllmDeployer``'s."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opteval.sweepcore.backends.base import Backend, Where
from opteval.sweepcore.model_sections import check_vllm_section
from opteval.sweepcore.placement import stage_gpus


class VllmBackend(Backend):
    name = "vllm"
    asks_server = True
    section = "vllm"
    serve = True
    on_gpus = True

    def check(self, model: Mapping[str, Any], where: Where) -> None:
        vc = dict(model.get("vllm") or {})
        if not vc.get("source"):
            raise where.error("vllm.source", "the vllm backend needs vllm.source")
        check_vllm_section(vc, where.error)

    def for_serving(self, serving: Any) -> Backend:
        return STANDIN if serving is not None and bool(serving.standin) else self

    def gpus(self, model: Mapping[str, Any]) -> int:
        return stage_gpus(model)


class StandinBackend(VllmBackend):
    """The vLLM placement (GPUs, CPUs, strategy, replicas) with simulated answers: rehearses
    stages, placement, readiness and teardown on fake GPUs, without vLLM."""

    name = "standin"
    asks_server = False  # the simulated stand-in never refuses
    simulated = True


STANDIN = StandinBackend()
