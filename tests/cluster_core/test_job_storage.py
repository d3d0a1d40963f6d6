"""Under `ray job submit` a relative ledger path would live in a throwaway working dir."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _sweep_module():
    spec = importlib.util.spec_from_file_location("sweep_job", REPO / "jobs" / "sweep.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_relative_output_dir_is_refused_under_ray_job_submit(monkeypatch, capsys, tmp_path):
    sweep = _sweep_module()
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")
    rc = sweep.main(["plan_only=true", "sweep.output_dir=results", "limit_problems=1"])
    err = capsys.readouterr().err
    assert rc == 2 and "sweep.output_dir=results is relative" in err and "s3://" in err
    rc = sweep.main(["plan_only=true", f"sweep.output_dir={tmp_path}", "limit_problems=1", "samples.default=1"])
    assert rc == 0 and "planned 3 trajectories" in capsys.readouterr().out


def test_relative_output_dir_is_fine_outside_a_job(monkeypatch, capsys, tmp_path):
    sweep = _sweep_module()
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.chdir(tmp_path)
    rc = sweep.main(["plan_only=true", "sweep.output_dir=results", "limit_problems=1", "samples.default=1"])
    assert rc == 0 and "planned 3 trajectories" in capsys.readouterr().out
