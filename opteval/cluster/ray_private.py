"""Every private Ray API opteval uses, reached through this one module and checked against the Ray
it was read from.

Why: ``ray._private``, ``ray.serve._private``, ``ray.llm._internal`` and Serve's underscored
functions change between Ray releases without notice. Reaching them only here means a Ray upgrade
that moves one fails in one place, with one line naming the API and both versions
(:class:`RayPrivateAPIError`), not with an AttributeError deep inside a deploy; and
``python -m opteval.cluster.ray_private`` (and tests/core/test_layering.py) checks them all against the
installed Ray. They were read from Ray :data:`READ_FROM` (the gpu extra pins ray[serve,llm]==2.60.0).
tests/core/test_layering.py refuses a private Ray API anywhere else in the product.

Ray is imported inside the accessors: ``ray`` itself is heavy and every caller has already
started it (or is about to) when it asks.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

READ_FROM = "2.60"  # the Ray release whose source these APIs were read from

# The prefix-aware request router, named by its defining module: Ray validates a
# request_router_class by importing it, and the public alias
# ray.serve.llm.request_router.PrefixCacheAffinityRouter (an empty subclass) imports vLLM.
PREFIX_ROUTER_CLASS = ("ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router:"
                       "PrefixCacheAffinityRouter")

# module -> the names used from it (what check() verifies); every accessor below reads one.
APIS: dict[str, tuple[str, ...]] = {
    "ray._private.ray_constants": ("ENABLE_RAY_CLUSTER",),
    "ray._private.state": ("state", "available_resources_per_node"),
    "ray._private.worker": ("_global_node",),
    "ray._common.tls_utils": ("add_port_to_grpc_server",),
    "ray.serve.context": ("_get_global_client",),
    "ray.serve._private.build_app": ("build_app",),
    "ray.llm._internal.serve.core.configs.llm_config": ("LLMConfig",),
    PREFIX_ROUTER_CLASS.split(":")[0]: (PREFIX_ROUTER_CLASS.split(":")[1],),
}


class RayPrivateAPIError(RuntimeError):
    """A private Ray API is not where it was in Ray :data:`READ_FROM`; the message names both versions."""


def installed_version() -> str:
    # deferred: Ray is heavy; callers have started it already
    import ray

    return str(ray.__version__)


def _moved(api: str, cause: BaseException) -> RayPrivateAPIError:
    installed = installed_version()
    same = installed == READ_FROM or installed.startswith(READ_FROM + ".")
    why = "it is not where it was" if same else "Ray moved it"
    return RayPrivateAPIError(f"Ray private API {api}: {type(cause).__name__}: {cause} ({why}: read from Ray "
                              f"{READ_FROM}, installed Ray {installed}; update cluster/ray_private.py)")


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise _moved(name, exc) from None


def _attr(module: str, name: str) -> Any:
    mod = _module(module)
    try:
        return getattr(mod, name)
    except AttributeError as exc:
        raise _moved(f"{module}.{name}", exc) from None


def check() -> list[str]:
    """One line per private API that the installed Ray lacks; [] when every one is there."""
    problems = []
    for module, names in APIS.items():
        for name in names:
            try:
                _attr(module, name)
            except RayPrivateAPIError as exc:
                problems.append(str(exc))
    return problems


# -- the accessors ---------------------------------------------------------------------------


@contextlib.contextmanager
def single_node_only() -> Iterator[None]:
    """Ray's ``ENABLE_RAY_CLUSTER`` off for the duration (``ray.init`` then keeps an explicit
    ``_node_ip_address="127.0.0.1"``): opteval.cluster.runtime.loopback_node_ip."""
    rc = _module("ray._private.ray_constants")
    before = _attr("ray._private.ray_constants", "ENABLE_RAY_CLUSTER")
    setattr(rc, "ENABLE_RAY_CLUSTER", False)  # noqa: B010  (a module attribute mypy cannot see)
    try:
        yield
    finally:
        setattr(rc, "ENABLE_RAY_CLUSTER", before)  # noqa: B010


ANY_HOST = ("[::]:", "0.0.0.0:")  # the all-interfaces binds loopback_grpc_binds() rewrites
LOOPBACK_WORKER_HOOK = "opteval.cluster.ray_private.loopback_grpc_binds"  # a runtime_env setup hook


def loopback_grpc_binds() -> None:
    """Bind the gRPC servers a worker of the embedded cluster opens to 127.0.0.1, not ``[::]``.

    Why: every Serve replica opens an inter-deployment gRPC server on ``[::]:0`` (Ray 2.60's
    ``replica.py``, whatever the node IP), so the embedded cluster, loopback everywhere else,
    exposed each model replica on all interfaces without authentication (issue 42). Ray has no
    setting for that address; the embedded cluster runs this as its workers' setup hook
    (:data:`LOOPBACK_WORKER_HOOK`). Its node IP is 127.0.0.1, so the replica's advertised address
    is loopback too and handles still reach it. A joined cluster is left as Ray made it."""
    tls = _module("ray._common.tls_utils")
    original = _attr("ray._common.tls_utils", "add_port_to_grpc_server")
    if getattr(original, "opteval_loopback", False):
        return

    def add_port(server: Any, address: str) -> Any:
        for prefix in ANY_HOST:
            if address.startswith(prefix):
                address = "127.0.0.1:" + address[len(prefix):]
                break
        return original(server, address)

    add_port.opteval_loopback = True  # type: ignore[attr-defined]
    setattr(tls, "add_port_to_grpc_server", add_port)  # noqa: B010
    replica = sys.modules.get("ray.serve._private.replica")  # imported the name already: rebind it there
    if replica is not None and getattr(replica, "add_port_to_grpc_server", None) is original:
        setattr(replica, "add_port_to_grpc_server", add_port)  # noqa: B010


def autoscaler_cluster_config() -> Any:
    """The cluster config the autoscaler publishes in the GCS (node groups), or None."""
    return _attr("ray._private.state", "state").get_cluster_config()


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Free resources per alive node, from the GCS."""
    fn: Callable[[], dict[str, dict[str, float]]] = _attr("ray._private.state", "available_resources_per_node")
    return fn()


def logs_dir() -> str | None:
    """This node's Ray session log folder (worker-*.err: the replicas' stderr), or None without a
    node in this process."""
    node = _attr("ray._private.worker", "_global_node")
    return str(node.get_logs_dir_path()) if node is not None else None


def serve_global_client() -> Any:
    """Serve's controller client of this process (None when Serve is not running here)."""
    return _attr("ray.serve.context", "_get_global_client")()


def build_serve_app(app: Any, name: str) -> Any:
    """Serve's own ``build_app`` (what ``serve.run`` does to an application), without running it."""
    return _attr("ray.serve._private.build_app", "build_app")(app, name=name)


def llm_config_base() -> type:
    """The pydantic parent of the public ``ray.serve.llm.LLMConfig`` (same fields and validators),
    importable without vLLM."""
    cls: type = _attr("ray.llm._internal.serve.core.configs.llm_config", "LLMConfig")
    return cls


def main() -> int:
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    if not problems:
        print(f"every private Ray API opteval uses is present in Ray {installed_version()} (read from {READ_FROM})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
