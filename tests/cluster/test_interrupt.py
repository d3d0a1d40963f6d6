"""A driver killed (SIGKILL) or stopped (SIGTERM) mid-sweep resumes to the ledger of an uninterrupted run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import ray

pytestmark = [pytest.mark.ray, pytest.mark.faults]  # slow tier: signals and kill -9 mid-sweep (.ci/run: -m faults)

SHAPE = {"models": "[sim-slow]", "methods": "[direct,optistate]", "limit": 4, "samples": 2}  # 16 trajectories


def _args(h, out, name, port):
    # few in flight, so the sweep is still running when the signal comes
    return h.sweep_args(out, name, port, "cluster.max_in_flight_per_model=3", **SHAPE)


def _named(name: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"opteval/{name}/" in a["name"]]


def _interrupt_and_resume(h, tmp_path, address, port, configs_dir, name, sig):
    args = _args(h, tmp_path, name, port)
    log = tmp_path / f"{name}.log"
    proc = h.spawn_sweep(args, address, log, configs_dir)
    try:
        h.wait_for(lambda: h.committed_files(tmp_path, name) or proc.poll() is not None, 240, "a first batch")
        assert proc.poll() is None, f"the sweep ended before it could be interrupted:\n{log.read_text()[-3000:]}"
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    partial = h.ledger_frame(tmp_path, name)
    assert not partial["key"].duplicated().any()
    # the killed job's actors go away with it (non-detached): the resume starts fresh ones
    h.wait_for(lambda: not _named(name), 90, f"the actors of the interrupted driver ({_named(name)}) to go")
    done = subprocess.run([sys.executable, str(h.sweep_py), *args, f"cluster.address={address}"],
                          cwd=str(h.repo), env=dict(os.environ, OPTEVAL_CONFIGS=str(configs_dir),
                                                    RAY_AUTH_MODE="disabled", PYTHONPATH=str(h.repo)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"already committed: {len(partial)}" in done.stdout
    return rc, partial, h.ledger_frame(tmp_path, name), log.read_text()


@pytest.fixture(scope="module")
def baseline(ray_cluster, h, tmp_path_factory, configs_dir):
    """The same config, uninterrupted, under another sweep name (run in this process)."""
    _, port = ray_cluster
    out = tmp_path_factory.mktemp("baseline")
    return h.run_uninterrupted(_args(h, out, "uninterrupted", port), out, "uninterrupted", configs_dir)


def test_sigkill_mid_sweep_then_resume_equals_uninterrupted(ray_cluster, h, tmp_path, configs_dir, baseline):
    address, port = ray_cluster
    rc, partial, final, _ = _interrupt_and_resume(h, tmp_path, address, port, configs_dir, "killed", signal.SIGKILL)
    base, planned = baseline
    assert rc == -signal.SIGKILL
    assert 0 < len(partial) < planned
    assert len(final) == planned and not final["key"].duplicated().any()
    assert h.identities(final) == h.identities(base)
    # rows committed before the kill are kept as they were (not re-run)
    kept = final.set_index("key").loc[partial["key"], "committed_at"]
    assert list(kept) == list(partial.set_index("key")["committed_at"])


def test_sigterm_commits_what_finished_exits_cleanly_and_resumes(ray_cluster, h, tmp_path, configs_dir, baseline):
    address, port = ray_cluster
    rc, partial, final, log = _interrupt_and_resume(h, tmp_path, address, port, configs_dir, "termed", signal.SIGTERM)
    base, planned = baseline
    assert rc in (0, 130), log[-3000:]
    assert "no new trajectories" in log and "resume with the same command" in log
    assert len(partial) >= 1
    assert len(final) == planned and h.identities(final) == h.identities(base)
