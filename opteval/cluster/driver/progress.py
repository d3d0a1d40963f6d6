"""Live progress: the printed ``[sweep] done/planned`` line, the bench's clocks, and MLflow
progress handed to the tracker's thread (the event loop never waits on MLflow). No Ray import."""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TextIO

from opteval.sweepcore.tracking import Tracker

ETA_MIN_DONE = 8  # finished trajectories before an ETA is printed


@dataclass
class Progress:
    planned: int
    already: int
    start: float = field(default_factory=time.monotonic)
    done: int = 0
    errors: int = 0
    retries: int = 0
    per: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    first_dispatch: float | None = None
    last_done: float | None = None
    finish_times: list[float] = field(default_factory=list)

    def dispatched(self) -> None:
        if self.first_dispatch is None:
            self.first_dispatch = time.monotonic()

    def dispatch_wall(self) -> float:
        """Seconds from the first dispatch to the last finished trajectory (the bench's clock)."""
        if self.first_dispatch is None or self.last_done is None:
            return 0.0
        return self.last_done - self.first_dispatch

    def steady_rate(self, skip_frac: float = 0.1) -> float:
        """Trajectories/s after the first ``skip_frac`` finished (ramp-up left out), for the bench."""
        t = self.finish_times
        k = int(len(t) * skip_frac)
        if len(t) - k < 2 or t[-1] <= t[k]:
            return 0.0
        return (len(t) - 1 - k) / (t[-1] - t[k])

    def record(self, model: str, method: str, correct: bool, error: bool) -> None:
        self.last_done = time.monotonic()
        self.finish_times.append(self.last_done)
        self.done += 1
        self.errors += int(error)
        self.per[(model, method)][0] += 1
        self.per[(model, method)][1] += int(bool(correct))

    def line(self) -> str:
        # Rate from the first dispatch (startup and deploys left out), and no ETA from the
        # first few finishes: right after a resume that gave "eta 3585s".
        elapsed = max(1e-9, time.monotonic() - (self.first_dispatch or self.start))
        rate = self.done / elapsed
        todo = self.planned - self.already - self.done
        eta = f"{todo / rate:.0f}s" if rate > 0 and (self.done >= ETA_MIN_DONE or todo == 0) else "?"
        total = self.already + self.done
        accs = " ".join(f"{mo}/{me}={c / n:.2f}({n})" for (mo, me), (n, c) in sorted(self.per.items()) if n)
        return (f"[sweep] {total}/{self.planned} ({100 * total / max(1, self.planned):.1f}%) "
                f"{rate:.2f} traj/s eta {eta} errors {self.errors} retries {self.retries} | acc {accs}")


class ProgressPrinter:
    """What the user sees of :class:`Progress`: a tqdm bar where the output is a terminal; else
    the ``[sweep]`` line, printed when something changed, and while nothing has (models still
    deploying, the first trajectory not back) once per ``heartbeat_s``, saying how long it has
    been waiting. Logs of a long sweep then hold one line per change, not one per interval."""

    def __init__(self, progress: Progress, stream: TextIO | None = None, heartbeat_s: float = 60.0,
                 bar: bool | None = None) -> None:
        self.progress, self.stream, self.heartbeat_s = progress, stream or sys.stdout, heartbeat_s
        self._last: tuple[int, int, int] | None = None
        self._last_at = 0.0
        use_bar = self.stream.isatty() if bar is None else bar
        self._bar: Any = None
        if use_bar:
            # deferred: tqdm only where the output is a terminal
            from tqdm import tqdm

            self._bar = tqdm(total=progress.planned, initial=progress.already, file=self.stream, unit="traj",
                             desc="[sweep]", dynamic_ncols=True, smoothing=0.1)

    def _state(self) -> tuple[int, int, int]:
        p = self.progress
        return (p.done, p.errors, p.retries)

    def tick(self) -> None:
        p = self.progress
        if self._bar is not None:
            self._bar.n = p.already + p.done
            self._bar.set_postfix_str(f"errors {p.errors} retries {p.retries}", refresh=False)
            self._bar.refresh()
            return
        now = time.monotonic()
        state = self._state()
        if state == self._last and now - self._last_at < self.heartbeat_s:
            return
        if state == self._last or (p.done == 0 and self._last is not None):
            waited = now - (p.first_dispatch or p.start)
            line = (f"{p.line()} (waiting {waited:.0f}s"
                    + (": no trajectory back yet, models may still be deploying)" if p.done == 0 else ")"))
        else:
            line = p.line()
        print(line, file=self.stream, flush=True)
        self._last, self._last_at = state, now

    def close(self) -> None:
        """The final state, once (not again when the last tick already showed it)."""
        if self._bar is not None:
            self._bar.n = self.progress.already + self.progress.done
            self._bar.close()
            self._bar = None
            print(self.progress.line(), file=self.stream, flush=True)
        elif self._state() != self._last:
            print(self.progress.line(), file=self.stream, flush=True)
            self._last = self._state()


def track_progress_offloop(tracker: Tracker | None, progress: Progress, planned: dict[tuple[str, str], int]) -> None:
    """Hand a snapshot of the progress to the tracker's thread: the event loop never waits on MLflow."""
    if tracker is None or not tracker.active:
        return
    snap = Progress(planned=progress.planned, already=progress.already, done=progress.done)
    snap.per.update({k: list(v) for k, v in progress.per.items()})
    offloop = getattr(tracker, "offloop", None)
    if offloop is None:
        track_progress(tracker, snap, planned)
    else:
        offloop.submit("log progress", track_progress, tracker, snap, planned)


def track_progress(tracker: Tracker | None, progress: Progress, planned: dict[tuple[str, str], int]) -> None:
    """Running progress into MLflow (the tracker guards its own failures)."""
    if tracker is None:
        return
    for (model, method), (n, correct) in list(progress.per.items()):
        tracker.progress(model, method, n, correct, planned.get((model, method)))
    tracker.progress_total(progress.already + progress.done, progress.planned)
