"""How MLflow runs are found again (their tags), the batch limits of MLflow's API, and the
commands and URLs the sweep prints to reach them."""
from __future__ import annotations

import os
import warnings

from opteval.sweepcore.ledger import open_filesystem

MAX_METRICS_PER_BATCH = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
MAX_PARAMS_PER_BATCH = 100  # MAX_PARAMS_TAGS_PER_BATCH
SWEEP_TAG = "opteval.sweep"
ROLE_TAG = "opteval.role"
SIMULATED_TAG = "opteval.simulated"
ACTIVE_TAG = "opteval.active_s"
# MLflow 3's UI picks the experiment page by this tag (older 3.x) or by the
# ``workflowType`` URL parameter / the top-bar GenAI | Model training toggle (3.17).
EXPERIMENT_KIND_TAG = ("mlflow.experimentKind", "custom_model_development")
LEDGER_TAG = "opteval.ledger"


class TrackingWarning(UserWarning):
    """MLflow could not be reached or refused a call; the sweep continues."""


def tracking_uri(tracking_cfg_uri: str | None, output_dir: str) -> str:
    """Config value, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///<output_dir>/mlflow.db``
    (absolute). An object-store output_dir cannot hold SQLite: then ``./mlflow.db``."""
    if tracking_cfg_uri:
        return str(tracking_cfg_uri)
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    fs, path = open_filesystem(output_dir)
    if fs.type_name != "local":
        path = os.path.abspath(".")
        warnings.warn(f"sweep.output_dir {output_dir} is not local: MLflow store at {path}/mlflow.db "
                      "(set tracking.uri to a tracking server on a cluster)", TrackingWarning, stacklevel=2)
    os.makedirs(path, exist_ok=True)
    return f"sqlite:///{path}/mlflow.db"


def ui_command(uri: str, experiment_id: str | None = None) -> str:
    """The command that opens the MLflow UI on this store, and the page with the runs table."""
    if uri.startswith("sqlite:"):
        # one worker and a long health-check timeout: on a loaded machine uvicorn's supervisor
        # killed the default 4 workers in a loop (5 s health check) and the UI never served
        cmd = (f"mlflow ui --backend-store-uri {uri} --port 5000 --workers 1 "
               "--uvicorn-opts '--timeout-worker-healthcheck 120'")
        return cmd + (f", then open {runs_url('http://127.0.0.1:5000', experiment_id)}" if experiment_id else "")
    if experiment_id and uri.startswith(("http://", "https://")):
        return f"open {runs_url(uri, experiment_id)} in a browser"
    return f"open {uri} in a browser"


def runs_url(server: str, experiment_id: str | None) -> str:
    """The experiment's runs table (not the GenAI traces page MLflow 3 opens by default)."""
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def sync_command(sweep: str, output_dir: str, uri: str | None = None) -> str:
    """The command that re-logs a sweep from its ledger (to the same tracking server)."""
    where = f" tracking.uri={uri}" if uri else ""
    return f"opteval report sweep.name={sweep} sweep.output_dir={output_dir}{where} --sync-mlflow"
