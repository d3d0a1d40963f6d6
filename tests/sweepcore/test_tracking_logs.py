"""MLflow's and SQLAlchemy's own logs stay off the terminal; an unopenable SQLite store is named.

A real MLflow client on a SQLite file that is not a database (what a damaged or foreign file at
``tracking.uri`` gives): MLflow fails inside SQLAlchemy and logs about it; the terminal shows only
the tracker's own warning and the end line, which names the store and why.
"""
from __future__ import annotations

import logging

import pytest

from opteval.sweepcore.plan import plan_counts
from opteval.sweepcore.tracking import Tracker, TrackingWarning
from opteval.sweepcore.tracking.library_logs import LOG_FILE, route_library_logs, sqlite_problem
from opteval.sweepcore.tracking.offloop import end_line
from tests.sweepcore.test_tracking import _sweep


def test_an_unopenable_sqlite_store_is_named_in_one_line_without_a_traceback(tmp_path, capfd):
    cfg, res, fp, plan, led = _sweep(tmp_path)
    db = tmp_path / "broken.db"
    db.write_bytes(b"this is not an SQLite database " * 200)
    tracker = Tracker(f"sqlite:///{db}", "opteval", "trk", str(tmp_path))
    with pytest.warns(TrackingWarning):
        assert tracker.start(res, fp, plan_counts(plan).keys()) is False
    line = end_line(tracker)
    assert line is not None and f"the SQLite store {db} cannot be opened for writing" in line, line
    assert "DatabaseError" in line and "not reachable" not in line
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "sqlalchemy" not in (out + err).lower(), (out + err)[-3000:]
    # MLflow's loggers now write beside the ledger (the file appears with the first record)
    handlers = logging.getLogger("mlflow").handlers
    assert [getattr(h, "baseFilename", None) for h in handlers] == [str(tmp_path / "trk" / LOG_FILE)]


def test_library_records_go_to_the_file_not_the_terminal(tmp_path, capfd):
    import mlflow  # noqa: F401  (its import sets its loggers up: routing must override that)

    path = route_library_logs(str(tmp_path / "sweep"))
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        logging.getLogger("mlflow.store.db.utils").exception("a store failure")
        logging.getLogger("sqlalchemy.pool").error("a pool failure")
    out, err = capfd.readouterr()
    assert "a store failure" not in out + err and "a pool failure" not in out + err
    assert path is not None
    text = open(path).read()
    assert "a store failure" in text and "Traceback" in text and "a pool failure" in text


def test_sqlite_problem_says_nothing_for_a_good_store_or_another_uri(tmp_path):
    import sqlite3

    good = tmp_path / "good.db"
    sqlite3.connect(good).close()
    assert sqlite_problem(f"sqlite:///{good}") is None
    assert sqlite_problem(f"sqlite:///{tmp_path}/new.db") is None  # created on first use
    assert "cannot be created" in str(sqlite_problem(f"sqlite:///{tmp_path}/no/such/dir/x.db"))
    assert sqlite_problem("http://127.0.0.1:5000") is None
