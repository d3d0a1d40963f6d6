"""MLflow round trip on SQLite: metrics equal the ledger recomputation; failures never stop a sweep."""
from __future__ import annotations

import socket

import pyarrow.parquet as pq
import pytest

from opteval.evalcore.records import CallRecord, ExecRecord, Submission, Trajectory
from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import Ledger, trajectory_row
from opteval.sweepcore.plan import expand_plan, plan_counts
from opteval.sweepcore.tracking import Tracker, TrackingWarning, run_metrics, summarize_ledger, sync_from_ledger

IDS = {"sample": [f"p{i}" for i in range(4)], "complexor": ["c1"]}


def _sweep(out):
    cfg = load_config([f"sweep.output_dir={out}", "sweep.name=trk", "methods=[direct,optistate]",
                       "benchmarks=[sample,complexor]", "samples.per_benchmark={complexor: 3}"])
    res = resolved(cfg)
    fp = sweep_fingerprint(res)
    plan = expand_plan(cfg, IDS)
    led = Ledger.open(str(out), "trk", res, fp)
    led.record_plan(plan)
    rows = []
    for i, p in enumerate(plan[:-2]):  # the last two stay missing
        t = Trajectory(model=p.model, method=p.method, benchmark=p.benchmark, problem_id=p.problem_id,
                       sample=p.sample, seed=42, status="submitted", submission=Submission(raw=1.0),
                       calls=[CallRecord(0, "generate", 100 + i, 10 * i, None, 0.1, "stop")],
                       execs=[ExecRecord(0, "ok" if i % 3 else "error", 0.1, 0.1, 0)], simulated=True)
        rows.append(trajectory_row(t, key=p.key, correct=(i % 2 == 0), profile="optagentbench",
                                   fingerprint=p.fingerprint, sweep="trk", parsed=1.0))
    led.commit(rows)
    return cfg, res, fp, plan, led


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlf")
    cfg, res, fp, plan, led = _sweep(out)
    tracker = Tracker(f"sqlite:///{out}/mlflow.db", "opteval-test", "trk", str(out))
    assert tracker.start(res, fp, plan_counts(plan).keys())
    tracker.progress("sim-small", "direct", 4, 2, planned=7)
    summary = tracker.log_results(led.read_table(), led.read_plan())
    tracker.finish()
    return out, cfg, plan, led, tracker, summary


def test_metrics_equal_ledger_recomputation(synced):
    out, cfg, plan, led, tracker, _ = synced
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracker.uri)
    summary = summarize_ledger(Ledger.open_existing(str(out), "trk").read_table(), led.read_plan())
    assert len(tracker.children) == 2
    for (model, method), run_id in tracker.children.items():
        run = client.get_run(run_id)
        assert run.info.run_name == f"trk/{model}/{method}"  # the sweep's name first: sweeps never look alike
        assert run.data.tags["opteval.simulated"] == "true"
        assert (run.data.params["samples.sample"], run.data.params["samples.complexor"]) == ("2", "3")
        assert run.data.tags["mlflow.parentRunId"] == tracker.parent_id
        assert run.data.tags["model"] == model and run.data.params["sampling.temperature"] == "0.6"
        expected = run_metrics(summary, model, method)
        assert {"acc/sample", "acc/complexor", "acc/macro", "tokens/macro", "missing/sample",
                "planned/complexor", "exec_rate/sample"} <= set(expected)
        for k, v in expected.items():
            assert run.data.metrics[k] == pytest.approx(v), k
    # the missing trajectories are counted (optistate's complexor lost two)
    assert client.get_run(tracker.children[("sim-small", "optistate")]).data.metrics["missing/complexor"] == 2
    arts = {a.path for a in client.list_artifacts(tracker.children[("sim-small", "direct")])}
    assert {"trajectories.parquet", "results.md"} <= arts
    # issue 44: the artifact carries the scoring columns, never the transcripts (they stay in the ledger)
    got = client.download_artifacts(tracker.children[("sim-small", "direct")], "trajectories.parquet", str(out))
    cols = set(pq.read_schema(got).names)
    assert {"key", "correct", "status"} <= cols and not {"transcript", "calls", "execs"} & cols
    hist = client.get_metric_history(tracker.children[("sim-small", "direct")], "progress/done")
    assert sorted(m.step for m in hist) == [4, 11]  # the periodic snapshot, then the ledger's final value
    direct = client.get_run(tracker.children[("sim-small", "direct")]).data.metrics
    optistate = client.get_run(tracker.children[("sim-small", "optistate")]).data.metrics
    assert direct["progress/frac"] == 1.0 and direct["progress/done"] == 11  # not the snapshot's 4/7
    assert optistate["progress/frac"] == pytest.approx(9 / 11) and optistate["progress/done"] == 9
    parent = client.get_run(tracker.parent_id).data.metrics
    assert (parent["progress/done"], parent["progress/planned"]) == (20, 22)


def test_sync_is_idempotent_and_reuses_runs(synced):
    out, cfg, plan, led, tracker, _ = synced
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracker.uri)
    for _ in range(2):
        again = Tracker(tracker.uri, "opteval-test", "trk", str(out))
        sync_from_ledger(Ledger.open_existing(str(out), "trk"), again)
        assert again.parent_id == tracker.parent_id and again.children == tracker.children
    assert again.experiment_id is not None
    runs = client.search_runs([again.experiment_id])
    assert len(runs) == 3  # one parent + two children, never more
    hist = client.get_metric_history(tracker.children[("sim-small", "direct")], "acc/macro")
    assert len(hist) == 1  # re-logging an unchanged ledger adds no metric rows
    assert len(client.get_metric_history(tracker.children[("sim-small", "direct")], "progress/frac")) == 2


def test_report_sync_cli(synced, capsys):
    out, *_ = synced
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("report", Path(__file__).resolve().parents[2] / "jobs" / "report.py")

    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    rc = report.main([f"sweep.output_dir={out}", "sweep.name=trk", f"tracking.uri=sqlite:///{out}/mlflow.db",
                      "tracking.experiment=opteval-test", "--sync-mlflow", "--summary"])
    text = capsys.readouterr().out
    assert rc == 0 and "SIMULATED" in text and "missing 2" in text and "mlflow ui --backend-store-uri" in text


def test_unreachable_tracking_warns_and_continues(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    cfg, res, fp, plan, led = _sweep(tmp_path)
    tracker = Tracker(f"http://127.0.0.1:{port}", "opteval", "trk", str(tmp_path))
    with pytest.warns(TrackingWarning, match="--sync-mlflow"):
        assert tracker.start(res, fp, plan_counts(plan).keys()) is False
    tracker.progress("sim-small", "direct", 1, 1)
    summary = tracker.log_results(led.read_table(), led.read_plan())  # still computes from the ledger
    tracker.finish()
    assert int(summary["missing"].sum()) == 2 and not tracker.active


def test_parent_is_marked_simulated_and_experiment_opens_on_runs(synced):
    out, cfg, plan, led, tracker, _ = synced
    from mlflow.tracking import MlflowClient

    from opteval.sweepcore.tracking import ui_command

    client = MlflowClient(tracking_uri=tracker.uri)
    parent = client.get_run(tracker.parent_id)
    assert parent.info.run_name == "trk" and parent.data.tags["opteval.simulated"] == "true"
    assert parent.data.params["samples.complexor"] == "3" and parent.data.params["limit_problems"] == "None"
    exp = client.get_experiment(tracker.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    hint = ui_command(tracker.uri, tracker.experiment_id)
    assert f"#/experiments/{tracker.experiment_id}/runs?workflowType=machine_learning" in hint


def test_resumed_run_duration_leaves_out_idle_time(tmp_path):
    import time

    from mlflow.tracking import MlflowClient

    cfg, res, fp, plan, led = _sweep(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    t0 = time.time()
    first = Tracker(uri, "opteval-idle", "trk", str(tmp_path))
    assert first.start(res, fp, plan_counts(plan).keys())
    first.finish("KILLED")
    time.sleep(5.0)  # idle between a stop and a resume
    second = Tracker(uri, "opteval-idle", "trk", str(tmp_path))
    assert second.start(res, fp, plan_counts(plan).keys())
    assert second.parent_id == first.parent_id
    second.finish()
    wall = time.time() - t0
    assert second.parent_id is not None
    run = MlflowClient(tracking_uri=uri).get_run(second.parent_id)
    active = float(run.data.tags["opteval.active_s"])
    assert run.info.end_time - run.info.start_time == pytest.approx(active * 1000, abs=2)
    assert active <= wall - 4.9, (active, wall)  # the 5 s idle gap is not in the duration
