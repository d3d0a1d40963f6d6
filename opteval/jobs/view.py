"""Write a static HTML viewer of a sweep from its ledger: every trajectory, filterable, one page each.

    opteval view sweep.name=NAME [sweep.output_dir=DIR] [--out DIR] [--max-pages N] [--mlflow] [--audit DIR]

The site is ``<output_dir>/<sweep.name>/view/index.html`` (or under --out): it opens from the file
system with no server. Each trajectory page shows every model call (messages and reply), every
program with its output or error, and how the grade came about; planned trajectories that were
never committed and error rows are listed with their reasons. --max-pages caps how many trajectory
pages are written (default 20000; errors, missing, unsubmitted and wrong first); the index always
lists every trajectory. --audit DIR (opteval audit's output) marks the problems whose answer key is
suspect, on their pages and in audit.html, with the evidence. --mlflow also attaches the site to
the sweep's MLflow run (artifacts: view/, its rows under view/shards/). No Ray import.

The ledger is read as a stream: the small columns of every row, the transcripts only of the rows
that get a page (issue 44: the whole table took 4.4 GB at 60,000 rows).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from opteval.exit_codes import ExitCode
from opteval.jobs.args import JobParser, UsageError, job_parser, parse, usage_error
from opteval.jobs.report import answer_keys, check_out_dir, default_out, no_plan_message
from opteval.sweepcore.config import ConfigError, load_config
from opteval.sweepcore.ledger import Ledger, LedgerError
from opteval.sweepcore.tracking import Tracker


def build_parser() -> JobParser:
    """``opteval view``'s line: the flags by name (``opts["--out"]``), the rest the sweep's overrides."""
    parser = job_parser("view", __doc__ or "")
    parser.add_argument("--mlflow", dest="--mlflow", action="store_true")
    for flag in ("--out", "--max-pages", "--audit"):
        parser.add_argument(flag, dest=flag)
    return parser


def main(argv: list[str] | None = None) -> int:
    # deferred: importing this job stays light (reporting: matplotlib, scipy)
    from opteval.evalcore.reporting.view import DEFAULT_MAX_PAGES, SHARD_DIR, write_site

    argv = list(sys.argv[1:] if argv is None else argv)
    opts: dict[str, Any] = {}
    try:
        args = parse(build_parser(), argv)
        if args is None:
            return 0
        opts = vars(args)
        rest = args.overrides
        max_pages = DEFAULT_MAX_PAGES if opts["--max-pages"] is None else int(opts["--max-pages"])
        if max_pages < 0:
            raise UsageError(f"--max-pages must be at least 0, got {max_pages}")
        cfg = load_config(rest)
        ledger = Ledger.open_existing(cfg.sweep.output_dir, cfg.sweep.name)
        plan = ledger.read_plan()
        if plan is None:
            raise UsageError(no_plan_message(ledger))
        out = Path(opts["--out"]) if opts["--out"] else default_out(ledger, "view")
        check_out_dir(out, what="")
    except ValueError as exc:
        if not isinstance(exc, (ConfigError, UsageError)):
            exc = UsageError(f"--max-pages takes an integer, got {opts.get('--max-pages')!r}")
        return usage_error(exc)
    except (ConfigError, LedgerError) as exc:
        return usage_error(exc)
    keys = answer_keys(cfg, sorted(pc.unique(plan.column("benchmark")).to_pylist()))
    if opts["--audit"] and not (Path(opts["--audit"]) / "audit.parquet").is_file():
        print(f"error: --audit {opts['--audit']}: no audit.parquet (write one with opteval audit ... --out DIR)",
              file=sys.stderr)
        return ExitCode.USAGE
    site = write_site(ledger, plan, out, keys, title=f"sweep {cfg.sweep.name}", max_pages=max_pages)
    if opts["--audit"]:
        # deferred: only --audit marks the site
        from opteval.evalcore.audit_view import MARK_COLUMNS, mark_site

        marked = mark_site(out, opts["--audit"], ledger.read_table(columns=list(MARK_COLUMNS)))
        print(f"audit: {marked} trajectory pages marked suspect; {out / 'audit.html'}")
    print(f"view written to {site.index.resolve()} ({site.trajectories} trajectories, {site.pages} pages, "
          f"{site.errors} errors, {site.missing} missing); open it in a browser")
    if opts["--mlflow"]:
        tracker = Tracker.from_config(cfg)
        tracker.enabled = True  # an explicit --mlflow overrides tracking.enabled=false
        man = ledger.manifest() or {}
        cells = plan.group_by(["model", "method"], use_threads=False).aggregate([])
        pairs = list(dict.fromkeys(zip(cells.column("model").to_pylist(), cells.column("method").to_pylist())))
        if tracker.start(man.get("config", {}), man.get("fingerprint", ""), pairs):
            tracker._session_start = None  # attaching files is not sweep time
            files = [p for p in out.iterdir() if p.suffix == ".html"] + list((out / SHARD_DIR).glob("s*.js"))
            tracker.log_report(sorted(files), out, folder="view")
            tracker.finish()
            print(f"view attached to the MLflow run of sweep {cfg.sweep.name} ({tracker.uri}, artifacts: view/)")
        else:
            print(f"MLflow unreachable ({tracker.uri}): view not attached", file=sys.stderr)
            return ExitCode.FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
