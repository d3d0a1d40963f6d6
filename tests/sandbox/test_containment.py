"""Containment: nothing a run started survives it; no network, no host files, no host /tmp, no host pids."""
from __future__ import annotations

import os
import signal
import socket
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest

from opteval.evalcore.sandbox import ERROR, KILLED, OK, TIMEOUT, ForkServer, Limits, SandboxUnavailable
from opteval.evalcore.sandbox.asuser import NOBODY, unprivileged_launcher

from .conftest import host_pids_with, reachable_dir, wait_gone

SETSID_PROGRAM = """
import ctypes, os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"{marker}", 0, 0, 0)  # PR_SET_NAME: visible on the host
        with open("{pidfile}", "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(120)
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep({linger})
submit(1)
"""


def _run_in_thread(server, code, limits):
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.setdefault("r", server.run_program(code, limits)))
    t.start()
    return t, box


def _seen_during(t: threading.Thread, marker: str, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while t.is_alive() and time.monotonic() < deadline:
        if host_pids_with(marker):
            return True
        time.sleep(0.02)
    return False


def test_setsid_grandchild_does_not_survive_the_run(server):
    marker = "sbx" + uuid.uuid4().hex[:8]
    code = SETSID_PROGRAM.format(marker=marker, pidfile="/tmp/pidfile", linger=1.5)
    t, box = _run_in_thread(server, code, Limits(wall_s=20))
    assert _seen_during(t, marker), "the grandchild should exist while the run is going"
    t.join()
    assert box["r"].outcome == OK, box["r"].stderr
    assert wait_gone(marker) == []


def test_long_cbc_solve_is_killed_with_its_cbc_process(server):
    marker = "cbc" + uuid.uuid4().hex[:8]
    code = textwrap.dedent(f"""
        import os, random, pulp
        rng = random.Random(7)
        m, n = 4, 36                      # a market-split instance: hard for branch and bound
        a = [[rng.randrange(100) for _ in range(n)] for _ in range(m)]
        prob = pulp.LpProblem("ms", pulp.LpMinimize)
        x = [pulp.LpVariable(f"x{{j}}", cat="Binary") for j in range(n)]
        s = [pulp.LpVariable(f"s{{i}}", lowBound=-1000) for i in range(m)]
        t = [pulp.LpVariable(f"t{{i}}", lowBound=0) for i in range(m)]
        prob += pulp.lpSum(t)
        for i in range(m):
            prob += pulp.lpSum(a[i][j] * x[j] for j in range(n)) + s[i] == sum(a[i]) // 2
            prob += t[i] >= s[i]
            prob += t[i] >= -s[i]
        os.makedirs("/tmp/{marker}")
        solver = pulp.PULP_CBC_CMD(msg=0)
        solver.tmpDir = "/tmp/{marker}"   # CBC's command line now carries the marker
        prob.solve(solver)
        submit(pulp.value(prob.objective))
        """)
    t, box = _run_in_thread(server, code, Limits(wall_s=3))
    assert _seen_during(t, marker), "CBC should be running during the solve"
    t.join()
    assert box["r"].outcome == TIMEOUT
    assert wait_gone(marker) == []


def test_tmp_is_private(server):
    name = f"opteval-host-{uuid.uuid4().hex}"
    host_file = f"/tmp/{name}"
    with open(host_file, "w") as fh:
        fh.write("host")
    try:
        r = server.run_program(textwrap.dedent(f"""
            import os
            print(os.path.exists("{host_file}"))
            open("/tmp/{name}-inside", "w").write("sandbox")
            print(sorted(os.listdir("/tmp")))
            """))
        assert r.outcome == OK, r.stderr
        # only its own file, plus the top of a Python installation that lives under /tmp (a venv)
        installs = {os.path.realpath(p).split("/")[2] for p in (sys.prefix, sys.base_prefix)
                    if os.path.realpath(p).startswith("/tmp/")}
        assert r.stdout.splitlines() == ["False", str(sorted({f"{name}-inside"} | installs))]
        assert not os.path.exists(f"/tmp/{name}-inside")
    finally:
        os.unlink(host_file)


def test_no_network_not_even_loopback(server):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    lsock.settimeout(0.5)
    port = lsock.getsockname()[1]
    try:
        r = server.run_program(textwrap.dedent(f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2)
                print("connected")
            except OSError as exc:
                print("refused", exc.errno)
            """))
        assert r.outcome == OK and r.stdout.startswith("refused"), r.stdout + r.stderr
        with pytest.raises(socket.timeout):
            lsock.accept()
    finally:
        lsock.close()


def _plant() -> str:
    """An answer file every user could read on the host (only the sandbox hides it)."""
    d = reachable_dir()
    planted = os.path.join(d, "answers.txt")
    with open(planted, "w") as fh:
        fh.write("the answer is 42")
    os.chmod(planted, 0o644)
    return planted


def test_host_files_are_invisible(server, shared_benchmarks):
    planted = _plant()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = server.run_program(textwrap.dedent(f"""
        import os, numpy, pulp, pyscipopt, sys
        for p in ["{planted}", "{shared_benchmarks}/nl4opt.jsonl", "{repo}/pyproject.toml", "/etc/shadow", "/root/.bash_history"]:
            try:
                open(p).read()
                print("READ", p)
            except OSError as exc:
                print("denied", type(exc).__name__)
        print(os.path.exists(sys.executable), sorted(os.listdir("/")))
        """))
    import shutil

    shutil.rmtree(os.path.dirname(planted))
    assert r.outcome == OK, r.stderr
    lines = r.stdout.splitlines()
    assert not any(line.startswith("READ") for line in lines), r.stdout
    assert lines[-1].startswith("True")  # the interpreter itself is there
    assert "work" not in lines[-1] and "home" not in lines[-1]


def test_own_pid_namespace(server):
    r = server.run_program("import os\nprint(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r.outcome == OK, r.stderr
    pid, pids = r.stdout.split(" ", 1)
    assert int(pid) == 2 and eval(pids) == [1, 2]


def test_program_cannot_forge_kills_outside(server):
    me = os.getpid()
    r = server.run_program(f"import os, signal\nos.kill({me}, signal.SIGKILL)")
    assert r.outcome == ERROR  # no such process in its namespace; we are still alive
    assert "ProcessLookupError" in r.stderr


def test_writes_outside_the_sandbox_fail(server):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    name = f"opteval-w-{uuid.uuid4().hex[:8]}"
    targets = ["/" + name, f"/usr/{name}", f"/etc/{name}", f"{os.path.realpath(sys.prefix)}/{name}",
               f"{repo}/{name}", f"/dev/{name}"]
    r = server.run_program(textwrap.dedent(f"""
        import errno
        for p in {targets!r}:
            try:
                open(p, "w").write("x")
                print("WROTE", p)
            except OSError as exc:
                print(errno.errorcode[exc.errno])
        open("/tmp/{name}", "w").write("private")   # allowed: its own /tmp
        open("/sandbox/{name}", "w").write("private")
        """))
    assert r.outcome == OK, r.stderr
    assert "WROTE" not in r.stdout and len(r.stdout.split()) == len(targets), r.stdout
    assert set(r.stdout.split()) <= {"EROFS", "EACCES", "ENOENT", "EPERM"}
    assert not any(os.path.exists(p) for p in targets + [f"/tmp/{name}", f"/sandbox/{name}"])


def test_disk_fill_stops_at_the_private_tmpfs(server):
    r = server.run_program(textwrap.dedent("""
        import errno, os
        chunk = bytes(1 << 20)
        total = 0
        try:
            for i in range(4096):
                with open(f"/sandbox/fill{i}", "wb") as fh:
                    for _ in range(32):
                        fh.write(chunk)
                        total += 1
        except OSError as exc:
            print(errno.errorcode[exc.errno], total)
        """), Limits(wall_s=30, file_mb=64))
    assert r.outcome == OK, r.stderr
    code, mb = r.stdout.split()
    assert code == "ENOSPC" and 400 <= int(mb) <= 520  # the run's 512 MB tmpfs, never the host disk
    assert server.run_program("submit(1)").submission == 1  # freed with the run


def test_each_server_runs_as_it_says(server, as_user):
    """[root] takes the root path; [unprivileged] really is uid 65534 with no capability on the host."""
    if not as_user:
        with open(f"/proc/{server.pid}/status") as fh:
            assert fh.read().split("Uid:")[1].split()[:4] == [str(os.geteuid())] * 4
        from opteval.evalcore.sandbox import linux

        assert server.contained and server.userns is (not linux.privileged())
        return
    import subprocess

    probe = "print(open('/proc/self/status').read())"
    out = subprocess.run([*as_user["launcher"], sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    status = {k: v.split() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)}
    assert status["Uid"] == [str(NOBODY)] * 4 and status["Groups"] == []
    assert all(int(status[c][0], 16) == 0 for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
    # the server itself (the pid the host knows) runs as that uid, in a user namespace of its own
    with open(f"/proc/{server.pid}/status") as fh:
        assert fh.read().split("Uid:")[1].split()[:4] == [str(NOBODY)] * 4
    assert os.readlink(f"/proc/{server.pid}/ns/user") != os.readlink("/proc/self/ns/user")
    assert server.userns and server.contained


def test_fork_server_death_is_a_killed_run_and_a_restart(as_user):
    fs = ForkServer(pool_size=1, **as_user)
    try:
        fs.start()
        old = fs.pid
        assert old is not None
        t, box = _run_in_thread(fs, "import time; time.sleep(30)", Limits(wall_s=60))
        time.sleep(1.0)
        os.kill(old, signal.SIGKILL)
        t.join(timeout=60)
        assert box["r"].outcome == KILLED and "fork server" in box["r"].note
        r = fs.run_program("submit(3)")
        assert (r.outcome, r.submission) == (OK, 3) and fs.pid != old
    finally:
        fs.close()


def test_fallback_without_namespaces_says_so(monkeypatch, as_user):
    monkeypatch.setenv("OPTEVAL_SANDBOX_NAMESPACES", "0")
    fs = ForkServer(pool_size=1, **as_user)
    marker = "fbk" + uuid.uuid4().hex[:8]
    planted = _plant()
    try:
        r = fs.run_program("submit(2.5)")
        assert (r.outcome, r.submission, r.contained) == (OK, 2.5, False)
        assert "NOT CONTAINED" in r.note and not fs.contained
        # positive control for test_host_files_are_invisible: this user could read the planted file
        r = fs.run_program(f"print(open({planted!r}).read())")
        assert r.stdout == "the answer is 42\n", r.stderr
        # positive control for the containment test above: without namespaces a setsid grandchild survives
        pidfile = f"/tmp/{marker}.pid"
        r = fs.run_program(SETSID_PROGRAM.format(marker=marker, pidfile=pidfile, linger=0.3))
        assert r.outcome == OK, r.stderr
        time.sleep(0.3)
        survivors = host_pids_with(marker)
        assert survivors, "without namespaces the setsid grandchild escapes (which is why we use them)"
        with open(pidfile) as fh:
            pid = int(fh.read())
        os.kill(pid, 0)  # the pid file names a live host process
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        os.unlink(pidfile)
    finally:
        fs.close()
        for pid in host_pids_with(marker):
            os.kill(pid, signal.SIGKILL)
        import shutil

        shutil.rmtree(os.path.dirname(planted), ignore_errors=True)


def _denied_launcher() -> list[str]:
    launcher, why = unprivileged_launcher(deny_userns=True)
    if launcher is None:
        pytest.skip(f"cannot model a node without user namespaces: {why}")
    return launcher


def test_refuses_to_start_when_nothing_can_contain():
    """No user namespaces and no root: no silent fallback, a clear refusal (and run_program says so)."""
    fs = ForkServer(pool_size=1, launcher=_denied_launcher(), allow_uncontained=False)
    try:
        with pytest.raises(SandboxUnavailable, match="allow_uncontained"):
            fs.start()
        r = fs.run_program("submit(1)")
        assert r.outcome == KILLED and "allow_uncontained" in r.note
    finally:
        fs.close()


def test_allow_uncontained_runs_but_every_result_says_so():
    fs = ForkServer(pool_size=1, launcher=_denied_launcher(), allow_uncontained=True)
    try:
        r = fs.run_program("submit(3)")
        assert (r.outcome, r.submission, r.contained) == (OK, 3, False) and "NOT CONTAINED" in r.note
        with fs.session() as s:
            c = s.run_cell("submit(4)")
        assert (c.outcome, c.submission, c.contained) == (OK, 4, False) and "NOT CONTAINED" in c.note
    finally:
        fs.close()
