"""One real demo-shaped sweep shared by the viewer, audit and export tests, with the listening
sockets of its whole process tree sampled while it runs (issue 42: nothing beyond 127.0.0.1).

Why one: each such sweep costs about 40 s of the integration tier (Ray, Serve, MLflow and the
sandbox start for 6 trajectories); the viewer and export tests only read what it wrote.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
SWEEP = "view-demo"
LISTENERS_FILE = "listeners.json"  # beside the sweep: what the sampler saw, for the loopback test


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_listeners(root: psutil.Process) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of ``root`` and its descendants."""
    seen: set[tuple[str, int, str]] = set()
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return seen
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
            name = " ".join(proc.cmdline()[:1] + [proc.name()])
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr:
                seen.add((str(c.laddr.ip), int(c.laddr.port), name[:120]))
    return seen


def run_with_listeners(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float,
                       every_s: float = 0.5) -> tuple[subprocess.CompletedProcess, list[tuple[str, int, str]]]:
    """Run ``cmd`` to its end while sampling its tree's listeners every ``every_s`` seconds."""
    proc = subprocess.Popen(cmd, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, int, str]] = set()
    stop = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            seen.update(tree_listeners(root))
            stop.wait(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        sampler.join(timeout=10)
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), sorted(seen)


def run_demo(out: Path) -> Path:
    """The output dir of a finished 2-method sweep over 3 sample problems, tracked to a SQLite MLflow."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "opteval.jobs.cli", "sweep", f"sweep.name={SWEEP}", f"sweep.output_dir={out}",
           "models=[sim-fast]", "methods=[direct,opticycle]", "benchmarks=[sample]", "limit_problems=3",
           "samples.default=1", "cluster.workers=1", "cluster.executors=1", f"serving.http_port={free_port()}",
           f"tracking.uri=sqlite:///{out}/mlflow.db"]
    done, listeners = run_with_listeners(cmd, env, REPO, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (out / LISTENERS_FILE).write_text(json.dumps(listeners))
    return out
