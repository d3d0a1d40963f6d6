"""Truncated and rejected calls counted per cell from the ledger's ``calls`` column."""
from __future__ import annotations

import json

import pandas as pd

from opteval.evalcore.finish_reasons import cell_counts, rejection, trajectory_counts, with_counts

REJ = "rejected: HTTP 400: max_tokens cannot be greater than max_model_len"


def test_rejection_parses_the_clients_finish_reason():
    assert rejection(REJ) == (400, "max_tokens cannot be greater than max_model_len")
    assert rejection("stop") is None and rejection(None) is None and rejection("length") is None


def test_a_trajectory_ended_by_a_truncated_or_rejected_last_call():
    calls = [{"finish_reason": "length"}, {"finish_reason": REJ}, {"finish_reason": "length"}]
    assert trajectory_counts(calls, "no_submission") == {
        "truncated_calls": 2, "rejected_calls": 1, "ended_truncated": 1, "ended_rejected": 0}
    # a trajectory that submitted was not ended by them, whatever its calls
    assert trajectory_counts(calls, "submitted")["ended_truncated"] == 0
    assert trajectory_counts([{"finish_reason": REJ}], "no_submission")["ended_rejected"] == 1


def _row(key, method, reasons, status="no_submission"):
    return {"key": key, "model": "m", "method": method, "benchmark": "sample", "status": status,
            "calls": json.dumps([{"finish_reason": r} for r in reasons])}


def test_cell_counts_and_a_summary_without_rows_gets_zeros():
    df = pd.DataFrame([_row("a", "direct", ["length"]), _row("b", "direct", ["stop", "length"], "submitted"),
                       _row("b", "direct", ["length", "length"]),  # the same key again: the last row wins
                       _row("c", "opticycle", [REJ, "stop"])])
    got = cell_counts(df).set_index("method")
    assert got.loc["direct", "truncated_calls"] == 3 and got.loc["direct", "ended_truncated"] == 2
    assert got.loc["opticycle", "rejected_calls"] == 1 and got.loc["opticycle", "ended_rejected"] == 0
    summary = pd.DataFrame([{"model": "m", "method": "direct", "benchmark": "sample"},
                            {"model": "m", "method": "optistate", "benchmark": "sample"}])
    out = with_counts(summary, df).set_index("method")
    assert out.loc["direct", "truncated_calls"] == 3 and out.loc["optistate", "truncated_calls"] == 0
    # a ledger written before any of this (no calls column) gives zeros, not an error
    assert with_counts(summary, df.drop(columns=["calls"]))["rejected_calls"].tolist() == [0, 0]
