"""bench/bench_schedule.py on a small slice of table1 (a few seconds): the replay through the real
scheduler and dispatcher commits every planned trajectory and ends with the pinned line."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAST = re.compile(r"^gpu_busy=(\d\.\d{3}) wall_vs_ideal=(\d+\.\d{3}) gpus=4 sweep=table1$")


def _bench(schedule: str) -> tuple[float, float, str]:
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_schedule.py"), "configs/sweeps/table1.yaml",
                        "--gpus", "4", "--fraction", "0.004", "--quiet", "--schedule", schedule],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    m = LAST.match(lines[-1])
    assert m, lines[-1]
    return float(m.group(1)), float(m.group(2)), r.stdout


def test_replay_commits_everything_and_prints_the_pinned_line():
    busy, ratio, out = _bench("continuous")
    assert 0.0 < busy <= 1.0 and ratio >= 0.99  # the wall can never beat the work / N
    planned = re.search(r"trajectories (\d+)/(\d+) committed", out)
    assert planned and planned.group(1) == planned.group(2)
    assert "assumptions:" in out.splitlines()[0]
    assert "Qwen3-4B" in out and "Qwen3.5-9B" in out  # per-model batch fill
    stages_busy, _, _ = _bench("stages")
    assert 0.0 < stages_busy <= 1.0
