"""Faults tier: a sandbox executor SIGKILLed mid-batch never turns into rewards of 0.

The service (its own local Ray, 2 sandbox replicas) gets a 200-item request of correct ORLM
programs; a few seconds in, one ``SandboxRunner`` replica process is SIGKILLed (then, in a
second request, one fork server). Every item must come back either with the reward its
finished program earned (1.0) or with ``reward: null`` and an ``error``: none silently 0.
"""
from __future__ import annotations

import signal
import threading
import time

import httpx
import psutil
import pytest

from tests.rewards.serve_proc import rewards_service
from tests.rewards.test_service import copt

pytestmark = [pytest.mark.faults, pytest.mark.ray]
N = 200


def _descendants(pid: int, needle: str) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if needle in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _victims(pid: int, needle: str) -> list[psutil.Process]:
    victims = _descendants(pid, needle)
    if needle == "SandboxRunner":
        return victims
    # the fork server itself (a replica's child), not its forked children
    runners = {r.pid for r in _descendants(pid, "SandboxRunner")}
    out = []
    for v in victims:
        try:
            if v.ppid() in runners:
                out.append(v)
        except psutil.Error:
            pass
    return out


def _kill_later(pid: int, needle: str, after_s: float, killed: list[int]) -> threading.Thread:
    def run() -> None:
        time.sleep(after_s)
        deadline = time.monotonic() + 10.0
        while not killed and time.monotonic() < deadline:
            # The fork server's forked children carry its command line and exit within
            # milliseconds: any of them may vanish between the listing and the look at its
            # parent, so each is asked on its own and a vanished one is skipped.
            for victim in _victims(pid, needle):
                try:
                    victim.send_signal(signal.SIGKILL)
                except psutil.Error:
                    continue
                killed.append(victim.pid)
                break
            else:
                time.sleep(0.2)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _check(rows: list[dict]) -> tuple[int, int]:
    assert [r["id"] for r in rows] == [f"p{i}" for i in range(N)]  # none lost, none duplicated, in order
    scored = [r for r in rows if r["error"] is None]
    failed = [r for r in rows if r["error"] is not None]
    assert all(r["reward"] == 1.0 and r["correct"] is True for r in scored), [r for r in scored if r["reward"] != 1.0]
    assert all(r["reward"] is None and r["correct"] is None and r["error"]["kind"] in
               ("executor_lost", "timeout_budget", "internal") for r in failed)
    return len(scored), len(failed)


@pytest.mark.timeout(900)
def test_an_executor_killed_mid_batch_scores_nothing_silently(tmp_path):
    log = tmp_path / "serve.log"
    with rewards_service(log, "--min-executors", "2", "--max-executors", "2", "--slots", "2",
                         "--num-cpus", "2") as (url, proc):
        body = {"scheme": "correct", "extraction": "orlm", "grading": "orlm",
                "items": [{"id": f"p{i}", "completion": copt(), "answer": 12} for i in range(N)]}
        assert len(_descendants(proc.pid, "SandboxRunner")) == 2, "expected two sandbox replicas"
        for needle in ("SandboxRunner", "opteval.evalcore.sandbox.forkserver"):
            killed: list[int] = []
            killer = _kill_later(proc.pid, needle, 3.0, killed)
            r = httpx.post(url, json=body, timeout=600)
            killer.join()
            assert killed, f"no {needle} process found to kill"
            assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
            assert r.status_code == 200, r.text[:500]
            scored, failed = _check(r.json()["rewards"])
            assert r.json()["errors"] == failed
            print(f"{needle} SIGKILLed: {scored} scored, {failed} errors (retried once first)")
