"""Ray start-up on a loaded machine, simulated: Ray's own start-up timeout ("The current node
timed out during startup", a fixed 30 s inside ray.init) is retried with backoff, then ends as
one line and exit 5; a signal between attempts ends as an interrupted start-up (130). Fast:
ray.init is replaced, no cluster starts."""
from __future__ import annotations

import json
import os
import signal

import pytest
import ray

from opteval.cluster import runtime

RAY_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet "
               "failed to startup or the GCS has become overloaded.")


@pytest.fixture
def fast_backoff(monkeypatch):
    monkeypatch.setattr(runtime, "STARTUP_BACKOFF_S", 0.01)
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: None)  # nothing was started


def fake_init(monkeypatch, failures: int, on_call=None) -> list[dict]:
    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        if on_call is not None:
            on_call(len(calls))
        if len(calls) <= failures:
            raise Exception(RAY_TIMEOUT)  # what ray/_private/node.py raises

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    return calls


def test_a_startup_timeout_is_retried_then_succeeds(monkeypatch, fast_backoff, capsys):
    calls = fake_init(monkeypatch, failures=2)
    rt = runtime.connect(None, num_cpus=1)
    assert rt.started_local and len(calls) == 3
    err = capsys.readouterr().err
    assert err.count("start-up attempt") == 2 and "retrying in" in err
    assert calls[0]["_node_ip_address"] == "127.0.0.1" and calls[0]["dashboard_host"] == "127.0.0.1"


def test_a_usage_error_is_not_retried(monkeypatch, fast_backoff):
    calls: list[int] = []

    def init(**kwargs):
        calls.append(1)
        raise ValueError("num_cpus must be a non-negative integer")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(ValueError):
        runtime.connect(None, num_cpus=1)
    assert calls == [1]


def test_attempts_exhausted_is_one_line_and_exit_5(tmp_path, monkeypatch, fast_backoff, capsys):
    from opteval.jobs import sweep

    calls = fake_init(monkeypatch, failures=99)
    rc = sweep.main([f"sweep.output_dir={tmp_path}", "sweep.name=busy", "tracking.enabled=false",
                     "methods=[direct]", "limit_problems=1", "samples.default=1"])
    assert rc == sweep.EXIT_STARTUP == 5
    assert len(calls) == runtime.STARTUP_ATTEMPTS
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("startup error: Ray did not start after") and "timed out during startup" in last
    assert "Traceback" not in err
    assert not (tmp_path / "busy" / "lease.json").exists()  # the writer lease is released


def test_a_signal_between_attempts_is_an_interrupted_startup(tmp_path, monkeypatch, fast_backoff, capsys):
    from opteval.jobs import sweep

    def sigint_on_first(n: int) -> None:
        if n == 1:
            os.kill(os.getpid(), signal.SIGINT)  # recorded by the driver's handler, honoured at the checkpoint

    calls = fake_init(monkeypatch, failures=99, on_call=sigint_on_first)
    rc = sweep.main([f"sweep.output_dir={tmp_path}", "sweep.name=busysig", "tracking.enabled=false",
                     "methods=[direct]", "limit_problems=1", "samples.default=1"])
    assert rc == 130 and len(calls) == 1
    assert "interrupted during startup" in capsys.readouterr().out
    assert not (tmp_path / "busysig" / "lease.json").exists()


def test_rewards_score_exits_5_when_ray_does_not_start(tmp_path, monkeypatch, fast_backoff, capsys):
    from opteval.jobs import rewards

    fake_init(monkeypatch, failures=99)
    comp, ans = tmp_path / "c.jsonl", tmp_path / "a.jsonl"
    comp.write_text(json.dumps({"id": "p1", "completion": "```python\nsubmit(1)\n```"}) + "\n")
    ans.write_text(json.dumps({"id": "p1", "answer": 1}) + "\n")
    rc = rewards.main(["score", "--completions", str(comp), "--answers", str(ans), "--scheme", "correct",
                       "--out", str(tmp_path / "r.jsonl")])
    assert rc == rewards.EXIT_STARTUP == 5
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("rewards: startup error: Ray did not start") and "Traceback" not in err
