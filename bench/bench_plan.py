"""Planning + resume at paper scale: 11 models x 3 methods x 17,852 = 589,116 keys, half committed.

    python bench/bench_plan.py [--batch 32] [--out /tmp/opteval-bench-plan]

Builds a ledger with half the keys committed in batches of ``--batch`` (as a sweep
would, compaction included; not timed), then times what a resumed driver does:
expand the plan, open the ledger (load committed keys), compute the remaining keys.
Target: well under 10 s. Synthetic problem ids with the paper's counts; 11 model
yamls are generated (copies of sim-fast) in a temp configs dir.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

COUNTS = {"nl4opt": 230, "mamo_easy": 652, "mamo_complex": 211, "nlp4lp": 242, "complexor": 18,
          "industryor": 100, "optibench": 605, "optmath": 166, "icml_competition": 410}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opteval-bench-plan-"))
    out = Path(args.out) if args.out else tmp / "results"
    shutil.copytree(REPO / "configs", tmp / "configs")
    models = [f"bench-m{i:02d}" for i in range(11)]
    for m in models:
        (tmp / "configs" / "models" / f"{m}.yaml").write_text(f"name: {m}\nbackend: simulated\n")
    os.environ["OPTEVAL_CONFIGS"] = str(tmp / "configs")

    from cluster.config import load_config, resolved, sweep_fingerprint
    from cluster.ledger import Ledger, error_row
    from cluster.plan import expand_plan, remaining

    argv = [f"sweep.output_dir={out}", "sweep.name=paper", f"models=[{','.join(models)}]",
            f"benchmarks=[{','.join(COUNTS)}]"]
    ids = {b: [f"{b}-{i:04d}" for i in range(n)] for b, n in COUNTS.items()}
    cfg = load_config(argv)
    res = resolved(cfg)
    fp = sweep_fingerprint(res)

    t = time.perf_counter()
    plan = expand_plan(cfg, ids)
    t_plan0 = time.perf_counter() - t
    assert len(plan) == 589_116, len(plan)
    led = Ledger.open(str(out), "paper", res, fp)
    t = time.perf_counter()
    led.record_plan(plan)
    t_record = time.perf_counter() - t
    t = time.perf_counter()
    half = plan[::2]
    for i in range(0, len(half), args.batch):
        led.commit([error_row(p, "synthetic", 1, sweep="paper") for p in half[i:i + args.batch]])
    t_fill = time.perf_counter() - t
    n_files = len(led.files())
    del led, plan

    # --- what a resumed driver does (timed) ---
    t0 = time.perf_counter()
    cfg = load_config(argv)
    res = resolved(cfg)
    fp = sweep_fingerprint(res)
    t1 = time.perf_counter()
    plan = expand_plan(cfg, ids)
    t2 = time.perf_counter()
    led = Ledger.open(str(out), "paper", res, fp)
    committed = led.committed_keys()
    t3 = time.perf_counter()
    todo = remaining(plan, committed)
    t4 = time.perf_counter()
    assert len(committed) == 294_558 and len(todo) == 589_116 - 294_558
    print(f"plan keys: {len(plan):,}; committed: {len(committed):,} in {n_files} files "
          f"(batch {args.batch}, filled in {t_fill:.1f} s); record_plan: {t_record:.2f} s; "
          f"first expansion: {t_plan0:.2f} s")
    print(f"config {t1 - t0:.2f} s | expand_plan {t2 - t1:.2f} s | ledger open + committed keys "
          f"{t3 - t2:.2f} s | remaining {t4 - t3:.2f} s | TOTAL {t4 - t0:.2f} s (target < 10 s)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
