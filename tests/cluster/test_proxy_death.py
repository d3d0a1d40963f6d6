"""Issue 42: Serve's HTTP proxy SIGKILLed twice mid-sweep under ``serving.route=http`` costs no
trajectory. Calls to a route of this cluster wait for the proxy's replacement without spending
their retries (``endpoint.SERVE_ROUTE_WAIT_S``), and the controller replaces a dead proxy in
about 30 s (``runtime.SERVE_PATIENCE_ENV``: Ray's 10 s check period). Before: 154 of 276
trajectories became ``status=error`` rows (exit 4)."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.faults]  # slow tier: kills mid-sweep (.ci/run: -m faults)

SHAPE = {"models": "[sim-slow]", "methods": "[direct,opticycle]", "limit": 6, "samples": 2}  # 24 trajectories


def _proxy_pid() -> int | None:
    """The pid of the session cluster's Serve HTTP proxy (a descendant of this process, which
    started that cluster) once Serve reports it healthy; else None."""
    from ray import serve

    try:
        if not all(str(getattr(st, "value", st)) == "HEALTHY" for st in serve.status().proxies.values()):
            return None
    except Exception:  # the controller busy replacing it
        return None
    pids = [p.pid for p in psutil.Process().children(recursive=True) if _cmd(p).startswith("ray::ProxyActor")]
    return pids[0] if len(pids) == 1 else None


def _cmd(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def test_two_proxy_kills_mid_sweep_cost_no_trajectory(ray_cluster, h, tmp_path, configs_dir):
    address, port = ray_cluster
    common = ("serving.route=http",)
    # the reference: the same trajectories with many in flight (the simulated outcomes do not
    # depend on timing: tests/cluster/test_serve_handle.py), so it is quick
    base_out = tmp_path / "base"
    base, planned = h.run_uninterrupted(h.sweep_args(base_out, "clean", port, *common, **SHAPE), base_out, "clean",
                                        configs_dir)
    # one call at a time: the sweep outlasts two proxy replacements (each stalls the call in flight)
    args = h.sweep_args(tmp_path, "proxykill", port, *common, "cluster.max_in_flight_per_model=1", **SHAPE)
    log = tmp_path / "proxykill.log"
    proc = h.spawn_sweep(args, address, log, configs_dir)
    killed: list[int] = []
    try:
        for _ in range(2):
            h.wait_for(lambda: h.committed_files(tmp_path, "proxykill") or proc.poll() is not None, 240, "a commit")
            pid = h.wait_for(lambda: _proxy_pid() or proc.poll() is not None, 180, "a healthy proxy")
            assert proc.poll() is None, f"the sweep ended before kill {len(killed) + 1}:\n{log.read_text()[-3000:]}"
            assert pid not in killed
            os.kill(int(pid), signal.SIGKILL)
            killed.append(pid)
            print(f"killed proxy {pid} at {time.strftime('%X')}")
            time.sleep(2)
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    assert rc == 0, out[-3000:]
    final = h.ledger_frame(tmp_path, "proxykill")
    assert (final["status"] != "error").sum() == len(final), final[final["status"] == "error"][["key", "error"]]
    assert len(final) == planned and not final["key"].duplicated().any()
    assert h.identities(final) == h.identities(base)
    assert "waiting up to" in out and "for the route to come back" in out  # the one line per outage
    # Ray forwards Serve's own tracebacks to every driver, prefixed with the actor's name: the
    # controller's health checks meeting the dead actor, and a replica whose in-flight request was
    # cut when its proxy died (CI printed one; the rows above show the call was retried). Nothing
    # of the sweep's own raises: no unprefixed traceback, none from our executors or tasks.
    serve_own = ("(ServeController", "(ServeReplica:")
    ours = [ln for ln in out.splitlines()
            if "Traceback" in ln and not any(tag in ln for tag in serve_own)]
    assert ours == [], out[-3000:]
