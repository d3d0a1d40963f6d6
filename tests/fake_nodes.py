"""A Ray cluster of several nodes on this one machine (``ray start`` per node), for the tiers
that need more than one raylet: the node-loss fault, the reward service's spread, its bench.

Every port is explicit: single ports from the kernel's ephemeral range (bind to 0), each
node's worker ports a block below it (checked free), so no two components ever share one.
The cluster lives in its own ``--temp-dir``; only processes whose command line names it are
ever stopped (never ``ray stop``: other clusters may run here).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

WORKER_BLOCK = 100  # worker ports per node (Ray's workers, Serve's replicas and proxies)


@dataclass(frozen=True)
class Node:
    cpus: float
    resources: dict[str, float] = field(default_factory=dict)
    gpus: int = 0


@dataclass
class FakeCluster:
    temp: str
    address: str  # the GCS, 127.0.0.1:port
    env: dict[str, str]  # what a driver joining it needs (auth off, no RAY_ADDRESS of another)
    node_manager_ports: list[int]
    dashboard: str | None = None  # http://127.0.0.1:port when started with one

    def pids(self) -> list[int]:
        """Processes whose command line names this cluster's temp dir (its nodes, nobody else's)."""
        return our_pids(self.temp)

    def raylet_pid(self, node: int) -> int:
        port = self.node_manager_ports[node]
        for pid in self.pids():
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if "raylet" in cmd.split(" ")[0] and f"--node_manager_port={port}" in cmd:
                    return pid
        raise AssertionError(f"no raylet with node manager port {port}")


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def worker_blocks(n: int, size: int = WORKER_BLOCK) -> list[int]:
    """Bases of ``n`` free blocks of ``size`` worker ports, below the kernel's ephemeral range
    (32768+) that :func:`free_ports` draws from, so a block never holds another component's
    port (one beside those ports once swallowed an agent's gRPC port and ``ray start`` refused)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(11000, 32000 - n * size)
        socks = []
        try:
            for port in range(base, base + n * size):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return [base + i * size for i in range(n)]
    raise AssertionError(f"no {n} free blocks of {size} worker ports below 32000")


def our_pids(temp: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp in cmd and int(d.name) != os.getpid():
            out.append(int(d.name))
    return out


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _node_args(node: Node, temp: str, ports: list[int], workers: int) -> list[str]:
    nm, om, agent, agent_grpc, metrics, rt_env = ports
    args = [f"--temp-dir={temp}", "--node-ip-address=127.0.0.1", f"--num-cpus={node.cpus:g}",
            f"--num-gpus={node.gpus}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
            f"--min-worker-port={workers}", f"--max-worker-port={workers + WORKER_BLOCK - 1}",
            f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rt_env}", "--disable-usage-stats"]
    if node.resources:
        args.append(f"--resources={json.dumps(node.resources)}")
    return args


def wait_alive(address: str, count: int, env: dict[str, str], within_s: float = 120.0) -> None:
    """Until ``count`` nodes are alive in the GCS (a worker's ``ray start`` returns before the
    head lists it)."""
    probe = ("import sys, time, ray\n"
             "ray.init(address=sys.argv[1], logging_level='ERROR')\n"
             "end = time.time() + float(sys.argv[3])\n"
             "while sum(n['Alive'] for n in ray.nodes()) < int(sys.argv[2]) and time.time() < end:\n"
             "    time.sleep(0.5)\n"
             "alive = sum(n['Alive'] for n in ray.nodes())\n"
             "sys.exit(0 if alive >= int(sys.argv[2]) else f'{alive} of {sys.argv[2]} nodes alive')\n")
    r = subprocess.run([sys.executable, "-c", probe, address, str(count), str(within_s)], env=env,
                       capture_output=True, text=True, timeout=within_s + 120)
    assert r.returncode == 0, f"nodes not alive: {r.stdout[-1000:]}{r.stderr[-2000:]}"


@contextlib.contextmanager
def fake_cluster(nodes: list[Node], *, dashboard: bool = False, wait: bool = True,
                 prefix: str = "fc-") -> Iterator[FakeCluster]:
    """``nodes[0]`` is the head. Everything it started is SIGKILLed on exit."""
    temp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: Ray's socket paths stay under 107 bytes
    ports = free_ports(3 + 6 * len(nodes))
    gcs, client, dash = ports[:3]
    blocks = worker_blocks(len(nodes))
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    node_ports = [ports[3 + 6 * i: 9 + 6 * i] for i in range(len(nodes))]
    head = [_ray_bin(), "start", "--head", f"--port={gcs}", f"--ray-client-server-port={client}",
            *(["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}"] if dashboard
              else ["--include-dashboard=false"]),
            *_node_args(nodes[0], temp, node_ports[0], blocks[0])]
    cluster = FakeCluster(temp=temp, address=f"127.0.0.1:{gcs}", env=env, node_manager_ports=[p[0] for p in node_ports],
                          dashboard=f"http://127.0.0.1:{dash}" if dashboard else None)
    try:
        cmds = [("head", head)] + [(f"node {i}", [_ray_bin(), "start", f"--address={cluster.address}",
                                                  *_node_args(node, temp, node_ports[i], blocks[i])])
                                   for i, node in enumerate(nodes) if i > 0]
        for what, cmd in cmds:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
            assert r.returncode == 0, f"ray start ({what}) failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        if wait:
            wait_alive(cluster.address, len(nodes), env)
        yield cluster
    finally:
        for _ in range(2):
            for pid in our_pids(temp):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        shutil.rmtree(temp, ignore_errors=True)
