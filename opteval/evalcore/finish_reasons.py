"""Why model calls ended, counted per cell (model x method x benchmark) from the ledger alone.

Why: a call cut at ``max_tokens`` (``finish_reason: length``) or refused by the server
(``rejected: HTTP 400: ...``, written by the OpenAI-compatible client) looks like a wrong
answer in the accuracy column; these counts tell "the model cannot write code" from
"max_tokens is too small" or "the server refuses the request". A trajectory *ended by* them
submitted nothing and its last call was truncated or rejected. Reads the ``calls`` column
(every ledger has it, in either format: ``opteval.evalcore.ledger_detail.calls_of``).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from opteval.evalcore.ledger_detail import calls_of

LENGTH = "length"
REJECTED = "rejected"
COLUMNS = ("truncated_calls", "rejected_calls", "ended_truncated", "ended_rejected")
_REJECTION = re.compile(r"^rejected: HTTP (\d{3}): ?(.*)$", re.S)


def rejection(finish_reason: str | None) -> tuple[int, str] | None:
    """(HTTP status, the server's text) of a refused call, else None."""
    if not finish_reason or not finish_reason.startswith(REJECTED):
        return None
    m = _REJECTION.match(finish_reason)
    return (int(m.group(1)), m.group(2).strip()) if m else (0, finish_reason[len(REJECTED):].lstrip(": "))


def is_truncated(finish_reason: str | None) -> bool:
    return finish_reason == LENGTH


def trajectory_counts(calls: Iterable[Mapping[str, Any]], status: str | None) -> dict[str, int]:
    """The four counts of one trajectory (its calls as the ledger stores them)."""
    reasons = [c.get("finish_reason") for c in calls]
    last = reasons[-1] if reasons else None
    ended = status != "submitted"
    return {"truncated_calls": sum(is_truncated(r) for r in reasons),
            "rejected_calls": sum(rejection(r) is not None for r in reasons),
            "ended_truncated": int(ended and is_truncated(last)),
            "ended_rejected": int(ended and rejection(last) is not None)}


def cell_counts(table: Any, by: tuple[str, ...] = ("model", "method", "benchmark")) -> Any:
    """A pandas frame: ``by`` columns plus :data:`COLUMNS`, one row per cell present in
    ``table`` (a pyarrow Table or pandas DataFrame of ledger rows; a key counts once, the last
    row winning as in ``opteval.evalcore.metrics.summarize``)."""
    # deferred: pandas is for reports; the sweep's driver imports this
    import pandas as pd

    df = table.to_pandas() if hasattr(table, "to_pandas") else table
    cols = list(by)
    reduced = df is not None and all(c in df.columns for c in COLUMNS)  # counted as the rows were read
    if df is None or len(df) == 0 or ("calls" not in df.columns and not reduced):
        return pd.DataFrame(columns=[*cols, *COLUMNS])
    if "key" in df.columns and df["key"].duplicated().any():
        df = df.drop_duplicates("key", keep="last")
    if reduced and "calls" not in df.columns:
        return df[[*cols, *COLUMNS]].groupby(cols, sort=False, as_index=False)[list(COLUMNS)].sum()
    status = df["status"] if "status" in df.columns else pd.Series([None] * len(df), index=df.index)
    counts = pd.DataFrame([trajectory_counts(calls_of(c), s) for c, s in zip(df["calls"], status)], index=df.index)
    return pd.concat([df[cols], counts], axis=1).groupby(cols, sort=False, as_index=False)[list(COLUMNS)].sum()


def with_counts(summary: Any, table: Any) -> Any:
    """``summary`` (one row per cell) with :data:`COLUMNS` added (0 where the ledger has no rows)."""
    by = [c for c in ("model", "method", "benchmark") if c in summary.columns]
    counts = cell_counts(table, tuple(by))
    out = summary.drop(columns=[c for c in COLUMNS if c in summary.columns]).merge(counts, on=by, how="left")
    for c in COLUMNS:
        out[c] = out[c].fillna(0).astype(int)
    return out
