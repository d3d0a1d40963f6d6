"""Issue 42: during the demo sweep no process of its tree listens beyond 127.0.0.1.

The shared demo sweep (tests/demo_sweep.py) is sampled every 0.5 s: the driver, the GCS, the
raylet, the agents, the Serve controller, proxy and replicas, the executors and their fork
servers. Before the fix each ``ray::ServeReplica`` held a ``*:<port>`` (Serve's inter-deployment
gRPC server binds ``[::]:0`` whatever the node IP); ``opteval.cluster.ray_private.loopback_grpc_binds``
rewrites that bind in the embedded cluster's workers."""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from opteval.cluster import ray_private
from tests.demo_sweep import LISTENERS_FILE


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (a dual-stack socket's view)
    return (mapped or ip).is_loopback


def test_every_listener_of_the_demo_sweeps_process_tree_is_on_loopback(demo: Path) -> None:
    seen = [tuple(x) for x in json.loads((demo / LISTENERS_FILE).read_text())]
    names = " ".join(name for _, _, name in seen)
    # the sampler saw the cluster, not an empty tree: the GCS, the raylet and a Serve replica at least
    assert "gcs_server" in names and "raylet" in names and "ServeReplica" in names, seen
    beyond = [x for x in seen if not _loopback(x[0])]
    assert beyond == [], beyond


def test_the_hook_rewrites_only_all_interface_binds(monkeypatch) -> None:
    import ray._common.tls_utils as tls

    got: list[str] = []

    def record(_server: object, address: str) -> int:
        got.append(address)
        return 1

    monkeypatch.setattr(tls, "add_port_to_grpc_server", record)
    ray_private.loopback_grpc_binds()
    for address in ("[::]:0", "0.0.0.0:9000", "10.0.0.5:9000", "127.0.0.1:0"):
        tls.add_port_to_grpc_server(None, address)
    assert got == ["127.0.0.1:0", "127.0.0.1:9000", "10.0.0.5:9000", "127.0.0.1:0"]
    ray_private.loopback_grpc_binds()  # idempotent: not wrapped twice
    tls.add_port_to_grpc_server(None, "[::]:1")
    assert got[-1] == "127.0.0.1:1" and len(got) == 5
