"""Captured formulations stored once per fingerprint beside the ledger (issue 36).

Why content-addressed: the same model is written by many trajectories (every sample of a
problem that formulates it alike); a ledger row keeps only ``model_fingerprint``. Layout::

    <sweep>/models/<fingerprint>.parquet    one row: fingerprint, n_vars, n_rows, form (JSON)

Written before the rows that name it are committed (a crash between leaves an unreferenced
file, never a row without its model); an existing file is never rewritten.
"""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from opteval.sweepcore.ledger.store import Ledger

MODELS_DIR = "models"
MODEL_SCHEMA = pa.schema([("fingerprint", pa.string()), ("n_vars", pa.int32()), ("n_rows", pa.int32()),
                          ("form", pa.string())])


def model_path(ledger: Ledger, fp: str) -> str:
    return f"{ledger.root}/{MODELS_DIR}/{fp}.parquet"


def store_models(ledger: Ledger, forms: dict[str, dict[str, Any]]) -> int:
    """Write each formulation not stored yet; returns how many files were written."""
    known: set[str] = ledger.__dict__.setdefault("_stored_models", set())
    written = 0
    for fp, form in forms.items():
        if fp in known:
            continue
        path = model_path(ledger, fp)
        if ledger.fs.get_file_info(path).type != pafs.FileType.File:
            table = pa.Table.from_pylist([{"fingerprint": fp, "n_vars": len(form["vars"]), "n_rows": len(form["rows"]),
                                           "form": json.dumps(form, separators=(",", ":"))}], schema=MODEL_SCHEMA)
            ledger._atomic_write_table(table, path)
            written += 1
        known.add(fp)
    return written


def read_model(ledger: Ledger, fp: str) -> dict[str, Any] | None:
    """The stored formulation with this fingerprint, or None."""
    path = model_path(ledger, fp)
    if not fp or ledger.fs.get_file_info(path).type != pafs.FileType.File:
        return None
    row = pq.read_table(path, filesystem=ledger.fs).to_pylist()[0]
    form: dict[str, Any] = json.loads(row["form"])
    return form
