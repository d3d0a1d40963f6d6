"""Whole sweeps on the session's Ray: Serve HTTP -> workers -> executors -> grading -> ledger -> MLflow."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pandas as pd
import pytest
import ray

from opteval.cluster.driver import run_sweep
from opteval.cluster.driver.prepare import prepare
from opteval.sweepcore.config import load_config

pytestmark = pytest.mark.ray


def _report_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "jobs" / "report.py"
    spec = importlib.util.spec_from_file_location("report_job", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cfg(h, out, name, port, *extra, **kw):
    return load_config(h.sweep_args(out, name, port, *extra, **kw))


def test_end_to_end_ledger_holds_the_plan_and_mlflow_matches(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    cfg = _cfg(h, tmp_path, "e2e", port)
    assert run_sweep(cfg) == 0
    out = capsys.readouterr().out
    assert "planned 9 trajectories" in out and "SIMULATED" in out and "mlflow ui --backend-store-uri" in out

    prep = prepare(cfg, read_only=True)
    df = h.ledger_frame(tmp_path, "e2e")
    assert sorted(df["key"]) == sorted(it.key for it in prep.plan)
    assert not df["key"].duplicated().any()
    assert df["simulated"].all() and set(df["status"]) <= {"submitted", "no_submission", "error"}
    assert (df["status"] != "error").all(), df[df["status"] == "error"]["error"].tolist()
    assert df["prompt_tokens"].notna().all() and (df["n_calls"] >= 1).all() and (df["n_execs"] >= 1).all()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`opteval.sweep` = 'e2e'")
    children = {(r.data.tags.get("model"), r.data.tags.get("method")): r for r in runs if r.data.tags.get("method")}
    assert set(children) == {("sim-fast", m) for m in ("direct", "opticycle", "optistate")}
    for (model, method), run in children.items():
        sub = df[(df["model"] == model) & (df["method"] == method)]
        assert run.data.metrics["acc/sample"] == pytest.approx(sub["correct"].sum() / 3)
        assert run.data.metrics["planned/sample"] == 3 and run.data.metrics["missing/sample"] == 0
        tokens = (sub["prompt_tokens"] + sub["completion_tokens"]).mean()
        assert run.data.metrics["tokens/sample"] == pytest.approx(tokens)

    # a second run of the same command dispatches nothing and changes nothing
    assert run_sweep(cfg) == 0
    assert len(h.ledger_frame(tmp_path, "e2e")) == len(df)

    # the full report from this ledger: files written, numbers equal the ledger's, logged to MLflow
    capsys.readouterr()
    report = _report_module()
    args = [a for a in h.sweep_args(tmp_path, "e2e", port) if not a.startswith(("serving.", "progress."))]
    assert report.main([*args, "--sync-mlflow", "--compare", "direct,opticycle"]) == 0
    text = capsys.readouterr().out
    assert "Paired comparison: direct vs opticycle" in text and "planned 9 trajectories, committed 9" in text
    out_dir = tmp_path / "e2e" / "report"
    for name in ("report.md", "main_table.csv", "main_table.tex", "tables/failures.csv"):
        assert (out_dir / name).stat().st_size > 0, name
    pngs = list((out_dir / "plots").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    table = pd.read_csv(out_dir / "main_table.csv")
    for method in ("direct", "opticycle", "optistate"):
        row = table[table["method"].str.startswith(method)].iloc[0]
        sub = df[df["method"] == method]
        assert float(row["sample"]) == pytest.approx(100 * sub["correct"].mean(), abs=0.05)
    parent = [r for r in client.search_runs([exp.experiment_id], filter_string="tags.`opteval.sweep` = 'e2e'")
              if not r.data.tags.get("method")][0]
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/report.md" in logged and "report/main_table.csv" in logged


@pytest.mark.faults  # slow tier (.ci/run: -m faults)
def test_killing_an_executor_and_a_worker_loses_nothing(ray_cluster, h, tmp_path, configs_dir, monkeypatch):
    _, port = ray_cluster
    monkeypatch.setenv("OPTEVAL_CONFIGS", str(configs_dir))
    name = "killactors"
    cfg = _cfg(h, tmp_path, name, port, "cluster.retries=3", models="[sim-slow]", methods="[direct,opticycle]",
               limit=4, samples=2)
    result: dict[str, int] = {}
    t = threading.Thread(target=lambda: result.setdefault("rc", run_sweep(cfg)), daemon=True)
    t.start()
    h.wait_for(lambda: h.committed_files(tmp_path, name), 180, "a first committed batch")
    ray.kill(ray.get_actor(f"opteval/{name}/executor-0", namespace="opteval"), no_restart=False)
    ray.kill(ray.get_actor(f"opteval/{name}/worker-0", namespace="opteval"), no_restart=False)
    t.join(300)
    assert not t.is_alive()

    plan = prepare(cfg, read_only=True).plan
    df = h.ledger_frame(tmp_path, name)
    assert result["rc"] == (4 if (df["status"] == "error").any() else 0)  # error rows: exit 4
    assert sorted(df["key"]) == sorted(it.key for it in plan)  # nothing lost
    assert not df["key"].duplicated().any()  # nothing twice
    retried = int((df["attempts"] - 1).sum())
    errors = int((df["status"] == "error").sum())
    assert retried + errors >= 1, "the killed actors' trajectories must show up as retries or errors"
    assert (df.loc[df["status"] == "error", "error"].str.len() > 0).all()


def test_changed_config_is_refused_and_bad_key_names_its_path(ray_cluster, h, tmp_path):
    _, port = ray_cluster
    args = h.sweep_args(tmp_path, "guard", port, methods="[direct]", limit=1)
    assert run_sweep(load_config(args)) == 0
    env = dict(os.environ, PYTHONPATH=str(h.repo))
    changed = subprocess.run([sys.executable, str(h.sweep_py), *args, "samples.default=2", "plan_only=true"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert changed.returncode != 0
    assert "different configuration" in changed.stderr and "samples.default" in changed.stderr
    bad = subprocess.run([sys.executable, str(h.sweep_py), "plan_only=true", "cluster.wrokers=3"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "cluster.wrokers" in bad.stderr
    ok = subprocess.run([sys.executable, str(h.sweep_py), *args, "plan_only=true"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0 and "planned 1 trajectories" in ok.stdout
    assert "already committed: 1" in ok.stdout


def test_plan_only_never_imports_ray(h, tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from opteval.jobs.sweep import main; "
            "rc = main(sys.argv[2:]); assert 'ray' not in sys.modules, 'plan_only imported ray'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, str(h.repo), "plan_only=true", "sweep.name=planonly",
                        f"sweep.output_dir={tmp_path}", "methods=[direct,optistate]", "limit_problems=5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "planned 20 trajectories"
    assert "sim-small x direct: 10 planned, 0 committed" in r.stdout
    assert not (tmp_path / "planonly").exists() or not any((tmp_path / "planonly").rglob("*.parquet"))
