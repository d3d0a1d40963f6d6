"""SIGINT/SIGTERM for the whole sweep: recorded during startup, then the event loop's stop state.

Startup (config, plan, MLflow, ``ray.init``, actors) takes tens of seconds, and a
KeyboardInterrupt raised in the middle of ``ray.init`` can crash the interpreter or leave
half-started processes. So from the driver's first line a signal only *records* itself
(printed at once); :func:`checkpoint` between startup steps raises :class:`Interrupted`,
and the caller undoes what it started and exits 130. Once ``drive`` runs, its event-loop
handlers (:class:`StopState`) take over and see a recorded signal at once: the first
signal stops dispatching and lets the trajectories in flight finish and commit; a second
one abandons those in flight. After an interrupted loop, :func:`quiet_signals` makes a
further signal exit 130 at once with one line.

Installing also overrides an inherited SIG_IGN for SIGINT (a job started from a
non-interactive shell): the user's Ctrl-C / ``kill -INT`` must stop the sweep. No Ray import.
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from opteval.exit_codes import ExitCode

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_INTERRUPTED = ExitCode.INTERRUPTED


# -- during startup -----------------------------------------------------------------------


class Interrupted(Exception):
    """A signal arrived during startup; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class _State:
    signum: int | None = None
    step: str = "starting"
    finishing: bool = False  # past the last trajectory: results committed, the tables and traces being written


STATE = _State()


def _handler(signum: int, frame: Any) -> None:
    first = STATE.signum is None
    STATE.signum = STATE.signum or signum
    if first and STATE.finishing:
        print(f"[sweep] signal {signum} after the last trajectory ({STATE.step}): every result is committed; "
              "skipping what is left to log, exit 130", file=sys.stderr, flush=True)
    elif first:
        print(f"[sweep] signal {signum} during startup: stopping after the current step ({STATE.step})",
              file=sys.stderr, flush=True)


def install() -> dict[int, Any] | None:
    """Record SIGINT/SIGTERM from now on; returns the previous handlers (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old: dict[int, Any] = {}
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


def finishing(name: str) -> None:
    """Past the last trajectory (``name``: what is being written): a signal from now on is
    recorded and said as such, not as a startup step; the caller exits 130 once the results,
    all committed already, are printed."""
    STATE.step, STATE.finishing = name, True


def checkpoint() -> None:
    """Raise :class:`Interrupted` if a signal was recorded."""
    if STATE.signum is not None:
        raise Interrupted(STATE.signum)


def pending() -> int | None:
    """The recorded signal, if any (``drive`` trips its stop state with it)."""
    return STATE.signum


def reset() -> None:
    """Forget a recorded signal (tests run several sweeps in one process)."""
    STATE.signum, STATE.step, STATE.finishing = None, "starting", False


STUCK_GRACE_S = 1.0  # how long the main thread has to notice a signal before the watchdog ends the run


@contextlib.contextmanager
def watchdog(on_stuck: Callable[[int], None], grace_s: float = STUCK_GRACE_S) -> Iterator[None]:
    """Around a step that can block in native code: a signal still ends the run within ``grace_s``.

    Python runs signal handlers only when the main thread returns to the interpreter. A SIGTERM
    sent to the driver's process group also kills the GCS that ``ray.init`` just started, and
    the driver then waits in C++ for it: 30 s, or 60 s and a fatal exit 1, never 130. The C-level
    handler still writes the signal to a wakeup fd at once; a thread reading it gives the main
    thread ``grace_s`` to leave the step, then calls ``on_stuck(signum)``, which must end the
    process (the step's children share its fate). Off the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    r, w = socket.socketpair()
    w.setblocking(False)
    left = threading.Event()

    def watch() -> None:
        while True:
            data = r.recv(64)
            caught = [b for b in data if b in SIGNALS]
            if not data or left.is_set():
                return
            if caught and not left.wait(grace_s):
                on_stuck(caught[0])
                return

    old_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    thread = threading.Thread(target=watch, name="opteval-startup-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        left.set()
        signal.set_wakeup_fd(old_fd)
        with contextlib.suppress(OSError):
            w.send(b"\0")  # wakes the thread; 0 is no signal
        thread.join(grace_s + 1.0)
        r.close()
        w.close()


# -- once the event loop runs -------------------------------------------------------------


class StopState:
    """First signal: stop dispatching. Second: abandon what is in flight."""

    def __init__(self) -> None:
        self.soft = asyncio.Event()
        self.hard = asyncio.Event()
        self.signum: int | None = None

    def trip(self, signum: int) -> None:
        self.signum = self.signum or signum
        if self.soft.is_set():
            self.hard.set()
            print("[sweep] second signal: abandoning trajectories in flight, committing what finished", flush=True)
        else:
            self.soft.set()
            print(f"[sweep] signal {signum}: no new trajectories; finishing those in flight "
                  f"(signal again to stop now)", flush=True)

    def abort(self) -> None:
        """Stop now for a reason that is not a signal (a failed commit): no dispatch, abandon in flight."""
        self.soft.set()
        self.hard.set()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers only work on the main thread (tests drive sweeps from others)
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.trip, sig)
        recorded = pending()
        if recorded:  # arrived during startup, after the last checkpoint
            self.trip(recorded)

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)


def quiet_signals() -> None:
    """After an interrupted run's loop ended: another SIGINT/SIGTERM (the user insisting while
    the results are printed) exits at once with 130 and one line, never a traceback. What
    finished is committed already; the lease is released on the way out."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: Any) -> None:
        print(f"[sweep] signal {signum} again: exiting now; resume with the same command", flush=True)
        raise SystemExit(EXIT_INTERRUPTED)

    for sig in SIGNALS:
        signal.signal(sig, handler)
