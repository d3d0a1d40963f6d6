"""SIGINT/SIGTERM before the sweep's event loop runs: record them, stop at the next step.

Why: startup (config, plan, MLflow, ``ray.init``, actors) takes tens of seconds, and a
KeyboardInterrupt raised in the middle of ``ray.init`` can crash the interpreter or leave
half-started processes. So from the driver's first line a signal only *records* itself
(printed at once); :func:`checkpoint` between startup steps raises :class:`Interrupted`,
and the caller undoes what it started and exits 130. Once ``drive`` runs, its event-loop
handlers (``StopState``) take over and see a recorded signal at once.

Installing also overrides an inherited SIG_IGN for SIGINT (a job started from a
non-interactive shell): the user's Ctrl-C / ``kill -INT`` must stop the sweep. No Ray import.
"""
from __future__ import annotations

import signal
import sys
import threading
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A signal arrived during startup; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class _State:
    signum: int | None = None
    step: str = "starting"


STATE = _State()


def _handler(signum: int, frame: Any) -> None:
    first = STATE.signum is None
    STATE.signum = STATE.signum or signum
    if first:
        print(f"[sweep] signal {signum} during startup: stopping after the current step ({STATE.step})",
              file=sys.stderr, flush=True)


def install() -> dict[int, Any] | None:
    """Record SIGINT/SIGTERM from now on; returns the previous handlers (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old = {}
    for sig in SIGNALS:
        old[sig] = signal.getsignal(sig)
        signal.signal(sig, _handler)
    return old


def restore(old: dict[int, Any] | None) -> None:
    """Put back what :func:`install` replaced."""
    if not old or threading.current_thread() is not threading.main_thread():
        return
    for sig, h in old.items():
        signal.signal(sig, h if h is not None else signal.SIG_DFL)


def step(name: str) -> None:
    """Name the startup step about to run (for the message), after checking for a signal."""
    checkpoint()
    STATE.step = name


def checkpoint() -> None:
    """Raise :class:`Interrupted` if a signal was recorded."""
    if STATE.signum is not None:
        raise Interrupted(STATE.signum)


def pending() -> int | None:
    """The recorded signal, if any (``drive`` trips its stop state with it)."""
    return STATE.signum


def reset() -> None:
    """Forget a recorded signal (tests run several sweeps in one process)."""
    STATE.signum, STATE.step = None, "starting"
