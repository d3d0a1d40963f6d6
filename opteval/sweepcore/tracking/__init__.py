"""MLflow as a view of the ledger: runs and metrics (tracker), trajectories as traces (traces),
and the tables read back from MLflow (mlflow_views)."""
from opteval.sweepcore.tracking.tracker import (
    ACTIVE_TAG,
    MAX_METRICS_PER_BATCH,
    ROLE_TAG,
    SIMULATED_TAG,
    SUMMARY_READ,
    SWEEP_TAG,
    BackgroundStart,
    OffLoop,
    Tracker,
    TrackingWarning,
    end_line,
    git_revision,
    model_families,
    plan_params,
    planned_counts_from,
    problem_counts_from,
    results_markdown,
    run_metrics,
    run_params,
    runs_url,
    samples_per_benchmark,
    summarize_ledger,
    sync_command,
    sync_from_ledger,
    tracking_uri,
    ui_command,
)

__all__ = [
    "ACTIVE_TAG", "BackgroundStart", "MAX_METRICS_PER_BATCH", "OffLoop", "ROLE_TAG", "SIMULATED_TAG", "SUMMARY_READ", "SWEEP_TAG",
    "Tracker", "TrackingWarning", "end_line", "model_families",
    "git_revision", "plan_params", "planned_counts_from", "problem_counts_from",
    "results_markdown", "run_metrics", "run_params", "runs_url", "samples_per_benchmark", "summarize_ledger",
    "sync_command", "sync_from_ledger", "tracking_uri", "ui_command"
]
