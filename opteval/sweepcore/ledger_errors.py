"""The ledger's errors, in a leaf module so ``opteval.sweepcore.lease`` (whose errors are ledger errors)
and ``opteval.sweepcore.ledger`` (which takes the lease) import it without importing each other.
``opteval.sweepcore.ledger`` re-exports every name."""
from __future__ import annotations


class LedgerError(RuntimeError):
    """The ledger cannot be used as asked; the message names the file."""


class DuplicateKeyError(LedgerError):
    """A trajectory key would be (or was) committed twice."""


class DamagedFileError(LedgerError):
    """A ledger file (data, manifest or plan) cannot be read; ``sweep.repair=true`` quarantines it."""


class CommitError(LedgerError):
    """A write failed (disk full, permission, object-store error); the message names path and cause."""


class ConfigChangedError(LedgerError):
    """The sweep exists with a different configuration; the message lists the changes."""

def _cause(exc: BaseException) -> str:
    """The useful part of a storage exception, on one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
