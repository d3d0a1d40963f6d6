"""A signal must end the sweep even when the main thread is stuck in native code.

A SIGTERM to the driver's process group also stops the GCS and raylet that ``ray.init``
started; the driver then waits in C++ (30 s, or 60 s and exit 1). ``signals.watchdog`` ends
the run from a thread when the main thread does not leave the step within its grace, and
``ClusterWatch`` ends it when the local cluster's processes exit under a running sweep.
No Ray: the stuck main thread is a ``join`` that the recording handler does not break."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opteval.cluster.driver.clusterwatch import ClusterWatch

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, sys, threading, time
from opteval.cluster.driver import signals
signals.install()  # records SIGINT/SIGTERM, never raises: a blocked main thread stays blocked

def stuck(signum):
    print(f"watchdog {signum}", flush=True)
    os._exit(130)

with signals.watchdog(stuck, grace_s=0.5):
    print("ready", flush=True)
    if sys.argv[1] == "stuck":
        waiter = threading.Thread(target=time.sleep, args=(60,), daemon=True)
        waiter.start()
        waiter.join()  # the main thread does not return to the step's caller
    else:
        while signals.pending() is None:
            time.sleep(0.01)
print(f"left the step after signal {signals.pending()}", flush=True)
time.sleep(1.5)  # longer than the grace: the watchdog must be gone
print("done", flush=True)
"""


def _child(mode: str) -> tuple[int, str, float]:
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    return p.returncode, out, time.monotonic() - t0


def test_a_main_thread_stuck_after_a_signal_is_ended_by_the_watchdog():
    rc, out, took = _child("stuck")
    assert rc == 130 and "watchdog 15" in out, out
    assert "left the step" not in out
    assert took < 20, took  # the grace (0.5 s) and a loaded machine's delay, not the 60 s wait


def test_a_main_thread_that_leaves_the_step_is_not_ended_by_the_watchdog():
    rc, out, _ = _child("returns")
    assert rc == 0, out
    assert "left the step after signal 15" in out and "done" in out
    assert "watchdog" not in out


def test_the_cluster_watch_reports_the_first_loss_once():
    reports: list[list[str]] = []
    reported = threading.Event()
    answers = iter([[], [], ["gcs_server pid 7"]])

    def lost(gone: list[str]) -> None:
        reports.append(gone)
        reported.set()

    with ClusterWatch(lambda: next(answers, ["raylet pid 8"]), lost, poll_s=0.01):
        assert reported.wait(10)
        time.sleep(0.1)
    assert reports == [["gcs_server pid 7"]]


def test_the_cluster_watch_stops_with_its_block_before_ray_is_shut_down_on_purpose():
    calls: list[list[str]] = []
    alive = threading.Event()

    def gone() -> list[str]:
        alive.set()
        return []

    with ClusterWatch(gone, calls.append, poll_s=0.01) as watch:
        assert alive.wait(10)
    assert not watch._thread.is_alive()  # joined: a shutdown's exiting GCS is not reported
    assert calls == []


@pytest.mark.parametrize("how", ["exit", "zombie"])
def test_services_gone_names_a_service_that_exited(how):
    """An exited child is a zombie until Ray reaps it at shutdown; both count as gone."""
    from opteval.cluster.runtime import services_gone

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert services_gone({child.pid: "gcs_server"}) == []
        child.kill()
        if how == "exit":
            child.wait(10)
        else:
            deadline = time.monotonic() + 10
            while not services_gone({child.pid: "gcs_server"}) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert services_gone({child.pid: "gcs_server"}) == [f"gcs_server pid {child.pid}"]
    finally:
        child.kill()
        child.wait(10)
