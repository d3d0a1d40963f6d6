"""The report on a sweep barely begun (issue 44): a plan far larger than its committed rows.

Most planned trajectories are then missing, so whatever the report does per missing trajectory is
most of its memory. These check that the missing list is built from the few columns it names (never
a copy of the whole plan-sized frame) and says exactly what the row-by-row rule says, and that the
plan's keys are matched without a Python set of them.
"""
from __future__ import annotations

import math
import tracemalloc
from typing import Any

import pandas as pd
import pytest

from opteval.evalcore.records import STATUS_ERROR
from opteval.evalcore.reporting import build_report, frame
from tests.report import synth

SAMPLES = 1500  # planned samples per problem: 8 groups x 2 problems x 1500 = 24,000 keys, ~40 committed


def _plan() -> pd.DataFrame:
    rows = []
    for (model, method, bench), _ in sorted(synth.PLANNED.items()):
        for pid in sorted(synth.ANSWERS[bench].answers):
            for s in range(SAMPLES):
                rows.append({"key": f"{model}/{method}/{bench}/{pid}/{s}/h", "model": model, "method": method,
                             "benchmark": bench, "problem_id": pid, "sample": s})
    return pd.DataFrame(rows)


def _old_missing(traj: pd.DataFrame) -> pd.DataFrame:
    """The missing list as the report built it before issue 44: row by row over a full copy."""
    def nn(v: Any) -> Any:
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    m = traj[(~traj["present"]) | (traj["status"] == STATUS_ERROR)]
    reasons = [frame.NOT_RUN if not pres else (nn(err) or "error") for pres, err in zip(m["present"], m["error"])]
    keys = [(nn(k) or f"{a}/{b}/{c}/{d}/{e}") for k, a, b, c, d, e in
            zip(m["key"], m["model"], m["method"], m["benchmark"], m["problem_id"], m["sample"])]
    return pd.DataFrame({"key": keys, "model": m["model"].values, "method": m["method"].values,
                         "benchmark": m["benchmark"].values, "problem_id": m["problem_id"].values,
                         "sample": m["sample"].values, "reason": reasons})


@pytest.fixture(scope="module")
def prep() -> frame.Prepared:
    return frame.prepare(synth.ledger_frame(), synth.ANSWERS, _plan())


def test_missing_list_is_the_row_by_row_rule(prep: frame.Prepared) -> None:
    committed = len(synth.rows())
    errors = sum(r["status"] == STATUS_ERROR for r in synth.rows())
    assert len(prep.traj) == 16 * SAMPLES and int(prep.traj["present"].sum()) == committed
    assert len(prep.missing) == 16 * SAMPLES - committed + errors
    old = _old_missing(prep.traj)
    pd.testing.assert_frame_equal(prep.missing.astype(object), old.astype(object), check_dtype=False)
    assert "timeout exception" in set(prep.missing["reason"]) and frame.NOT_RUN in set(prep.missing["reason"])


def test_missing_list_copies_only_its_columns(prep: frame.Prepared) -> None:
    """Before issue 44 the list copied every column of the missing rows: ~the whole frame's size."""
    whole = int(prep.traj.memory_usage(index=False, deep=False).sum())
    tracemalloc.start()
    try:
        frame._missing(prep.traj)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < whole / 3, (peak, whole)


def test_plan_keys_matched_without_a_python_set(prep: frame.Prepared, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row whose key is not planned is left out, as before; the match is Arrow's (no ``set``)."""
    rows = synth.ledger_frame()
    stray = rows.iloc[[0]].assign(key="not/planned")
    seen: list[int] = []
    real_set = set

    class CountingSet(real_set):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            seen.append(len(self))

    monkeypatch.setattr("builtins.set", CountingSet)
    again = frame.prepare(pd.concat([rows, stray], ignore_index=True), synth.ANSWERS, _plan())
    monkeypatch.undo()
    assert max(seen, default=0) < 1000  # never a set of the plan's 24,000 keys
    assert int(again.traj["present"].sum()) == int(prep.traj["present"].sum())
    assert list(frame._isin(pd.Series(["a", None, "c"], dtype=object), pd.Series(["a", "b"]))) == [True, False, False]
    assert list(frame._isin(pd.Series([1, 2]), pd.Series(["1", 2], dtype=object))) == [False, True]


def test_report_tables_on_a_wide_plan(prep: frame.Prepared) -> None:
    """The tables read the plan-sized frame through their own columns; counts stay the plan's."""
    rep = build_report(synth.ledger_frame(), synth.ANSWERS, _plan(), n_resamples=200, compare=("direct", "opticycle"))
    fs = rep.failures[rep.failures["benchmark"] != "all"]
    assert int(fs["planned"].sum()) == 16 * SAMPLES
    assert (fs[list(frame.CATEGORIES)].sum(axis=1) == fs["planned"]).all()
    assert len(rep.missing) == len(prep.missing)
    assert set(rep.curves["n_problems"]) == {2}
    assert len(rep.paired) and set(rep.difficulty["planned"]) >= {0}
