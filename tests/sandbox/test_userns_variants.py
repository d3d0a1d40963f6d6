"""The other ways an executor may lack the host's root: root of a pod's user namespace
(``hostUsers: false``), and the throwaway-uid range each namespace allows."""
from __future__ import annotations

import pytest

from opteval.evalcore.sandbox import OK, ForkServer, Limits, SandboxUnavailable
from opteval.evalcore.sandbox.asuser import unprivileged_launcher
from opteval.evalcore.sandbox.forkserver.isolation import throwaway_uid_range

FULL = "0 0 4294967295\n"
DEFAULT = (1_000_000, 2_000_000_000)


def test_throwaway_uid_range_follows_the_id_maps():
    assert throwaway_uid_range(FULL, FULL, DEFAULT) == DEFAULT  # the host
    assert throwaway_uid_range("0 100000 65536\n", "0 100000 65536\n", DEFAULT) == (1000, 65534)  # a pod
    assert throwaway_uid_range("0 1000 1\n", "0 1000 1\n", DEFAULT) is None  # one id: nested user namespaces
    assert throwaway_uid_range("0 100000 65536\n", "0 100000 2000\n", DEFAULT) == (1000, 2000)


def test_root_of_a_pod_user_namespace_takes_the_root_path():
    launcher, why = unprivileged_launcher(pod_userns=200_000)
    if launcher is None:
        pytest.skip(f"cannot model a pod user namespace: {why}")
    fs = ForkServer(pool_size=1, launcher=launcher)
    try:
        fs.start()
        assert fs.contained and not fs.userns, fs.note
        r = fs.run_program("import os\nprint(os.getuid(), os.getpid(), sorted(os.listdir('/proc'))[:2])")
        uid, pid, procs = r.stdout.split(" ", 2)
        assert r.outcome == OK and 1000 <= int(uid) < 65534 and pid == "2" and procs.strip() == "['1', '2']"
        swarm = fs.run_program(
            "import os, time\nn = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    n += 1\nprint(n)", Limits(max_procs=8, wall_s=20))
        assert swarm.stdout == "7\n", swarm.stderr
    finally:
        fs.close()


def test_masked_proc_refuses_cleanly_and_the_fallback_still_works():
    """A runtime's masked /proc (the default in most pods) forbids a fresh proc mount in a user
    namespace: the server must notice before it changes anything, refuse by default, and run
    (uncontained, saying so) when allowed."""
    launcher, why = unprivileged_launcher(mask_proc=True)
    if launcher is None:
        pytest.skip(f"cannot model a masked /proc: {why}")
    fs = ForkServer(pool_size=1, launcher=launcher)
    try:
        with pytest.raises(SandboxUnavailable, match="proc"):
            fs.start()
    finally:
        fs.close()
    fs = ForkServer(pool_size=1, launcher=launcher, allow_uncontained=True)
    try:
        r = fs.run_program("submit(2)")
        assert (r.outcome, r.submission, r.contained) == (OK, 2, False) and "NOT CONTAINED" in r.note
    finally:
        fs.close()
