"""Calls and tokens per trajectory per method, simulated policy, real sandbox, in process.

Why: the method YAMLs' budgets are calibrated so each baseline's call and token structure
relative to OptiCycle matches the harness paper's own accounting (section 4.4; the figures in
``opteval.evalcore.reporting.paper_costs``). This runs every harness exactly as a sweep's worker does
(the method's harness, extraction, params, stages and effective budgets from ``opteval.sweepcore.config``,
the model's sampling) against the simulated policy, with every program run in the real sandbox
(``LocalExecutor``: the warm fork server), and prints the report's cost table
(``opteval.evalcore.reporting.costs.cost_table``: the same numbers ``opteval report`` prints from a
ledger). Counts, not timings: it may run on a loaded machine. The simulated model's latency is
switched off (its token counts do not depend on it).

    python bench/bench_budgets.py                                   # Table 1's nine methods, sample x 2
    python bench/bench_budgets.py --methods opticycle,autoformulation --problems 10
    python bench/bench_budgets.py method_budgets.optimus.max_calls=20   # any sweep override
    python bench/bench_budgets.py --params autoformulation.rollouts=4   # a method's params

Output: the Markdown table, then one JSON line per (model, method) (``--json PATH`` writes them
as a list). Absolute counts are the simulated policy's own; compare the ratios to OptiCycle.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from opteval.evalcore.harnesses import get_harness  # noqa: E402
from opteval.evalcore.harnesses.base import HarnessContext  # noqa: E402
from opteval.evalcore.models import make_model  # noqa: E402
from opteval.evalcore.problems import load_benchmark  # noqa: E402
from opteval.evalcore.reporting.costs import allowance_band, cost_markdown, cost_table  # noqa: E402
from opteval.evalcore.reporting.table1 import TABLE1_METHODS  # noqa: E402
from opteval.evalcore.sandbox import LocalExecutor  # noqa: E402
from opteval.sweepcore import config as cconf  # noqa: E402  (after the repo is on sys.path)
from opteval.sweepcore.backends.sim_config import simulated_client_config  # noqa: E402


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="sim-small", help="comma-separated simulated models (default sim-small)")
    p.add_argument("--methods", default=",".join(TABLE1_METHODS), help="comma-separated methods (default: Table 1's nine)")
    p.add_argument("--benchmark", default="sample", help="benchmark (default: the embedded sample)")
    p.add_argument("--samples", type=int, default=2, help="samples per problem (default 2)")
    p.add_argument("--problems", type=int, default=0, help="first N problems only (default: all)")
    p.add_argument("--concurrency", type=int, default=2, help="trajectories in flight (default 2)")
    p.add_argument("--params", action="append", default=[], metavar="METHOD.KEY=VALUE",
                   help="override a method's params (YAML value), repeatable")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as a JSON list here")
    return p.parse_known_args(argv)


def method_params(method: str, base: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = dict(base)
    for item in overrides:
        key, _, value = item.partition("=")
        m, _, name = key.partition(".")
        if not name or not _:
            raise SystemExit(f"--params {item!r}: expected METHOD.KEY=VALUE")
        if m == method:
            out[name] = yaml.safe_load(value)
    return out


@dataclass
class Arm:
    """One (model, method) as a sweep's worker would run it."""

    model_name: str
    model: Any
    method: str
    harness: Any
    ctx: dict[str, Any]  # HarnessContext fields shared by the arm's trajectories


async def run_one(arm: Arm, spec: Any, sample: int, executor: Any, sem: asyncio.Semaphore) -> dict[str, Any]:
    ctx = HarnessContext(model=arm.model, executor=executor, sample=sample, model_name=arm.model_name,
                         method=arm.method, **arm.ctx)
    async with sem:
        traj = await arm.harness.run(spec, ctx)
    return {"model": arm.model_name, "method": arm.method, "benchmark": spec.benchmark, "problem_id": spec.id,
            "sample": sample, "status": traj.status, "n_calls": len(traj.calls), "n_execs": len(traj.execs),
            "answered": traj.submission is not None, "prompt_tokens": traj.prompt_tokens,
            "completion_tokens": traj.completion_tokens, "max_calls": ctx.budgets.max_calls, "simulated": True}


async def run_all(args: argparse.Namespace, overrides: list[str]) -> list[dict[str, Any]]:
    models = [m for m in args.models.split(",") if m]
    methods = [m for m in args.methods.split(",") if m]
    if "opticycle" not in methods:  # the reference every ratio needs
        methods.append("opticycle")
    cfg = cconf.load_config([f"models=[{','.join(models)}]", f"methods=[{','.join(methods)}]",
                             f"benchmarks=[{args.benchmark}]", *overrides])
    specs, _ = load_benchmark(args.benchmark)
    if args.problems:
        specs = specs[: args.problems]
    executor = LocalExecutor()
    sem = asyncio.Semaphore(max(1, args.concurrency))
    rows: list[dict[str, Any]] = []
    for model_name in models:
        model_cfg = cconf.as_plain(cconf.model_config(model_name))
        if model_cfg.get("backend") != "simulated":
            raise SystemExit(f"{model_name}: only simulated models (backend: simulated) are measured here")
        client = simulated_client_config(model_cfg)
        client.update(ttft_s=0.0, tokens_per_s=0.0)  # counts do not depend on the simulated latency
        model = make_model(client)
        for method in methods:
            me = cconf.method_config(method)
            arm = Arm(model_name, model, method, get_harness(me.harness), {
                "sampling": cconf.effective_sampling(cfg, model_name), "budgets": cconf.effective_budgets(cfg, method),
                "extraction": me.extraction, "stages": dict(me.stages), "solvers": cfg.solvers,
                "params": method_params(method, cconf.as_plain(me.params), args.params)})
            rows += await asyncio.gather(*[run_one(arm, s, k, executor, sem) for s in specs for k in range(args.samples)])
            print(f"  {model_name}/{method}: {len(specs) * args.samples} trajectories", file=sys.stderr, flush=True)
    await executor.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
    import pandas as pd

    rows = asyncio.run(run_all(args, overrides))
    frame = pd.DataFrame(rows)
    table = cost_table(frame)
    print(f"# calls and tokens per trajectory: {args.benchmark} x {args.samples} samples, simulated policy "
          f"(SIMULATED counts: compare ratios to OptiCycle)\n")
    print(cost_markdown(table))
    band = allowance_band(table)
    print("reasoning-allowance band (docs/calibration.md): tokens ÷ OptiCycle of a real model between "
          "band_low and band_high\n")
    print(band.to_string(index=False, float_format=lambda x: f"{x:.3f}"), "\n")
    frame["capped"] = frame["n_calls"] >= frame["max_calls"]
    capped = frame.groupby(["model", "method"])["capped"].mean().to_dict()
    execs = frame.groupby(["model", "method"])["n_execs"].mean().round(2).to_dict()
    answered = frame.groupby(["model", "method"])["answered"].mean().to_dict()
    most = frame.groupby(["model", "method"])["n_calls"].max().to_dict()
    records = [{**{k: (None if pd.isna(v) else v) for k, v in r.items()}, "execs": execs[(r["model"], r["method"])],
                "calls_max": int(most[(r["model"], r["method"])]),
                "answered": round(float(answered[(r["model"], r["method"])]), 3),
                "at_call_cap": round(float(capped[(r["model"], r["method"])]), 3),
                **{k: v for b in band.to_dict("records") if (b["model"], b["method"]) == (r["model"], r["method"])
                   for k, v in b.items() if k.startswith("band_") or k == "r_max"}}
               for r in table.to_dict("records")]
    for r in records:
        print(json.dumps(r))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
