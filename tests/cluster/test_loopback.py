"""The embedded local Ray (what a sweep, ``rewards`` and these tests start through
``opteval.cluster.runtime.connect``) listens on loopback only: no GCS, raylet, worker, agent or
dashboard socket on 0.0.0.0 / * while auth is off (``RAY_AUTH_MODE=disabled``)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import ray

pytestmark = pytest.mark.ray


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (Ray's GCS, raylet, workers and agents)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def listeners(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process name) of every TCP listener owned by ``pids`` (``ss -ltnp``)."""
    text = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    out = []
    for line in text.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            out.append((line.split()[3], ",".join(re.findall(r'"([^"]+)"', line))))
    return out


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_no_ray_service_listens_beyond_loopback(ray_cluster):
    @ray.remote
    def touch() -> int:
        return os.getpid()

    ray.get([touch.remote() for _ in range(2)])  # a worker process is up too
    found = listeners(descendants(os.getpid()))
    names = {n for _, n in found}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), found
    exposed = [(a, n) for a, n in found
               if not (a.startswith("127.0.0.1:") or a.startswith("[::ffff:127.0.0.1]:") or a.startswith("[::1]:"))]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert ray.util.get_node_ip_address() == "127.0.0.1"
