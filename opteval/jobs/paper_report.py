"""The paper's whole results section from several sweeps: ``opteval report`` with a
comma-separated ``sweep.name`` (or ``--preset paper``) lands here.

    opteval report sweep.name=table1,paper,figure4 [sweep.output_dir=results] [--out DIR]
    opteval report --preset paper [sweep.output_dir=results] [--out DIR]

Writes, into ``--out`` (default ``<output_dir>/paper_report``): table1, table2 (.md, .csv),
per_benchmark_<backbone> (.md, .csv), figure2_left, figure2_right, figure3, figure4, figure5
(.png, .csv), budget_curve when a backbone and method ran at several matched budgets, and
index.md; each names the sweeps and planned / scored trajectories it rests on
(evalcore/reporting/paper.py). Ledgers grading or planning a shared benchmark differently are
refused in one line (exit 2). The preset ``paper`` names the sweeps of configs/sweeps/ (table1,
paper, figure4, extra_backbones) and leaves out, saying so, those not run yet.
Each ledger is read with column projection: no per-call or per-execution column is loaded.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opteval.evalcore.problems import BenchmarkLoadError, data_dir, load_benchmark
from opteval.jobs.args import JobParser, UsageError, job_parser, parse, usage_error
from opteval.sweepcore.config import ConfigError, SweepConfig, load_config, model_config
from opteval.sweepcore.ledger import Ledger, LedgerError

if TYPE_CHECKING:
    from opteval.evalcore.reporting.paper import SweepData

PRESETS: dict[str, tuple[str, ...]] = {"paper": ("table1", "paper", "figure4", "extra_backbones")}
OUT_FOLDER = "paper_report"


def wants(argv: list[str]) -> bool:
    """Whether a report command line asks for the merged report (jobs/report.py dispatches)."""
    return any(a == "--preset" or a.startswith("--preset=") or (a.startswith("sweep.name=") and "," in a)
               for a in argv)


def build_parser() -> JobParser:
    """The merged report's line (``opteval report`` with several sweeps): ``--preset`` (repeatable),
    ``--out``, the sweep names and overrides."""
    parser = job_parser("report", __doc__ or "", unknown="unknown option {arg} for a merged report (known: {known})")
    parser.add_argument("--preset", action="append", default=[])
    parser.add_argument("--out")
    return parser


def split_args(argv: list[str]) -> tuple[list[str], bool, Path | None, list[str]]:
    """(sweep names, from a preset, --out, the rest of the dotlist). The names keep the order of
    the line: each ``--preset`` and ``sweep.name=`` adds its own where it stands."""
    args = parse(build_parser(), argv)
    assert args is not None, "--help is answered before split_args"
    for flag, value in [("--preset", v) for v in args.preset] + [("--out", args.out)]:
        if value is not None and not value:
            raise UsageError(f"{flag} needs a value")
    for value in args.preset:
        if value not in PRESETS:
            raise UsageError(f"--preset {value!r} is not known (known: {', '.join(PRESETS)})")
    at = [i for i, a in enumerate(argv) if a == "--preset" or a.startswith("--preset=")]
    sources: list[tuple[int, list[str]]] = [(i, list(PRESETS[v])) for i, v in zip(at, args.preset)]
    rest: list[str] = []
    for arg in args.overrides:
        name, _, value = arg.partition("=")
        if name == "sweep.name":
            sources.append((argv.index(arg), [n.strip() for n in value.split(",") if n.strip()]))
        else:
            rest.append(arg)
    names = [n for _, group in sorted(sources, key=lambda s: s[0]) for n in group]
    if not names:
        raise UsageError("name the sweeps: sweep.name=A,B,... or --preset paper")
    return list(dict.fromkeys(names)), bool(args.preset), Path(args.out) if args.out else None, rest


def grading_of(manifest: dict[str, Any], benchmarks: list[str], where: str) -> dict[str, str]:
    """Per benchmark the profile the sweep graded under: its benchmark YAML's override, else
    ``grading.profile`` (as opteval.sweepcore.config.grading_profile_for), read from the manifest."""
    config = manifest.get("config") or {}
    profile = (config.get("grading") or {}).get("profile")
    if not profile:
        raise UsageError(f"{where}/manifest.json names no grading.profile")
    benches = config.get("benchmark_configs") or {}
    return {b: (benches.get(b) or {}).get("grading") or profile for b in benchmarks}


def answer_keys(cfg: SweepConfig, benchmarks: list[str]) -> dict[str, Any]:
    """The answer keys found (the grades are redone from the submissions); a benchmark without
    data keeps the grades stored in the ledger, said once."""
    keys: dict[str, Any] = {}
    for slug in benchmarks:
        try:
            keys[slug] = load_benchmark(slug, data_dir(cfg.data.dir))[1]
        except (BenchmarkLoadError, LookupError, OSError):
            print(f"note: no answer key for {slug}; using the grades stored in the ledgers", file=sys.stderr)
    return keys


def read_sweep(cfg: SweepConfig, name: str) -> SweepData:
    from opteval.evalcore.reporting.paper import LEDGER_COLUMNS, SweepData  # matplotlib behind it: see run_merged

    ledger = Ledger.open_existing(cfg.sweep.output_dir, name)
    plan = ledger.read_plan()
    if plan is None:
        raise UsageError(f"{ledger.uri} has no plan.parquet (the sweep never started)")
    manifest = ledger.manifest() or {}
    plan_df = plan.to_pandas()
    rows = ledger.read_table(columns=list(LEDGER_COLUMNS)).to_pandas()
    benches = sorted(plan_df["benchmark"].unique())
    return SweepData(name=name, plan=plan_df, rows=rows, grading=grading_of(manifest, benches, str(ledger.uri)))


def exists(cfg: SweepConfig, name: str) -> bool:
    try:
        Ledger.open_existing(cfg.sweep.output_dir, name)
    except LedgerError:
        return False
    return True


def model_meta(models: list[str]) -> dict[str, dict[str, Any]]:
    """Family and size per model config (Figure 3; absent configs are left out)."""
    meta: dict[str, dict[str, Any]] = {}
    for name in models:
        try:
            mc = model_config(name)
        except ConfigError:
            continue
        meta[name] = {"family": mc.family or name, "size_b": mc.size_b}
    return meta


def run_merged(argv: list[str]) -> int:
    """``opteval report``'s merged form (not a subcommand of its own: jobs/report.py dispatches)."""
    # lazy: opteval.evalcore.reporting brings matplotlib, which jobs/report.py loads only for a report
    # that draws (its --summary and --from-mlflow paths stay light)
    from opteval.evalcore.reporting.paper import PaperReportError, merge, write_paper

    try:
        names, preset, out, rest = split_args(argv)
        cfg = load_config(rest)
        if preset:
            absent = [n for n in names if not exists(cfg, n)]
            for n in absent:
                print(f"note: sweep {n} has no ledger under {cfg.sweep.output_dir}; left out", file=sys.stderr)
            names = [n for n in names if n not in absent]
            if not names:
                raise UsageError(f"no sweep of the preset has a ledger under {cfg.sweep.output_dir}")
        sweeps = [read_sweep(cfg, n) for n in names]
        benches = sorted({b for s in sweeps for b in s.plan["benchmark"].unique()})
        keys = answer_keys(cfg, benches)
        for s in sweeps:
            s.answer_keys = {b: k for b, k in keys.items() if b in set(s.plan["benchmark"])}
        merged = merge(sweeps)
        target = out or Path(str(cfg.sweep.output_dir).removeprefix("file://")) / OUT_FOLDER
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--out {target}: cannot write the report there ({exc.strerror or exc})") from None
        models = sorted(set(merged.cells["model"]))
        written = write_paper(merged, target, model_meta(models))
    except (ConfigError, LedgerError, UsageError, PaperReportError) as exc:
        return usage_error(exc)
    for note in merged.notes:
        print(f"note: {note}")
    for art in written:
        print(f"{art.name}: {', '.join(p.name for p in art.files)} ({art.rests_on})")
    print(f"paper report of sweeps {','.join(merged.sweeps)} written to {target} ({len(written)} artefacts; index.md)")
    return 0
