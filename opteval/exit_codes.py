"""The exit codes of every opteval command, in one place.

Why one enum: the codes were defined fourteen times in seven modules (130 three times, 2 four
times); a script that drives opteval (a scheduler retrying on 5 or 6, CI treating 4 apart) needs
one vocabulary. The README's table and docs/errors.md are checked against it
(tests/cli/test_exit_codes.py). Values never change: other tools depend on them.
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a command's exit status means; ``str(code)`` is the number."""

    OK = 0
    """done (also ``--help`` and ``plan_only=true``)"""
    FAILED = 1
    """a command other than the sweep failed after starting (a build, MLflow unreachable for
    ``view --mlflow``); its last line says why"""
    USAGE = 2
    """bad input: one line naming the key, file or refused model; a damaged ledger file; a lease
    another driver holds"""
    COMMIT = 3
    """a commit failed (disk full, permissions, object store): the path and cause are named"""
    UNAVAILABLE = 3
    """alias of COMMIT for ``serve`` and ``models``: what the command needs is not installed here
    (vLLM, the model build tools); the line names how to get it"""
    ERROR_ROWS = 4
    """the sweep finished with ``status=error`` rows"""
    STARTUP = 5
    """Ray (or Serve) did not start, or the local cluster the sweep started stopped under it"""
    ENDPOINT = 6
    """a served model's endpoint gave no proper answer to the preflight: rerun when it answers"""
    INTERRUPTED = 130
    """interrupted (SIGINT/SIGTERM): what finished is committed; the same command resumes"""

    def __str__(self) -> str:
        return str(int(self))


SWEEP_CODES = (ExitCode.OK, ExitCode.USAGE, ExitCode.COMMIT, ExitCode.ERROR_ROWS, ExitCode.STARTUP,
               ExitCode.ENDPOINT, ExitCode.INTERRUPTED)
"""The codes ``opteval sweep`` exits with (the README's table lists exactly these)."""
