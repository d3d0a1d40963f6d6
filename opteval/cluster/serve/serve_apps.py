"""Serve applications' lifecycle, whatever serves in them: readiness (RUNNING and a 1-token
answer), the errors a deploy ends in, and teardown with the prefix router's detached actors.

A leaf of the serving modules: ``opteval.cluster.serve.serving`` (simulated apps, stand-ins) and
``opteval.cluster.serve.llm_serving`` (vLLM apps) both use it, and neither imports the other through it.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from opteval.cluster import ray_private
from opteval.cluster.runtime import PlacementError, RayStartupError
from opteval.sweepcore.config_errors import ConfigError

LLM_APP_NAME = "opteval-llm"  # the one ray.serve.llm application of a stage
SERVE_NAMESPACE = "serve"
# One access-log line per request would drown the progress line in `ray job logs`.
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}
PREFIX_TREE_ACTOR = "LlmPrefixTreeActor"  # Ray's name for the prefix router's detached actor
SERVER_PREFIX = "LLMServer:"
# how often readiness asks whether a pending replica could ever be placed (a GCS read): a replica's
# request shows up a moment after the deploy, so the first look often sees none
UNPLACEABLE_CHECK_S = 2.0
TEARDOWN_WAIT_S = 30.0  # how long teardown waits for the killed prefix-tree actors to be gone
# Ray gives Serve's HTTP proxy a fixed 60 s to come up (serve.start's TimeoutError; Ray's private
# HTTP_PROXY_TIMEOUT); on a busy machine it takes longer while the controller keeps starting it.
RAY_PROXY_TIMEOUT_S = 60
PROXY_WAIT_ENV = "OPTEVAL_SERVE_PROXY_WAIT_S"
PROXY_WAIT_S = 600.0
PROXY_POLL_S = 2.0


class ModelNotReady(TimeoutError):
    """A deployed model did not come up in time (or its deployment failed); names the model.
    The message is one line; ``detail`` keeps Serve's whole message (tracebacks included)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class UnplaceableModel(PlacementError):
    """A replica the cluster cannot place: names the model, what it asks for and what is offered."""


def server_deployment_name(model_id: str) -> str:
    """The name ``ray.serve.llm`` gives a model's ``LLMServer`` deployment (its builder's rule);
    stand-ins take the same name."""
    return SERVER_PREFIX + model_id.replace("/", "--").replace(".", "_")


# -- readiness ----------------------------------------------------------------------------


def _status_value(s: Any) -> str:
    return str(getattr(s, "value", s))


def app_state(app_name: str) -> tuple[str, str]:
    """(status, message) of a Serve application; ("NOT_FOUND", "") when absent."""
    # deferred: jobs/sweep imports this; plan_only must not load Ray
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return "NOT_FOUND", ""
    status = _status_value(app.status)
    msgs = [f"{d}: {s.message}" for d, s in app.deployments.items() if s.message]
    return status, "; ".join(msgs) or str(app.message or "")


def probe_model(base_url: str, model_id: str, timeout_s: float = 120.0) -> str | None:
    """One 1-token chat request; None when it succeeds, else why not."""
    # deferred: httpx only to probe a deployed model
    import httpx

    body = {"model": model_id, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 1,
            "temperature": 0.0}
    try:
        r = httpx.post(f"{base_url}/chat/completions", json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:200]}"


UNSCHEDULED_HINT = "to be scheduled"  # Serve's 30 s warning: a replica not placed yet (maybe never)


def pending_requests(app_name: str) -> dict[str, tuple[list[dict[str, float]], str]]:
    """Deployment name -> (bundles, strategy) one of its replicas asks for, from the Serve
    controller's deployment configs; {} when the controller cannot say."""
    # deferred: only the placement check needs capacity
    from opteval.cluster.serve.capacity import replica_request

    try:
        client = ray_private.serve_global_client()
        details = client.get_serve_details() if client is not None else {}
    except Exception:
        return {}
    app = (details.get("applications") or {}).get(app_name) or {}
    return {name: replica_request(dep.get("deployment_config") or {})
            for name, dep in (app.get("deployments") or {}).items()}


def refuse_unplaceable(app_name: str, model_ids: list[str],
                       shapes: list[dict[str, float]] | None = None) -> dict[str, str]:
    """Raise :class:`UnplaceableModel` for a deployment whose replica no node and no autoscaler
    node type could ever hold; else deployment -> what one replica needs, in words."""
    # deferred: capacity only for this check; runtime is loaded already
    from opteval.cluster.runtime import describe_nodes
    from opteval.cluster.serve.capacity import can_ever_place, capacity_shapes, describe_need

    requests = pending_requests(app_name)
    if requests and shapes is None:
        shapes = capacity_shapes()
    needs = {}
    for dep, (bundles, strategy) in requests.items():
        if not can_ever_place(bundles, strategy, shapes or []):
            raise UnplaceableModel(
                f"model(s) {model_ids} in Serve app {app_name!r} cannot be placed: a replica of {dep!r} asks for "
                f"{describe_need(bundles)} ({strategy}) and no node or autoscaler node type offers it; the cluster "
                f"has: {describe_nodes(shapes or [])}")
        needs[dep] = describe_need(bundles)
    return needs


def _replica_of(dep: str, model_ids: list[str]) -> str:
    for m in model_ids:
        if dep in (m, server_deployment_name(m)):
            return m
    return dep if len(model_ids) != 1 else model_ids[0]


def wait_app_ready(app_name: str, base_url: str, model_ids: list[str], timeout_s: float, *,
                   poll_s: float = 2.0, progress_s: float = 30.0) -> None:
    """Ready = ``serve.status()`` says RUNNING and a 1-token request to every model succeeds.

    ``/v1/models`` is not enough: the ingress answers it from the model cards while the
    weights still load. Fails fast on DEPLOY_FAILED and on a replica that asks for what no
    node and no autoscaler node type offers (checked from the first poll, not after Serve's
    30 s warning); anything else -- a busy node, a GPU group scaling up, a slow constructor --
    is waited for up to ``timeout_s`` (``serving.ready_timeout_s``), with a progress line
    every ``progress_s``: ``replica of X waiting for 1 GPU: 2 m 10 s``.
    """
    # deferred: only the readiness wait needs capacity
    from opteval.cluster.serve.capacity import elapsed

    t0 = time.monotonic()
    deadline = t0 + float(timeout_s)
    last = "no status yet"
    needs: dict[str, str] = {}
    next_progress = t0 + float(progress_s)
    next_check = t0
    while True:
        try:
            status, msg = app_state(app_name)
        except Exception as exc:
            status, msg = "UNKNOWN", f"{type(exc).__name__}: {exc}"
        if status == "DEPLOY_FAILED":
            raise ModelNotReady(f"model(s) {model_ids} failed to deploy in Serve app {app_name!r}: "
                                f"{engine_error(app_name, msg)}", detail=msg)
        if status == "RUNNING":
            failures = {m: probe_model(base_url, m) for m in model_ids}
            bad = {m: f for m, f in failures.items() if f}
            if not bad:
                return
            last = "; ".join(f"{m}: {f}" for m, f in bad.items())
        else:
            if status == "DEPLOYING" and time.monotonic() >= next_check:  # nodes may join or leave
                needs = refuse_unplaceable(app_name, model_ids) or needs
                next_check = time.monotonic() + UNPLACEABLE_CHECK_S
            last = f"app {status}" + (f": {msg}" if msg else "")
        now = time.monotonic()
        if now >= deadline:
            raise ModelNotReady(f"model(s) {model_ids} not ready at {base_url} after {timeout_s:.0f}s "
                                f"(last: {last}); raise serving.ready_timeout_s for large models")
        if now >= next_progress and status != "RUNNING":
            next_progress = now + float(progress_s)
            what = "waiting for" if UNSCHEDULED_HINT in msg else "starting, needs"
            for dep, need in (needs or {"": "?"}).items():
                print(f"[serving] replica of {_replica_of(dep, model_ids)} {what} {need}: {elapsed(now - t0)}",
                      flush=True)
        time.sleep(poll_s)


# -- why a deploy failed ---------------------------------------------------------------------

# An exception line of a traceback: "ValueError: ...", "vllm.x.EngineDeadError: ...".
_EXC_LINE = re.compile(r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(.*))?$")
# What a replica raises when the real cause is elsewhere: vLLM's engine core dies in a process of
# its own and prints the cause there ("See root cause above"); Ray wraps the constructor's error.
_POINTERS = ("root cause above", "Engine core initialization failed", "RayTaskError", "RayActorError",
             "ActorDiedError", "The actor died")


def last_exception(text: str) -> str | None:
    """The last exception line of ``text`` (a traceback, a log), or None."""
    found = None
    for line in text.splitlines():
        m = _EXC_LINE.match(line)
        if m:
            found = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
    return " ".join(found.split()) if found else None


def _is_pointer(line: str) -> bool:
    return any(p in line for p in _POINTERS)


def replica_logs(app_name: str, logs_dir: str | Path | None = None) -> list[Path]:
    """The worker stderr files of ``app_name``'s replicas in this node's Ray session (each starts
    with Ray's ``:actor_name:ServeReplica:<app>:<deployment>`` line), oldest first."""
    if logs_dir is None:
        try:
            logs_dir = ray_private.logs_dir()
        except Exception:  # no Ray session in this process, or the API moved: no log to read
            return []
        if logs_dir is None:
            return []
    marker = f":actor_name:ServeReplica:{app_name}:".encode()
    found = []
    for f in Path(str(logs_dir)).glob("worker-*.err"):
        try:
            with f.open("rb") as fh:
                head = fh.read(4096)
        except OSError:
            continue
        if marker in head:
            found.append(f)
    return sorted(found, key=lambda f: f.stat().st_mtime)


def engine_error(app_name: str, message: str, logs_dir: str | Path | None = None) -> str:
    """One line saying why a deploy failed, in the engine's own words: the last exception line of
    Serve's message, unless it only points elsewhere (vLLM's "See root cause above"): then the
    last other exception line in the app's replica logs (what vLLM's engine core printed)."""
    said = last_exception(message)
    if said is None or _is_pointer(said):
        for f in reversed(replica_logs(app_name, logs_dir)):
            try:
                text = f.read_bytes()[-200_000:].decode("utf-8", "replace")
            except OSError:
                continue
            causes = [c for c in (last_exception(line) for line in text.splitlines()) if c and not _is_pointer(c)]
            if causes:
                return f"{causes[-1]} (from the replica's log {f.name}" + (f"; Serve says {said})" if said else ")")
    if said is not None:
        return said
    return " ".join(message.split())[:300] or "no reason given"


# -- start ---------------------------------------------------------------------------------


def proxy_wait_s() -> float:
    """How long start-up waits for Serve's HTTP proxies after Ray's own 60 s ($OPTEVAL_SERVE_PROXY_WAIT_S)."""
    raw = os.environ.get(PROXY_WAIT_ENV, "")
    try:
        return float(raw) if raw.strip() else PROXY_WAIT_S
    except ValueError:
        raise ConfigError(f"${PROXY_WAIT_ENV}={raw!r}: expected a number of seconds") from None


def wait_proxies_healthy(wait_s: float, poll_s: float = PROXY_POLL_S) -> tuple[bool, dict[str, str]]:
    """Poll ``serve.status().proxies`` until every proxy is HEALTHY or ``wait_s`` passes.
    Returns (healthy, last statuses by node); a proxy the controller restarts shows up again."""
    # deferred: jobs/sweep imports this; plan_only must not load Ray
    from ray import serve
    from ray.serve.schema import ProxyStatus

    deadline = time.monotonic() + wait_s
    seen: dict[str, str] = {}
    while True:
        proxies = serve.status().proxies
        seen = {str(node)[:12]: _status_value(st) for node, st in proxies.items()}
        if proxies and all(_status_value(st) == ProxyStatus.HEALTHY.value for st in proxies.values()):
            return True, seen
        if time.monotonic() >= deadline:
            return False, seen
        time.sleep(poll_s)


def start_serve(host: str, port: int, logging_config: Any = None, attempts: int = 3) -> None:
    """``serve.start`` that survives a busy machine, where two things go wrong while it starts:
    the controller kills a proxy that misses its health checks (``ActorDiedError``: shut down and
    retried, ``attempts`` times), and the proxy takes longer than the 60 s Ray waits for it
    (``TimeoutError``: the controller is up and still starting it, so wait for it to report
    HEALTHY, up to :func:`proxy_wait_s` more). Either way out: ``RayStartupError`` (exit 5, one line)."""
    # deferred: jobs/sweep imports this; plan_only must not load Ray
    from ray import serve
    from ray.exceptions import RayActorError

    wait_s = proxy_wait_s()  # a bad setting fails before anything starts
    for i in range(attempts):
        try:
            serve.start(http_options={"host": host, "port": int(port)}, logging_config=logging_config)
            return
        except TimeoutError as exc:
            print(f"[serving] Serve's HTTP proxy is not up after Ray's {RAY_PROXY_TIMEOUT_S} s ({exc}); the machine is busy: "
                  f"waiting up to {wait_s:.0f} s more (${PROXY_WAIT_ENV})", flush=True)
            healthy, seen = wait_proxies_healthy(wait_s)
            if healthy:
                print("[serving] Serve's HTTP proxy is up", flush=True)
                return
            states = ", ".join(f"{node}: {st}" for node, st in sorted(seen.items())) or "none started"
            raise RayStartupError(f"Serve's HTTP proxy was not up {RAY_PROXY_TIMEOUT_S + wait_s:.0f} s after serve.start "
                                  f"(proxies {states}); on a busy machine raise ${PROXY_WAIT_ENV}") from None
        except RayActorError as exc:
            if i + 1 >= attempts:
                raise RayStartupError(f"Serve did not start after {attempts} attempts (last: {type(exc).__name__}: "
                                      f"{' '.join(str(exc).split())[:300]})") from None
            print(f"[serving] Serve's start failed ({type(exc).__name__}: its proxy died starting); retrying",
                  flush=True)
            try:
                serve.shutdown()
            except Exception:
                pass
            time.sleep(5.0 * (i + 1))


# -- teardown -----------------------------------------------------------------------------


def prefix_tree_actors(app_name: str) -> list[tuple[str, str]]:
    """(name, namespace) of the prefix router's detached actors that belong to ``app_name``."""
    # deferred: jobs/sweep imports this; plan_only must not load Ray
    import ray

    ns_prefix = f"{SERVE_NAMESPACE}::{app_name}::"
    return [(a["name"], a["namespace"]) for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"] == PREFIX_TREE_ACTOR and str(a["namespace"]).startswith(ns_prefix)]


def teardown(app_name: str = LLM_APP_NAME) -> None:
    """Delete the stage's Serve application (frees its GPUs for the next stage) and the
    prefix-tree actors its router created (detached: they outlive ``serve.delete``)."""
    # deferred: jobs/sweep imports this; plan_only must not load Ray
    import ray
    from ray import serve

    try:
        serve.delete(app_name, _blocking=True)
    finally:
        for name, ns in prefix_tree_actors(app_name):
            try:
                ray.kill(ray.get_actor(name, namespace=ns), no_restart=True)
            except ValueError:  # already gone
                pass
        # ray.kill only asks: the name stays registered (and the actor holds its CPU) until the
        # GCS sees it dead, so wait, briefly, for torn down to mean gone
        deadline = time.monotonic() + TEARDOWN_WAIT_S
        while prefix_tree_actors(app_name) and time.monotonic() < deadline:
            time.sleep(0.2)
