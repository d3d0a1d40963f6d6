"""Issue 44: ``--sync-mlflow`` reads the ledger's small columns, counts the traces the store holds,
caps them by ``tracking.max_traces`` with a line that says so, ends every run, and its artifacts
carry no transcripts."""
from __future__ import annotations

import pyarrow.parquet as pq

from opteval.sweepcore.ledger import DETAIL_COLUMNS
from opteval.sweepcore.tracking import Tracker, ledger_summary, sync_from_ledger
from opteval.sweepcore.tracking.traces import KEY_TAG
from tests.report.test_report_stream import _sweep


def test_sync_counts_the_store_caps_and_ends_runs(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    led, plan = _sweep(tmp_path, "direct,opticycle")
    small = ledger_summary(led)
    assert not set(DETAIL_COLUMNS) & set(small.column_names) and small.num_rows > 5
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, "opteval-test", "st", str(tmp_path), traces="all", max_traces=5)
    sync_from_ledger(led, tracker)
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("MLflow traces:")]
    assert line == [f"MLflow traces: 5 of {small.num_rows} traces logged (tracking.traces=all); "
                    f"{small.num_rows - 5} over tracking.max_traces, the rest not selected"]
    client = MlflowClient(tracking_uri=uri)
    assert tracker.experiment_id is not None
    traces = client.search_traces(locations=[tracker.experiment_id], max_results=100)
    assert len(traces) == 5 and all(t.info.tags.get(KEY_TAG) for t in traces)
    assert len(client.get_trace(traces[0].info.trace_id).data.spans) > 1  # its calls and runs are there
    runs = client.search_runs([tracker.experiment_id])
    assert runs and all(r.info.status == "FINISHED" for r in runs)
    child = tracker.children[("sim-small", "direct")]
    local = client.download_artifacts(child, "trajectories.parquet", str(tmp_path / "dl"))
    assert not set(DETAIL_COLUMNS) & set(pq.read_schema(local).names)
    assert client.get_run(child).data.tags.get("opteval.ledger") == led.trajectories_uri
