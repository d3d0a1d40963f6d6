"""MLflow as a view of the ledger: runs and metrics (tracker), the results table (summary), the
runs' parameters (params), their tags and commands (names), MLflow off the event loop (offloop),
trajectories as traces (traces), and the tables read back from MLflow (mlflow_views)."""
from opteval.sweepcore.tracking.names import (
    ACTIVE_TAG,
    MAX_METRICS_PER_BATCH,
    ROLE_TAG,
    SIMULATED_TAG,
    SWEEP_TAG,
    TrackingWarning,
    runs_url,
    sync_command,
    tracking_uri,
    ui_command,
)
from opteval.sweepcore.tracking.offloop import (
    BackgroundStart,
    OffLoop,
    end_line,
)
from opteval.sweepcore.tracking.params import (
    git_revision,
    plan_params,
    run_params,
    samples_per_benchmark,
)
from opteval.sweepcore.tracking.summary import (
    SUMMARY_COLUMNS,
    SUMMARY_READ,
    ledger_summary,
    model_families,
    planned_counts_from,
    problem_counts_from,
    results_markdown,
    run_metrics,
    summarize_ledger,
)
from opteval.sweepcore.tracking.tracker import (
    TraceCount,
    Tracker,
    sync_from_ledger,
)

__all__ = [
    "ACTIVE_TAG", "BackgroundStart", "MAX_METRICS_PER_BATCH", "OffLoop", "ROLE_TAG", "SIMULATED_TAG",
    "SUMMARY_COLUMNS", "SUMMARY_READ",
    "TraceCount", "ledger_summary", "SWEEP_TAG",
    "Tracker", "TrackingWarning", "end_line", "model_families",
    "git_revision", "plan_params", "planned_counts_from", "problem_counts_from",
    "results_markdown", "run_metrics", "run_params", "runs_url", "samples_per_benchmark", "summarize_ledger",
    "sync_command", "sync_from_ledger", "tracking_uri", "ui_command"
]
