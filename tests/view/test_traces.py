"""The demo's trajectories as MLflow traces: one per selected trajectory, on its (model, method)
child run, a span per model call (with token usage) and per execution; a re-sync adds none; the
tracking server's REST API lists them (what MLflow's Traces page reads)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pandas as pd

from opteval.evalcore.ledger_detail import calls_of, execs_of
from opteval.sweepcore.ledger import Ledger
from opteval.sweepcore.tracking.traces import KEY_TAG, select
from tests.view.conftest import SWEEP, args, free_port, opteval


def _traces(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("opteval")
    assert exp is not None
    return list(client.search_traces(locations=[exp.experiment_id], max_results=500))


def test_the_sweep_logs_its_trajectories_as_traces(demo):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{demo}/mlflow.db"
    ledger = Ledger.open_existing(str(demo), SWEEP)
    table = ledger.read_table()
    expected = select(table, ledger.read_plan(), "sample", 3)
    traces = _traces(uri)
    assert sorted(t.info.tags[KEY_TAG] for t in traces) == sorted(expected["key"])
    rows = table.to_pandas().set_index("key")
    client = MlflowClient(tracking_uri=uri)
    for trace in traces:
        row = rows.loc[trace.info.tags[KEY_TAG]]
        run = client.get_run(trace.info.request_metadata["mlflow.sourceRun"])
        assert (run.data.tags["model"], run.data.tags["method"]) == (row["model"], row["method"])
        spans = trace.data.spans
        calls = [s for s in spans if s.span_type == "CHAT_MODEL"]
        execs = [s for s in spans if s.span_type == "TOOL"]
        assert (len(calls), len(execs)) == (row["n_calls"], row["n_execs"])
        first = calls_of(row["calls"])[0]
        usage = calls[0].get_attribute("mlflow.chat.tokenUsage")
        assert usage["input_tokens"] == first["prompt_tokens"] and usage["output_tokens"] == first["completion_tokens"]
        assert execs[0].inputs["code"] == execs_of(row["execs"])[0]["code"]
        assert calls[0].inputs["messages"][0]["role"] in ("system", "user")
    # a re-sync finds them by key and logs none twice
    done = opteval("report", *args(demo), "--sync-mlflow", "--summary")
    assert done.returncode == 0, done.stderr
    # the count is the store's (issue 44): every chosen trace is there, none logged twice
    assert f"MLflow traces: {len(traces)} of {len(expected)} traces logged" in done.stdout
    assert len(_traces(uri)) == len(traces)


def test_select_keeps_every_notable_row_and_n_per_cell():
    rows = [{"key": f"k{i}", "model": "m", "method": "direct", "benchmark": "b", "problem_id": f"p{i}", "sample": 0,
             "status": "submitted", "correct": i >= 3} for i in range(10)]
    rows[5]["status"], rows[5]["correct"] = "error", False
    picked = set(select(pd.DataFrame(rows), None, "sample", 2)["key"])
    assert picked == {"k0", "k1", "k2", "k5", "k3", "k4"}
    assert len(select(pd.DataFrame(rows), None, "all", 2)) == 10
    assert len(select(pd.DataFrame(rows), None, "none", 2)) == 0


def test_the_tracking_servers_rest_api_lists_the_traces(demo, tmp_path):
    port = free_port()
    env = dict(os.environ, MLFLOW_ENABLE_TELEMETRY="false")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               f"sqlite:///{demo}/mlflow.db", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1"], cwd=str(tmp_path), env=env,
                              stdout=(tmp_path / "mlflow.log").open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240  # a loaded machine starts it slowly
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "mlflow.log").read_text()[-2000:]
            time.sleep(1)
        over_rest = _traces(f"http://127.0.0.1:{port}")
        assert len(over_rest) == len(_traces(f"sqlite:///{demo}/mlflow.db")) > 0
        assert {t.info.tags["method"] for t in over_rest} <= {"direct", "opticycle"}
    finally:
        server.terminate()
        server.wait(timeout=30)
