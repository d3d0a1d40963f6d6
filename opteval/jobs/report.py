"""Read a sweep's results: tables, statistics and plots computed from its ledger.

    python jobs/report.py sweep.name=try1 [sweep.output_dir=results] [options]    (or: opteval report ...)
    python jobs/report.py sweep.name=table1,paper,figure4 | --preset paper [--out DIR]
                         the paper's results section from several sweeps (jobs/paper_report.py)

Options:
    --out DIR            where report.md, main_table.{csv,tex}, tables/ and plots/ go
                         (default: <output_dir>/<sweep.name>/report when local)
    --profile NAME       grading profile of the main table (default: the sweep's grading.profile)
    --compare A,B        paired comparison of methods A and B by problem (McNemar or paired bootstrap)
    --audit DIR          accuracy on trusted keys beside the raw (suspect keys of opteval audit's DIR left
                         out), and with --compare each difference recomputed on them (docs/audit.md)
    --bootstrap B        resamples of the problem-level bootstrap intervals (default 2000)
    --seed S             seed of those resamples (default 0)
    --summary            print only the short results table (no full report)
    --sync-mlflow        re-log every run, metric and artifact from the ledger (idempotent)
    --from-mlflow        rebuild the main table from the tracking server alone (mlflow.search_runs)

Everything is computed from the Parquet ledger (never from memory): avg@k over the
*planned* trajectories (missing ones count as wrong), macro, tokens, missing keys.
No Ray import.
"""
from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.ledger_detail import without_exec_text
from opteval.evalcore.problems import BenchmarkLoadError, data_dir, load_benchmark
from opteval.exit_codes import ExitCode
from opteval.jobs.args import JobParser, UsageError, help_asked, job_parser, parse, usage_error
from opteval.jobs.paper_report import run_merged, wants
from opteval.sweepcore.config import ConfigError, SweepConfig, load_config, method_config, model_config
from opteval.sweepcore.ledger import DETAIL_COLUMNS, Ledger, LedgerError, columns_without
from opteval.sweepcore.tracking import (
    SUMMARY_COLUMNS,
    Tracker,
    ledger_summary,
    results_markdown,
    summarize_ledger,
    sync_from_ledger,
    ui_command,
)

FLAGS = ("--sync-mlflow", "--from-mlflow", "--summary")
VALUED = ("--out", "--profile", "--compare", "--bootstrap", "--seed", "--audit")


def build_parser() -> JobParser:
    """``opteval report``'s line: the flags by name (``opts["--out"]``), the rest the sweep's
    overrides. The other ledger readers (jobs/view.py, jobs/audit.py, jobs/export.py) build their own
    with opteval.jobs.args the same way."""
    parser = job_parser("report", __doc__ or "")
    for flag in FLAGS:
        parser.add_argument(flag, dest=flag, action="store_true")
    for flag in VALUED:
        parser.add_argument(flag, dest=flag)
    return parser


def parse_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(options by flag, the OmegaConf dotlist that names the sweep); ``main`` answers --help first."""
    args = parse(build_parser(), argv)
    assert args is not None, "--help is answered before parse_args"
    return vars(args), args.overrides


def model_meta(models: list[str]) -> dict[str, dict[str, Any]]:
    """Family and size per model, for the size plots (absent configs are skipped)."""
    meta: dict[str, dict[str, Any]] = {}
    for name in models:
        try:
            mc = model_config(name)
        except ConfigError:
            continue
        meta[name] = {"family": mc.family or name, "size_b": mc.size_b}
    return meta


def answer_keys(cfg: SweepConfig, benchmarks: list[str]) -> dict[str, Any]:
    """The driver-side answer keys; a benchmark whose data is absent keeps its stored grades."""
    keys: dict[str, Any] = {}
    for slug in benchmarks:
        try:
            keys[slug] = load_benchmark(slug, data_dir(cfg.data.dir))[1]
        except (BenchmarkLoadError, LookupError, OSError) as exc:
            print(f"note: no answer key for {slug} ({exc}); using the grades stored in the ledger",
                  file=sys.stderr)
    return keys


def full_report(cfg: SweepConfig, ledger: Ledger, opts: dict[str, Any], tracker: Tracker | None,
                plan: pa.Table | None = None) -> int:
    """The whole report; ``plan``: the plan already read by the caller (read once: 71 MB of Arrow at
    the paper's 589,116 keys)."""
    # deferred: reporting loads matplotlib, scipy; --summary skips it
    from opteval.evalcore.reporting import build_report

    plan = plan if plan is not None else ledger.read_plan()
    if plan is None:
        raise UsageError(no_plan_message(ledger))
    plan_df = plan.to_pandas()
    table = report_rows(ledger, sorted(plan_df["method"].unique()))
    profile = opts["--profile"] or cfg.grading.profile
    compare = tuple(opts["--compare"].split(",")) if opts["--compare"] else None
    if compare is not None and len(compare) != 2:
        raise UsageError(f"--compare takes two methods A,B; got {opts['--compare']!r}")
    n_resamples = _int_opt(opts, "--bootstrap", 2000, minimum=100)
    seed = _int_opt(opts, "--seed", 0, minimum=0)
    if compare is not None:
        known = sorted(plan_df["method"].unique())
        unknown = [m for m in compare if m not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            raise UsageError(f"--compare: method(s) {', '.join(map(repr, unknown))} not in sweep "
                             f"{cfg.sweep.name} (its methods: {', '.join(known)})"
                             + (f"; did you mean {close[0]!r}?" if close else ""))
    out = Path(opts["--out"]) if opts["--out"] else default_out(ledger)
    check_out_dir(out)
    suspects = load_suspects(opts["--audit"]) if opts.get("--audit") else None
    report = build_report(table, answer_keys(cfg, sorted(plan_df["benchmark"].unique())), plan_df,
                          model_meta=model_meta(sorted(plan_df["model"].unique())), profile=profile,
                          compare=compare, n_resamples=n_resamples, seed=seed)
    view = out.parent / "view" / "index.html"
    link = " ([open it](../view/index.html))" if not opts["--out"] and view.is_file() else ""
    report.notes.append(f"every trajectory (calls, programs, outputs, why it scored): `opteval view "
                        f"sweep.name={cfg.sweep.name}` writes {view}{link}")
    paths = report.write(out)
    print(report.markdown())
    if suspects is not None:
        paths += trusted_section(table, plan_df, suspects, compare, n_resamples, seed, out)
    print(f"report written to {out} ({len(paths)} files: report.md, summary.json, main_table.csv, main_table.tex, "
          "plots/)")
    if len(report.missing):
        print(f"missing scores: {len(report.missing)}; every key and reason in {out / 'tables' / 'missing.csv'}")
    if tracker is not None:
        tracker.log_report(paths, out)
    return 0


def load_suspects(audit_dir: str) -> dict[str, set[str]]:
    # deferred: only --audit reads an audit's files
    from opteval.evalcore import audit_report

    try:
        return audit_report.load_suspects(audit_dir)[0]
    except audit_report.AuditFileError as exc:
        raise UsageError(str(exc)) from None


def trusted_section(table: Any, plan_df: Any, suspects: dict[str, set[str]], compare: tuple[str, str] | None,
                    n_resamples: int, seed: int, out: Path) -> list[Path]:
    """``--audit DIR``: raw and trusted accuracy side by side (opteval.evalcore.audit_report)."""
    # deferred: only --audit reads an audit's files
    from opteval.evalcore import audit_report

    result = audit_report.trusted_report(table, plan_df, suspects, compare, n_resamples, seed)
    print("\n".join(result.lines))
    return audit_report.write(result, out)


def semopt_methods(methods: list[str]) -> list[str]:
    """The methods run by the SemOPT harness: the only ones whose report tables read transcripts."""
    out = []
    for m in methods:
        try:
            if method_config(m).harness == "semopt":
                out.append(m)
        except ConfigError:  # a method config gone since the sweep ran: its transcripts are read
            out.append(m)
    return out


BATCH_ROWS = 2048  # rows per record batch of the report's streaming read


def report_rows(ledger: Ledger, methods: list[str], batch_rows: int = BATCH_ROWS) -> Any:
    """The ledger's rows as pandas, read in record batches of ``batch_rows`` and reduced as they are
    read (``opteval.evalcore.reporting.frame.reduce_rows``: ``calls`` and ``execs`` give way to the few
    values the tables derive from them), so the report holds no JSON detail column (issue 44). The
    transcripts are 95% of a row's bytes and only SemOPT's tables read them (its candidates'
    annotations): those are taken in one filtered streaming pass over the SemOPT methods' rows; no
    other row's transcript is ever read."""
    # deferred: reporting loads matplotlib, scipy; --summary skips it
    from opteval.evalcore.reporting.frame import reduce_rows, semopt_annotations

    sem = semopt_methods(methods)
    annotations: dict[str, list[dict[str, Any]]] = {}
    if sem:
        # format 2 rebuilds the transcript's entries from the calls too (opteval.evalcore.ledger_detail)
        for batch in ledger.scan(["key", "transcript", "calls"], batch_rows, filter=pc.field("method").isin(sem)):
            for key, text, calls in zip(*(batch.column(i).to_pylist() for i in range(3))):
                annotations[key] = semopt_annotations(text, calls)  # a key read twice: its last row, as read_table
    columns = columns_without(*DETAIL_COLUMNS) + ["calls", "execs"]
    parts = [reduce_rows(without_exec_text(batch).to_pandas(), annotations)
             for batch in ledger.scan(columns, batch_rows)]
    if not parts:
        return reduce_rows(ledger.read_table(columns=columns).to_pandas(), annotations)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _int_opt(opts: dict[str, Any], name: str, default: int, minimum: int) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name} takes an integer, got {raw!r}") from None
    if value < minimum:
        raise UsageError(f"{name} must be at least {minimum}, got {value}")
    return value


def no_plan_message(ledger: Ledger) -> str:
    """No plan.parquet: a sweep that never started, or one whose plan file was lost (it has a
    manifest or committed rows); the second is named as such, with the way to rewrite it."""
    try:
        committed = ledger.read_table(columns=["key"]).num_rows
    except Exception:  # a damaged part is reported by the reads that need it
        committed = 0
    if committed or ledger.manifest() is not None:
        return (f"{ledger.uri}/plan.parquet is missing (the sweep has a manifest and {committed} committed "
                "trajectories); re-run the same sweep command (same sweep.name) to write the plan again")
    return f"{ledger.uri} has no plan.parquet (the sweep never started)"


def check_out_dir(out: Path, what: str = "the report") -> None:
    """``--out`` must be a directory we can create and write, before ``what`` is built
    (``what`` empty: the line says only that it cannot be written)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".opteval-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        target = f" {what}" if what else ""
        raise UsageError(f"--out {out}: cannot write{target} there ({exc.strerror or exc})") from None


def default_out(ledger: Ledger, folder: str = "report") -> Path:
    """``<ledger>/<folder>`` for a local ledger; a remote one needs --out."""
    uri = str(ledger.uri)
    if "://" in uri and not uri.startswith("file://"):
        raise UsageError(f"the ledger is on {uri}; pass --out DIR for the {folder} files")
    return Path(uri.removeprefix("file://")) / folder


def from_mlflow(cfg: SweepConfig) -> int:
    # deferred: --from-mlflow only; reporting loads matplotlib, scipy
    from opteval.evalcore.reporting import to_markdown
    from opteval.sweepcore.tracking import tracking_uri
    from opteval.sweepcore.tracking.mlflow_views import MlflowViewError, table_from_mlflow

    uri = tracking_uri(cfg.tracking.uri, cfg.sweep.output_dir)
    try:
        table = table_from_mlflow(uri, cfg.tracking.experiment, cfg.sweep.name)
    except MlflowViewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    print(to_markdown(table))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if help_asked(build_parser(), argv):
        return 0
    if wants(argv):  # several sweeps: the paper's results section
        return run_merged(argv)
    try:
        opts, rest = parse_args(argv)
        cfg = load_config(rest)
        if opts["--from-mlflow"]:
            return from_mlflow(cfg)
        ledger = Ledger.open_existing(cfg.sweep.output_dir, cfg.sweep.name)
    except (ConfigError, LedgerError, UsageError) as exc:
        return usage_error(exc)
    try:
        return _report(cfg, ledger, opts)
    except MemoryError:  # pyarrow's ArrowMemoryError too; a kernel OOM kill cannot be answered
        print(f"error: the ledger {ledger.uri} does not fit in this process's memory (out of memory while reading "
              "it); run the report on a machine with more memory, or with --summary", file=sys.stderr)
        return ExitCode.FAILED
    except (LedgerError, pa.ArrowException) as exc:  # a damaged or unreadable file met while reading
        first = " ".join(str(exc).split())[:300]
        print(f"error: cannot read the ledger {ledger.uri}: {type(exc).__name__}: {first}; "
              "opteval sweep ... sweep.repair=true quarantines a damaged file", file=sys.stderr)
        return ExitCode.USAGE


def _report(cfg: SweepConfig, ledger: Ledger, opts: dict[str, Any]) -> int:
    """``main`` once the ledger is open: every read of it happens here (see ``main``'s error lines)."""
    plan = ledger.read_plan()
    if plan is None:
        print(f"error: {no_plan_message(ledger)}", file=sys.stderr)
        return ExitCode.USAGE
    tracker = None
    if opts["--sync-mlflow"]:
        tracker = Tracker.from_config(cfg)
        tracker.enabled = True  # an explicit --sync-mlflow overrides tracking.enabled=false
        summary = sync_from_ledger(ledger, tracker)
        if tracker.active:
            ui = ui_command(tracker.uri, tracker.experiment_id)
            print(f"synced {len(tracker.children)} runs to MLflow ({tracker.uri}); UI: {ui}")
        else:
            print(f"MLflow sync failed ({tracker.uri}); see the warnings above", file=sys.stderr)
    else:
        summary = summarize_ledger(ledger_summary(ledger, SUMMARY_COLUMNS), plan)
    committed = int(summary["scored"].sum()) if len(summary) else 0
    if opts["--summary"]:
        families = {m: v["family"] for m, v in model_meta(list(cfg.models)).items()}
        print(results_markdown(summary, f"sweep {cfg.sweep.name}", families))
    else:
        # deferred: reporting loads matplotlib, scipy; --summary skips it
        from opteval.evalcore.reporting import ReportError

        try:
            full_report(cfg, ledger, opts, tracker if tracker is not None and tracker.active else None, plan)
        except (UsageError, ReportError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.USAGE
    print(f"planned {plan.num_rows} trajectories, committed {committed}, missing {plan.num_rows - committed}")
    print(f"ledger: {ledger.trajectories_uri} (Parquet; pandas.read_parquet(..., partitioning=None) or "
          f"duckdb \"SELECT * FROM read_parquet('{ledger.trajectories_uri}/**/*.parquet')\")")
    return 0 if tracker is None or tracker.active else 1


if __name__ == "__main__":
    sys.exit(main())
