"""Every limit, proven by a program that tries to break it; and run_program never raises."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from opteval.evalcore.sandbox import ERROR, MEMORY, OK, OUTPUT_LIMIT, TIMEOUT, ForkServer, Limits, SandboxUnavailable

REPO = Path(__file__).resolve().parents[2]


def run(server, code: str, **limits):
    return server.run_program(textwrap.dedent(code), Limits(**limits) if limits else None)


def test_run_program_one_liner_in_a_fresh_process():
    out = subprocess.run(
        [sys.executable, "-c", "from opteval.evalcore.sandbox import run_program; print(run_program('submit(1+1)'))"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "outcome='ok'" in out.stdout and "submission=2," in out.stdout


def test_ok_program_output_and_submission(server):
    r = run(server, "print('hello'); import sys; print('warn', file=sys.stderr); submit(1+1)")
    assert (r.outcome, r.exit_code, r.submission) == (OK, 0, 2)
    assert r.stdout == "hello\n" and r.stderr == "warn\n"
    assert r.contained and r.wall_s > 0


def test_wall_limit_kills_a_loop_that_ignores_sigterm(server):
    t0 = time.monotonic()
    r = run(server, """
        import signal
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        print('started', flush=True)
        while True:
            pass
        """, wall_s=1.0, cpu_s=30)
    assert r.outcome == TIMEOUT and "wall" in r.note
    assert r.stdout == "started\n"  # output before the kill is kept
    assert time.monotonic() - t0 < 10


def test_cpu_limit_counts_every_thread(server):
    t0 = time.monotonic()
    r = run(server, """
        import threading
        def burn():
            while True:
                pass
        for _ in range(4):
            threading.Thread(target=burn, daemon=True).start()
        burn()
        """, wall_s=30, cpu_s=1)
    assert r.outcome == TIMEOUT and "CPU" in r.note
    assert time.monotonic() - t0 < 15  # far below the 30 s wall limit


def test_six_gigabyte_allocation_is_a_memory_outcome(server):
    r = run(server, "import numpy as np\na = np.ones(6 * 10**9 // 8)\nsubmit(float(a.sum()))",
            memory_mb=2048, wall_s=30)
    assert r.outcome == MEMORY and r.submission is None
    assert "MemoryError" in r.stderr
    r2 = run(server, "x = bytearray(6 * 10**9)", memory_mb=2048)
    assert r2.outcome == MEMORY


def test_output_flood_is_truncated_and_killed(server):
    t0 = time.monotonic()
    r = run(server, "while True:\n    print('x' * 1000)", output_bytes=50_000, wall_s=30)
    assert r.outcome == OUTPUT_LIMIT and r.truncated
    assert 0 < len(r.stdout) + len(r.stderr) <= 50_000
    assert time.monotonic() - t0 < 10


def test_process_limit_stops_a_fork_swarm(server):
    r = run(server, """
        import os, time
        n = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
        print(n)
        """, max_procs=16, wall_s=20)
    assert r.outcome == OK, r.stderr
    # exactly: the program itself counts as one, and nothing outside the run counts (a throwaway
    # uid as root, a user namespace of its own without root)
    assert int(r.stdout) == 15
    bomb = run(server, """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """, max_procs=32, wall_s=2)
    assert bomb.outcome in (TIMEOUT, ERROR)
    assert run(server, "submit(7)").submission == 7  # and the next run works


def test_file_size_limit(server):
    r = run(server, "open('big.bin', 'wb').write(b'0' * (3 * 1024 * 1024))", file_mb=1)
    assert r.outcome == ERROR and "File too large" in r.stderr


def test_crashes_come_back_as_results(server):
    seg = run(server, "import ctypes; ctypes.string_at(0)")
    assert seg.outcome == ERROR and seg.exit_code == -11 and "SIGSEGV" in seg.note
    rec = run(server, "def f():\n    return f()\nf()")
    assert rec.outcome == ERROR and "RecursionError" in rec.stderr
    assert run(server, "import os; os._exit(0)").outcome == OK
    r5 = run(server, "import os; os._exit(5)")
    assert (r5.outcome, r5.exit_code) == (ERROR, 5)
    r3 = run(server, "import sys; sys.exit(3)")
    assert (r3.outcome, r3.exit_code) == (ERROR, 3)
    ki = run(server, "raise KeyboardInterrupt")
    assert ki.outcome == ERROR and "KeyboardInterrupt" in ki.stderr
    syn = run(server, "def (:")
    assert syn.outcome == ERROR and "SyntaxError" in syn.stderr
    assert run(server, "submit(1)").outcome == OK


def test_stdin_is_closed(server):
    r = run(server, """
        import sys
        print(repr(sys.stdin.read()))
        try:
            input()
        except EOFError:
            print('EOF')
        """)
    assert r.stdout == "''\nEOF\n"


def test_environment_is_scrubbed(server):
    SECRET_ENV = "OPTEVAL_SANDBOX_TEST_SECRET"  # set by conftest.py before the server started
    SECRET_VALUE = os.environ[SECRET_ENV]
    r = run(server, f"""
        import os
        print(sorted(os.environ))
        seen = []
        for p in ('self', '1'):
            try:
                seen.append(open(f'/proc/{{p}}/environ', 'rb').read())
            except OSError:
                pass  # not dumpable after the uid change (root path), another user namespace (init)
        print(any(b'{SECRET_VALUE}' in s for s in seen))
        submit(os.environ.get('{SECRET_ENV}', 'absent'))
        """)
    assert r.outcome == OK, r.stderr
    assert r.submission == "absent"
    assert SECRET_VALUE not in r.stdout and r.stdout.rstrip().endswith("False")
    names = eval(r.stdout.splitlines()[0])
    assert {"PATH", "HOME", "LANG"} <= set(names) and len(names) <= 12


def test_run_program_is_thread_safe(server):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: run(server, f"import time; time.sleep(0.05); submit({i})"), range(12)))
    assert [r.submission for r in results] == list(range(12))
    assert all(r.outcome == OK for r in results)


def test_a_limit_the_kernel_refuses_is_reported_not_ignored(server):
    r = run(server, "submit(1)", memory_mb=2**44)  # 2**64 bytes: setrlimit cannot take it
    assert (r.outcome, r.submission) == (OK, 1), r
    assert "memory_mb: RLIMIT_AS not applied" in r.note, r.note
    assert run(server, "submit(2)").note == ""  # only the run that asked for it


def test_a_limit_above_the_inherited_hard_limit_is_held_there_and_reported(as_user):
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    hard = 2 * 1024 * 1024  # the executor was started with a 2 MB file-size hard limit
    launcher = [prlimit, f"--fsize={hard}:{hard}", *as_user.get("launcher", [])]
    fs = ForkServer(pool_size=1, modules=(), launcher=launcher)
    try:
        fs.start()
    except SandboxUnavailable as exc:
        fs.close()
        pytest.skip(f"no namespaces for this user here: {exc}")
    try:
        r = fs.run_program("open('big.bin', 'wb').write(b'0' * (3 * 1024 * 1024))", Limits(file_mb=64))
        assert r.outcome == ERROR and "File too large" in r.stderr, r
        assert "file_mb: RLIMIT_FSIZE held at the inherited hard limit of 2 MB (asked 64 MB)" in r.note, r.note
        with fs.session() as s:
            c = s.run_cell("x = 1", Limits(file_mb=64))
            assert c.outcome == OK and "RLIMIT_FSIZE held" in c.note, c
    finally:
        fs.close()
