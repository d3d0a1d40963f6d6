"""Sandbox speed: pooled fork server vs unpooled (fork on demand) vs a fresh ``python prog.py``.

Run: ``python bench/bench_sandbox.py [--runs N] [--fresh-runs M] [--as root|unprivileged|both]``.
Everything is measured in one run on the same machine, and every figure is printed as a ratio
against a baseline measured in that run (a fresh interpreter, and the same fork server with
``pool_size=0``), so the ratios hold when absolute numbers move with the load (the load
average is printed at start and end). ``both`` (the default when run as root) measures the
fork server started by root (the root path) and as uid 65534 with no capabilities (the
user-namespace path, ``opteval.evalcore.sandbox.asuser``); the fresh-interpreter baseline is measured once.

Per program: *latency* = requests 0.2 s apart, so a pooled child is waiting (what one request
pays: its program only); *back-to-back* = the next request as soon as the last answer came
(the steady rate, bounded by how fast children are forked). The floor is ``submit(1)``.
Targets: a tiny PuLP LP's pooled latency <= 6 ms and >= 30x faster than a fresh
interpreter (on a quiet machine); a trivial session cell <= 3 ms.
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

from opteval.evalcore.sandbox import ForkServer, Limits
from opteval.evalcore.sandbox.asuser import unprivileged_launcher

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

FLOOR = "submit(1)\n"
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


def row(label: str, base: float, *cols: float) -> str:
    return f"{label:<40}" + "".join(f" {c:>9.1f} ms {base / c:>6.1f}x" for c in cols)


def capture_overhead(runs: int, gap_s: float) -> None:
    """Issue 36: the tiny PuLP LP with formulation capture + fingerprinting on vs off, two fork
    servers started in this run (``OPTEVAL_CAPTURE_FORMULATION=0`` switches the capture off in
    the second), runs interleaved so the load hits both alike. Per program: paced latency
    (``gap_s`` apart) including the host's ``opteval.evalcore.formulation.verify``; whole path:
    back-to-back programs per second, verify included."""
    from opteval.evalcore.formulation import verify

    servers = {}
    for label, flag in (("capture on", "1"), ("capture off", "0")):
        os.environ["OPTEVAL_CAPTURE_FORMULATION"] = flag
        servers[label] = ForkServer(pool_size=2).start()
    os.environ.pop("OPTEVAL_CAPTURE_FORMULATION", None)
    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} cpus, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at start")

    def one(fs: ForkServer) -> float:
        t0 = time.perf_counter()
        r = fs.run_program(PULP_LP, Limits(wall_s=30))
        v = verify([r], r.submission, "optagentbench")
        if r.outcome != "ok" or r.submission != 12.0:
            raise SystemExit(f"run failed: {r}")
        return time.perf_counter() - t0 if v.answer_source else 0.0

    for fs in servers.values():
        for _ in range(3):
            one(fs)
    captured = servers["capture on"].run_program(PULP_LP).models[-1]
    if captured.get("capture") != "ok" or servers["capture off"].run_program(PULP_LP).models[-1].get("capture") != "off":
        raise SystemExit("the capture switch did not take")
    lat: dict[str, list[float]] = {k: [] for k in servers}
    for _ in range(runs):
        for label, fs in servers.items():
            time.sleep(gap_s)
            lat[label].append(one(fs))
    rate: dict[str, list[float]] = {k: [] for k in servers}
    for _ in range(5):  # blocks of back-to-back programs, alternating servers
        for label, fs in servers.items():
            t0 = time.perf_counter()
            for _ in range(max(4, runs // 3)):
                one(fs)
            rate[label].append(max(4, runs // 3) / (time.perf_counter() - t0))
    on, off = ms(lat["capture on"]), ms(lat["capture off"])
    ron, roff = statistics.median(rate["capture on"]), statistics.median(rate["capture off"])
    print(f"tiny PuLP LP latency (median of {runs}): capture on {on:.1f} ms, off {off:.1f} ms, ratio {on / off:.3f}")
    print(f"whole path (back-to-back, median of 5 blocks): on {ron:.1f}/s, off {roff:.1f}/s, ratio {roff / ron:.3f}")
    load1 = os.getloadavg()
    print(f"load average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at end")
    for fs in servers.values():
        fs.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture-overhead", action="store_true",
                    help="only the formulation capture's cost: capture on vs off (issue 36)")
    ap.add_argument("--runs", type=int, default=30, help="fork-server runs per program and mode")
    ap.add_argument("--fresh-runs", type=int, default=6, help="fresh-subprocess runs per program")
    ap.add_argument("--cells", type=int, default=100)
    ap.add_argument("--pool", type=int, default=2, help="pool size of the pooled server")
    ap.add_argument("--gap", type=float, default=0.2, help="seconds between latency requests")
    ap.add_argument("--as", dest="as_user", choices=("root", "unprivileged", "both"), default="both")
    args = ap.parse_args()
    if args.capture_overhead:
        capture_overhead(args.runs, args.gap)
        return

    modes: list[tuple[str, dict]] = []
    if args.as_user in ("root", "both"):
        modes.append(("root" if os.geteuid() == 0 else f"uid {os.geteuid()}", {}))
    if args.as_user in ("unprivileged", "both"):
        launcher, why = unprivileged_launcher()
        if launcher is not None:
            modes.append(("unprivileged", {"launcher": launcher}))
        else:
            print(f"(not measuring the unprivileged fork server: {why})")

    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} cpus, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at start")
    programs = (("PuLP LP (CBC)", PULP_LP, 12.0), ("PySCIPOpt MILP", SCIP_MILP, 34.0), ("floor: submit(1)", FLOOR, 1))
    fresh = {name: ms(time_fresh(code, args.fresh_runs)) for name, code, _ in programs}
    results: dict[tuple[str, int, str], tuple[float, float]] = {}
    cells: dict[str, float] = {}
    for mode, kw in modes:
        for pool in (args.pool, 0):
            t0 = time.perf_counter()
            fs = ForkServer(pool_size=pool, **kw).start()
            print(f"{mode}, pool {pool}: fork server ready in {time.perf_counter() - t0:.2f} s; "
                  f"contained={fs.contained} (user namespace: {fs.userns})")
            for name, code, expect in programs:
                lat = time_forkserver(fs, code, args.runs, expect, gap_s=args.gap)
                b2b = time_forkserver(fs, code, args.runs, expect)
                results[(mode, pool, name)] = (ms(lat), ms(b2b))
            if pool:
                cells[mode] = ms(time_cells(fs, args.cells))
            fs.close()
    load1 = os.getloadavg()

    print()
    print("median per program, and the speed-up against the baseline in the label (same run):")
    for name, _, _ in programs:
        print(f"{name}: fresh interpreter {fresh[name]:.1f} ms")
        for mode, _ in modes:
            lat_p, b2b_p = results[(mode, args.pool, name)]
            lat_0, b2b_0 = results[(mode, 0, name)]
            print(row(f"  {mode} pool {args.pool}, latency vs fresh", fresh[name], lat_p))
            print(row(f"  {mode} pool {args.pool}, back-to-back vs fresh", fresh[name], b2b_p))
            print(row(f"  {mode} pool 0, latency vs fresh", fresh[name], lat_0))
            print(row(f"  {mode} pool {args.pool} vs pool 0, latency", lat_0, lat_p))
            print(row(f"  {mode} pool {args.pool} vs pool 0, back-to-back", b2b_0, b2b_p))
            if name.startswith("PuLP"):
                ok = lat_p <= 6 and fresh[name] / lat_p >= 30
                print(f"  {mode}: target pooled latency <= 6 ms and >= 30x fresh: {'ok' if ok else 'MISS'}"
                      f" ({lat_p:.1f} ms, {fresh[name] / lat_p:.1f}x)")
    for mode, cell in cells.items():
        print(f"{mode} session cell: {cell:.2f} ms ({fresh['floor: submit(1)'] / cell:.0f}x faster than a fresh "
              f"interpreter's floor) {'ok' if cell <= 3 else 'MISS'} (target <= 3 ms)")
    print(f"medians over {args.runs} fork-server runs per mode, {args.fresh_runs} fresh runs, {args.cells} cells; "
          f"load average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at end ({os.cpu_count()} cpus)")


if __name__ == "__main__":
    main()
