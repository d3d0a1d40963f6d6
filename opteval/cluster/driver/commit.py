"""Grading, ledger rows and batched commits; results read back from the ledger.

Why the driver grades: it alone holds the answer keys (workers get ``ProblemSpec``s).
Why commits are batched: each batch is one atomic Parquet file; a crash loses at most
the rows not yet committed, which a resume then runs again (never twice committed).
No Ray import.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from opteval.cluster.driver.prepare import Prepared
from opteval.evalcore.data import reference_models
from opteval.evalcore.formulation import Reference, reference_from_models, verify
from opteval.evalcore.grading import grade_submission, parse_submission
from opteval.evalcore.records import Trajectory
from opteval.sweepcore.backends import is_simulated
from opteval.sweepcore.ledger import CommitError, Ledger, LedgerError, error_row, trajectory_row
from opteval.sweepcore.ledger.models import store_models
from opteval.sweepcore.plan import PlanItem
from opteval.sweepcore.tracking import SUMMARY_COLUMNS, ledger_summary, summarize_ledger


class Committer:
    """Buffers rows; commits a batch when full or when the interval has passed."""

    def __init__(self, ledger: Ledger, batch: int, interval_s: float) -> None:
        self._ledger, self._batch, self._interval = ledger, max(1, int(batch)), float(interval_s)
        self._rows: list[dict[str, Any]] = []
        self._keys: set[str] = set()
        self._lock = asyncio.Lock()
        self._last = time.monotonic()
        self.committed = 0
        self.batches = 0

    def add(self, row: dict[str, Any]) -> None:
        if row["key"] in self._keys:
            raise RuntimeError(f"internal error: key {row['key']} finished twice in one run")
        self._keys.add(row["key"])
        self._rows.append(row)

    def due(self) -> bool:
        return len(self._rows) >= self._batch or (
            bool(self._rows) and time.monotonic() - self._last >= self._interval)

    async def flush(self, force: bool = False) -> None:
        async with self._lock:
            if self.failed is not None:
                raise self.failed
            if not self._rows or not (force or self.due()):
                return
            # Take the batch out before the await: rows finishing while the commit runs in its
            # thread go into a fresh list (they are committed next time, never dropped).
            rows, self._rows = self._rows, []
            try:
                await asyncio.to_thread(self._ledger.commit, rows)
            except Exception as exc:
                self._fail(exc)
                raise self.failed from exc  # type: ignore[misc]
            self._last = time.monotonic()
            self.committed += len(rows)
            self.batches += 1

    failed: Exception | None = None
    on_failure: Callable[[Exception], None] | None = None  # called once with the error (the driver stops the sweep)

    def _fail(self, exc: Exception) -> None:
        """A commit that failed stops the sweep: nothing more is committed by this run, the
        rows in memory are dropped (they run again on resume), what is on disk stays valid."""
        if isinstance(exc, LedgerError):
            self.failed = exc
        else:
            self.failed = CommitError(f"commit failed: {type(exc).__name__}: {exc}")
        if self.on_failure is not None:
            self.on_failure(self.failed)


@dataclass
class Outcome:
    """One planned trajectory's end: a Trajectory to grade, or the reason it failed for good."""

    traj: Trajectory | None
    error: str | None
    attempts: int


def build_row(prep: Prepared, item: PlanItem, out: Outcome) -> tuple[dict[str, Any], bool]:
    """Grade in the driver and shape the ledger row; an error row is never correct."""
    profile, sweep = prep.profile(item.benchmark), prep.cfg.sweep.name
    if out.error is not None:
        sampling, _ = prep.run_params(item.model, item.method)
        simulated = bool(out.traj.simulated) if out.traj is not None else \
            is_simulated(prep.model_cfgs[item.model])
        row = error_row(item, out.error, out.attempts, sweep=sweep, seed=sampling.seed_for(item.sample),
                        simulated=simulated, profile=profile, fingerprint=item.fingerprint)
        return row, False
    traj = cast(Trajectory, out.traj)  # no error: the worker returned one
    parsed = parse_submission(traj.submission.raw if traj.submission is not None else None)
    expected = parse_submission(prep.answers[item.benchmark][item.problem_id])
    correct = bool(grade_submission(traj.submission, expected, profile))  # SIRL's alternate included
    verification = verify(traj.execs, parsed, profile, reference_for(item.benchmark, item.problem_id))
    store_models(prep.ledger, verification.forms)  # before the row that names them is committed
    row = trajectory_row(traj, key=item.key, correct=correct, profile=profile, fingerprint=item.fingerprint,
                         sweep=sweep, parsed=parsed, attempts=out.attempts, verification=verification)
    return row, correct


_REFERENCES: dict[tuple[str, str], Reference | None] = {}


def reference_for(benchmark: str, problem_id: str) -> Reference | None:
    """The reference program's captured model (the embedded sample's, run once in the sandbox:
    evalcore/data/reference_models.jsonl), or None where the benchmark names none."""
    if (benchmark, problem_id) not in _REFERENCES:
        models = reference_models(problem_id) if benchmark == "sample" else None
        _REFERENCES[(benchmark, problem_id)] = None if models is None else reference_from_models(models)
    return _REFERENCES[(benchmark, problem_id)]


def results_summary(prep: Prepared) -> Any:
    """Per model x method x benchmark accounting recomputed from the committed ledger and its plan."""
    return summarize_ledger(ledger_summary(prep.ledger, SUMMARY_COLUMNS), prep.ledger.read_plan())
