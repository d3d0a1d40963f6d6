"""Sandbox speed: warm fork server vs a fresh ``python prog.py`` per program, and a Session cell.

Run: ``python bench/bench_sandbox.py [--runs N] [--fresh-runs M] [--as root|unprivileged|both]``.
Everything is measured in one run on the same machine, so the ratios hold even when absolute
numbers move with the load. ``both`` (the default when run as root) measures the fork server
started by root (the root path) and started as uid 65534 with no capabilities (the user-
namespace path, ``evalcore.sandbox._asuser``); the fresh-interpreter baseline is measured once.
Targets (issue 2, section 6): fork-server median per program <= 15 ms and >= 10x faster than a
fresh subprocess; a trivial session cell <= 3 ms.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalcore.sandbox import ForkServer, Limits  # noqa: E402
from evalcore.sandbox._asuser import unprivileged_launcher  # noqa: E402

PULP_LP = """\
import pulp
prob = pulp.LpProblem("bench_lp", pulp.LpMaximize)
x = pulp.LpVariable("x", 0)
y = pulp.LpVariable("y", 0)
prob += 3 * x + 2 * y
prob += x + y <= 4
prob += x + 3 * y <= 6
prob.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(prob.objective))
"""

SCIP_MILP = """\
from pyscipopt import Model, quicksum
m = Model()
m.hideOutput()
xs = [m.addVar(vtype="I", lb=0, ub=10) for i in range(5)]
m.addCons(quicksum((i + 2) * xs[i] for i in range(5)) <= 23)
m.setObjective(quicksum((i + 3) * xs[i] for i in range(5)), "maximize")
m.optimize()
submit(m.getObjVal())
"""

TRIVIAL = "submit(1 + 1)\n"
SUBMIT_SHIM = "def submit(value):\n    print('SUBMIT', value)\n\n"


def time_forkserver(fs: ForkServer, code: str, runs: int, expect, gap_s: float = 0.0) -> list[float]:
    """Back-to-back (gap 0: the pool must be refilled as fast as runs finish) or paced runs."""
    for _ in range(3):  # warm the pool
        fs.run_program(code)
    out = []
    for _ in range(runs):
        time.sleep(gap_s)
        t0 = time.perf_counter()
        r = fs.run_program(code, Limits(wall_s=30))
        out.append(time.perf_counter() - t0)
        if r.outcome != "ok" or r.submission != expect:
            raise SystemExit(f"fork-server run failed: {r}")
    return out


def time_fresh(code: str, runs: int) -> list[float]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        prog = Path(d) / "prog.py"
        prog.write_text(SUBMIT_SHIM + code)
        for _ in range(runs):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, str(prog)], cwd=d, capture_output=True, text=True, timeout=120)
            out.append(time.perf_counter() - t0)
            if p.returncode != 0 or "SUBMIT" not in p.stdout:
                raise SystemExit(f"fresh run failed: {p.stderr}")
    return out


def time_cells(fs: ForkServer, runs: int) -> list[float]:
    out = []
    with fs.session() as s:
        s.run_cell("x = 0")
        for _ in range(runs):
            t0 = time.perf_counter()
            r = s.run_cell("x += 1")
            out.append(time.perf_counter() - t0)
            if r.outcome != "ok":
                raise SystemExit(f"session cell failed: {r}")
    return out


def ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="fork-server runs per program")
    ap.add_argument("--fresh-runs", type=int, default=8, help="fresh-subprocess runs per program")
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--as", dest="as_user", choices=("root", "unprivileged", "both"), default="both")
    args = ap.parse_args()

    modes: list[tuple[str, dict]] = []
    if args.as_user in ("root", "both"):
        modes.append(("root" if os.geteuid() == 0 else f"uid {os.geteuid()}", {}))
    if args.as_user in ("unprivileged", "both"):
        launcher, why = unprivileged_launcher()
        if launcher is not None:
            modes.append(("unprivileged", {"launcher": launcher}))
        else:
            print(f"(not measuring the unprivileged fork server: {why})")

    print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f} (1 min) at start")
    programs = (("PuLP LP (CBC)", PULP_LP, 12.0), ("PySCIPOpt MILP", SCIP_MILP, 34.0))
    fresh = {name: ms(time_fresh(code, args.fresh_runs)) for name, code, _ in programs}
    rows, extra = [], []
    for mode, kw in modes:
        t0 = time.perf_counter()
        fs = ForkServer(pool_size=2, **kw).start()
        print(f"{mode}: fork server ready in {time.perf_counter() - t0:.2f} s; contained={fs.contained}"
              f" (user namespace: {fs.userns})")
        for name, code, expect in programs:
            warm = time_forkserver(fs, code, args.runs, expect)
            paced = time_forkserver(fs, code, args.runs, expect, gap_s=0.05)
            rows.append((mode, name, ms(warm), ms(paced), fresh[name], fresh[name] / ms(warm)))
        trivial = time_forkserver(fs, TRIVIAL, args.runs, 2)
        cells = time_cells(fs, args.cells)
        fs.close()
        extra.append((mode, ms(trivial), ms(cells)))
    with ForkServer(namespaces=False, pool_size=2) as nons:
        trivial_nons = ms(time_forkserver(nons, TRIVIAL, args.runs, 2))

    print()
    print(f"{'server':<13} {'program':<18} {'fork server':>12} {'(paced)':>10} {'fresh python':>13} {'speed-up':>9}")
    for mode, name, w, paced, f, ratio in rows:
        ok = "ok" if w <= 15 and ratio >= 10 else "MISS"
        print(f"{mode:<13} {name:<18} {w:>9.1f} ms {paced:>7.1f} ms {f:>10.1f} ms {ratio:>8.1f}x  {ok}")
    for mode, trivial, cell in extra:
        print(f"{mode:<13} {'trivial program':<18} {trivial:>9.1f} ms")
        print(f"{mode:<13} {'session cell':<18} {cell:>9.2f} ms  {'ok' if cell <= 3 else 'MISS'} (target <= 3 ms)")
    print(f"{'(no namespaces)':<13} {'trivial program':<18} {trivial_nons:>9.1f} ms")
    print("medians over", args.runs, "fork-server runs,", args.fresh_runs, "fresh runs (as this user, once),",
          args.cells, "cells;", f"load average {os.getloadavg()[0]:.2f} at end")
    print("fork server = back-to-back runs (each needs a fresh fork: the steady-state rate);"
          " paced = 50 ms apart (the pool is always warm: a run's latency); speed-up uses back-to-back")


if __name__ == "__main__":
    main()
