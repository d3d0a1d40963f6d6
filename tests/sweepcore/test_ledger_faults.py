"""Ledger faults: the writer lease, damaged files named and repaired, failed commits, re-run errors.

Everything here is a real local directory (and one real tmpfs for disk-full when the
test may mount one); the S3 lease is in ``test_ledger_s3.py``.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

import pytest

from opteval.sweepcore.lease import LEASE_FILE, LeaseHeldError, LeaseLostError
from opteval.sweepcore.ledger import CommitError, DamagedFileError, DuplicateKeyError, Ledger, error_row
from opteval.sweepcore.ledger.keyset import KeySet
from tests.sweepcore.test_ledger import _row, _setup

REPO = Path(__file__).resolve().parents[2]


def _open(tmp_path, res, fp, **kw):
    kw.setdefault("lease_stale_s", 30.0)
    return Ledger.open(str(tmp_path), "demo", res, fp, **kw)


# -- the lease ------------------------------------------------------------------------------


def test_second_writer_refused_naming_holder_then_free_after_release(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp)
    info = json.loads((tmp_path / "demo" / LEASE_FILE).read_text())
    assert info["pid"] == os.getpid() and info["host"] and info["owner"]
    with pytest.raises(LeaseHeldError) as ei:
        _open(tmp_path, res, fp)
    msg = str(ei.value)
    assert f"pid {os.getpid()}" in msg and "last heartbeat" in msg and "sweep.wait_for_lease=true" in msg
    # read-only access (plan_only, reports) needs no lease
    Ledger.open(str(tmp_path), "demo", res, fp, read_only=True)
    a.commit([_row(plan[0])])
    a.close()
    assert not (tmp_path / "demo" / LEASE_FILE).exists()
    b = _open(tmp_path, res, fp)
    assert b.committed_keys() == {plan[0].key}
    b.close()


def test_stale_lease_taken_over_and_old_holder_stops_writing(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp, lease_stale_s=30.0)
    a.lease._stop.set()  # a hung driver: no more heartbeats
    lease = tmp_path / "demo" / LEASE_FILE
    info = json.loads(lease.read_text())
    info["heartbeat_at"] = "2000-01-01T00:00:00+00:00"
    info["pid"] = 1  # alive, so only staleness can free it
    lease.write_text(json.dumps(info))
    a.lease.token = (info["owner"], info["heartbeat_at"])
    b = _open(tmp_path, res, fp)
    assert json.loads(lease.read_text())["owner"] == b.lease.owner
    with pytest.raises(LeaseLostError):
        a.commit([_row(plan[0])])  # the old holder never writes again (nor deletes)
    b.commit([_row(plan[0])])
    assert b.committed_keys() == {plan[0].key}
    a.close()  # must not remove b's lease
    assert json.loads(lease.read_text())["owner"] == b.lease.owner
    b.close()


def test_lease_of_a_dead_local_process_is_taken_at_once(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    (tmp_path / "demo").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket
    from datetime import datetime

    now = datetime.now(UTC).isoformat()
    (tmp_path / "demo" / LEASE_FILE).write_text(json.dumps({
        "owner": "f" * 32, "host": socket.gethostname(), "pid": int(dead.stdout), "acquired_at": now,
        "heartbeat_at": now}))
    led = _open(tmp_path, res, fp)
    assert led.lease is not None
    led.close()


def test_heartbeat_keeps_a_live_lease_and_waiter_gets_it_after_release(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp, lease_stale_s=1.0)  # beats every 0.25 s
    first = json.loads((tmp_path / "demo" / LEASE_FILE).read_text())["heartbeat_at"]
    time.sleep(1.5)
    assert json.loads((tmp_path / "demo" / LEASE_FILE).read_text())["heartbeat_at"] != first
    with pytest.raises(LeaseHeldError):  # beating: never stale
        _open(tmp_path, res, fp, lease_stale_s=1.0)
    import threading

    got: dict[str, Ledger] = {}
    t = threading.Thread(target=lambda: got.setdefault("led", _open(tmp_path, res, fp, lease_stale_s=1.0,
                                                                       wait_for_lease=True)))
    t.start()
    time.sleep(0.8)
    assert "led" not in got  # still waiting
    a.close()
    t.join(timeout=20)
    assert got["led"].lease is not None
    got["led"].close()


def test_two_drivers_racing_leave_exactly_one_writer(tmp_path):
    """Processes opening one sweep at the same moment: exactly one wins, the others are refused."""
    cfg, res, fp, plan = _setup(tmp_path)
    code = (
        "import sys, time; sys.path.insert(0, {!r})\n"
        "from tests.sweepcore.test_ledger import _setup\n"
        "from opteval.sweepcore.ledger import Ledger\nfrom opteval.sweepcore.lease import LeaseHeldError\n"
        "cfg, res, fp, plan = _setup({!r})\n"
        "t0 = float(sys.argv[1])\n"
        "while time.time() < t0: time.sleep(0.001)\n"
        "import os, pathlib; tried = pathlib.Path({!r})\n"
        "try:\n    led = Ledger.open({!r}, 'demo', res, fp, lease_stale_s=30)\n"
        "except LeaseHeldError:\n    (tried / str(os.getpid())).touch(); print('refused'); sys.exit(2)\n"
        "(tried / str(os.getpid())).touch()\n"
        "t1 = time.time()\n"
        "while len(list(tried.iterdir())) < 3 and time.time() - t1 < 60: time.sleep(0.05)\n"
        "print('won'); led.close()\n".format(str(REPO), str(tmp_path), str(tmp_path / "tried"), str(tmp_path)))
    (tmp_path / "tried").mkdir()
    start = str(time.time() + 4.0)
    procs = [subprocess.Popen([sys.executable, "-c", code, start], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert sorted(outs) == ["refused", "refused", "won"], outs


# -- damage -----------------------------------------------------------------------------------


def _truncate_one(tmp_path) -> Path:
    parts = sorted((tmp_path / "demo" / "trajectories").rglob("part-*.parquet"))
    victim = parts[0]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    return victim


def test_truncated_file_is_named_then_repair_quarantines_and_releases_its_keys(tmp_path, capsys):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp)
    a.record_plan(plan)
    a.commit([_row(p) for p in plan[:3]])  # direct: one file
    a.commit([_row(p) for p in plan[3:6]])
    a.close()
    victim = _truncate_one(tmp_path)
    with pytest.raises(DamagedFileError) as ei:
        _open(tmp_path, res, fp)
    msg = str(ei.value)
    assert str(victim) in msg and "sweep.repair=true" in msg and "\n" not in msg
    assert not (tmp_path / "demo" / LEASE_FILE).exists()  # a refused open releases its lease
    with pytest.raises(DamagedFileError):  # reports (read-only) name it too
        Ledger.open_existing(str(tmp_path), "demo")
    b = _open(tmp_path, res, fp, repair=True)
    b.record_plan(plan)
    rerun = b.log_quarantined(plan)
    assert not victim.exists()
    q = list((tmp_path / "demo" / "quarantine").glob("*part-*.parquet"))
    assert len(q) == 1
    held = set((q[0].parent / (q[0].name + ".keys.txt")).read_text().split())
    # unreadable: the partition's planned keys not in the ledger (a superset of what it held)
    assert held == set(rerun) == {p.key for p in plan if p.method == "direct"} - b.committed_keys()
    assert {p.key for p in plan[:3]} <= held
    assert b.committed_keys() == {p.key for p in plan[3:6]}
    b.commit([_row(p) for p in plan[:3]])  # the re-run: no duplicate
    assert sorted(b.read_table(columns=["key"]).column(0).to_pylist()) == sorted(p.key for p in plan[:6])
    assert "repair: moved" in capsys.readouterr().out
    b.close()


def test_duplicate_key_named_with_repair_hint_and_repaired(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp)
    a.commit([_row(p) for p in plan[:3]])
    a.close()
    b = Ledger.open(str(tmp_path), "demo", res, fp)  # no lease: simulates the old two-driver damage
    b._keys = KeySet()
    b.commit([_row(plan[1]), _row(plan[5])])
    with pytest.raises(DuplicateKeyError) as ei:
        _open(tmp_path, res, fp)
    assert "sweep.repair=true" in str(ei.value)
    c = _open(tmp_path, res, fp, repair=True)
    assert c.committed_keys() == {p.key for p in plan[:3]}  # plan[5] runs again
    assert c.log_quarantined(plan) == [plan[5].key]
    c.close()


@pytest.mark.parametrize("damage", ["manifest", "plan"])
def test_corrupt_manifest_or_plan_named_then_repaired(tmp_path, damage):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp)
    a.record_plan(plan)
    a.commit([_row(plan[0])])
    a.close()
    target = tmp_path / "demo" / ("manifest.json" if damage == "manifest" else "plan.parquet")
    target.write_bytes(target.read_bytes()[:20])
    with pytest.raises(DamagedFileError) as ei:
        _open(tmp_path, res, fp)
    assert str(target.name) in str(ei.value) and "sweep.repair=true" in str(ei.value)
    b = _open(tmp_path, res, fp, repair=True)
    b.record_plan(plan)
    assert b.committed_keys() == {plan[0].key}
    assert b.read_plan().num_rows == len(plan) and b.manifest()["fingerprint"] == fp
    assert len(list((tmp_path / "demo" / "quarantine").iterdir())) == 1
    b.close()


# -- failed commits ---------------------------------------------------------------------------


def test_commit_that_fails_names_path_and_cause_and_keeps_what_was_committed(tmp_path, monkeypatch):
    cfg, res, fp, plan = _setup(tmp_path)
    led = _open(tmp_path, res, fp)
    led.commit([_row(plan[0])])
    import pyarrow.parquet as pq

    real = pq.write_table

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(CommitError) as ei:
        led.commit([_row(plan[1])])
    assert "No space left on device" in str(ei.value) and str(tmp_path / "demo") in str(ei.value)
    monkeypatch.setattr(pq, "write_table", real)
    assert not [f for _, _, fs in os.walk(tmp_path / "demo") for f in fs if f.endswith(".tmp")]
    led.close()
    again = _open(tmp_path, res, fp)
    assert again.committed_keys() == {plan[0].key}
    again.commit([_row(plan[1])])
    again.close()


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def test_disk_full_on_a_real_small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "600k"):
        pytest.skip("needs root and tmpfs mounts (the monkeypatched ENOSPC test covers the logic)")
    try:
        cfg, res, fp, plan = _setup(mnt)
        led = Ledger.open(str(mnt), "demo", res, fp, lease_stale_s=30.0)
        (mnt / "ballast").write_bytes(b"\0" * 200_000)
        done = 0
        with pytest.raises(CommitError) as ei:
            for p in plan:  # incompressible bytes in a plain string column (the same in either ledger format)
                led.commit([dict(_row(p), submission=os.urandom(60_000).hex())])
                done += 1
        assert "No space left on device" in str(ei.value) and done >= 1
        committed = led.committed_keys()
        led.close()
        (mnt / "ballast").unlink()  # the cause is fixed
        again = Ledger.open(str(mnt), "demo", res, fp, lease_stale_s=30.0)
        assert again.committed_keys() == committed and len(committed) == done
        assert again.read_table(columns=["key"]).num_rows == done
        again.close()
    finally:
        # lazily when busy (a file the failed commit left open): a mount left behind fills the
        # host's mount table and makes pytest's clean-up of old temp dirs warn on every later run
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# -- re-running errors ------------------------------------------------------------------------


def test_retry_errors_supersedes_error_rows_never_duplicates(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp, compact_every=2)
    a.commit([_row(plan[0]), error_row(plan[1], "executor lost", 3, sweep="demo")])
    a.commit([_row(plan[2])])
    a.commit([error_row(plan[3], "worker died", 3, sweep="demo")])  # compacts
    released = a.supersede_errors()
    assert sorted(released) == sorted([plan[1].key, plan[3].key])
    assert a.committed_keys() == {plan[0].key, plan[2].key}
    a.commit([_row(plan[1]), _row(plan[3])])
    a.close()
    b = _open(tmp_path, res, fp)
    t = b.read_table(columns=["key", "status"]).to_pylist()
    assert sorted(r["key"] for r in t) == sorted(p.key for p in plan[:4])
    assert all(r["status"] == "submitted" for r in t)
    b.close()


def test_crash_after_rewrite_before_deletes_resolves_at_open(tmp_path, monkeypatch):
    cfg, res, fp, plan = _setup(tmp_path)
    a = _open(tmp_path, res, fp)
    a.commit([_row(plan[0]), error_row(plan[1], "executor lost", 3, sweep="demo")])
    monkeypatch.setattr(a, "_delete", lambda p: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        a.supersede_errors()
    monkeypatch.undo()
    a.close()
    b = _open(tmp_path, res, fp)  # the old file is recognised as replaced, deleted, no duplicate
    assert b.committed_keys() == {plan[0].key}
    b.close()


def test_committer_keeps_rows_that_finish_while_a_commit_runs_and_stops_on_failure(tmp_path):
    import asyncio

    from opteval.cluster.driver.commit import Committer

    cfg, res, fp, plan = _setup(tmp_path)
    led = _open(tmp_path, res, fp)
    real = led.commit

    def slow_commit(rows):
        batch = list(rows)  # what the writer took, like Ledger.commit grouping the rows first
        time.sleep(0.3)
        return real(batch)

    led.commit = slow_commit
    com = Committer(led, batch=2, interval_s=60)
    failures: list[Exception] = []
    com.on_failure = failures.append

    async def go():
        com.add(_row(plan[0]))
        com.add(_row(plan[1]))
        flushing = asyncio.create_task(com.flush())
        await asyncio.sleep(0.1)
        com.add(_row(plan[2]))  # finishes while the first batch is being written
        await flushing
        await com.flush(force=True)

    asyncio.run(go())
    assert led.committed_keys() == {p.key for p in plan[:3]} and com.committed == 3

    def broken(rows):
        raise OSError(errno.EACCES, "Permission denied")

    led.commit = broken
    com.add(_row(plan[3]))
    with pytest.raises(CommitError):
        asyncio.run(com.flush(force=True))
    assert failures and "Permission denied" in str(failures[0])
    with pytest.raises(CommitError):  # stays failed: nothing more is committed by this run
        asyncio.run(com.flush(force=True))
    led.close()


def test_the_cluster_watch_commits_what_finished_from_its_own_thread(tmp_path):
    """Running.commit_now: the rows that finished are committed on the sweep's loop from
    another thread (the watch's, whose next step is os._exit); a closed loop is reported, not raised."""
    import asyncio
    import threading

    from opteval.cluster.driver.clusterwatch import Running
    from opteval.cluster.driver.commit import Committer

    cfg, res, fp, plan = _setup(tmp_path)
    led = _open(tmp_path, res, fp)
    com = Committer(led, batch=100, interval_s=60)  # nothing would be committed on its own
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    running = Running(loop=loop, committer=com)
    assert Running().commit_now() == "nothing had finished"
    com.add(_row(plan[0]))
    com.add(_row(plan[1]))
    assert running.commit_now(timeout_s=10) == "2 trajectories committed by this run"
    assert led.committed_keys() == {plan[0].key, plan[1].key}
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
    com.add(_row(plan[2]))
    said = running.commit_now(timeout_s=1)
    assert said == "the last commit did not complete (the sweep's event loop had ended)", said
    assert led.committed_keys() == {plan[0].key, plan[1].key}
    led.close()
