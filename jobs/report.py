"""Print a sweep's results table from its ledger; optionally re-log it to MLflow.

    python jobs/report.py sweep.name=try1 [sweep.output_dir=results] [--sync-mlflow]

The table is computed from the Parquet ledger (never from memory): avg@k per
model x method x benchmark over the *planned* trajectories (missing ones count as
wrong), macro, tokens and missing counts. ``--sync-mlflow`` re-logs every run,
metric and artifact from the ledger (idempotent: the same runs are reused and an
unchanged ledger adds no metric rows), for sweeps that ran while MLflow was down.
No Ray import.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cluster.config import ConfigError, load_config  # noqa: E402
from cluster.ledger import Ledger, LedgerError  # noqa: E402
from cluster.tracking import Tracker, results_markdown, summarize_ledger, sync_from_ledger, ui_command  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sync = "--sync-mlflow" in argv
    argv = [a for a in argv if a != "--sync-mlflow"]
    try:
        cfg = load_config(argv)
        ledger = Ledger.open_existing(cfg.sweep.output_dir, cfg.sweep.name)
    except (ConfigError, LedgerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = ledger.read_plan()
    if plan is None:
        print(f"error: {ledger.uri} has no plan.parquet (the sweep never started)", file=sys.stderr)
        return 2
    table = ledger.read_table()
    if sync:
        tracker = Tracker.from_config(cfg)
        tracker.enabled = True  # an explicit --sync-mlflow overrides tracking.enabled=false
        summary = sync_from_ledger(ledger, tracker)
        if tracker.active:
            print(f"synced {len(tracker.children)} runs to MLflow ({tracker.uri}); UI: {ui_command(tracker.uri)}")
        else:
            print(f"MLflow sync failed ({tracker.uri}); see the warnings above", file=sys.stderr)
    else:
        summary = summarize_ledger(table, plan)
    print(results_markdown(summary, f"sweep {cfg.sweep.name}"))
    committed = int(summary["scored"].sum()) if len(summary) else 0
    print(f"planned {plan.num_rows} trajectories, committed {committed}, missing {plan.num_rows - committed}")
    print(f"ledger: {ledger.uri}/trajectories (Parquet; pandas.read_parquet or "
          f"duckdb \"SELECT * FROM '{ledger.uri}/trajectories/**/*.parquet'\")")
    return 0 if not sync or tracker.active else 1


if __name__ == "__main__":
    sys.exit(main())
