"""No silent fallback, end to end: the config key, the executor's refusal, the report's count.

The node without containment is modelled by ``asuser --deny-userns`` (no capabilities, user
namespaces forbidden), the way a pod whose seccomp profile blocks ``unshare`` would be.
"""
from __future__ import annotations

import asyncio
import functools
import json

import pandas as pd
import pytest

from opteval.evalcore.sandbox import ForkServer, Limits
from opteval.evalcore.sandbox.asuser import unprivileged_launcher


def _denied() -> list[str]:
    launcher, why = unprivileged_launcher(deny_userns=True)
    if launcher is None:
        pytest.skip(f"cannot model a node without user namespaces: {why}")
    return launcher


def test_config_key_defaults_to_refusal_and_is_operational():
    from opteval.sweepcore.config import item_fingerprint, load_config, resolved, sweep_fingerprint

    off = load_config([])
    on = load_config(["limits.allow_uncontained=true"])
    assert off.limits.allow_uncontained is False and on.limits.allow_uncontained is True
    # the manifest stores the resolved config: it records the choice ...
    assert resolved(on)["limits"]["allow_uncontained"] is True
    # ... but toggling it neither refuses a resumed sweep nor re-keys its trajectories
    assert sweep_fingerprint(off) == sweep_fingerprint(on)
    m, meth, b = off.models[0], off.methods[0], off.benchmarks[0]
    assert item_fingerprint(off, m, meth, b) == item_fingerprint(on, m, meth, b)
    with pytest.raises(ValueError, match="allow_uncontained"):
        Limits(allow_uncontained="yes")  # type: ignore[arg-type]


def _actor(monkeypatch, allow: bool):
    """The executor actor's own class, outside Ray, on a node that cannot contain."""
    import opteval.evalcore.sandbox as sandbox
    from opteval.cluster.actors.executors import ExecutorActor

    monkeypatch.setattr(sandbox, "ForkServer", functools.partial(ForkServer, pool_size=1, launcher=_denied()))
    cls = ExecutorActor.__ray_metadata__.modified_class  # type: ignore[attr-defined]  # set by @ray.remote
    return cls(1, Limits(wall_s=20, allow_uncontained=allow))


def test_executor_refuses_to_start_uncontained_by_default(monkeypatch):
    actor = _actor(monkeypatch, allow=False)
    try:
        info = asyncio.run(actor.warm())
        assert info["contained"] is False and "allow_uncontained" in info["refused"]
    finally:
        actor._server.close()


def test_executor_allowed_uncontained_marks_every_result(monkeypatch):
    actor = _actor(monkeypatch, allow=True)
    try:
        info = asyncio.run(actor.warm())
        assert (info["contained"], info["refused"]) == (False, "")
        r = asyncio.run(actor.run("submit(5)"))
        assert (r.outcome, r.submission, r.contained) == ("ok", 5, False)
    finally:
        actor._server.close()


def test_report_counts_uncontained_runs():
    from opteval.evalcore.reporting.report import uncontained_runs

    df = pd.DataFrame({"execs": [json.dumps([{"outcome": "ok", "contained": True}]),
                                 json.dumps([{"outcome": "ok", "contained": False},
                                             {"outcome": "error", "contained": False}]),
                                 None]})
    assert uncontained_runs(df) == (3, 2)
    import pyarrow as pa

    assert uncontained_runs(pa.Table.from_pandas(df)) == (3, 2)
