"""The outcome of one run or cell: a pure function of what the server saw.

Why separate: which of ``ok``/``error``/``timeout``/``memory``/``output_limit``/``killed`` a
program gets decides its grade, and the evidence comes from four places (the server's own
kill, the wait status, the child's exit message, the CPU time). Keeping the decision in one
function with no I/O lets a table of cases pin it down (``tests/sandbox/test_outcome.py``).
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from enum import StrEnum

from opteval.evalcore.sandbox.types import ERROR, KILLED, MEMORY, OK, OUTPUT_LIMIT, TIMEOUT, Limits


class KillReason(StrEnum):
    """Why the server killed a run or cell itself (none: the program ended on its own)."""

    WALL = "timeout"  # past the wall-clock deadline
    CPU = "cpu"  # a session cell over its CPU limit (the watchdog)
    OUTPUT = "output"  # stdout + stderr over output_bytes
    LOST = "lost"  # the request could not be delivered to the child
    CANCEL = "cancel"  # the host closed the job's socket


@dataclass(frozen=True)
class Verdict:
    """An outcome with the exit code and the reason to show: what the host's ExecResult carries."""

    outcome: str  # one of types.OUTCOMES
    exit_code: int | None  # the program's exit code; -N for a signal N; None when the server killed it
    reason: str  # why, for ExecResult.note ("" for a clean ok)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def classify(limits: Limits, kill: KillReason | None = None, status: int | None = None,
             code: int | None = None, exc: str | None = None, cpu_s: float = 0.0) -> Verdict:
    """Decide a run's or cell's outcome.

    ``kill``: the server's own kill, which wins over everything else. ``status``: the wait
    status of the child, when it was reaped before the answer (None: it reported and was
    answered first). ``code``/``exc``: from the child's exit message (the program's exit code
    and the class name of the exception that ended it), when it sent one. ``cpu_s``: CPU time
    of the run, to tell a kill on the CPU hard limit from any other SIGKILL.
    """
    if kill is KillReason.WALL:
        return Verdict(TIMEOUT, None, f"wall time limit of {limits.wall_s:g}s exceeded; killed")
    if kill is KillReason.CPU:
        return Verdict(TIMEOUT, None, f"CPU time limit of {limits.cpu_s:g}s exceeded; killed")
    if kill is KillReason.OUTPUT:
        return Verdict(OUTPUT_LIMIT, None, f"output exceeded {int(limits.output_bytes)} bytes; truncated and killed")
    if kill in (KillReason.LOST, KillReason.CANCEL):
        return Verdict(KILLED, None, "the sandbox could not deliver the program")
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = _signal_name(sig)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits.cpu_s):
            return Verdict(TIMEOUT, -sig, f"CPU time limit of {limits.cpu_s:g}s exceeded ({name})")
        if sig == signal.SIGXFSZ:
            return Verdict(ERROR, -sig, f"file size limit of {limits.file_mb:g} MB exceeded ({name})")
        return Verdict(ERROR, -sig, f"killed by signal {name}")
    if code is None and status is not None and os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
    if exc == "MemoryError":
        return Verdict(MEMORY, code, f"MemoryError under the address-space limit of {limits.memory_mb} MB")
    if code == 0:
        return Verdict(OK, 0, "")
    return Verdict(ERROR, code, f"raised {exc}" if exc else f"exited with status {code}")
