"""A sorted Arrow string array seen as a sequence of str, for :mod:`bisect`.

Why its own module: the ledger's committed keys (``ledger.keyset``) and the plan's "minus
committed" (``plan.remaining``) both binary-search one sorted array, and ``plan`` cannot import
the ledger package (the ledger imports the plan).
"""
from __future__ import annotations

import pyarrow as pa


class SortedStrings:
    """``array[i]`` as a Python str, made only for the ~log2(n) items a search looks at."""

    __slots__ = ("array",)

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: int) -> str:
        return self.array[i].as_py()
