"""RaySession.restart: a fresh interpreter on the same actor, or a new session when the actor lost it."""
from __future__ import annotations

import asyncio

import pytest
import ray

from opteval.cluster.actors.executors import ExecutorActor, RayExecutor, _Shared
from opteval.evalcore.sandbox.types import KILLED, Limits

pytestmark = pytest.mark.ray

LIMITS = Limits(wall_s=2, cpu_s=2)


def test_restart_after_a_killed_cell_and_after_a_lost_actor(ray_cluster):
    actor = ExecutorActor.options(num_cpus=0.5, max_restarts=-1).remote(1, LIMITS)  # type: ignore[attr-defined]
    ray.get(actor.ping.remote(), timeout=120)
    ex = RayExecutor(_Shared([actor]), LIMITS)

    async def go():
        s = await ex.open_session()
        await s.run_cell("x = 1", LIMITS)
        killed = await s.run_cell("while True:\n    pass\n", LIMITS)
        dead = await s.run_cell("print(1)", LIMITS)
        await s.restart()
        fresh = await s.run_cell("print('x' in globals())\ny = 5", LIMITS)
        same_actor_losses = list(ex.losses)
        ray.kill(actor, no_restart=False)  # the actor restarts empty: the session is gone with it
        await asyncio.sleep(1.0)
        lost = await s.run_cell("print(y)", LIMITS)
        for _ in range(60):  # the facade opens a new session once the actor is back
            await s.restart()
            again = await s.run_cell("submit(7)", LIMITS)
            if again.outcome == "ok":
                break
            await asyncio.sleep(0.5)
        await s.close()
        return killed, dead, fresh, same_actor_losses, lost, again

    killed, dead, fresh, same_actor_losses, lost, again = asyncio.run(go())
    assert killed.outcome == KILLED and "wall time limit" in killed.note
    assert dead.outcome == KILLED
    assert fresh.outcome == "ok" and fresh.stdout.strip() == "False"
    assert same_actor_losses == []  # a limit hit is the program's doing, not an infrastructure loss
    assert lost.outcome == KILLED and ex.losses
    assert again.outcome == "ok" and again.submission == 7
    ray.kill(actor, no_restart=True)
