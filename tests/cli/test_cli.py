"""The ``opteval`` command: every job is a subcommand, arguments and exit codes pass through
unchanged, and ``python jobs/<job>.py`` (what ``ray job submit`` runs) stays the same program.

The installed ``opteval`` script may belong to another checkout, so these tests run this
checkout's module (``python -m opteval.jobs.cli``) with ``PYTHONPATH`` set to it. No Ray is started:
``plan_only`` and bad input stop before it."""
from __future__ import annotations

import ast
import importlib
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from opteval.jobs import cli

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "jobs" / "sweep.py"


def _run(args: list[str], cwd: Path = REPO, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPTEVAL_DATA", "OPTEVAL_DATA_BASE_URL", "OPTEVAL_CONFIGS")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _jobs_with_main() -> set[str]:
    """jobs/*.py that define ``main`` (read, not imported), the CLI itself aside."""
    out = set()
    for path in (REPO / "jobs").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.stem != "cli" and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            out.add(path.stem)
    return out


def _in_process(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        return int(exc.code or 0)


def test_every_job_is_a_subcommand():
    assert set(cli.COMMANDS) == _jobs_with_main()


def test_help_lists_every_subcommand_with_a_line():
    r = _run(["-m", "opteval.jobs.cli", "--help"])
    assert r.returncode == 0, r.stderr
    listed = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("  ")}
    assert set(listed) == set(cli.COMMANDS)
    for line in listed.values():
        assert len(line.split(None, 1)[1]) > 20, line  # a description, not just the name


def test_no_command_or_an_unknown_one_is_a_usage_error(capsys):
    assert _in_process([]) == 2
    assert "usage: opteval" in capsys.readouterr().err
    assert _in_process(["swep"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("opteval: unknown command 'swep'") and "sweep" in err and "\n" not in err


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_each_command_has_help(command, capsys):
    assert _in_process([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"opteval {command}" in out or f"jobs/{command}.py" in out, out[:500]
    assert len(out.splitlines()) >= 3


def test_sweep_help_explains_the_argument_forms_and_lists_the_sections(capsys):
    assert _in_process(["sweep", "--help"]) == 0
    out = capsys.readouterr().out
    assert "[CONFIG.yaml] [key=value ...]" in out and "models=[sim-small" in out
    sections = [line.split()[0] for line in out.split("Top-level sections")[1].splitlines()[1:]
                if line.startswith("  ") and not line.startswith("   ")]
    for key in ("sweep", "models", "methods", "benchmarks", "samples", "data", "cluster", "serving", "tracking"):
        assert key in sections, sections
    assert "exit" in out.lower() and "130" in out  # the exit codes stay in the help


def test_python_m_the_job_module_gives_the_same_help():
    r = _run(["-m", "opteval.jobs.sweep", "--help"])
    assert r.returncode == 0 and "Top-level sections" in r.stdout, r.stderr[-2000:]


def test_opteval_sweep_is_python_jobs_sweep(tmp_path):
    args = ["plan_only=true", f"sweep.output_dir={tmp_path}"]
    script = _run([str(SWEEP), *args])
    command = _run(["-m", "opteval.jobs.cli", "sweep", *args])
    assert script.returncode == command.returncode == 0, script.stderr[-2000:] + command.stderr[-2000:]
    assert script.stdout.startswith("planned 276 trajectories"), script.stdout
    assert command.stdout == script.stdout


def test_a_bad_key_exits_2_with_the_same_one_line_either_way(tmp_path):
    args = ["plan_only=true", "no_such_section.key=1", f"sweep.output_dir={tmp_path}"]
    script = _run([str(SWEEP), *args])
    command = _run(["-m", "opteval.jobs.cli", "sweep", *args])
    assert script.returncode == command.returncode == 2
    lines = command.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: ") and "no_such_section" in lines[0], command.stderr
    assert command.stderr == script.stderr and command.stdout == script.stdout == ""


def _catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler for ``sig`` (Linux: SigCgt in /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) >> (sig - 1) & 1)


def test_an_interrupt_during_startup_exits_130_through_the_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "opteval.jobs.cli", "sweep", f"sweep.output_dir={tmp_path}",
                          "serving.http_port=1",
                          "tracking.enabled=false", "sweep.name=sig"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    # the sweep's handlers are in once SIGTERM is caught (Python itself only catches SIGINT)
    while not _catches(p.pid, signal.SIGTERM) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 130, out[-3000:]
    assert "interrupted during startup" in out and "Traceback" not in out


def test_the_script_runs_from_another_directory(tmp_path):
    """Repo-relative paths (the positional YAML, configs/) do not depend on the working directory."""
    r = _run([str(SWEEP), "configs/sweeps/paper.yaml", "plan_only=true", f"data.dir={tmp_path / 'none'}",
              f"sweep.output_dir={tmp_path / 'out'}"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("planned 589116 trajectories"), r.stdout[:500]


def test_project_scripts_names_an_importable_callable():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"opteval"}
    module, _, attr = scripts["opteval"].partition(":")
    target = getattr(importlib.import_module(module), attr)
    assert callable(target) and target is cli.main


def test_jobs_and_runtime_leave_sys_path_alone():
    """The package is installed (pip install -e .; the images do the same): no script edits sys.path."""
    files = [*sorted((REPO / "jobs").glob("*.py")), REPO / "cluster" / "runtime.py"]
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
                pytest.fail(f"{path.relative_to(REPO)}:{node.lineno}: sys.path")
