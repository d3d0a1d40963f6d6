"""MLflow off the sweep's event loop: its start in the background (retried) and calls bounded in
time, so a slow or dead tracking server never stalls a sweep."""
from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opteval.evalcore.backoff import Backoff
from opteval.sweepcore.tracking.library_logs import sqlite_problem
from opteval.sweepcore.tracking.names import TrackingWarning, sync_command

if TYPE_CHECKING:  # annotations only: tracker.py does not import this module, nor this one it at run time
    from opteval.sweepcore.tracking.tracker import Tracker

log = logging.getLogger("opteval.tracking")


class BackgroundStart:
    """Starts a tracker's runs on a daemon thread and retries with backoff while MLflow is down
    or slow (a SQLite store creating its schema on a loaded machine took 82 s), so the sweep
    never waits for it and tracking is not turned off for the whole run by a slow start. While
    it is down the tracker is inactive (progress calls are no-ops); once up, progress flows again
    and the end of the sweep logs every result from the ledger (the ledger is the truth, so
    nothing committed meanwhile is lost to MLflow). One line when it goes down, one when it is up."""

    def __init__(self, tracker: Tracker, resolved: Mapping[str, Any], fingerprint: str,
                 pairs: Iterable[tuple[str, str]], *, backoff_s: float = 5.0, max_backoff_s: float = 60.0) -> None:
        self.tracker, self.resolved, self.fingerprint, self.pairs = tracker, resolved, fingerprint, list(pairs)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.up = threading.Event()
        self._stop = threading.Event()
        self.attempts = 0
        self._thread = threading.Thread(target=self._run, name="opteval-mlflow-start", daemon=True)

    def begin(self) -> BackgroundStart:
        self._thread.start()
        return self

    def _run(self) -> None:
        t = self.tracker
        schedule = Backoff(self.backoff_s, self.max_backoff_s)
        t.quiet = True
        while not self._stop.is_set():
            self.attempts += 1
            t.enabled = True
            t.failures = 0
            if t.start(self.resolved, self.fingerprint, self.pairs) and t.failures == 0:
                t.quiet = False
                self.up.set()
                if self.attempts > 1:
                    print(f"[sweep] MLflow ({t.uri}) is up after {self.attempts} attempts; tracking resumes "
                          "(results are logged from the ledger at the end)", flush=True)
                return
            t.enabled = False
            t.client = t.parent_id = None  # half-started runs are found again by their tags next time
            if self.attempts == 1:
                print(f"[sweep] MLflow ({t.uri}) is not reachable ({getattr(t, 'last_error', 'no answer')}); "
                      f"the sweep goes on and retries it in the background", flush=True)
            self._stop.wait(schedule.delay(self.attempts - 1))

    def wait(self, timeout_s: float) -> bool:
        """Up within ``timeout_s``? (The end of the sweep gives a slow start one more chance.)"""
        return self.up.wait(max(0.0, float(timeout_s)))

    def stop(self) -> None:
        self._stop.set()
        if not self.up.is_set():
            self.tracker.enabled = False  # a start still in flight must not log after the end


def end_line(tracker: Tracker | None) -> str | None:
    """The end-of-sweep line: does MLflow hold every result, or how to put them there."""
    if tracker is None:
        return None
    if tracker.active and tracker.synced:
        return (f"[sweep] MLflow holds every result of this sweep ({len(tracker.children)} runs, logged from the "
                "ledger)")
    why = sqlite_problem(tracker.uri) or getattr(tracker, 'last_error', None) or 'not reachable or too slow'
    return (f"[sweep] MLflow does NOT hold all results ({tracker.uri}: {why}); the ledger does. Re-log with: "
            f"{sync_command(tracker.sweep, tracker.output_dir, tracker.uri)}")


class OffLoop:
    """Runs a tracker's calls on daemon threads with a time bound, so a hung tracking server
    never blocks the sweep: the driver's event loop only hands work over (:meth:`submit`,
    progress: skipped while the previous one is still running), and the calls the driver
    waits for (:meth:`call`: start, results, finish) give up after ``timeout_s``. A call that
    times out turns tracking off for the run with the re-log hint; the ledger stays the truth.
    Daemon threads, so a call stuck in a socket never keeps the process alive."""

    def __init__(self, tracker: Tracker, timeout_s: float) -> None:
        self.tracker, self.timeout_s = tracker, float(timeout_s)
        self._pending: tuple[threading.Event, float] | None = None
        self.skipped = 0

    def _spawn(self, fn: Any, args: tuple) -> tuple[threading.Event, dict[str, Any]]:
        done, box = threading.Event(), {}

        def run() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=run, name="opteval-mlflow", daemon=True).start()
        return done, box

    def _give_up(self, what: str) -> None:
        t = self.tracker
        if t.enabled:
            t.enabled = False
            warnings.warn(f"MLflow ({t.uri}) did not answer within {self.timeout_s:g}s while trying to {what}; "
                          f"tracking is off for the rest of this run (the ledger is the truth). Re-log later with: "
                          f"{sync_command(t.sweep, t.output_dir, t.uri)}", TrackingWarning, stacklevel=3)

    def submit(self, what: str, fn: Any, *args: Any) -> bool:
        """Start ``fn(*args)`` and return at once; False (skipped) while the previous one runs."""
        if not self.tracker.enabled:
            return False
        if self._pending is not None and not self._pending[0].is_set():
            self.skipped += 1
            if time.monotonic() - self._pending[1] > self.timeout_s:
                self._give_up(what)
            return False
        done, _ = self._spawn(fn, args)
        self._pending = (done, time.monotonic())
        return True

    def call(self, what: str, fn: Any, *args: Any, default: Any = None) -> Any:
        """``fn(*args)`` waited for at most ``timeout_s`` (after any progress call still running)."""
        if not self.tracker.enabled:
            return default
        start = time.monotonic()
        if self._pending is not None and not self._pending[0].wait(self.timeout_s):
            self._give_up(what)
            return default
        done, box = self._spawn(fn, args)
        if not done.wait(max(0.0, self.timeout_s - (time.monotonic() - start)) or 0.001):
            self._give_up(what)
            return default
        if "error" in box:
            raise box["error"]
        return box.get("value", default)
