"""The sweep's exit code from what it left in the ledger (no Ray import).

Why a code of its own for error rows: a sweep whose trajectories all became ``status=error``
(a crashed server, say) used to print a results table and exit 0, so a pipeline could not
tell it from a finished study. Codes: 0 done; 2 a model's dispatch was stopped as a
configuration error (every call refused the same way); 4 the ledger holds ``status=error``
rows (``sweep.retry_errors=true`` reruns them; ``sweep.allow_errors=true`` turns this back
to 0). 5 is taken by Ray start-up failures and 3 / 130 by jobs/sweep.py.
"""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import pyarrow.compute as pc

from opteval.cluster.driver.prepare import Prepared
from opteval.evalcore.ledger_detail import error_message
from opteval.exit_codes import ExitCode

EXIT_OK = ExitCode.OK
EXIT_CONFIG = ExitCode.USAGE
EXIT_ERROR_ROWS = ExitCode.ERROR_ROWS
TOP_REASONS = 3


def error_rows(table: Any, keys: Sequence[str] | None = None) -> list[str]:
    """The ``error`` text of each ``status=error`` row (of ``keys`` when given: the plan's)."""
    if table is None or table.num_rows == 0:
        return []
    errs = table.select(["key", "status", "error"])
    errs = errs.filter(pc.equal(errs.column("status"), "error"))  # Arrow first: Python objects for errors only
    wanted = set(keys) if keys is not None else None
    return [error_message(r["error"]) or "no reason recorded" for r in errs.to_pylist()
            if wanted is None or r["key"] in wanted]


def _reason_class(reason: str) -> str:
    """A reason without the per-call details (URLs and counts stay; keys do not repeat)."""
    return " ".join(reason.split())[:160]


def sweep_exit(name: str, table: Any, *, allow_errors: bool = False, config_errors: Mapping[str, str] | None = None,
               keys: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Decide the exit code and say why in a few lines (on stderr)."""
    out = out or sys.stderr
    if config_errors:
        for line in config_errors.values():
            print(f"config error: {line}", file=out, flush=True)
        return EXIT_CONFIG
    errors = error_rows(table, keys)
    if not errors:
        return EXIT_OK
    top = Counter(_reason_class(r) for r in errors).most_common(TOP_REASONS)
    reasons = "; ".join(f"{n}x {r}" for r, n in top)
    if allow_errors:
        print(f"[sweep] {len(errors)} trajectory row(s) with status=error (sweep.allow_errors=true: exit 0); "
              f"top reasons: {reasons}", file=out, flush=True)
        return EXIT_OK
    print(f"sweep ended with {len(errors)} status=error row(s) (exit {EXIT_ERROR_ROWS}); top reasons: {reasons}. "
          f"Fix the cause and rerun with sweep.retry_errors=true sweep.name={name} to run them again "
          f"(sweep.allow_errors=true exits 0)", file=out, flush=True)
    return EXIT_ERROR_ROWS


def exit_code(prep: Prepared) -> int:
    """:func:`sweep_exit` for a finished (not interrupted) sweep, from its ledger and plan."""
    cfg = prep.cfg
    rows = prep.ledger.read_table(columns=["key", "status", "error"])  # never the transcripts
    return sweep_exit(cfg.sweep.name, rows, allow_errors=cfg.sweep.allow_errors,
                      config_errors=prep.config_errors, keys=[it.key for it in prep.plan])
