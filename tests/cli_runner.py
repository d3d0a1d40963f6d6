"""Run an ``opteval`` job the way the tests do: as a subprocess of this checkout, or in process.

:func:`run` starts ``python jobs/<command>.py ARGS`` (``form="cli"``: ``python -m opteval.jobs.cli
<command> ARGS``, what the ``opteval`` script runs) with this checkout first on ``PYTHONPATH`` (so
it is this tree's code, not whatever opteval is installed) and returns the finished process with
its text output. A test that starts one is in the integration tier (docs/testing.md).

:func:`in_process` calls ``opteval <command> ARGS`` in this process (the job's ``main(argv)``
through ``opteval.jobs.cli.run``) and returns the same shape, its stdout and stderr captured.
What the job's threads, its logging handlers made earlier, or Ray's workers print is not in it:
use ``capsys`` (or a subprocess) for those.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[1]


def command_line(command: str, *args: str, form: Literal["script", "cli"] = "script") -> list[str]:
    """The argv that runs ``opteval <command> ARGS`` with this interpreter."""
    if form == "cli":
        return [sys.executable, "-m", "opteval.jobs.cli", command, *args]
    return [sys.executable, str(REPO / "jobs" / f"{command}.py"), *args]


def job_env(env: Mapping[str, str] | None = None, unset: Iterable[str] = ()) -> dict[str, str]:
    """This process's environment without ``unset``, with ``PYTHONPATH`` = the checkout, then ``env``."""
    out = {k: v for k, v in os.environ.items() if k not in set(unset)}
    out["PYTHONPATH"] = str(REPO)
    out.update(env or {})
    return out


def run(command: str, *args: str, env: Mapping[str, str] | None = None, unset: Iterable[str] = (),
        cwd: Path | str = REPO, timeout: float = 300,
        form: Literal["script", "cli"] = "script") -> subprocess.CompletedProcess[str]:
    """``opteval <command> ARGS`` as a subprocess; stdout and stderr captured as text."""
    return subprocess.run(command_line(command, *args, form=form), cwd=str(cwd), env=job_env(env, unset),
                          capture_output=True, text=True, timeout=timeout)


def in_process(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``opteval <command> ARGS`` in this process: its exit code and what it printed."""
    from opteval.jobs.cli import run as run_job

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run_job(command, list(args))
        except SystemExit as exc:  # argparse's usage errors and --help, as the process would end
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
    return subprocess.CompletedProcess(["opteval", command, *args], code, out.getvalue(), err.getvalue())
