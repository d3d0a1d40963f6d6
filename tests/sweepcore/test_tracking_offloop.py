"""A hung tracking server never blocks the sweep: calls run off the event loop, bounded in time,
and the warning's re-log hint names the tracking server."""
from __future__ import annotations

import asyncio
import socket
import time
import warnings

from opteval.sweepcore.tracking import OffLoop, Tracker, TrackingWarning, sync_command


def _hung_server() -> tuple[socket.socket, str]:
    """A TCP port that accepts connections (kernel backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s, f"http://127.0.0.1:{s.getsockname()[1]}"


def test_hung_server_costs_at_most_the_timeout_and_turns_tracking_off(tmp_path):
    sock, uri = _hung_server()
    try:
        tracker = Tracker(uri, "exp", "sw", str(tmp_path))
        off = OffLoop(tracker, timeout_s=1.0)
        t0 = time.monotonic()
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            assert off.call("start runs", tracker.start, {}, "fp", [("m", "x")]) is None
        assert time.monotonic() - t0 < 3.0
        assert not tracker.enabled and not tracker.active
        text = " ".join(str(w.message) for w in got if issubclass(w.category, TrackingWarning))
        assert "did not answer within 1s" in text and f"tracking.uri={uri}" in text
        # afterwards nothing is even attempted
        t0 = time.monotonic()
        assert off.call("end runs", tracker.finish) is None and time.monotonic() - t0 < 0.1
    finally:
        sock.close()


def test_event_loop_never_waits_on_a_slow_progress_call(tmp_path):
    tracker = Tracker("sqlite:///unused.db", "exp", "sw", str(tmp_path))
    off = OffLoop(tracker, timeout_s=30.0)
    calls = []

    def slow(n):
        time.sleep(1.0)
        calls.append(n)

    async def loop():
        t0 = time.monotonic()
        started = [off.submit("log progress", slow, i) for i in range(5)]
        return time.monotonic() - t0, started

    took, started = asyncio.run(loop())
    assert took < 0.2 and started == [True, False, False, False, False] and off.skipped == 4
    assert off.call("end runs", lambda: "done") == "done" and calls == [0]  # waits for the pending one


def test_relog_hint_carries_the_tracking_uri():
    assert sync_command("s", "out", "http://mlflow:5000") == \
        "opteval report sweep.name=s sweep.output_dir=out tracking.uri=http://mlflow:5000 --sync-mlflow"
