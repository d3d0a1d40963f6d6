"""``ServeFleet``: the schedule's hands on Ray Serve, one model's apps at a time.

Why its own module: the schedule (``opteval.cluster.driver.schedule``) is pure asyncio and replayed by
the bench on fake replicas; this is the real side. Each model is one app per replica group
(``opteval.cluster.serve.llm_serving.llm_app_name``), deployed with exactly the replicas the schedule gives
it (``with_replicas``), its placement checked against the free resources of the alive nodes
before deploying (``plan_placement``, counting the groups still coming up), ready when Serve
says RUNNING and a 1-token request answers, and torn down as a whole (every group, prefix-tree
actors included) the moment the model is done. Blocking Serve calls run in threads.
"""
from __future__ import annotations

import asyncio
from typing import Any

from opteval.cluster.driver.schedule import ModelWork
from opteval.cluster.serve import llm_serving
from opteval.cluster.serve.deployers import deployer_of
from opteval.cluster.serve.serving import cluster_gpus, deploy_stage, ensure_serve, teardown_stage, with_routes
from opteval.sweepcore.backends import backend_of
from opteval.sweepcore.endpoint import Endpoint
from opteval.sweepcore.placement import plan_placement, with_replicas


class ServeFleet:
    """Deploys and tears down one model's Serve apps at a time (see the module docstring)."""

    def __init__(self, cfg: Any, models: list[dict[str, Any]]) -> None:
        self.cfg = cfg
        self.total_gpus = cluster_gpus(cfg)
        self.endpoints: dict[str, list[Endpoint]] = {}
        self.coming: dict[tuple[str, int], dict[str, Any]] = {}  # placed on paper, not yet visible in Ray
        if any(backend_of(m, cfg.serving).serve for m in models):
            ensure_serve(int(cfg.serving.http_port), str(cfg.serving.http_host))

    def fits(self, model: ModelWork, replicas: int) -> bool:
        """``replicas`` more replicas of ``model`` fit the free resources now (the real placement
        rules), after the groups still coming up have taken theirs."""
        if not model.gpus_per_replica:
            return True
        want = [*self.coming.values(), with_replicas(model.cfg, replicas)]
        return not plan_placement(want, self.cfg.serving, llm_serving._free_nodes())

    async def deploy(self, model: ModelWork, replicas: int, group: int) -> Endpoint:
        cfg = model.cfg
        backend = backend_of(cfg, self.cfg.serving)
        if backend.on_gpus:
            cfg = with_replicas(cfg, replicas)
        self.coming[(model.name, group)] = cfg
        try:
            if group:
                eps = await asyncio.to_thread(deployer_of(backend).deploy_group, cfg, self.cfg, group)  # type: ignore[attr-defined]
                eps = with_routes(eps, [(backend, [cfg])], self.cfg.serving)
            else:
                eps = await asyncio.to_thread(deploy_stage, [cfg], self.cfg)
        finally:
            self.coming.pop((model.name, group), None)
        ep = eps[model.name]
        self.endpoints.setdefault(model.name, []).append(ep)
        return ep

    async def teardown(self, model: ModelWork) -> list[str]:
        """Every app of the model (a half-deployed one included) deleted; blocking, so its GPUs
        are free when this returns."""
        eps = {f"{model.name}#{i}": ep for i, ep in enumerate(self.endpoints.pop(model.name, []))}
        return await asyncio.to_thread(teardown_stage, eps, [model.cfg], self.cfg.serving)
