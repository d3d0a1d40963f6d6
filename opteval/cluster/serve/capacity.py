"""What the cluster has and can grow to, and whether a replica could ever be placed on it.

Why a module of its own: readiness must tell a replica that *waits* (a busy node, a
KubeRay GPU group scaling up, a slow worker start) from one that *cannot* be placed (it asks
for a resource no node and no autoscaler node type offers). Serve's own "to be scheduled"
warning says neither; it only says 30 s have passed. The rule here is pure (node shapes in,
verdict out); the readers of Ray's state are small functions beside it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opteval.cluster import ray_private

Bundle = dict[str, float]


def alive_node_totals() -> list[Bundle]:
    """Total resources of every alive node (not what is free: a busy node frees up)."""
    # deferred: the pure rule imports without Ray (llm_serving, k8s)
    import ray

    return [{k: float(v) for k, v in (n.get("Resources") or {}).items()} for n in ray.nodes() if n.get("Alive")]


def autoscaler_node_types() -> list[Bundle]:
    """The node shapes the autoscaler may add (KubeRay worker groups, cluster launcher node
    types), from the cluster config the autoscaler publishes in the GCS; [] when there is none
    (a local or fixed-size cluster). Node groups with ``max_count`` 0 cannot grow and are skipped."""
    try:
        config = ray_private.autoscaler_cluster_config()
    except Exception:  # older GCS, no autoscaler: nothing to grow into
        return []
    if config is None:
        return []
    return [{str(k): float(v) for k, v in g.resources.items()}
            for g in config.node_group_configs if int(g.max_count) != 0]


def capacity_shapes() -> list[Bundle]:
    """Every node shape the cluster has or can grow: alive nodes' totals + autoscaler node types."""
    return alive_node_totals() + autoscaler_node_types()


def _fits(need: Mapping[str, float], shape: Mapping[str, float]) -> bool:
    return all(float(v) <= float(shape.get(k, 0.0)) + 1e-9 for k, v in need.items() if float(v) > 0)


def _sum(bundles: Sequence[Mapping[str, float]]) -> Bundle:
    out: Bundle = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def can_ever_place(bundles: Sequence[Mapping[str, float]], strategy: str, shapes: Sequence[Mapping[str, float]]) -> bool:
    """Could one replica (its bundles, placed by ``strategy``) fit on the shapes, were they empty?

    STRICT_PACK needs all bundles on one node; any other strategy needs each bundle to fit on
    some node. Conservative on purpose: a False here is certain, a True may still wait."""
    if not bundles:
        return True
    if strategy == "STRICT_PACK":
        return any(_fits(_sum(bundles), s) for s in shapes)
    return all(any(_fits(b, s) for s in shapes) for b in bundles)


def replica_request(deployment_config: Mapping[str, Any]) -> tuple[list[Bundle], str]:
    """(bundles, strategy) one replica of a Serve deployment asks for, from the controller's
    deployment config (``placement_group_bundles`` when set, else ``ray_actor_options``)."""
    pg = deployment_config.get("placement_group_bundles")
    strategy = str(deployment_config.get("placement_group_strategy") or "PACK")
    if pg:
        return [{str(k): float(v) for k, v in b.items() if float(v) > 0} for b in pg], strategy
    opts = deployment_config.get("ray_actor_options") or {}
    need: Bundle = {"CPU": float(opts.get("num_cpus", 1) if opts.get("num_cpus") is not None else 1),
                    "GPU": float(opts.get("num_gpus") or 0)}
    need.update({str(k): float(v) for k, v in (opts.get("resources") or {}).items()})
    if opts.get("accelerator_type"):
        need[f"accelerator_type:{opts['accelerator_type']}"] = 0.001
    return [{k: v for k, v in need.items() if v > 0}], "PACK"


def describe_need(bundles: Sequence[Mapping[str, float]]) -> str:
    """'1 GPU', '2 GPUs + 4 CPUs', 'no resources': what a replica waits for, in words."""
    total = _sum(bundles)
    parts = []
    for k in ("GPU", "CPU"):
        if total.get(k):
            n = total.pop(k)
            parts.append(f"{n:g} {k}" + ("s" if n != 1 else ""))
        else:
            total.pop(k, None)
    for k, v in sorted(total.items()):
        parts.append(k.split(":", 1)[1] if k.startswith("accelerator_type:") else f"{v:g} {k}")
    return " + ".join(parts) or "no resources"


def elapsed(seconds: float) -> str:
    """'2 m 10 s' (the progress line's clock)."""
    s = int(seconds)
    return f"{s // 60} m {s % 60} s" if s >= 60 else f"{s} s"
