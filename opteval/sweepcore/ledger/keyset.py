"""The ledger's committed keys, held compactly.

Why not a ``set[str]``: a resumed driver at ten times the paper holds millions of committed
keys, and a Python set costs ~130 bytes a key (a str object and a hash slot), where the same
keys in one sorted Arrow string array cost their bytes and an offset (~70). A commit asks about a
handful of keys, which a binary search answers in microseconds; the scheduler's "plan minus
committed" takes the array itself (:meth:`KeySet.to_arrow`, no copy on a fresh open). Keys
committed or released after open live in two small Python sets beside the array.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Set

import pyarrow as pa
import pyarrow.compute as pc

from opteval.sweepcore.sorted_strings import SortedStrings

_ITER_CHUNK = 1 << 16


def _sorted(keys: pa.Array | pa.ChunkedArray | None) -> pa.Array:
    if keys is None:
        return pa.array([], type=pa.string())
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], type=keys.type)
    if keys.null_count:
        raise ValueError("a committed key is null")
    return keys.take(pc.sort_indices(keys)) if len(keys) > 1 else keys


class KeySet(Set[str]):
    """A set of committed keys: a sorted Arrow array read at open, plus what changed since."""

    def __init__(self, keys: pa.Array | pa.ChunkedArray | None = None) -> None:
        self._base = _sorted(keys)
        self._probe = SortedStrings(self._base)
        self._added: set[str] = set()
        self._removed: set[str] = set()

    def duplicates(self) -> bool:
        """Whether the keys given at construction held one twice (adjacent once sorted)."""
        n = len(self._base)
        if n < 2:
            return False
        same = pc.equal(self._base.slice(1), self._base.slice(0, n - 1))
        return bool(pc.any(same).as_py())

    def _in_base(self, key: str) -> bool:
        i = bisect.bisect_left(self._probe, key)
        return i < len(self._base) and self._probe[i] == key

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self._added:
            return True
        if key in self._removed:
            return False
        return self._in_base(key)

    def __len__(self) -> int:
        return len(self._base) - len(self._removed) + len(self._added)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._base), _ITER_CHUNK):
            for key in self._base.slice(start, _ITER_CHUNK).to_pylist():
                if key not in self._removed:
                    yield key
        yield from self._added

    def update(self, keys: Iterable[str]) -> None:
        for key in keys:
            if key in self._removed:
                self._removed.discard(key)
            elif not self._in_base(key):
                self._added.add(key)

    def difference_update(self, keys: Iterable[str]) -> None:
        for key in keys:
            if key in self._added:
                self._added.discard(key)
            elif self._in_base(key):
                self._removed.add(key)

    def to_arrow(self) -> pa.Array:
        """Every key as one string array: the array read at open itself when nothing changed."""
        base = self._base
        if self._removed:
            gone = pa.array(sorted(self._removed), type=base.type)
            base = base.filter(pc.invert(pc.is_in(base, value_set=gone)))
        if not self._added:
            return base
        return pa.concat_arrays([base, pa.array(sorted(self._added), type=base.type)])
