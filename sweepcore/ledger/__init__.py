"""The results store: one sweep's Parquet dataset, its manifest and plan, committed atomically."""
from sweepcore.ledger.errors import CommitError, ConfigChangedError, DamagedFileError, DuplicateKeyError, LedgerError
from sweepcore.ledger.store import (
    MANIFEST,
    OBJECT_STORES,
    PLAN_FILE,
    PLAN_SCHEMA,
    QUARANTINE_DIR,
    REPAIR_HINT,
    REPLACES_META,
    TMP_DIR,
    TRAJ_DIR,
    Ledger,
    _sorted_keys_sha256,
    _version,
    config_diff,
    error_row,
    join_uri,
    open_filesystem,
    trajectory_row,
)

__all__ = [
    "CommitError", "ConfigChangedError", "DamagedFileError", "DuplicateKeyError", "Ledger", "LedgerError", "MANIFEST",
    "OBJECT_STORES", "PLAN_FILE", "PLAN_SCHEMA", "QUARANTINE_DIR", "REPAIR_HINT", "REPLACES_META", "TMP_DIR", "TRAJ_DIR",
    "_sorted_keys_sha256", "_version", "config_diff", "error_row", "join_uri", "open_filesystem", "trajectory_row"
]
