"""The paper's scale end to end: a synthetic sweep written through the project's own API, then every
reader of a finished sweep measured in its own process (wall, CPU, peak RSS, output size).

    python bench/bench_scale.py --write DIR --rows N [--transcripts paper|demo] [--commit-rows K]
                                [--readers report,view,end,open] [--skip-write]
                                [--compact-every E --compact-fan-in F]  # the ledger's compaction shape

Writes sweep ``scale`` under ``DIR``: the paper's plan whole (configs/sweeps/paper.yaml: 11 backbones x
direct/opticycle/optistate x the nine benchmarks, 589,116 keys) with ``N`` of its keys committed, spread
evenly over all 33 model x method cells and interleaved as the scheduler does (round robin over the
cells), in commits of ``K`` rows, each through ``Trajectory`` -> ``trajectory_row`` / ``error_row`` ->
``Ledger.commit``. Rows carry the paper's tokens per method (Direct ~2.9k, OptiCycle ~11.8k, OptiState
~21.7k in+out, ~4 characters a token); ``paper`` transcripts store each call's full message list as the
harnesses do (so they grow with the square of the turns), ``demo`` ones are a few hundred characters.
Shares: 50% correct, 13% unsubmitted, 2% status=error, the rest submitted and wrong. Problem ids and
answers are the real benchmarks' when their files are found ($OPTEVAL_DATA or data.dir), so
``opteval report sweep.name=scale sweep.output_dir=DIR`` regrades them; otherwise synthetic ids with the
paper's counts (the report then keeps the stored grades).

Then each reader runs in a fresh process (``/usr/bin/time``-like: ``resource.getrusage`` of the child):
``report`` (``opteval report``), ``view`` (``opteval view``), ``end`` (the sweep's end without MLflow:
``results_summary`` and the exit code's error scan, as ``finalize``/``exit_code`` run them) and ``open``
(a resumed driver's ledger open: committed keys, live files). One table is printed; the machine's load
average is printed beside it (the figures are only comparable within one run). The write line gives the
live files at the end (per compaction level) and the slowest commit (a compaction is on its path), so
``--compact-every 64 --compact-fan-in 1000000000`` (the single-level compaction before tiers) and the
defaults compare in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SWEEP = "scale"
PAPER_YAML = REPO / "configs" / "sweeps" / "paper.yaml"
# the paper's tokens per trajectory (in + out) per method, and calls per trajectory assumed for them
TOKENS = {"direct": 2_900, "opticycle": 11_800, "optistate": 21_700}
CALLS = {"direct": 1, "opticycle": 4, "optistate": 6}
CHARS_PER_TOKEN = 4
SHARES = (("correct", 0.50), ("no_submission", 0.13), ("error", 0.02), ("wrong", 0.35))
PAPER_COUNTS = {"nl4opt": 230, "mamo_easy": 652, "mamo_complex": 211, "nlp4lp": 242, "complexor": 18,
                "industryor": 100, "optibench": 605, "optmath": 166, "icml_competition": 410}
READERS = ("report", "view", "end", "open")


def config_argv(out: Path) -> list[str]:
    return [str(PAPER_YAML), f"sweep.name={SWEEP}", f"sweep.output_dir={out}"]


def problem_ids(cfg: Any) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """The benchmarks' real ids and answers when their files are present, else synthetic ids."""
    from opteval.evalcore.problems import BenchmarkLoadError, data_dir, load_benchmark

    ids: dict[str, list[str]] = {}
    answers: dict[str, dict[str, Any]] = {}
    for slug in cfg.benchmarks:
        try:
            problems, key = load_benchmark(slug, data_dir(cfg.data.dir))
            ids[slug] = [p.id for p in problems]
            answers[slug] = dict(key.answers)
        except (BenchmarkLoadError, LookupError, OSError):
            ids[slug] = [f"{slug}-{i:04d}" for i in range(PAPER_COUNTS[slug])]
            answers[slug] = {pid: float(i) for i, pid in enumerate(ids[slug])}
    return ids, answers


class Text:
    """Cheap pseudo-text (seeded words, so compression is realistic rather than trivial)."""

    def __init__(self, seed: int = 0) -> None:
        rng = random.Random(seed)
        words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                 for _ in range(4000)]
        self.blob = " ".join(rng.choice(words) for _ in range(400_000))
        self.rng = rng

    def take(self, chars: int) -> str:
        chars = max(1, min(chars, len(self.blob) - 1))
        start = self.rng.randrange(0, len(self.blob) - chars)
        return self.blob[start:start + chars]


def synthetic_trajectory(item: Any, outcome: str, answer: Any, transcripts: str, text: Text) -> Any:
    """A graded-shape Trajectory for ``item``: the method's tokens over its calls, one execution per call."""
    from opteval.evalcore.records import CallRecord, ExecRecord, Submission, Trajectory

    n = CALLS[item.method]
    total = TOKENS[item.method]
    # prompt of call i = base + i * (completion + feedback): sum over calls = total
    completion = max(50, total // (6 * n))
    feedback = completion // 3
    base = max(200, (total - n * completion - (n * (n - 1) // 2) * (completion + feedback)) // n)
    traj = Trajectory(model=item.model, method=item.method, benchmark=item.benchmark, problem_id=item.problem_id,
                      sample=int(item.sample), seed=int(item.sample), simulated=True, key=item.key,
                      budgets={"max_calls": 8, "max_total_tokens": 32768})
    small = transcripts == "demo"
    messages: list[dict[str, str]] = [{"role": "user", "content": text.take(200 if small else base * CHARS_PER_TOKEN)}]
    for i in range(n):
        reply = text.take(120 if small else completion * CHARS_PER_TOKEN)
        prompt_tokens = base + i * (completion + feedback)
        traj.calls.append(CallRecord(i, "generate" if i == 0 else "revise", prompt_tokens, completion, 0,
                                     0.5 + 0.01 * i, "stop", "act"))
        traj.transcript.append({"call": i, "turn": i, "purpose": traj.calls[-1].purpose, "stage": "act",
                                "messages": [dict(m) for m in messages], "completion": reply,
                                "finish_reason": "stop"})
        last = i == n - 1
        ok = not last or outcome in ("correct", "wrong")
        sub = None
        if last and outcome == "correct":
            sub = answer
        elif last and outcome == "wrong":
            sub = (float(answer) + 1.0) * 3.0 if isinstance(answer, (int, float)) else 1234.5
        traj.execs.append(ExecRecord(i, "ok" if ok else "error", 0.8, 0.7, 0 if ok else 1, sub,
                                     [{"objective": sub if isinstance(sub, float) else 1.0, "sense": "min",
                                       "n_vars": 12, "n_binary": 0, "n_integer": 3, "status": "optimal"}],
                                     text.take(300), "" if ok else text.take(300), True,
                                     text.take(400 if small else 1500)))
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": text.take(60 if small else feedback * CHARS_PER_TOKEN)}]
    if outcome in ("correct", "wrong"):
        traj.status = "submitted"
        traj.submission = Submission(traj.execs[-1].submission)
    traj.wall_s = 3.0 * n
    return traj


def chosen(plan: Any, rows: int) -> list[list[Any]]:
    """``rows`` keys spread evenly over every model x method cell (each cell's share taken at an even
    stride through its keys), one list per cell."""
    cells: dict[tuple[str, str], list[Any]] = {}
    for item in plan:
        cells.setdefault((item.model, item.method), []).append(item)
    per = [rows // len(cells) + (1 if i < rows % len(cells) else 0) for i in range(len(cells))]
    out = []
    for n, items in zip(per, cells.values()):
        n = min(n, len(items))
        stride = len(items) / n if n else 1
        out.append([items[int(j * stride)] for j in range(n)])
    return out


def write(out: Path, rows: int, transcripts: str, commit_rows: int, compact: dict[str, int]) -> dict[str, Any]:
    """The synthetic sweep, through expand_plan, Ledger.open/record_plan/commit, trajectory_row."""
    from opteval.evalcore.grading import parse_submission
    from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
    from opteval.sweepcore.ledger import Ledger, error_row, trajectory_row
    from opteval.sweepcore.ledger.store import COMPACT_EVERY, COMPACT_FAN_IN
    from opteval.sweepcore.plan import expand_plan

    cfg = load_config(config_argv(out))
    ids, answers = problem_ids(cfg)
    res = resolved(cfg)
    fp = sweep_fingerprint(res)
    t0 = time.perf_counter()
    plan = expand_plan(cfg, ids)
    led = Ledger.open(str(out), SWEEP, res, fp, compact_every=compact.get("compact_every", COMPACT_EVERY),
                      compact_fan_in=compact.get("compact_fan_in", COMPACT_FAN_IN))
    led.record_plan(plan)
    slowest = 0.0

    def commit(rows: list[dict[str, Any]]) -> None:
        nonlocal slowest
        t = time.perf_counter()
        led.commit(rows)
        slowest = max(slowest, time.perf_counter() - t)

    cells = chosen(plan, rows)
    text = Text()
    rng = random.Random(1)
    batch: list[dict[str, Any]] = []
    written = 0
    for depth in range(max(len(c) for c in cells)):
        for cell in cells:  # round robin over the cells, as the schedule interleaves models and methods
            if depth >= len(cell):
                continue
            item = cell[depth]
            r, acc = rng.random(), 0.0
            outcome = "wrong"
            for name, share in SHARES:
                acc += share
                if r < acc:
                    outcome = name
                    break
            if outcome == "error":
                row = error_row(item, "synthetic: worker lost", 3, sweep=SWEEP, seed=int(item.sample),
                                simulated=True, profile=cfg.grading.profile, fingerprint=item.fingerprint)
            else:
                answer = answers[item.benchmark][item.problem_id]
                traj = synthetic_trajectory(item, outcome, answer, transcripts, text)
                raw = traj.submission.raw if traj.submission is not None else None
                row = trajectory_row(traj, key=item.key, correct=outcome == "correct", profile=cfg.grading.profile,
                                     fingerprint=item.fingerprint, sweep=SWEEP, parsed=parse_submission(raw))
            batch.append(row)
            if len(batch) >= commit_rows:
                commit(batch)
                written += len(batch)
                batch = []
    if batch:
        commit(batch)
        written += len(batch)
    files = len(led.files())
    levels: dict[int, int] = {}
    for per_dir in led.live_levels().values():
        for level, n in per_dir.items():
            levels[level] = levels.get(level, 0) + n
    led.close()
    return {"planned": len(plan), "committed": written, "files": files, "write_s": time.perf_counter() - t0,
            "levels": levels, "slowest_commit_s": slowest}


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def max_file(path: Path) -> int:
    return max((p.stat().st_size for p in path.rglob("*") if p.is_file()), default=0)


def run_reader(name: str, out: Path) -> dict[str, Any]:
    """One reader in a fresh process; its peak RSS and CPU from the kernel's child accounting."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    base = [f"sweep.name={SWEEP}", f"sweep.output_dir={out}"]
    outdir = out / SWEEP / name
    if name == "report":
        cmd = [sys.executable, "-m", "opteval.jobs.cli", "report", *base, "--out", str(outdir), "--bootstrap", "200"]
    elif name == "view":
        cmd = [sys.executable, "-m", "opteval.jobs.cli", "view", *base, "--out", str(outdir)]
    else:
        cmd = [sys.executable, __file__, "--child", name, "--write", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    row: dict[str, Any] = {"reader": name, "rc": p.returncode, "wall_s": wall,
                           "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                           "peak_mb": after.ru_maxrss / 1024, "out_mb": dir_bytes(outdir) / 2**20,
                           "max_file_mb": max_file(outdir) / 2**20}
    tail = (p.stdout + p.stderr).strip().splitlines()
    row["last_line"] = tail[-1][:160] if tail else ""
    if name in ("end", "open") and p.returncode == 0:
        row.update(json.loads(p.stdout.strip().splitlines()[-1]))
    return row


def child(name: str, out: Path) -> None:
    """The in-process readers: the sweep's end (no MLflow) and a resumed driver's ledger open."""
    from types import SimpleNamespace

    from opteval.cluster.driver.commit import results_summary
    from opteval.sweepcore.ledger import Ledger

    t = time.perf_counter()
    led = Ledger.open_existing(str(out), SWEEP)
    if name == "open":
        print(json.dumps({"keys": len(led.committed_keys()), "live_files": len(led.files()),
                          "open_s": time.perf_counter() - t}))
        return
    from opteval.sweepcore.config import load_config
    from opteval.sweepcore.plan import expand_plan

    cfg = load_config(config_argv(out))
    prep: Any = SimpleNamespace(ledger=led, cfg=cfg, config_errors={}, plan=expand_plan(cfg, problem_ids(cfg)[0]))
    summary = results_summary(prep)
    with open(os.devnull, "w") as sink:
        code = sweep_exit_of(prep, sink)
    print(json.dumps({"cells": len(summary), "exit": code, "end_s": time.perf_counter() - t}))


def sweep_exit_of(prep: Any, sink: Any) -> int:
    """``opteval.cluster.driver.outcome.exit_code`` with its lines sent to ``sink``."""
    from opteval.cluster.driver import outcome

    stderr, sys.stderr = sys.stderr, sink
    try:
        return outcome.exit_code(prep)
    finally:
        sys.stderr = stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", required=True, help="output_dir of the synthetic sweep (sweep name: scale)")
    ap.add_argument("--rows", type=int, default=3000, help="committed keys (of the 589,116 planned)")
    ap.add_argument("--transcripts", choices=("paper", "demo"), default="paper")
    ap.add_argument("--commit-rows", type=int, default=32, help="rows per commit")
    ap.add_argument("--compact-every", type=int, default=None, help="the ledger's compact_every (its default)")
    ap.add_argument("--compact-fan-in", type=int, default=None, help="the ledger's compact_fan_in (its default)")
    ap.add_argument("--readers", default=",".join(READERS), help=f"comma list of {', '.join(READERS)}")
    ap.add_argument("--skip-write", action="store_true", help="measure an existing DIR/scale")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.write).resolve()
    if args.child:
        child(args.child, out)
        return
    if args.measure:
        print(json.dumps(run_reader(args.measure, out)))
        return
    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} cpus, load average {load0[0]:.2f} / {load0[1]:.2f} (1 / 5 min) at start")
    if not args.skip_write:
        if (out / SWEEP).exists():
            raise SystemExit(f"{out / SWEEP} exists: pass another --write DIR, or --skip-write to measure it")
        compact = {k: v for k, v in (("compact_every", args.compact_every),
                                     ("compact_fan_in", args.compact_fan_in)) if v is not None}
        w = write(out, args.rows, args.transcripts, args.commit_rows, compact)
        print(f"wrote {w['committed']:,} of {w['planned']:,} planned rows ({args.transcripts} transcripts, "
              f"{args.commit_rows} rows a commit) in {w['write_s']:.0f} s: {w['files']} live files "
              f"(per level {w['levels']}), slowest commit {w['slowest_commit_s']:.2f} s, "
              f"ledger {dir_bytes(out / SWEEP / 'trajectories') / 2**20:.0f} MB on disk")
    names = [r for r in args.readers.split(",") if r]
    unknown = [r for r in names if r not in READERS]
    if unknown:
        raise SystemExit(f"--readers: unknown {unknown} (known: {', '.join(READERS)})")
    results = []
    for name in names:
        # each reader under its own wrapper process, so RUSAGE_CHILDREN's peak is that reader's alone
        p = subprocess.run([sys.executable, __file__, "--measure", name, "--write", str(out)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"measuring {name} failed:\n{p.stderr[-3000:]}")
        results.append(json.loads(p.stdout.strip().splitlines()[-1]))
    load1 = os.getloadavg()
    print(f"{'reader':8} {'rc':>3} {'wall s':>8} {'cpu s':>8} {'peak MB':>9} {'out MB':>8} {'max file MB':>11}  extra")
    for r in results:
        extra = {k: v for k, v in r.items() if k not in ("reader", "rc", "wall_s", "cpu_s", "peak_mb", "out_mb",
                                                          "max_file_mb", "last_line")}
        print(f"{r['reader']:8} {r['rc']:>3} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['peak_mb']:>9.0f} "
              f"{r['out_mb']:>8.1f} {r['max_file_mb']:>11.2f}  {json.dumps(extra) if extra else r['last_line']}")
    print(f"load average {load1[0]:.2f} / {load1[1]:.2f} (1 / 5 min) at end")


if __name__ == "__main__":
    main()
