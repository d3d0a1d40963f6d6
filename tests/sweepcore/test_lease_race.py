"""Two processes taking the same lease at the same instant, 300 times: never both.

Why: the lease was created with ``O_CREAT|O_EXCL`` and written after, so a contender reading
in between saw an empty file, judged it stale and took it over (11 of 300 pairs held it twice).
"""
from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from opteval.sweepcore.lease import LEASE_FILE, Lease, LocalStore

pytestmark = pytest.mark.faults

ROUNDS = 300


def _contender(root: str, barrier: Any, results: Any, slot: int) -> None:
    for i in range(ROUNDS):
        lease = Lease(LocalStore(f"{root}/{i}/{LEASE_FILE}"), stale_s=30.0, label=f"round {i}")
        barrier.wait()
        results[slot * ROUNDS + i] = 1 if lease.try_acquire() is None else 0


def test_300_simultaneous_try_acquire_pairs_never_both_acquire(tmp_path: Path) -> None:
    for i in range(ROUNDS):
        (tmp_path / str(i)).mkdir()
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(2)
    results = ctx.Array("b", 2 * ROUNDS)
    procs = [ctx.Process(target=_contender, args=(str(tmp_path), barrier, results, s)) for s in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    got = [results[i] for i in range(2 * ROUNDS)]
    both = [i for i in range(ROUNDS) if got[i] and got[ROUNDS + i]]
    neither = [i for i in range(ROUNDS) if not got[i] and not got[ROUNDS + i]]
    assert both == [], f"{len(both)} of {ROUNDS} pairs both acquired the lease"
    assert neither == [], f"{len(neither)} of {ROUNDS} pairs left the lease to nobody"
    # every round's lease names its one holder in full (never an empty or torn file)
    assert all((tmp_path / str(i) / LEASE_FILE).read_bytes().startswith(b"{") for i in range(ROUNDS))
    assert not list(tmp_path.glob("*/*.tmp"))
