"""Persistent sessions and the async LocalExecutor."""
from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from opteval.evalcore.harnesses.base import Executor
from opteval.evalcore.sandbox import ERROR, KILLED, MEMORY, OK, Limits, LocalExecutor

from .conftest import host_pids_with, wait_gone

REPO = Path(__file__).resolve().parents[2]


def test_globals_survive_and_each_cell_has_its_own_output(server):
    with server.session() as s:
        a = s.run_cell("x = 41\nprint('first')")
        b = s.run_cell("x += 1\nprint(x)\nsubmit(x)")
        c = s.run_cell("print('third')")
        assert (a.outcome, a.stdout, a.submission) == (OK, "first\n", None)
        assert (b.outcome, b.stdout, b.submission) == (OK, "42\n", 42)
        assert (c.stdout, c.submission) == ("third\n", None)  # submission is per cell


def test_error_cell_keeps_the_session(server):
    with server.session() as s:
        s.run_cell("import numpy as np\nkeep = np.arange(3)")
        bad = s.run_cell("1 / 0")
        assert bad.outcome == ERROR and "ZeroDivisionError" in bad.stderr and "<cell" in bad.stderr
        mem = s.run_cell("big = bytearray(6 * 10**9)", Limits(memory_mb=2048))
        assert mem.outcome == MEMORY
        ok = s.run_cell("print(int(keep.sum()))")
        assert (ok.outcome, ok.stdout) == (OK, "3\n")


def test_crash_ends_the_session_until_restart(server):
    s = server.session()
    try:
        s.run_cell("y = 5")
        crash = s.run_cell("import ctypes; ctypes.string_at(0)")
        assert crash.outcome == KILLED and "SIGSEGV" in crash.note
        later = s.run_cell("print(y)")
        assert later.outcome == KILLED and "restart" in later.note
        s.restart()
        fresh = s.run_cell("print('y' in globals())")
        assert (fresh.outcome, fresh.stdout) == (OK, "False\n")
    finally:
        s.close()


def test_cell_limits_timeout_and_cpu(server):
    with server.session() as s:
        t0 = time.monotonic()
        r = s.run_cell("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass",
                       Limits(wall_s=1, cpu_s=30))
        assert r.outcome == KILLED and "wall" in r.note
        assert time.monotonic() - t0 < 10
        s.restart()
        t0 = time.monotonic()
        r = s.run_cell(
            "import threading\ndef burn():\n    while True: pass\n"
            "[threading.Thread(target=burn, daemon=True).start() for _ in range(3)]\nburn()",
            Limits(wall_s=30, cpu_s=1))
        assert r.outcome == KILLED and "CPU" in r.note
        assert time.monotonic() - t0 < 15


def test_session_is_contained_and_close_kills_everything(server):
    marker = "ses" + uuid.uuid4().hex[:8]
    s = server.session()
    r = s.run_cell(
        "import os, ctypes, time\n"
        f"print(os.getpid(), os.path.exists({str(REPO)!r}))\n"  # the checkout is not in the sandbox
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    ctypes.CDLL(None).prctl(15, b'{marker}', 0, 0, 0)\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n")
    assert (r.outcome, r.stdout) == (OK, "2 False\n") and r.contained
    deadline = time.monotonic() + 5
    while not host_pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert host_pids_with(marker), "the background process should live while the session does"
    s.close()
    assert wait_gone(marker) == []
    assert s.run_cell("1").outcome == KILLED


def test_local_executor_implements_the_protocol(server):
    ex = LocalExecutor(server=server)
    assert isinstance(ex, Executor)

    async def go():
        r1, r2 = await asyncio.gather(ex.run("submit(1)"), ex.run("submit(2)"))
        sess = await ex.open_session()
        await sess.run_cell("v = 10")
        c = await sess.run_cell("submit(v * 2)")
        await sess.close()
        return r1, r2, c

    r1, r2, c = asyncio.run(go())
    assert (r1.submission, r2.submission, c.submission) == (1, 2, 20)
