"""The continuous GPU schedule (opteval.cluster.driver.schedule), which replaced stage packing
(``pack_stages``/``run_stages``): models flow onto freed GPUs, largest remaining work first,
placement checked by the real rules, every model torn down the moment it is done.

A fake fleet (placement through ``opteval.sweepcore.placement.plan_placement`` on node dicts) and a
``run_model`` that sleeps in proportion to a model's items: no Ray, a fraction of a second."""
from __future__ import annotations

import asyncio
import copy

import pytest

from opteval.cluster.driver.admission import Admission
from opteval.cluster.driver.schedule import GpuQueue, ModelWork, model_works, run_schedule
from opteval.cluster.runtime import PlacementError
from opteval.cluster.serve import llm_serving as ls
from opteval.sweepcore.config import ServingSection, as_plain, model_config
from opteval.sweepcore.placement import placement, plan_placement, stage_gpus, with_replicas


def _m(name: str, min_replicas: int | None = None) -> dict:
    m = copy.deepcopy(as_plain(model_config(name)))
    if min_replicas is not None:
        m["vllm"]["deployment"]["autoscaling_config"]["min_replicas"] = min_replicas
        m["vllm"]["deployment"]["autoscaling_config"]["max_replicas"] = max(
            min_replicas, m["vllm"]["deployment"]["autoscaling_config"]["max_replicas"])
    return m


PAPER = ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B", "Qwen3.5-0.8B", "Qwen3.5-2B",
         "Qwen3.5-4B", "Qwen3.5-9B", "Qwen3.5-27B", "Qwen3.6-27B"]


class Fleet:
    """``gpus`` fake GPUs on one node; placement by the real rules; records what it holds."""

    def __init__(self, gpus: int, fail: str | None = None) -> None:
        self.total_gpus = gpus
        self.nodes = [{"GPU": float(gpus), "CPU": 64.0}]
        self.held: dict[str, list[dict]] = {}
        self.peak = 0
        self.fail = fail
        self.torn: list[str] = []

    def _free(self) -> list[dict]:
        free = [dict(n) for n in self.nodes]
        for cfgs in self.held.values():
            for c in cfgs:
                pl = placement(c, ServingSection())
                free[0]["GPU"] -= pl["gpus"] * pl["replicas"]
        return free

    def fits(self, m: ModelWork, replicas: int) -> bool:
        return not plan_placement([with_replicas(m.cfg, replicas)], ServingSection(), self._free())

    async def deploy(self, m: ModelWork, replicas: int, group: int) -> str:
        cfg = with_replicas(m.cfg, replicas)
        ls.check_placement([cfg], None, self._free())  # placement checked before deploying
        self.held.setdefault(m.name, []).append(cfg)
        self.peak = max(self.peak, self.total_gpus - int(self._free()[0]["GPU"]))
        await asyncio.sleep(0.001)
        if m.name == self.fail:
            raise TimeoutError(f"{m.name} not ready")
        return f"http://fake/{m.name}/{group}"

    async def teardown(self, m: ModelWork) -> list[str]:
        self.torn.append(m.name)
        return [ls.llm_app_name(m.name, g) for g in range(len(self.held.pop(m.name, [])))]


def _works(names: list[str], counts: dict[str, int] | None = None, **cfgs) -> list[ModelWork]:
    model_cfgs = {n: cfgs.get(n) or _m(n) for n in names}
    items = {n: list(range((counts or {}).get(n, 10))) for n in names}
    return model_works(model_cfgs, items, {n: ["direct"] for n in names}, ServingSection(), 64)  # type: ignore[arg-type]


def _run(works: list[ModelWork], fleet: Fleet, barrier: bool = False, seconds_per_item: float = 0.002):
    order: list[str] = []

    async def run_model(m: ModelWork, ep: str) -> None:
        order.append(m.name)
        await asyncio.sleep(seconds_per_item * len(m.items) * m.cost / 10)
        m.left = 0

    async def main():
        return await run_schedule(works, fleet, run_model, Admission(512, 256, say=lambda s: None),
                                  barrier=barrier, say=lambda s: None)

    return asyncio.run(main()), order


def test_paper_backbones_on_8_gpus_flow_onto_freed_gpus():
    works = _works(PAPER)
    assert sum(w.gpus for w in works) == 13  # nine 1-GPU models + two 2-GPU models
    fleet = Fleet(8)
    log, order = _run(works, fleet)
    assert sorted(order) == sorted(PAPER)  # every model once
    assert fleet.peak <= 8 and not fleet.held  # never more than the GPUs; nothing left deployed
    events = [(k, m) for k, m, _ in log.events]
    first_down = next(i for i, (k, _) in enumerate(events) if k == "torn down")
    later = [m for k, m in events[first_down:] if k == "deploying"]
    assert later, "a freed GPU took the next model while the others kept running"
    still_up = {m for k, m in events[:first_down] if k == "deploying"} - {events[first_down][1]}
    assert still_up, "the other models were still running when the next one deployed"


def test_largest_remaining_work_first():
    works = _works(["Qwen3-0.6B", "Qwen3-14B", "Qwen3-4B"], {"Qwen3-0.6B": 100, "Qwen3-14B": 10, "Qwen3-4B": 30})
    q = GpuQueue(works)
    assert q.names() == ["Qwen3-14B", "Qwen3-4B", "Qwen3-0.6B"]  # 140, 120, 60 relative GPU-seconds
    # a model that does not fit now is skipped, not waited for
    picked = q.pop_fitting(lambda m: m.name != "Qwen3-14B")
    assert picked is not None and picked.name == "Qwen3-4B"


def test_barrier_replays_the_old_stages():
    works = _works(["Qwen3.5-27B", "Qwen3.6-27B", "Qwen3-4B"])
    fleet = Fleet(3)
    log, _ = _run(works, fleet, barrier=True)
    kinds = [(k, m) for k, m, _ in log.events if k in ("deploying", "torn down")]
    # first fit in config order: 27B + 4B share the first stage, the second 27B waits for both
    assert kinds.index(("deploying", "Qwen3.6-27B")) > max(kinds.index(("torn down", "Qwen3.5-27B")),
                                                           kinds.index(("torn down", "Qwen3-4B")))


def test_min_replicas_count_and_are_pinned():
    m = _m("Qwen3-8B", min_replicas=3)
    assert stage_gpus(m) == 3
    (w,) = _works(["Qwen3-8B"], **{"Qwen3-8B": m})
    assert (w.gpus, w.replicas, w.max_replicas) == (3, 3, 8)
    pinned = with_replicas(m, 2)["vllm"]["deployment"]["autoscaling_config"]
    assert (pinned["min_replicas"], pinned["max_replicas"]) == (2, 2)  # Serve's autoscaler takes no free GPU


def test_a_model_too_big_for_the_cluster_is_named():
    with pytest.raises(PlacementError, match=r"'Qwen3\.6-27B' needs 2 GPU"):
        _run(_works(["Qwen3-4B", "Qwen3.6-27B"]), Fleet(1))


def test_a_failed_deploy_is_torn_down_and_raised():
    fleet = Fleet(4, fail="Qwen3-8B")
    with pytest.raises(TimeoutError, match="Qwen3-8B"):
        _run(_works(["Qwen3-4B", "Qwen3-8B"], {"Qwen3-4B": 2000, "Qwen3-8B": 10}), fleet)
    assert "Qwen3-8B" in fleet.torn and "Qwen3-4B" in fleet.torn and not fleet.held


def test_freed_gpus_grow_the_model_with_most_work_when_none_waits():
    works = _works(["Qwen3-4B", "Qwen3-0.6B"], {"Qwen3-4B": 5000, "Qwen3-0.6B": 10})
    fleet = Fleet(4)
    log, _ = _run(works, fleet)
    grew = [d for k, m, d in log.events if k == "growing" and m == "Qwen3-4B"]
    assert grew and fleet.peak <= 4


def test_non_vllm_models_hold_no_gpus():
    (w,) = model_works({"sim-small": as_plain(model_config("sim-small"))}, {"sim-small": [1]},  # type: ignore[list-item]
                       {"sim-small": ["direct"]}, ServingSection(), 64)
    assert w.gpus == 0
