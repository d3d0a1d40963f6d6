"""Starting or joining Ray for a sweep driver, and leaving only what we started.

Why a module of its own: the driver either owns a throwaway local cluster (a laptop,
the tests) or is a guest on a long-lived one (``ray job submit``). Only in the first
case may it shut Ray down at the end; in the second, ``RAY_ADDRESS`` tells us so.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil

from opteval.cluster import ray_private
from opteval.evalcore.backoff import Backoff

NAMESPACE = "opteval"
# The custom Ray resource a node offers, one unit per executor slot (PINNED: the KubeRay
# manifests put it on CPU worker groups). Executors run only where it is offered, so they
# never take the CPUs a vLLM replica, the OpenAI ingress or the prefix-tree actor needs.
EXECUTOR_RESOURCE = "opteval_executor"
LOOPBACK = "127.0.0.1"
# Ray waits a fixed 30 s for its raylet to register (ray/_private/node.py, no setting lengthens
# it); on a loaded machine that is often too short. We retry the whole start instead.
STARTUP_ATTEMPTS = int(os.environ.get("OPTEVAL_RAY_START_ATTEMPTS", "6"))
STARTUP_BACKOFF_S = float(os.environ.get("OPTEVAL_RAY_START_BACKOFF_S", "5"))
STARTUP_MAX_BACKOFF_S = 30.0
# What Ray raises when its own processes did not come up in time (not a config problem).
STARTUP_TIMEOUTS = ("timed out during startup", "gcs has become overloaded", "failed to connect to gcs",
                    "timed out while waiting", "timed out waiting for", "failed to start the gcs",
                    "deadline exceeded", "failed to register worker")


# Serve's proxy health checks (ray/serve/_private/constants.py): a readiness check of 5 s and
# health checks of 10 s, three misses and the controller kills the proxy. On a loaded machine
# (CI with busy processes beside the run) a healthy proxy misses them and is killed in a loop,
# so serve.start never returns. For a cluster we start, the controller gets generous bounds
# (an existing one keeps its own settings; a user's environment wins over these defaults).
# The period stays Ray's 10 s: patience is in the timeouts, and a dead proxy (three failed
# checks) is replaced in about 30 s, not 75-85 s as with a 30 s period (issue 42); calls to
# our own routes wait that long without spending retries (endpoint.SERVE_ROUTE_WAIT_S).
SERVE_PATIENCE_ENV = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "120",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "120",
    "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S": "10",
    "RAY_SERVE_PROXY_GRACEFUL_SHUTDOWN_TIMEOUT_S": "30",
}


class RayStartupError(RuntimeError):
    """Ray did not start within its attempts (a loaded machine, a GCS that does not answer).
    jobs/sweep.py and jobs/rewards.py print it as one line and exit 5 (EXIT_STARTUP)."""


def is_startup_timeout(exc: BaseException) -> bool:
    """Is this one of Ray's start-up timeouts (worth another attempt), not a usage error?"""
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(t in text for t in STARTUP_TIMEOUTS)


@contextlib.contextmanager
def loopback_node_ip() -> Iterator[None]:
    """Make ``ray.init`` take 127.0.0.1 as this node's IP, so the GCS, raylet, workers and
    agents of the embedded cluster listen on loopback only (Ray binds its gRPC servers to
    all interfaces unless the node IP is 127.0.0.1). ``ray.init`` maps an explicit
    ``_node_ip_address="127.0.0.1"`` back to the host's address unless Ray thinks it runs
    single-node-only (its ``ENABLE_RAY_CLUSTER``, off on macOS/Windows); we set that for the
    duration of the call. No one else can join this cluster: it is ours and throwaway."""
    with ray_private.single_node_only():
        yield


def is_loopback_address(address: str) -> bool:
    """``127.x.x.x:port`` / ``localhost:port`` (a GCS address on this machine's loopback)."""
    host = address.rsplit(":", 1)[0] if ":" in address and "://" not in address else ""
    return host == "localhost" or host.startswith("127.")


def init_with_retries(kwargs: dict[str, Any], *, attempts: int | None = None, backoff_s: float | None = None,
                      between: Callable[[], None] | None = None, local: bool = True) -> None:
    # local: this node's IP is 127.0.0.1 (a cluster we start, or one on loopback we join)
    """``ray.init(**kwargs)``, retried with exponential backoff when Ray's start-up times out.

    A half-started cluster is shut down before the next attempt. ``between`` runs before each
    retry (the driver passes its signal checkpoint: a signal there ends the start-up, exit 130).
    A ``SystemExit`` (Ray's own SIGTERM handler) is never retried. After the last attempt:
    :class:`RayStartupError` naming the cause."""
    # deferred: plan_only imports this module and must not load Ray
    import ray

    attempts = max(1, STARTUP_ATTEMPTS if attempts is None else int(attempts))
    backoff = STARTUP_BACKOFF_S if backoff_s is None else float(backoff_s)
    for i in range(attempts):
        before = set(local_services())
        try:
            with loopback_node_ip() if local else contextlib.nullcontext():
                ray.init(**kwargs)
            return
        except Exception as exc:
            if not is_startup_timeout(exc):
                raise
            cause = " ".join(f"{type(exc).__name__}: {exc}".split())
            with contextlib.suppress(Exception):
                ray.shutdown()
            if "address" not in kwargs:
                _end_leftover_services(before)
            if i + 1 >= attempts:
                raise RayStartupError(
                    f"Ray did not start after {attempts} attempt(s) (last: {cause}); the machine may be "
                    f"overloaded (load average {_load()}): retry when it is quieter, or raise "
                    f"OPTEVAL_RAY_START_ATTEMPTS") from None
            wait = Backoff(backoff, STARTUP_MAX_BACKOFF_S).delay(i)
            print(f"[ray] start-up attempt {i + 1}/{attempts} timed out ({cause}); retrying in {wait:g} s",
                  file=sys.stderr, flush=True)
            time.sleep(wait)
            if between is not None:
                between()


def _end_leftover_services(before: set[int]) -> None:
    """End the GCS and raylet a timed-out start left behind: ``ray.shutdown()`` does not always
    reach processes of a node that never finished starting, and the next attempt would start
    a second pair beside them (seen under a load average of 10). Only this process's own
    children that appeared during the attempt are touched."""
    left = [psutil.Process(pid) for pid in set(local_services()) - before if psutil.pid_exists(pid)]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


@dataclass
class RayRuntime:
    """What :func:`connect` did, so :func:`disconnect` undoes exactly that."""

    started_local: bool  # this process started the cluster (shut it down at the end)
    connected_here: bool  # this process called ray.init (ray.shutdown at the end)
    address: str | None


def resolve_address(cfg_address: str | None) -> str | None:
    """Config wins, then ``RAY_ADDRESS`` (set by ``ray job submit``), else None = start local."""
    if cfg_address:
        return str(cfg_address)
    env = os.environ.get("RAY_ADDRESS")
    return env or None


def _local_init_kwargs(num_cpus: int | None, dashboard: bool) -> dict[str, Any]:
    """A throwaway cluster: no token auth, no dashboard unless asked.

    Its workers import our code the way the driver did: the installed package, or the
    driver's ``PYTHONPATH`` (the raylet inherits this process's environment), and Ray adds
    the driver's script directory and working directory to every worker's path."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    for key, value in SERVE_PATIENCE_ENV.items():  # the raylet, and so every worker, inherits them
        os.environ.setdefault(key, value)
    return {
        # "local" always starts a new cluster: never attach to one started by `ray start`
        # (or named by a stale /tmp/ray/ray_current_cluster) that the user did not ask for.
        "address": "local",
        "num_cpus": num_cpus or os.cpu_count() or 1,
        # The embedded cluster is its own CPU node: it offers one executor slot per CPU
        # (executor_slots still leaves serving's CPUs free beside any GPU it has).
        "resources": {EXECUTOR_RESOURCE: float(num_cpus or os.cpu_count() or 1)},
        "include_dashboard": dashboard,
        "dashboard_host": LOOPBACK,
        "_node_ip_address": LOOPBACK,  # with loopback_node_ip(): every Ray service on 127.0.0.1
        "namespace": NAMESPACE,
        "log_to_driver": True,
        # the workers' auth mode must be the cluster's: "disabled" by default, but a shell that
        # exported RAY_AUTH_MODE=token for `ray start` (README) makes this local cluster token too
        "runtime_env": {"env_vars": {"RAY_AUTH_MODE": os.environ["RAY_AUTH_MODE"],
                                     **{k: os.environ[k] for k in SERVE_PATIENCE_ENV}},
                        # Serve replicas' gRPC servers on loopback too (they bind [::] otherwise)
                        "worker_process_setup_hook": ray_private.LOOPBACK_WORKER_HOOK},
    }


def ray_initialized() -> bool:
    """This process is connected to a Ray already (a sweep run in-process after another)."""
    # deferred: plan_only imports this module and must not load Ray
    import ray

    return bool(ray.is_initialized())


def connect(cfg_address: str | None = None, num_cpus: int | None = None, dashboard: bool = False, *,
            between: Callable[[], None] | None = None) -> RayRuntime:
    """Join the configured/ambient cluster, or start a local one (its services on loopback);
    reuse an initialized Ray. Start-up timeouts are retried (:func:`init_with_retries`), then
    :class:`RayStartupError`."""
    # deferred: plan_only imports this module and must not load Ray
    import ray

    if ray.is_initialized():
        return RayRuntime(started_local=False, connected_here=False, address=None)
    address = resolve_address(cfg_address)
    if address:
        # a cluster on loopback (ours, started by another driver or the tests) is joined as 127.0.0.1,
        # else Ray looks for a raylet on the host's address and never finds one
        init_with_retries({"address": address, "namespace": NAMESPACE, "log_to_driver": True}, between=between,
                          local=is_loopback_address(address))
        return RayRuntime(started_local=False, connected_here=True, address=address)
    init_with_retries(_local_init_kwargs(num_cpus, dashboard), between=between)
    return RayRuntime(started_local=True, connected_here=True, address=None)


LOCAL_SERVICES = ("gcs_server", "raylet")


def local_services() -> dict[int, str]:
    """The GCS and raylet that ``ray.init`` started, as this process's children (pid -> name)."""
    found: dict[int, str] = {}
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if child.name() in LOCAL_SERVICES:
                found[child.pid] = child.name()
    return found


def services_gone(services: dict[int, str]) -> list[str]:
    """Which of ``services`` exited, as "name pid N" (a zombie counts: Ray reaps them only at shutdown)."""
    gone = []
    for pid, name in services.items():
        try:
            dead = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            dead = True
        if dead:
            gone.append(f"{name} pid {pid}")
    return gone


def disconnect(rt: RayRuntime) -> None:
    """Shut down Ray only when this process started or joined it here.

    A cluster this process started goes away whole with ``ray.shutdown()`` (Serve's controller
    and proxies included); ``serve.shutdown()`` first would only race the controller's own
    graceful shutdown and end every local run on a "graceful_shutdown failed" raylet line.
    On a cluster we joined, Serve belongs to the cluster and is left alone.
    """
    # deferred: plan_only imports this module and must not load Ray
    import ray

    if rt.connected_here and ray.is_initialized():
        ray.shutdown()


def available_cpus() -> int:
    """CPUs the cluster offers in total (not just free), at least 1."""
    # deferred: plan_only imports this module and must not load Ray
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _config_error() -> type:
    from opteval.sweepcore.config_errors import ConfigError  # no Ray import there

    return ConfigError


class PlacementError(_config_error()):  # type: ignore[misc]
    """The cluster cannot place what a sweep asks for; the message says what is offered.
    A ConfigError: jobs/sweep.py prints it as one line and exits 2 (nothing is committed
    for the stages not run; the same command resumes once the cluster or config is fixed)."""


def serving_reserve(node: dict[str, float], cpus_per_gpu: float, ingress_cpus: float) -> float:
    """CPUs a node keeps for serving: ``cpus_per_gpu`` per GPU, plus the ingress on a GPU node."""
    gpus = float(node.get("GPU", 0))
    return gpus * float(cpus_per_gpu) + (float(ingress_cpus) if gpus else 0.0)


def executor_slots(nodes: list[dict[str, float]], executor_cpus: float, *, cpus_per_gpu: float = 1.0,
                   ingress_cpus: float = 1.0, gpu_serving: bool = False, cpu_serving: float = 0.0) -> int:
    """Executors the cluster can hold: per node, the ``opteval_executor`` units it offers,
    capped by its CPUs left after serving's reserve (only when the sweep serves on GPUs).
    ``cpu_serving``: CPUs that models served on CPUs (vLLM's CPU build: CPU-only bundles) and
    their ingress need; they are kept free on the executor node with the most CPUs (on one
    machine, the machine), so a replica never waits for CPUs the executors took.

    ``nodes`` are the alive nodes' total resources. Pure, so the rule is testable without Ray.
    """
    cpus_left: list[tuple[float, int]] = []
    for res in nodes:
        offered = int(float(res.get(EXECUTOR_RESOURCE, 0)))
        if offered <= 0:
            continue
        cpus = float(res.get("CPU", 0))
        if gpu_serving:
            cpus -= serving_reserve(res, cpus_per_gpu, ingress_cpus)
        cpus_left.append((cpus, offered))
    if cpu_serving > 0 and cpus_left:
        biggest = max(range(len(cpus_left)), key=lambda i: cpus_left[i][0])
        cpus, offered = cpus_left[biggest]
        cpus_left[biggest] = (cpus - float(cpu_serving), offered)
    return sum(min(offered, int(max(0.0, cpus) // max(1e-9, float(executor_cpus)))) for cpus, offered in cpus_left)


def node_resources() -> list[dict[str, float]]:
    """Total resources of every alive node (what the cluster offers)."""
    # deferred: plan_only imports this module and must not load Ray
    import ray

    return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]


def describe_nodes(nodes: list[dict[str, float]]) -> str:
    """One short line per node: CPU, GPU, executor slots, accelerator types."""
    parts = []
    for i, res in enumerate(nodes):
        acc = sorted(k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:"))
        parts.append(f"node {i}: CPU={res.get('CPU', 0):g} GPU={res.get('GPU', 0):g} "
                     f"{EXECUTOR_RESOURCE}={res.get(EXECUTOR_RESOURCE, 0):g}"
                     + (f" accelerator_type={','.join(acc)}" if acc else ""))
    return "; ".join(parts) or "no alive nodes"
