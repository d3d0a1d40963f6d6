"""Executor actors and the RayExecutor facade: spreading, sessions, and losses that never hang."""
from __future__ import annotations

import asyncio
import time

import pytest
import ray

from opteval.cluster.actors.executors import ExecutorActor, RayExecutor, _Shared
from opteval.evalcore.sandbox.types import KILLED, Limits

pytestmark = pytest.mark.ray

LIMITS = Limits(wall_s=20, cpu_s=20)


@pytest.fixture(scope="module")
def executors(ray_cluster):
    handles = [ExecutorActor.options(num_cpus=0.5).remote(1, LIMITS) for _ in range(2)]  # type: ignore[attr-defined]
    ray.get([h.ping.remote() for h in handles], timeout=120)
    yield handles
    for h in handles:
        ray.kill(h, no_restart=True)


def test_one_shot_runs_spread_and_submit(executors):
    shared = _Shared(executors)
    ex = RayExecutor(shared, LIMITS)

    async def go():
        return await asyncio.gather(*[ex.run(f"submit({i} * 2)", LIMITS) for i in range(6)])

    results = asyncio.run(go())
    assert [r.outcome for r in results] == ["ok"] * 6
    assert [r.submission for r in results] == [i * 2 for i in range(6)]
    assert ex.losses == [] and shared.load == [0, 0]


def test_session_keeps_state_on_one_actor(executors):
    ex = RayExecutor(_Shared(executors), LIMITS)

    async def go():
        s = await ex.open_session()
        a = await s.run_cell("x = 41", LIMITS)
        b = await s.run_cell("submit(x + 1)", LIMITS)
        await s.close()
        return a, b

    a, b = asyncio.run(go())
    assert a.outcome == "ok" and b.outcome == "ok" and b.submission == 42


def test_killed_executor_reports_killed_and_session_lost(ray_cluster):
    """In-flight run on an actor that dies -> killed (no hang); its session is lost after restart."""
    victim = ExecutorActor.options(num_cpus=0.5, max_restarts=-1).remote(1, LIMITS)  # type: ignore[attr-defined]
    ray.get(victim.ping.remote(), timeout=120)
    ex = RayExecutor(_Shared([victim]), LIMITS)

    async def go():
        s = await ex.open_session()
        assert (await s.run_cell("y = 1", LIMITS)).outcome == "ok"
        slow = asyncio.create_task(ex.run("import time\ntime.sleep(15)\nsubmit(1)", LIMITS))
        await asyncio.sleep(2.0)
        ray.kill(victim, no_restart=False)
        t0 = time.monotonic()
        res = await slow
        waited = time.monotonic() - t0
        cell = await s.run_cell("submit(y)", LIMITS)
        again = await ex.run("submit(7)", LIMITS)  # the restarted actor serves new runs
        return res, waited, cell, again

    res, waited, cell, again = asyncio.run(go())
    assert res.outcome == KILLED and "executor lost" in res.note
    assert waited < 12, "a dead executor must not wait for the program's own time"
    assert cell.outcome == KILLED
    assert again.outcome == "ok" and again.submission == 7
    assert len(ex.losses) >= 2
    ray.kill(victim, no_restart=True)
