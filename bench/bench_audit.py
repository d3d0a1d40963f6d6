"""The answer-key audit at the paper's scale (issue 37): ``opteval audit`` over a synthetic ledger of
the paper's plan, in a fresh process pinned to one core, its wall time, CPU and peak RSS measured.

    python bench/bench_audit.py --write DIR [--rows 589116] [--skip-write] [--commit-rows K]

The ledger is bench/bench_scale.py's sweep ``scale`` (its ``write``: the paper's plan, ``N`` keys
committed through ``trajectory_row`` and ``Ledger.commit``, demo-sized transcripts; problem ids and
answers are the real benchmarks' when ``$OPTEVAL_DATA`` holds them). The audit reads it column-projected
(never the transcripts, calls or execs) in record batches and writes audit.csv, audit.parquet and
audit.md under ``DIR/scale/audit``. The budget (the issue's): under 5 minutes and 4 GB on one core.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 300
BUDGET_MB = 4096


def bench_scale() -> Any:
    spec = importlib.util.spec_from_file_location("bench_scale", REPO / "bench" / "bench_scale.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = mod
    spec.loader.exec_module(mod)
    return mod


def one_core() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[-1]})


def run_audit(out: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "opteval.jobs.cli", "audit", "sweep.name=scale", f"sweep.output_dir={out}",
           "--out", str(out / "scale" / "audit")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, preexec_fn=one_core)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tail = (p.stdout + p.stderr).strip().splitlines()
    return {"reader": "audit", "rc": p.returncode, "wall_s": round(wall, 1),
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "peak_mb": round(after.ru_maxrss / 1024), "last_line": tail[-1][:200] if tail else "",
            "within_budget": p.returncode == 0 and wall < BUDGET_S and after.ru_maxrss / 1024 < BUDGET_MB,
            "load_avg": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", type=Path, required=True, help="the directory the sweep 'scale' is (or goes) under")
    ap.add_argument("--rows", type=int, default=589116)
    ap.add_argument("--commit-rows", type=int, default=20000)
    ap.add_argument("--skip-write", action="store_true", help="audit the ledger already there")
    args = ap.parse_args()
    if not args.skip_write:
        t = time.perf_counter()
        info = bench_scale().write(args.write, args.rows, "demo", args.commit_rows)
        print(f"wrote {args.rows} rows in {time.perf_counter() - t:.0f} s: {json.dumps(info, default=str)[:300]}")
    print(json.dumps(run_audit(args.write)))


if __name__ == "__main__":
    main()
