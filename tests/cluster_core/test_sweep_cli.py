"""jobs/sweep.py on bad input and before Ray starts: one line naming the key, exit 2; plan_only
without data; missing benchmarks fetched from a mirror; signals during startup exit 130.
No Ray is started by these tests (they stop before it, or the signal stops the run first)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "jobs" / "sweep.py"
PAPER = REPO / "configs" / "sweeps" / "paper.yaml"


def _run(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("OPTEVAL_DATA", "OPTEVAL_DATA_BASE_URL")}
    e.update(env or {}, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(SWEEP), *args], cwd=REPO, env=e, capture_output=True, text=True,
                          timeout=timeout)


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("config error: "), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_unbracketed_list_names_the_key_and_the_fix():
    _one_line_error(_run("models=sim-small", "plan_only=true"), "models:", "models=[sim-small]")


def test_unwritable_output_dir_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    _one_line_error(_run(f"sweep.output_dir={tmp_path / 'afile' / 'sub'}"), "sweep.output_dir", "afile")


def test_missing_data_without_fetch_names_every_benchmark_and_the_command(tmp_path):
    line = _one_line_error(_run("benchmarks=[nl4opt,complexor]", f"data.dir={tmp_path / 'none'}",
                                f"sweep.output_dir={tmp_path / 'out'}", "data.fetch_missing=false"),
                           "nl4opt", "complexor", "opteval data fetch nl4opt complexor")
    assert "data.fetch_missing" in line


def test_failed_fetch_is_one_line_pointing_at_offline_options(tmp_path):
    _one_line_error(_run("benchmarks=[complexor]", f"data.dir={tmp_path / 'none'}", f"sweep.output_dir={tmp_path / 'o'}",
                         f"data.base_url={(tmp_path / 'no-mirror').as_uri()}"),
                    "data.fetch_missing", "complexor", "--base-url file://", "OPTEVAL_DATA")


def test_plan_only_without_data_counts_from_the_registry(tmp_path):
    r = _run(str(PAPER), "plan_only=true", f"data.dir={tmp_path / 'none'}", f"sweep.output_dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == "planned 589116 trajectories"
    assert "Qwen3-4B x opticycle: 17852 planned" in r.stdout
    assert "opteval data fetch mamo_easy optibench" in r.stdout
    assert not (tmp_path / "none").exists()  # plan_only never downloads


def test_missing_benchmarks_are_fetched_from_a_mirror_before_planning(shared_benchmarks, tmp_path):
    from opteval.jobs.sweep import ensure_data, missing_benchmarks
    from opteval.sweepcore.config import load_config

    ddir = tmp_path / "data"
    cfg = load_config(["benchmarks=[complexor,sample]", f"data.dir={ddir}",
                       f"data.base_url={shared_benchmarks.as_uri()}"])
    assert missing_benchmarks(cfg) == ["complexor"]
    ensure_data(cfg)
    assert (ddir / "complexor.jsonl").read_bytes() == (shared_benchmarks / "complexor.jsonl").read_bytes()
    assert missing_benchmarks(cfg) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_startup_stops_the_run_with_130(tmp_path, sig):
    """Sent to the whole process group as the first line is printed (the config read, Ray not yet
    started): a fixed point of start-up, not a fixed second, which on a slow machine fell inside
    ``ray.init`` (that case: tests/cluster_core/test_startup_watchdog.py and the faults tier)."""
    e = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, str(SWEEP), f"sweep.output_dir={tmp_path}", "serving.http_port=1",
                          "tracking.enabled=false", "sweep.name=sig"], cwd=REPO, env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert p.stdout is not None
    first = p.stdout.readline()
    os.killpg(p.pid, sig)
    out, _ = p.communicate(timeout=120)
    out = first + out
    assert p.returncode == 130, out[-3000:]
    assert "interrupted during startup" in out and "Traceback" not in out
    assert "Started a local Ray instance" not in out


def test_a_sigterm_inside_ray_init_is_an_interrupted_startup(tmp_path, monkeypatch, capsys):
    """ray.init installs its own SIGTERM handler (sys.exit(15)) before it starts the cluster; a
    SIGTERM landing there must end like any startup signal: exit 130, the lease released."""
    import opteval.cluster.driver.run as run
    from opteval.sweepcore.config import load_config

    def sigterm_in_ray_init(address, **_):
        raise SystemExit(signal.SIGTERM)  # what Ray's handler does

    monkeypatch.setattr(run, "connect", sigterm_in_ray_init)
    cfg = load_config([f"sweep.output_dir={tmp_path}", "sweep.name=sigray", "tracking.enabled=false",
                       "methods=[direct]", "limit_problems=1", "samples.default=1"])
    assert run.run_sweep(cfg) == 130
    assert "interrupted during startup (signal 15)" in capsys.readouterr().out
    assert not (tmp_path / "sigray" / "lease.json").exists()


def test_readme_ledger_snippets_divide_by_the_planned_trajectories(tmp_path):
    """docs/results.md's pandas and duckdb snippets, run as written on a ledger with missing rows,
    give avg@k over the planned trajectories (the report's rule), not over the committed ones."""
    import re

    from opteval.evalcore.records import Submission, Trajectory
    from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
    from opteval.sweepcore.ledger import Ledger, trajectory_row
    from opteval.sweepcore.plan import expand_plan

    cfg = load_config([f"sweep.output_dir={tmp_path}", "sweep.name=try1", "methods=[direct]", "samples.default=2"])
    res = resolved(cfg)
    plan = expand_plan(cfg, {"sample": ["p1", "p2"]})  # 4 planned
    led = Ledger.open(str(tmp_path), "try1", res, sweep_fingerprint(res))
    led.record_plan(plan)
    rows = [trajectory_row(Trajectory(model=p.model, method=p.method, benchmark=p.benchmark, problem_id=p.problem_id,
                                      sample=p.sample, seed=42, status="submitted", submission=Submission(raw=1.0)),
                           key=p.key, correct=True, profile="optagentbench", fingerprint=p.fingerprint, sweep="try1",
                           parsed=1.0) for p in plan[:2]]  # 2 committed (both right), 2 missing
    led.commit(rows)
    readme = (REPO / "docs" / "results.md").read_text()  # the README's snippets live there now
    part = readme[readme.index("Reading the ledger yourself"):]
    blocks = re.findall(r"```python\n(.*?)```", part, re.S)[:2]
    assert "plan.parquet" in blocks[0] and "plan.parquet" in blocks[1]
    ns: dict = {}
    exec(compile(blocks[0].replace("results/try1", str(tmp_path / "try1")), "README-pandas", "exec"), ns)
    exec(compile(blocks[0].replace("results/try1", str(tmp_path / "try1")).rsplit("\n", 2)[0] +
                 "\nacc = (correct.reindex(planned.index, fill_value=0) / planned)\n", "README-pandas", "exec"), ns)
    assert list(ns["acc"]) == [0.5]
    found = re.search(r'duckdb.sql\("""(.*?)"""\)', blocks[1], re.S)
    assert found is not None, "the README's duckdb example"
    sql = found.group(1).replace("results/try1", str(tmp_path / "try1"))
    import duckdb

    rel = duckdb.sql(sql)
    assert rel is not None and rel.fetchall() == [("sim-small", "direct", "sample", 0.5, 4, 2)]
