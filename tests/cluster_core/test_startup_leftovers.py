"""A timed-out Ray start leaves no GCS or raylet behind (faults tier, CI load: a sweep had two
GCS/raylet pairs as children after a retried start)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import psutil

from opteval.cluster.runtime import _end_leftover_services, local_services


def _child_named(tmp_path: Path, name: str) -> subprocess.Popen:
    exe = tmp_path / name
    os.symlink(shutil.which("sleep") or "/bin/sleep", exe)
    return subprocess.Popen([str(exe), "60"])


def test_only_services_started_during_the_attempt_are_ended(tmp_path):
    kept = _child_named(tmp_path, "raylet")
    try:
        before = set(local_services())
        assert kept.pid in before
        gcs = _child_named(tmp_path, "gcs_server")
        assert local_services()[gcs.pid] == "gcs_server"
        _end_leftover_services(before)
        assert gcs.wait(timeout=10) is not None
        assert kept.poll() is None and psutil.Process(kept.pid).is_running()
    finally:
        kept.kill()
        kept.wait()
