"""The results store, by part: ``schema`` (layout, plan and row schemas, the format version),
``rows`` (a graded trajectory or an error as a ledger row), ``manifest`` (manifest, plan file,
quarantine and repair), ``store`` (:class:`Ledger`: open, resume, commit with atomic writes,
compaction) and ``errors``. The writer lease is ``opteval.sweepcore.lease``."""
from opteval.sweepcore.ledger.manifest import config_diff
from opteval.sweepcore.ledger.rows import error_row, trajectory_row
from opteval.sweepcore.ledger.schema import (
    DETAIL_COLUMNS,
    LEDGER_FORMAT,
    MANIFEST,
    OBJECT_STORES,
    PLAN_FILE,
    PLAN_SCHEMA,
    QUARANTINE_DIR,
    REPAIR_HINT,
    REPLACES_META,
    TMP_DIR,
    TRAJ_DIR,
    columns_without,
)
from opteval.sweepcore.ledger.store import Ledger, join_uri, open_filesystem
from opteval.sweepcore.ledger_errors import CommitError, ConfigChangedError, DamagedFileError, DuplicateKeyError, LedgerError

__all__ = [
    "DETAIL_COLUMNS", "columns_without",
    "LEDGER_FORMAT", "MANIFEST", "OBJECT_STORES", "PLAN_FILE", "PLAN_SCHEMA", "QUARANTINE_DIR", "REPAIR_HINT", "REPLACES_META",
    "TMP_DIR", "TRAJ_DIR", "CommitError", "ConfigChangedError", "DamagedFileError", "DuplicateKeyError", "Ledger",
    "LedgerError", "config_diff", "error_row", "join_uri", "open_filesystem", "trajectory_row",
]
