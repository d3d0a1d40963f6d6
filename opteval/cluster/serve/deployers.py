"""How each backend's endpoints are stood up on this cluster (or pointed at): one deployer per
backend, ``DEPLOYERS`` keyed by the backend's name (``opteval.sweepcore.backends``).

Why apart from the backend specs: a spec's checks, GPUs and client config are Ray-free state
(``plan_only`` and the config use them), while deploying needs Ray Serve. A new backend is a spec
in ``sweepcore/backends/`` plus a deployer here (docs/extending.md).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from opteval.cluster.serve import llm_serving
from opteval.cluster.serve.sim_serving import SimulatedOpenAI, deploy_simulated
from opteval.sweepcore.backends import BACKENDS, Backend
from opteval.sweepcore.backends.sim_config import simulated_app_name
from opteval.sweepcore.endpoint import Endpoint, client_host


class Deployer:
    """Stands up (or points at) one backend's endpoints. Subclasses set ``backend`` and override
    what differs."""

    backend: ClassVar[str]  # the name of the opteval.sweepcore.backends spec it deploys

    def preflight(self) -> None:
        """Before Ray starts: fail with the install hint when this backend cannot run here."""

    def apps(self, models: Sequence[Mapping[str, Any]]) -> list[str]:
        """The Serve applications ``deploy`` creates for these models (known before deploying)."""
        return []

    def handle_target(self, ep: Endpoint) -> tuple[str, str] | None:
        """(deployment, app) a worker may call through a Serve handle instead of the HTTP proxy
        (serving.route=handle): only apps this cluster deployed whose deployment answers
        ``respond(raw, meta)``; None keeps the endpoint's own route."""
        return None

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        """Stand these models' endpoints up (or point at them); name -> Endpoint. ``cfg`` is the
        sweep config (read by attribute)."""
        raise NotImplementedError


class SimulatedDeployer(Deployer):
    backend = "simulated"

    def apps(self, models: Sequence[Mapping[str, Any]]) -> list[str]:
        return [simulated_app_name(str(m["name"])) for m in models]

    def handle_target(self, ep: Endpoint) -> tuple[str, str] | None:
        return (SimulatedOpenAI.name, ep.app_name) if ep.app_name else None  # type: ignore[attr-defined]

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        return {str(m["name"]): deploy_simulated(m, int(cfg.serving.http_port),
                                                 timeout_s=float(cfg.serving.request_timeout_s),
                                                 http_host=str(cfg.serving.http_host)) for m in models}


class OpenAIDeployer(Deployer):
    """A server someone else runs: nothing to deploy, the endpoint is its URL."""

    backend = "openai"

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        return {str(m["name"]): external_endpoint(m) for m in models}


def external_endpoint(model: Mapping[str, Any]) -> Endpoint:
    """The Endpoint of an external URL: every ``openai`` key reaches the worker's client."""
    oc = dict(model.get("openai") or {})
    backoff = oc.get("backoff_s")
    return Endpoint(name=str(model["name"]), base_url=str(oc["base_url"]), model_id=str(oc["model_id"]),
                    simulated=False, api_key_env=str(oc.get("api_key_env") or ""),
                    timeout_s=float(oc.get("timeout_s", 600.0)), max_retries=int(oc.get("max_retries", 4)),
                    backoff_s=None if backoff is None else float(backoff))


class ReplayDeployer(Deployer):
    """Recorded completions, answered inside the worker: an endpoint without a URL."""

    backend = "replay"

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        spec = BACKENDS[self.backend]
        return {str(m["name"]): Endpoint(name=str(m["name"]), base_url=None, model_id=str(m["name"]),
                                         model_cfg=spec.client_config(m)) for m in models}


class VllmDeployer(Deployer):
    """One ``ray.serve.llm`` app per model replica group on this cluster's GPUs."""

    backend = "vllm"
    standin = False  # whether the replicas answer with the simulated policy

    def preflight(self) -> None:
        llm_serving.require_vllm()

    def apps(self, models: Sequence[Mapping[str, Any]]) -> list[str]:
        return [llm_serving.llm_app_name(str(m["name"])) for m in models]

    def deploy(self, models: list[dict[str, Any]], cfg: Any) -> dict[str, Endpoint]:
        eps: dict[str, Endpoint] = {}
        for m in models:
            eps.update(self.deploy_group(m, cfg, 0))
        return eps

    def deploy_group(self, model: dict[str, Any], cfg: Any, group: int) -> dict[str, Endpoint]:
        """One replica group of one model as its own app (group 0: the model's first)."""
        name = str(model["name"])
        return llm_serving.deploy_stage([model], cfg.serving, app_name=llm_serving.llm_app_name(name, group),
                                        route_prefix=llm_serving.llm_route_prefix(name, group), standin=self.standin,
                                        host=client_host(str(cfg.serving.http_host)))


class StandinDeployer(VllmDeployer):
    """The vLLM placement with simulated answers (``serving.standin``): needs no vLLM."""

    backend = "standin"
    standin = True

    def preflight(self) -> None:
        """Stand-ins need no vLLM."""

    def handle_target(self, ep: Endpoint) -> tuple[str, str] | None:
        """Each model's StandinServer replica directly, past the stand-in ingress."""
        return (llm_serving.server_deployment_name(ep.model_id), ep.app_name) if ep.app_name else None


DEPLOYERS: dict[str, Deployer] = {d.backend: d for d in (SimulatedDeployer(), OpenAIDeployer(), ReplayDeployer(),
                                                         VllmDeployer(), StandinDeployer())}


def deployer_of(backend: Backend) -> Deployer:
    """The deployer of a backend spec (``opteval.sweepcore.backends.backend_of``'s answer)."""
    return DEPLOYERS[backend.name]
