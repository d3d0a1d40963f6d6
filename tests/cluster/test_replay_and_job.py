"""Two user paths no other test covers: a replayed run through the whole sweep, and ``ray job submit``.

Replay: ``backend: replay`` reproduces a run without a model. The worker binds the
replay model to each (problem, sample) with ``for_problem``; the ledger's outcomes must then be
exactly what the recorded completions imply, tokens that were never reported stay null (not 0),
the rows are not marked simulated, and a planned problem the recording lacks ends as a listed
``error`` row instead of hanging.

Job submit: what a user runs on a cluster, ``ray job submit --working-dir . -- python
jobs/sweep.py ...``, against a throwaway head of our own (its own temp dir and ports), killed by
the PIDs it started so no other Ray cluster on the machine is touched.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from opteval.cluster.driver import run_sweep
from opteval.cluster.driver.prepare import prepare
from opteval.evalcore.data import reference_program
from opteval.sweepcore.config import load_config

pytestmark = pytest.mark.ray

MODEL = "replay-test"
PROBLEMS = ["sample-0001", "sample-0002", "sample-0003"]  # the first 3 (limit_problems picks them)
MISSING = "sample-0004"  # planned by limit_problems=4 but absent from the recording
WRONG_VALUE = -98765.4321
WRONG = f"```python\nsubmit({WRONG_VALUE})\n```"
NO_CODE = "I would model this as a linear program, but I will not write the code."


def _fenced(program: str) -> str:
    return f"Here is the model.\n\n```python\n{program}\n```\n"


# (problem, sample) -> (completion, expected status, expected correct)
def _recording() -> dict[tuple[str, int], tuple[str, str, bool]]:
    found = {pid: reference_program(pid) for pid in PROBLEMS}
    ref = {pid: prog for pid, prog in found.items() if prog}
    assert len(ref) == len(found), f"reference programs missing for {sorted(set(found) - set(ref))}"
    return {
        ("sample-0001", 0): (_fenced(ref["sample-0001"]), "submitted", True),
        ("sample-0001", 1): (_fenced(ref["sample-0001"]), "submitted", True),
        ("sample-0002", 0): (_fenced(ref["sample-0002"]), "submitted", True),
        ("sample-0002", 1): (WRONG, "submitted", False),
        ("sample-0003", 0): (WRONG, "submitted", False),
        ("sample-0003", 1): (NO_CODE, "no_submission", False),
    }


@pytest.fixture()
def replay_model(tmp_path) -> tuple[Path, dict]:
    """A model YAML ``replay-test.yaml`` (given to the sweep by its path) pointing at a fresh recording."""
    rec = _recording()
    path = tmp_path / "recorded.jsonl"
    with path.open("w") as fh:
        for (pid, sample), (text, _, _) in rec.items():
            fh.write(json.dumps({"id": pid, "sample": sample, "call": 0, "completion": text}) + "\n")
    model = tmp_path / f"{MODEL}.yaml"
    model.write_text(
        f"name: {MODEL}\nbackend: replay\nfamily: replay\nsize_b: null\nreplay: {{path: {json.dumps(str(path))}}}\n"
        "sampling: {}\n")
    return model, rec


def test_replay_sweep_reproduces_the_recorded_outcomes(ray_cluster, h, tmp_path, replay_model, capsys):
    _, port = ray_cluster
    model, rec = replay_model
    name = "replay"
    cfg = load_config(h.sweep_args(tmp_path, name, port, "tracking.enabled=false", "cluster.retries=1",
                                   models=f"[{model}]", methods="[direct]", limit=4, samples=2))
    start = time.monotonic()
    assert run_sweep(cfg) == 4  # the problem the recording lacks leaves status=error rows
    wall = time.monotonic() - start
    out, err = capsys.readouterr()
    assert "sweep ended with 2 status=error row(s) (exit 4)" in err and "no recorded completion" in err
    assert "planned 8 trajectories" in out
    assert wall < 240, f"the sweep took {wall:.0f}s: a missing recording must fail fast, not hang"

    df = h.ledger_frame(tmp_path, name)
    plan = prepare(cfg, read_only=True).plan
    assert sorted(df["key"]) == sorted(it.key for it in plan) and len(df) == 8
    assert not df["simulated"].any(), "replayed rows must not be marked simulated"

    got = {(r.problem_id, int(r.sample)): r for r in df.itertuples(index=False)}
    for (pid, sample), (_, status, correct) in rec.items():
        row = got[(pid, sample)]
        assert (row.status, bool(row.correct)) == (status, correct), (pid, sample, row.status, row.error)
        assert row.n_calls == 1 and row.attempts == 1 and row.model == MODEL and row.method == "direct"
        if status == "submitted":
            assert row.n_execs == 1
        if not correct and status == "submitted":
            assert row.submission_value == pytest.approx(WRONG_VALUE)
    # the recording has no usage: counts are unknown (null), never a made-up 0
    replayed = df[df["problem_id"].isin(PROBLEMS)]
    for col in ("prompt_tokens", "completion_tokens"):
        assert replayed[col].isna().all(), f"{col} should be null, got {replayed[col].tolist()}"

    # a planned problem the recording lacks: a listed error row per sample, retried, never correct
    missing = df[df["problem_id"] == MISSING]
    assert sorted(missing["sample"].astype(int)) == [0, 1]
    assert (missing["status"] == "error").all() and not missing["correct"].any()
    assert (missing["attempts"] == 2).all()  # cluster.retries=1
    assert missing["error"].str.contains("no recorded completion").all(), missing["error"].tolist()
    assert int(df["correct"].sum()) == sum(c for _, _, c in rec.values())


# -- ray job submit against a throwaway head ------------------------------------------------------

JOB_TIMEOUT_S = 240


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line), from /proc (psutil is not a dependency)."""
    out: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d)] = (ppid, cmd)
    return out


def _head_pids(temp_dir: str, gcs_port: int) -> set[int]:
    """Every process of OUR head: the daemons name its temp dir (or its GCS port), the rest descend from them.

    Why not ``ray stop``: it stops every Ray on the machine, other engineers' test clusters included.
    """
    procs = _proc_table()
    found = {pid for pid, (_, cmd) in procs.items()
             if temp_dir in cmd or (f":{gcs_port} " in cmd + " " and "ray" in cmd)}
    found.discard(os.getpid())
    frontier = set(found)
    while frontier:
        frontier = {pid for pid, (ppid, _) in procs.items() if ppid in frontier and pid not in found}
        found |= frontier
    return found


def _kill_head(temp_dir: str, gcs_port: int) -> set[int]:
    """SIGTERM, then SIGKILL what is left; returns the pids still alive afterwards (should be none)."""
    for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 3.0)):
        for pid in _head_pids(temp_dir, gcs_port):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while _head_pids(temp_dir, gcs_port) and time.monotonic() < deadline:
            time.sleep(0.2)
    return _head_pids(temp_dir, gcs_port)


def _ray_cli() -> list[str]:
    exe = shutil.which("ray")
    return [exe] if exe else [sys.executable, "-m", "ray.scripts.scripts"]


def _working_copy(repo: Path, dest: Path) -> Path:
    """The checkout as a user has it (no .git), plus a gitignored ``results/`` that must not be uploaded."""
    shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(".git", "results", "__pycache__", ".pytest_cache"))
    (dest / "results" / "old").mkdir(parents=True)
    (dest / "results" / "old" / "junk.bin").write_bytes(os.urandom(3 << 20))
    return dest


@pytest.mark.faults  # slow tier (.ci/run: -m faults)
def test_ray_job_submit_runs_the_sweep_on_a_cluster(h, tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="rjob", dir="/tmp")  # short: Ray's socket paths must stay < 108 chars
    gcs, dash, client, agent, http = (_free_port() for _ in range(5))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)  # the job must find our code through its working_dir alone
    wd = _working_copy(h.repo, tmp_path / "checkout")
    out = tmp_path / "out"
    t0 = time.monotonic()
    try:
        start = subprocess.run(
            [*_ray_cli(), "start", "--head", f"--port={gcs}", f"--dashboard-port={dash}", "--include-dashboard=true",
             "--dashboard-host=127.0.0.1", f"--ray-client-server-port={client}",
             f"--dashboard-agent-listen-port={agent}", "--num-cpus=2", f"--temp-dir={ray_tmp}",
             '--resources={"opteval_executor": 2}',  # executor slots: a CPU node offers them
             "--disable-usage-stats"],
            env=env, capture_output=True, text=True, timeout=120)
        assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
        t_started = time.monotonic()

        args = ["methods=[direct]", "limit_problems=2", "samples.default=1", f"sweep.output_dir={out}",
                "sweep.name=jobcheck", "tracking.enabled=false", f"serving.http_port={http}", "progress.interval_s=2",
                "cluster.workers=1", "cluster.executors=1"]
        job = subprocess.run(
            [*_ray_cli(), "job", "submit", "--working-dir", ".", "--", "python", "jobs/sweep.py", *args],
            cwd=str(wd), env=dict(env, RAY_ADDRESS=f"http://127.0.0.1:{dash}"),
            capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        log = job.stdout[-4000:] + job.stderr[-3000:]
        print(f"ray start {t_started - t0:.1f}s, job {time.monotonic() - t_started:.1f}s")
        assert job.returncode == 0 and "succeeded" in log, log
        assert "planned 2 trajectories" in job.stdout, log

        df = h.ledger_frame(out, "jobcheck")
        plan = prepare(load_config(args), read_only=True).plan
        assert sorted(df["key"]) == sorted(it.key for it in plan) and len(df) == 2
        assert (df["status"] != "error").all(), df["error"].tolist()

        # the upload honoured .gitignore: results/ stayed home and the package is small
        pkgs = [p for p in Path(ray_tmp).glob("session_latest/runtime_resources/working_dir_files/_ray_pkg_*")
                if p.is_dir()]
        assert len(pkgs) == 1, pkgs
        files = [p for p in pkgs[0].rglob("*") if p.is_file()]
        assert (pkgs[0] / "jobs" / "sweep.py").is_file() and (pkgs[0] / "cluster" / "driver" / "run.py").is_file()
        assert not any(p.relative_to(pkgs[0]).parts[0] == "results" for p in files)
        size = sum(p.stat().st_size for p in files)
        assert size < 20 << 20, f"uploaded {size / 2**20:.1f} MiB (Ray's limit is 100 MiB)"
    finally:
        t_kill = time.monotonic()
        left = _kill_head(ray_tmp, gcs)
        print(f"teardown {time.monotonic() - t_kill:.1f}s")
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not left, f"processes of the throwaway head survived: {sorted(left)}"
