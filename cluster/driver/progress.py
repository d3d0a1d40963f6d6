"""Live progress: the printed ``[sweep] done/planned`` line, the bench's clocks, and MLflow
progress handed to the tracker's thread (the event loop never waits on MLflow). No Ray import."""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from cluster.tracking import Tracker

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
