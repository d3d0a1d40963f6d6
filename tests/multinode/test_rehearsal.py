"""The 3-node rehearsal (tests/multinode/run_rehearsal.sh) as a pytest tier.

Not part of the README test command: it starts its own Ray cluster with `ray start` (three
raylets) and takes minutes. Run it with
    OPTEVAL_MULTINODE=1 python -m pytest -q tests/multinode -m multinode
or directly: bash tests/multinode/run_rehearsal.sh
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.multinode
SCRIPT = Path(__file__).with_name("run_rehearsal.sh")


@pytest.mark.skipif(os.environ.get("OPTEVAL_MULTINODE") != "1",
                    reason="multinode tier: set OPTEVAL_MULTINODE=1 (starts a 3-node Ray cluster, minutes)")
@pytest.mark.timeout(1200)
def test_rehearsal_on_three_nodes_with_fake_gpus():
    """Three models of unequal work on 3 fake GPUs (4 needed at once): freed GPUs take the next one."""
    run = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1100)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "[rehearsal] working_dir unpacked on 3 node(s)" in run.stdout  # warm_nodes.py, before the sweep
    assert "[rehearsal] OK: 160/160 trajectories committed, 0 error rows" in run.stdout
    assert "the first model's GPUs served the third before the second finished, nothing left deployed" in run.stdout
