"""Planning + resume at paper scale and beyond: 11 models x 3 methods x 17,852 = 589,116 keys
(``--scale 10``: 110 models, 5,891,160 keys), half committed.

    python bench/bench_plan.py [--scale 10] [--committed 0.9] [--batch 32] [--out /tmp/opteval-bench-plan]

Builds a ledger with half the keys (``--committed``: that share) committed in batches of ``--batch`` x scale rows (as a
sweep would, compaction included, the same number of files at every scale; not timed), then
times what a resumed driver does: open the ledger (load committed keys), expand the plan,
record the plan, compute the remaining keys. Reports the driver's peak RSS
(``resource.getrusage``) and, as the same-run baseline, the time to hash every plan key once
with ``opteval.evalcore.records.trajectory_key`` (the least any plan must do). Targets: paper scale
well under 10 s; 10x under 30 s with the driver under 1.5 GB (issue 44). Synthetic problem ids with the
paper's counts; model yamls are generated (copies of sim-fast) in a temp configs dir.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COUNTS = {"nl4opt": 230, "mamo_easy": 652, "mamo_complex": 211, "nlp4lp": 242, "complexor": 18,
          "industryor": 100, "optibench": 605, "optmath": 166, "icml_competition": 410}


def setup(tmp: Path, scale: int) -> tuple[list[str], dict[str, list[str]]]:
    """Configs for ``11 * scale`` models (copies of sim-fast) and the paper's problem ids."""
    if not (tmp / "configs").exists():
        shutil.copytree(REPO / "configs", tmp / "configs")
    models = [f"bench-m{i:03d}" for i in range(11 * scale)]
    for m in models:
        (tmp / "configs" / "models" / f"{m}.yaml").write_text(f"name: {m}\nbackend: simulated\n")
    os.environ["OPTEVAL_CONFIGS"] = str(tmp / "configs")
    ids = {b: [f"{b}-{i:04d}" for i in range(n)] for b, n in COUNTS.items()}
    return models, ids


def picked(i: int, share: Fraction) -> bool:
    """Whether plan item ``i`` is committed: ``share`` of the items, spread evenly (every other
    one at 1/2, nine in ten at 9/10)."""
    return (i * share.numerator) % share.denominator < share.numerator


def sweep_name(scale: int, share: Fraction) -> str:
    return f"paper-x{scale}" if share == Fraction(1, 2) else f"paper-x{scale}-c{share.numerator}of{share.denominator}"


def argv_for(out: Path, name: str, models: list[str]) -> list[str]:
    return [f"sweep.output_dir={out}", f"sweep.name={name}", f"models=[{','.join(models)}]",
            f"benchmarks=[{','.join(COUNTS)}]"]


def fill(tmp: Path, out: Path, scale: int, batch: int, share: Fraction) -> tuple[int, float]:
    """A ledger with ``share`` of the keys committed, in batches of ``batch`` rows (not timed)."""
    from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
    from opteval.sweepcore.ledger import Ledger, error_row
    from opteval.sweepcore.plan import expand_plan

    models, ids = setup(tmp, scale)
    name = sweep_name(scale, share)
    cfg = load_config(argv_for(out, name, models))
    res = resolved(cfg)
    led = Ledger.open(str(out), name, res, sweep_fingerprint(res))
    t = time.perf_counter()
    half: list = []
    for i, p in enumerate(expand_plan(cfg, ids)):
        if picked(i, share):
            half.append(p)
        if len(half) == batch:
            led.commit([error_row(x, "synthetic", 1, sweep=name) for x in half])
            half = []
    if half:
        led.commit([error_row(x, "synthetic", 1, sweep=name) for x in half])
    return len(led.files()), time.perf_counter() - t


def resume(tmp: Path, out: Path, scale: int, share: Fraction) -> None:
    """What a resumed driver does (the scheduler's ``prepare``), timed; prints one JSON line."""
    import json
    import resource

    from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
    from opteval.sweepcore.ledger import Ledger
    from opteval.sweepcore.plan import expand_plan, plan_counts, remaining

    models, ids = setup(tmp, scale)
    name = sweep_name(scale, share)
    t0 = time.perf_counter()
    cfg = load_config(argv_for(out, name, models))
    res = resolved(cfg)
    fp = sweep_fingerprint(res)
    t1 = time.perf_counter()
    # in the driver's order (opteval.cluster.driver.prepare): the ledger and its committed keys
    # first, then the plan
    led = Ledger.open(str(out), name, res, fp)
    committed = led.committed_array()  # what the driver's prepare() holds (Prepared.committed)
    t2 = time.perf_counter()
    plan = expand_plan(cfg, ids)
    t3 = time.perf_counter()
    led.record_plan(plan)
    t4 = time.perf_counter()
    todo = remaining(plan, committed)
    n_todo = len(todo)
    counts = plan_counts(todo)
    t5 = time.perf_counter()
    want = 589_116 * scale
    done = want // share.denominator * share.numerator + \
        sum(picked(i, share) for i in range(want - want % share.denominator, want))
    assert len(plan) == want and len(committed) == done and n_todo == want - done, \
        (len(plan), len(committed), n_todo)
    assert sum(counts.values()) == n_todo
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"keys": len(plan), "config": t1 - t0, "committed": t2 - t1, "expand": t3 - t2,
                      "record_plan": t4 - t3, "remaining": t5 - t4, "total": t5 - t0, "peak_mb": peak_mb}))


def hash_floor(scale: int) -> float:
    """Seconds to sha256 every key's input once in a tight loop: what any plan must at least do."""
    import hashlib

    n = 589_116 * scale
    sha = hashlib.sha256
    t = time.perf_counter()
    for i in range(n):
        sha(b"paper\x1fbench-m000\x1fdirect\x1fnl4opt\x1fnl4opt-0001\x1f%d\x1f0123456789abcdef" % i).hexdigest()
    return time.perf_counter() - t


def main() -> None:
    import json
    import subprocess

    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=1, help="x the paper's 589,116 keys (11 x scale models)")
    ap.add_argument("--committed", type=float, default=0.5, help="share of the keys committed (0.5)")
    ap.add_argument("--batch", type=int, default=32, help="rows per commit at scale 1 (x scale above)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--resume-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    share = Fraction(args.committed).limit_denominator(100)
    if not 0 < share < 1:
        ap.error("--committed must be between 0 and 1")
    if args.resume_only:
        resume(Path(args.tmp), Path(args.out), args.scale, share)
        return
    tmp = Path(tempfile.mkdtemp(prefix="opteval-bench-plan-"))
    out = Path(args.out) if args.out else tmp / "results"
    load0 = os.getloadavg()[0]
    rows = {}
    scales = sorted({1, args.scale})
    for scale in scales:
        n_files, t_fill = fill(tmp, out, scale, args.batch * scale, share)
        # a fresh process: its peak RSS is the resumed driver's alone
        cmd = [sys.executable, __file__, "--resume-only", "--scale", str(scale), "--committed", str(args.committed),
               "--out", str(out), "--tmp", str(tmp)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"resume at scale {scale} failed:\n{p.stderr[-3000:]}")
        rows[scale] = json.loads(p.stdout.strip().splitlines()[-1])
        rows[scale]["files"], rows[scale]["fill"] = n_files, t_fill
        rows[scale]["floor"] = hash_floor(scale)
    print(f"machine: {os.cpu_count()} cpus, load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    for scale in scales:
        r = rows[scale]
        print(f"scale {scale}: {r['keys']:,} keys, {float(share):.0%} committed in {r['files']} files "
              f"(filled in {r['fill']:.0f} s): "
              f"config {r['config']:.2f} s | expand_plan {r['expand']:.2f} s | ledger open + committed keys "
              f"{r['committed']:.2f} s | record_plan {r['record_plan']:.2f} s | remaining {r['remaining']:.2f} s | "
              f"TOTAL {r['total']:.2f} s, peak RSS {r['peak_mb']:.0f} MB; "
              f"{r['total'] / r['floor']:.1f}x the bare hashing of its keys ({r['floor']:.2f} s)")
    if args.scale != 1:
        a, b = rows[1], rows[args.scale]
        print(f"scale {args.scale} vs 1 (same run): {b['total'] / a['total']:.1f}x the time, "
              f"{b['peak_mb'] / a['peak_mb']:.1f}x the peak RSS for {args.scale}x the keys")
        ok = b["total"] < 30 and b["peak_mb"] < 1536
        print(f"target at scale {args.scale} (issue 44): plan + resume < 30 s, driver < 1.5 GB: "
              f"{'ok' if ok else 'MISS'}")
    else:
        print(f"target at scale 1: < 10 s: {'ok' if rows[1]['total'] < 10 else 'MISS'}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
