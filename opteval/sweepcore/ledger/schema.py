"""The ledger's on-disk layout and format: file names, the plan's and rows' schemas, and the
format version written in ``manifest.json`` (``format``) and checked on every read of it.

Why a version: a manifest written by a newer opteval may mean files this code would misread;
it is refused with one line naming the file. Ledgers written before the field existed hold
format 1 and read as such.

Formats: 1, the detail columns as JSON text and ``error`` as text; 2 (new ledgers), the detail
columns as Arrow nested types and ``error`` as ``{kind, where, message}``
(``opteval.evalcore.records.ledger_schema``; encoded and decoded by ``opteval.evalcore.ledger_detail``).
A ledger keeps the format it was created with: resuming a format-1 ledger writes format 1, so one
ledger's files never mix schemas. The format is in no fingerprint: plans and keys are the same."""
from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from opteval.evalcore.records import LEDGER_SCHEMA
from opteval.sweepcore.ledger_errors import DamagedFileError, LedgerError

# What this code writes into a new ledger's manifest ``format``, and the newest it reads.
LEDGER_FORMAT = 2
FORMATS = (1, 2)  # the formats this code reads and writes (a ledger keeps its own)


MANIFEST = "manifest.json"
PLAN_FILE = "plan.parquet"
TRAJ_DIR = "trajectories"
TMP_DIR = "_tmp"
QUARANTINE_DIR = "quarantine"
REPAIR_HINT = "sweep.repair=true moves it into <sweep>/quarantine/ and runs its keys again"
REPLACES_META = b"opteval.replaces"
OBJECT_STORES = ("s3", "gcs")
PLAN_SCHEMA = pa.schema([
    ("key", pa.string()), ("model", pa.string()), ("method", pa.string()),
    ("benchmark", pa.string()), ("problem_id", pa.string()), ("sample", pa.int32()),
])
_REQUIRED = [f.name for f in LEDGER_SCHEMA if not f.nullable]
# The JSON columns that hold a trajectory's detail (the transcript alone is ~95% of a row's bytes at the
# paper's token counts): readers that only count, score or summarize leave them on disk (issue 44).
DETAIL_COLUMNS = ("calls", "execs", "transcript", "budgets")


def columns_without(*names: str) -> list[str]:
    """Every ledger column but ``names`` (a reader's projection: Parquet then never reads those)."""
    return [c for c in LEDGER_SCHEMA.names if c not in names]
_COLUMNS = set(LEDGER_SCHEMA.names)
# part-<seq>-<hex> (level 0), compact-<seq>-<hex> (level 1, the only compaction before tiers) or
# compact-<seq>-l<level>-<hex>, rewrite-<seq>-<hex>. Level and sequence decide, from names alone,
# which files a compaction replaced (opteval.sweepcore.ledger.store: "Why compaction in tiers").
_FILE_RE = re.compile(r"^(part|compact|rewrite)-(\d+)(?:-l(\d+))?-[0-9a-f]+\.parquet$")


def file_level(match: re.Match[str]) -> int:
    """A data file's compaction level from its name's match: parts 0, an unlevelled ``compact-`` 1."""
    kind, level = match.group(1), match.group(3)
    if kind == "part":
        return 0
    return int(level) if level else 1


def check_format(manifest: dict[str, Any], where: str) -> int:
    """The manifest's ledger format (1 or 2); refuse a newer one (one line naming ``where``, the
    manifest's location). A manifest without ``format`` is format 1 (written before the field was read)."""
    fmt = manifest.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise DamagedFileError(f"{where}: format must be a positive integer, got {fmt!r}; {REPAIR_HINT}")
    if fmt > LEDGER_FORMAT:
        raise LedgerError(f"{where}: ledger format {fmt} is newer than this opteval reads (format {LEDGER_FORMAT}); "
                          f"open it with the opteval that wrote it, or a newer one")
    return int(fmt)


def format_of_schema(schema: pa.Schema) -> int:
    """The format a data file was written in, from its schema (``calls`` as text: format 1): for a
    ledger whose manifest was lost (repair) and must keep its files' format."""
    if "calls" in schema.names and pa.types.is_string(schema.field("calls").type):
        return 1
    return 2 if "calls" in schema.names else 1
