"""``--from-mlflow``: the main table rebuilt from the child runs' metrics alone.

For users who only have the tracking server. The sweep's parent run carries the tag
``opteval.sweep=<name>``; its children (``mlflow.parentRunId``) carry ``model`` and
``method`` tags and the metrics ``acc/<bench>``, ``planned/<bench>``, ``missing/<bench>``
(and, when logged, ``errors/<bench>``, ``tokens/<bench>``, ``exec_rate/<bench>``).
Correct counts are ``round(acc * planned)``, so the table goes through the same
:func:`opteval.evalcore.reporting.main_table_from_summary` as the ledger path and comes out equal.
A child tagged ``opteval.simulated=true`` is labelled simulated.

No Ray import; MLflow is imported lazily (slow to import).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from opteval.evalcore.reporting import main_table_from_summary

SWEEP_TAG = "opteval.sweep"
ROLE_TAG = "opteval.role"
SIM_TAG = "opteval.simulated"


class MlflowViewError(LookupError):
    """The experiment or the sweep's parent run is not on the tracking server."""


def _search(tracking_uri: str, experiment: str, filter_string: str) -> pd.DataFrame:
    # deferred: mlflow takes seconds to import; only the search needs it
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise MlflowViewError(f"no MLflow experiment {experiment!r} at {tracking_uri}")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracking_uri)  # search_runs reads the global URI
    try:
        return mlflow.search_runs(experiment_ids=[exp.experiment_id], filter_string=filter_string,
                                  max_results=50000, output_format="pandas")
    finally:
        mlflow.set_tracking_uri(previous)


def child_runs(tracking_uri: str, experiment: str, sweep_name: str) -> pd.DataFrame:
    """The sweep's child runs as ``mlflow.search_runs`` returns them (one row each)."""
    runs = _search(tracking_uri, experiment, f"tags.`{SWEEP_TAG}` = '{sweep_name}'")
    if not len(runs):
        raise MlflowViewError(f"no run tagged {SWEEP_TAG}={sweep_name!r} in experiment {experiment!r}")
    parent_col = "tags.mlflow.parentRunId"
    parents = runs[runs[parent_col].isna()] if parent_col in runs.columns else runs
    if f"tags.{ROLE_TAG}" in parents.columns and (parents[f"tags.{ROLE_TAG}"] == "parent").any():
        parents = parents[parents[f"tags.{ROLE_TAG}"] == "parent"]
    if not len(parents):
        raise MlflowViewError(f"sweep {sweep_name!r}: no parent run (a run without mlflow.parentRunId)")
    parent_id = parents.sort_values("start_time").iloc[-1]["run_id"]
    children = _search(tracking_uri, experiment, f"tags.mlflow.parentRunId = '{parent_id}'")
    return children


def summary_from_runs(children: pd.DataFrame) -> pd.DataFrame:
    """Per (model, method, benchmark) counts from child-run metrics (the summary layout of
    :func:`opteval.evalcore.reporting.summary_from_prepared`)."""
    rows = []
    for _, r in children.iterrows():
        model, method = r.get("tags.model"), r.get("tags.method")
        if model is None or method is None or pd.isna(model) or pd.isna(method):
            continue
        sim = str(r.get(f"tags.{SIM_TAG}", "")).lower() == "true"
        benches = sorted({c[len("metrics.planned/"):] for c in children.columns
                          if c.startswith("metrics.planned/") and not pd.isna(r[c])})
        for b in benches:
            planned = int(round(float(r[f"metrics.planned/{b}"])))
            acc = _get(r, f"metrics.acc/{b}")
            row: dict[str, Any] = {
                "model": model, "method": method, "benchmark": b, "planned": planned,
                "correct": int(round(acc * planned)) if acc is not None else 0,
                "missing": int(round(_get(r, f"metrics.missing/{b}") or 0)),
                "errors": int(round(_get(r, f"metrics.errors/{b}") or 0)),
                "tokens_mean": _get(r, f"metrics.tokens/{b}"),
                "exec_rate": _get(r, f"metrics.exec_rate/{b}"),
                "simulated": sim,
            }
            rows.append(row)
    return pd.DataFrame(rows, columns=["model", "method", "benchmark", "planned", "correct", "missing", "errors",
                                       "tokens_mean", "exec_rate", "simulated"])


def _get(r: pd.Series, col: str) -> float | None:
    v = r.get(col)
    return None if v is None or pd.isna(v) else float(v)


def table_from_mlflow(tracking_uri: str, experiment: str, sweep_name: str) -> pd.DataFrame:
    """The main table (same layout and values as ``build_report(...).main_table``) from the
    sweep's child runs on the tracking server."""
    return main_table_from_summary(summary_from_runs(child_runs(tracking_uri, experiment, sweep_name)))


def model_meta_from_mlflow(children: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``{model: {"family", "size_b"}}`` from the child runs' ``family`` / ``size_b`` params."""
    out: dict[str, dict[str, Any]] = {}
    for _, r in children.iterrows():
        model = r.get("tags.model")
        size = r.get("params.size_b")
        if model is None or pd.isna(model):
            continue
        try:
            size_b = float(size) if size is not None and not pd.isna(size) and size != "None" else None
        except ValueError:
            size_b = None
        out[model] = {"family": r.get("params.family"), "size_b": size_b}
    return out
