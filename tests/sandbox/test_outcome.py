"""The outcome classifier, case by case: no processes, only the evidence the server would have."""
from __future__ import annotations

import signal

import pytest

from opteval.evalcore.sandbox import ERROR, KILLED, MEMORY, OK, OUTPUT_LIMIT, TIMEOUT, Limits
from opteval.evalcore.sandbox.forkserver.outcome import KillReason, classify

LIM = Limits(wall_s=2, cpu_s=3, memory_mb=512, output_bytes=100, file_mb=1)


def exited(code: int) -> int:
    return code << 8  # a wait status for a normal exit


def signalled(sig: int) -> int:
    return int(sig)  # a wait status for death by a signal (no core dump)


CASES = [
    # (name, kwargs, outcome, exit_code, words in the reason)
    ("clean exit", {"code": 0}, OK, 0, ""),
    ("exit message wins over the status", {"code": 0, "status": exited(3)}, OK, 0, ""),
    ("status only", {"status": exited(0)}, OK, 0, ""),
    ("non-zero exit", {"code": 5}, ERROR, 5, "exited with status 5"),
    ("raised", {"code": 1, "exc": "ZeroDivisionError"}, ERROR, 1, "raised ZeroDivisionError"),
    ("MemoryError", {"code": 1, "exc": "MemoryError"}, MEMORY, 1, "512 MB"),
    ("segfault", {"status": signalled(signal.SIGSEGV)}, ERROR, -11, "SIGSEGV"),
    ("SIGXCPU", {"status": signalled(signal.SIGXCPU)}, TIMEOUT, -signal.SIGXCPU, "CPU time limit of 3s"),
    ("SIGKILL at the CPU hard limit", {"status": signalled(signal.SIGKILL), "cpu_s": 3.5}, TIMEOUT, -9, "CPU"),
    ("SIGKILL below the CPU limit", {"status": signalled(signal.SIGKILL), "cpu_s": 0.5}, ERROR, -9, "SIGKILL"),
    ("SIGXFSZ", {"status": signalled(signal.SIGXFSZ)}, ERROR, -signal.SIGXFSZ, "file size limit of 1 MB"),
    ("unknown signal number", {"status": signalled(63)}, ERROR, -63, "signal 63"),
    ("wall kill wins over a signal", {"kill": KillReason.WALL, "status": signalled(signal.SIGKILL)}, TIMEOUT, None,
     "wall time limit of 2s"),
    ("CPU watchdog", {"kill": KillReason.CPU, "status": signalled(signal.SIGKILL)}, TIMEOUT, None, "CPU time limit"),
    ("output cap wins over a clean exit", {"kill": KillReason.OUTPUT, "code": 0}, OUTPUT_LIMIT, None, "100 bytes"),
    ("request lost", {"kill": KillReason.LOST}, KILLED, None, "could not deliver"),
    ("host cancelled", {"kill": KillReason.CANCEL}, KILLED, None, "could not deliver"),
    ("nothing known", {}, ERROR, None, "exited with status None"),
]


@pytest.mark.parametrize(("kwargs", "outcome", "exit_code", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classify(kwargs, outcome, exit_code, words):
    verdict = classify(LIM, **kwargs)
    assert (verdict.outcome, verdict.exit_code) == (outcome, exit_code)
    assert words in verdict.reason
    assert (verdict.reason == "") == (outcome == OK)
