"""``opteval show`` finds one trajectory by reading keys, then that row alone (issue 44: it read the
whole ledger, transcripts included, to print one of them)."""
from __future__ import annotations

from typing import Any

import pytest

from opteval.jobs.report import UsageError
from opteval.jobs.show import locate
from opteval.sweepcore.ledger import Ledger
from tests.sweepcore.test_ledger import _row, _setup


def _ledger(tmp_path) -> tuple[Ledger, list[Any]]:
    _, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    led.record_plan(plan)
    led.commit([_row(p) for p in plan[:4]])
    return led, plan


def _spy(led: Ledger, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every read_table call; any that would read every column of every row fails the test."""
    calls: list[dict[str, Any]] = []
    real = led.read_table

    def read_table(columns: list[str] | None = None, filter: Any = None) -> Any:
        calls.append({"columns": columns, "filter": filter})
        assert columns is not None or filter is not None, "read every column of every row"
        return real(columns=columns, filter=filter)

    monkeypatch.setattr(led, "read_table", read_table)
    return calls


def test_a_committed_key_is_read_alone(tmp_path, monkeypatch):
    led, plan = _ledger(tmp_path)
    calls = _spy(led, monkeypatch)
    row = locate(led, plan[2].key)
    assert row["key"] == plan[2].key and row["status"] == "submitted" and row["calls"]
    assert [c["columns"] for c in calls] == [["key"], None]  # the keys, then the one row whole
    assert led.read_table(filter=calls[-1]["filter"]).num_rows == 1


def test_a_planned_key_never_committed_shows_as_missing(tmp_path, monkeypatch):
    led, plan = _ledger(tmp_path)
    _spy(led, monkeypatch)
    missing = locate(led, plan[-1].key)
    assert missing["key"] == plan[-1].key and missing["status"] == "missing"
    assert missing["error"] == "planned, not committed"


def test_an_ambiguous_or_unknown_prefix_names_what_to_give(tmp_path, monkeypatch):
    led, plan = _ledger(tmp_path)
    _spy(led, monkeypatch)
    model = plan[0].key.split("/")[0]
    with pytest.raises(UsageError, match=f"trajectory keys start with '{model}/'; give more of it"):
        locate(led, f"{model}/")
    with pytest.raises(UsageError, match="no trajectory key starts with 'nope'"):
        locate(led, "nope")
