"""The pool of children forked ahead of demand: refilled in the background, robust to a child
killed while it waits, size 0 forks on demand, and a pooled child never inherits a previous run.

Children are observed from the host (this test process is root): descendants of the server
process whose comm is ``opteval-run`` (each prepared or running child sets it).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from opteval.evalcore.sandbox import ForkServer, Limits
from opteval.evalcore.sandbox.host import SandboxUnavailable

WAIT_S = 60.0  # generous: the shared CI/dev machine can be heavily loaded


def _children(root_pid: int) -> list[int]:
    """Live pids below ``root_pid`` whose comm is ``opteval-run``."""
    parent: dict[int, int] = {}
    comm: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        head, rest = stat.rsplit(")", 1)
        fields = rest.split()
        if fields[0] == "Z":
            continue
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        comm[pid] = head.split("(", 1)[1]
    found = []
    for pid, name in comm.items():
        if name != "opteval-run":
            continue
        p, hops = parent.get(pid, 0), 0
        while p > 1 and p != root_pid and hops < 20:
            p, hops = parent.get(p, 0), hops + 1
        if p == root_pid:
            found.append(pid)
    return found


def _wait_count(fs: ForkServer, want: int, timeout: float = WAIT_S) -> list[int]:
    """Wait until exactly ``want`` children exist, the same set for 0.3 s (a used child being
    torn down still carries the name for a moment)."""
    deadline = time.monotonic() + timeout
    assert fs.pid is not None
    kids, since = _children(fs.pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _children(fs.pid)
        if set(now) != set(kids):
            kids, since = now, time.monotonic()
        elif len(kids) == want and time.monotonic() - since >= 0.3:
            break
    return kids


def _start(pool: int, as_user: dict) -> ForkServer:
    fs = ForkServer(pool_size=pool, **as_user)
    try:
        fs.start()
    except SandboxUnavailable as exc:
        fs.close()
        pytest.skip(f"no namespaces for this user here: {exc}")
    assert fs.contained, fs.note
    return fs


def test_pool_refills_and_survives_a_child_killed_while_idle(as_user):
    fs = _start(3, as_user)
    try:
        kids = _wait_count(fs, 3)
        assert len(kids) == 3, f"expected 3 prepared children, found {kids}"
        for _ in range(4):  # more runs than the pool holds: it must be refilled as they go
            r = fs.run_program("submit(7)")
            assert (r.outcome, r.submission) == ("ok", 7), r
        refilled = _wait_count(fs, 3)
        assert len(refilled) == 3, refilled
        assert not set(refilled) & set(kids), "a used child came back to the pool"
        for pid in refilled:  # killed while waiting for code (OOM killer, an operator)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        r = fs.run_program("submit(8)", Limits(wall_s=30))
        assert (r.outcome, r.submission) == ("ok", 8), r
        with fs.session() as s:
            c = s.run_cell("x = 41\nsubmit(x + 1)")
            assert (c.outcome, c.submission) == ("ok", 42), c
        again = _wait_count(fs, 3)
        assert len(again) == 3 and not set(again) & set(refilled), again
    finally:
        fs.close()


def test_pool_size_zero_forks_on_demand(as_user):
    fs = _start(0, as_user)
    try:
        r = fs.run_program("submit(1)")
        assert (r.outcome, r.submission) == ("ok", 1), r
        time.sleep(0.5)
        assert _wait_count(fs, 0) == [], "pool_size=0 must keep no child waiting"
        results: list = []

        def one(i: int) -> None:
            results.append(fs.run_program(f"submit({i})"))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]  # a burst: one fork each
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(r.submission for r in results) == [0, 1, 2], results
        with fs.session() as s:
            assert s.run_cell("y = 2").outcome == "ok"
            c = s.run_cell("submit(y * 3)")
            assert (c.outcome, c.submission) == ("ok", 6), c
        assert _wait_count(fs, 0) == []
    finally:
        fs.close()
    with pytest.raises(ValueError, match="pool_size"):
        ForkServer(pool_size=-1)


POLLUTE = """\
import builtins, os, sys, pulp
for d in ("/sandbox", "/tmp", "/dev/shm", os.path.expanduser("~")):
    with open(os.path.join(d, "left-behind"), "w") as fh:
        fh.write("x")
os.environ["LEFT_BEHIND"] = "1"
builtins.left_behind = 1
pulp.left_behind = 1
sys.modules["left_behind"] = sys
sys.path.append("/left-behind")
import numpy
numpy.left_behind = 1
submit("polluted")
"""

CHECK = """\
import builtins, os, sys, pulp, numpy
seen = [p for d in ("/sandbox", "/tmp", "/dev/shm", os.path.expanduser("~"))
        for p in [os.path.join(d, "left-behind")] if os.path.exists(p)]
seen += [k for k in ("LEFT_BEHIND",) if k in os.environ]
seen += [n for n, o in (("builtins", builtins), ("pulp", pulp), ("numpy", numpy)) if hasattr(o, "left_behind")]
seen += [m for m in ("left_behind",) if m in sys.modules]
seen += [p for p in sys.path if "left-behind" in p]
submit("clean" if not seen else ",".join(seen))
"""


def test_pooled_child_never_sees_a_previous_run(server):
    assert server.run_program(POLLUTE).submission == "polluted"
    with server.session() as s:  # a session's state must not leak either
        assert s.run_cell(POLLUTE).submission == "polluted"
    for _ in range(3):  # the children already waiting, then fresh ones
        r = server.run_program(CHECK)
        assert (r.outcome, r.submission) == ("ok", "clean"), r


def test_a_warmed_up_child_shows_nothing_of_its_warm_up(server, as_user):
    """A pooled child warms up (a tiny PuLP solve) before it joins the pool; the program sees none
    of it: what it sees is what a child forked on demand (never warmed) sees. (Not simply an empty
    /tmp: a checkout under /tmp is bind-mounted read-only at its path, so its first component
    shows there in every child.)"""
    probe = ("import os\n"
             "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
             "print(sorted(os.listdir('/tmp')), sorted(os.listdir('.')), pids)\n")
    cold = ForkServer(pool_size=0, **as_user).start()
    try:
        c = cold.run_program(probe)
    finally:
        cold.close()
    time.sleep(1.0)  # the children now in the pool have finished their warm-up
    r = server.run_program(probe)
    assert (r.outcome, r.stderr, r.models, r.note) == ("ok", "", [], ""), r
    assert c.outcome == "ok" and c.stdout.endswith(" ['main.py'] [1, 2]\n"), c
    assert r.stdout == c.stdout, (r.stdout, c.stdout)  # no file, no process left by the warm-up
