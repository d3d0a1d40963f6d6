"""MLflow started in the background: while it is down the sweep is not held up, it is retried
with backoff, and once up the results are logged from the ledger; the end line says whether
MLflow holds everything (real SQLite MLflow; the outage is injected into the first attempts)."""
from __future__ import annotations

from opteval.sweepcore.plan import plan_counts
from opteval.sweepcore.tracking import BackgroundStart, Tracker, end_line, run_metrics
from tests.sweepcore.test_tracking import _sweep


def test_down_then_up_is_retried_and_resynced_from_the_ledger(tmp_path, monkeypatch, capsys):
    cfg, res, fp, plan, led = _sweep(tmp_path)
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "opteval-test", "trk", str(tmp_path))
    real = Tracker._start
    tries: list[int] = []

    def flaky(self, *args):
        tries.append(1)
        if len(tries) <= 2:
            raise ConnectionError("connection refused (MLflow still starting)")
        return real(self, *args)

    monkeypatch.setattr(Tracker, "_start", flaky)
    bg = BackgroundStart(tracker, res, fp, plan_counts(plan).keys(), backoff_s=0.05).begin()
    assert not tracker.active  # returned at once: the sweep does not wait for MLflow
    tracker.progress("sim-small", "direct", 1, 1)  # while down: a no-op, no warning, no error
    assert bg.wait(120) and tracker.active and bg.attempts == 3
    summary = tracker.log_results(led.read_table(), led.read_plan())
    bg.stop()
    tracker.finish()
    out = capsys.readouterr().out
    assert "is not reachable (ConnectionError" in out and "is up after 3 attempts" in out
    line = end_line(tracker)
    assert line is not None and line.startswith("[sweep] MLflow holds every result")
    run = tracker.client.get_run(tracker.children[("sim-small", "direct")])
    want = run_metrics(summary, "sim-small", "direct")
    assert {k: run.data.metrics[k] for k in want} == want  # what the ledger says, committed while down too


def test_down_for_the_whole_run_says_so_with_the_relog_command(tmp_path, monkeypatch):
    cfg, res, fp, plan, led = _sweep(tmp_path)
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "opteval-test", "trk", str(tmp_path))

    def down(self, *args):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(Tracker, "_start", down)
    bg = BackgroundStart(tracker, res, fp, plan_counts(plan).keys(), backoff_s=0.05).begin()
    assert not bg.wait(0.5)
    bg.stop()
    summary = tracker.log_results(led.read_table(), led.read_plan())  # still computed from the ledger
    assert int(summary["missing"].sum()) == 2
    line = end_line(tracker)
    assert line is not None and "does NOT hold all results" in line and "--sync-mlflow" in line
    assert "ConnectionError" in line and not tracker.active
