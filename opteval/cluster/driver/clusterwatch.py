"""Notice the local Ray cluster dying under a running sweep, and end the run honestly.

A SIGTERM sent to the driver's whole process group (Slurm's ``scancel``, a systemd stop,
``kill -- -PGID``) or the OOM killer also stops the GCS and raylet that ``ray.init`` started
as the driver's children. Nothing in flight can finish then, and every Ray call waits in C++
for the GCS: 60 s, then the process ends with exit 1, the rows that finished but were not yet
committed are lost, and a signalled run does not say "interrupted". A thread polls those
processes; once one is gone it commits what finished (on the event loop, bounded), releases
the lease and ends the process: 130 after a signal, else 5. No Ray import.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opteval.cluster.driver.commit import Committer
    from opteval.cluster.driver.signals import StopState

POLL_S = 0.5
COMMIT_WAIT_S = 20.0  # the last commit of a lost cluster's run; then the process ends anyway


@dataclass
class Running:
    """What :func:`opteval.cluster.driver.run.drive` runs with, for a thread that must commit from outside."""

    loop: asyncio.AbstractEventLoop | None = None
    committer: Committer | None = None
    stop: StopState | None = None

    def commit_now(self, timeout_s: float = COMMIT_WAIT_S) -> str:
        """Commit the rows that finished, on the loop; says what happened (never raises)."""
        if self.loop is None or self.committer is None:
            return "nothing had finished"
        if self.loop.is_closed():
            return "the last commit did not complete (the sweep's event loop had ended)"
        try:
            asyncio.run_coroutine_threadsafe(self.committer.flush(force=True), self.loop).result(timeout_s)
        except Exception as exc:  # a failed or slow commit: the process ends either way
            return f"the last commit did not complete ({type(exc).__name__}: {exc})"
        return f"{self.committer.committed} trajectories committed by this run"


class ClusterWatch:
    """A daemon thread that calls ``on_lost(gone)`` once ``gone()`` names a process that exited.

    ``on_lost`` runs on the thread and is expected to end the process; the watch stops
    (without calling it) when the ``with`` block ends, before Ray is shut down on purpose."""

    def __init__(self, gone: Callable[[], list[str]], on_lost: Callable[[list[str]], None],
                 poll_s: float = POLL_S) -> None:
        self._gone, self._on_lost, self._poll = gone, on_lost, poll_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="opteval-cluster-watch", daemon=True)

    def _watch(self) -> None:
        while not self._stopped.wait(self._poll):
            gone = self._gone()
            if gone and not self._stopped.is_set():
                self._on_lost(gone)
                return

    def __enter__(self) -> ClusterWatch:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(self._poll + 1.0)
