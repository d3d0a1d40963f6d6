"""The rejection guard (a 400 every call gets is a configuration error) and the exit code."""
from __future__ import annotations

import io

import pyarrow as pa

from opteval.cluster.driver.outcome import EXIT_CONFIG, EXIT_ERROR_ROWS, EXIT_OK, sweep_exit
from opteval.cluster.driver.rejections import RejectionGuard
from opteval.evalcore.records import CallRecord, Trajectory

REJ = "rejected: HTTP 400: max_tokens cannot be greater than max_model_len"


def _traj(*reasons: str) -> Trajectory:
    return Trajectory("m", "direct", "sample", "p", 0, 42,
                      calls=[CallRecord(1, "generate", None, None, None, 0.1, r) for r in reasons])


def test_the_same_400_n_times_in_a_row_trips_isolated_ones_do_not():
    g = RejectionGuard(streak=3)
    g.observe("m", _traj(REJ, REJ))
    g.observe("m", _traj("stop"))  # an answered call ends the streak
    g.observe("m", _traj(REJ, "rejected: HTTP 400: another text"))  # a different text starts a new one
    g.observe("m", _traj("rejected: HTTP 413: too large", REJ))  # not a 400: ends it
    assert not g.should_stop("m")
    g.observe("m", _traj(REJ))
    g.observe("m", _traj(REJ, REJ))
    assert g.should_stop("m") and not g.should_stop("other")
    line = g.tripped["m"]
    assert "model 'm'" in line and "max_tokens cannot be greater than max_model_len" in line and "\n" not in line


def _table(*rows: tuple[str, str, str | None]) -> pa.Table:
    return pa.table({"key": [r[0] for r in rows], "status": [r[1] for r in rows], "error": [r[2] for r in rows]})


def test_exit_codes():
    out = io.StringIO()
    ok = _table(("a", "submitted", None), ("b", "no_submission", None))
    assert sweep_exit("s", ok, out=out) == EXIT_OK and out.getvalue() == ""
    bad = _table(("a", "error", "endpoint unreachable: refused"), ("b", "error", "endpoint unreachable: refused"),
                 ("c", "submitted", None))
    assert sweep_exit("s", bad, out=out) == EXIT_ERROR_ROWS
    said = out.getvalue()
    assert "2 status=error row(s)" in said and "2x endpoint unreachable: refused" in said
    assert "sweep.retry_errors=true" in said and "sweep.allow_errors=true" in said
    assert sweep_exit("s", bad, allow_errors=True, out=io.StringIO()) == EXIT_OK
    assert sweep_exit("s", bad, keys=["c"], out=io.StringIO()) == EXIT_OK  # rows outside the plan do not count
    err = io.StringIO()
    assert sweep_exit("s", ok, config_errors={"m": "model 'm': refused"}, out=err) == EXIT_CONFIG
    assert err.getvalue() == "config error: model 'm': refused\n"
