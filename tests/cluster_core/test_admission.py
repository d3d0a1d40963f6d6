"""Admission per model (cluster/driver/admission.py): pools sized from serving capacity, the
workers' global bound shared out loud, an undeliverable per-model limit refused (exit 2)."""
from __future__ import annotations

import asyncio

import pytest

from opteval.cluster.driver.admission import SANDBOX_FACTOR, Admission, Pool, check_limits, harness_factor
from opteval.sweepcore.config_errors import ConfigError
from tests.cluster_core.test_sweep_cli import _one_line_error, _run


def test_limit_above_what_the_workers_hold_is_refused_naming_the_keys():
    with pytest.raises(ConfigError) as err:
        check_limits(2, 64, 256)  # the measured case: 2 x 64 gave 126, silently
    msg = str(err.value)
    for key in ("cluster.max_in_flight_per_model=256", "cluster.workers=4", "cluster.worker_concurrency",
                "2 x 64 = 128"):
        assert key in msg
    assert check_limits(4, 64, 256) == 256


def test_sweep_refuses_it_with_one_line_and_exit_2(tmp_path):
    r = _run("cluster.max_in_flight_per_model=256", f"sweep.output_dir={tmp_path}", "tracking.enabled=false")
    _one_line_error(r, "cluster.max_in_flight_per_model=256", "cluster.workers=4")


def test_pools_follow_serving_capacity_and_share_the_global_bound_out_loud():
    said: list[str] = []
    adm = Admission(global_bound=300, per_model_cap=1000, say=said.append)
    small = adm.open("small", replicas=1, max_ongoing=44, factor=SANDBOX_FACTOR)
    assert small.limit == 66  # 1 x 44 x 1.5: its own pool, from its own batch
    adm.open("big", replicas=2, max_ongoing=88, factor=SANDBOX_FACTOR)  # its target: 2 x 88 x 1.5 = 264
    # 66 + 264 > 300: both scaled in proportion (300/330), and said so
    assert (adm.limit("small"), adm.limit("big")) == (60, 240)
    assert any("add up to 330 > the workers' 300" in s and "raise cluster.workers" in s for s in said)
    adm.close("big")
    assert small.limit == 66  # its share comes back when the other model leaves
    adm.grow("small", 3)
    assert small.limit == 198


def test_a_cap_below_capacity_is_printed():
    said: list[str] = []
    adm = Admission(global_bound=512, per_model_cap=64, say=said.append)
    adm.open("m", replicas=2, max_ongoing=48, factor=1.5)
    assert adm.limit("m") == 64
    assert any("cluster.max_in_flight_per_model=64 is below its serving capacity 144" in s for s in said)


def test_factor_of_a_models_methods():
    assert harness_factor(["direct"]) < harness_factor(["direct", "opticycle"]) == SANDBOX_FACTOR


def test_pool_resizes_while_held():
    async def main() -> list[int]:
        pool, order = Pool(1), []

        async def one(i: int) -> None:
            await pool.acquire()
            order.append(i)
            await asyncio.sleep(0.01)
            pool.release()

        tasks = [asyncio.create_task(one(i)) for i in range(4)]
        await asyncio.sleep(0.001)
        assert pool.held == 1
        pool.resize(3)  # a replica group came up: waiters admitted at once, in order
        await asyncio.sleep(0)
        assert pool.held == 3
        await asyncio.gather(*tasks)
        assert pool.held == 0
        return order

    assert asyncio.run(main()) == [0, 1, 2, 3]
