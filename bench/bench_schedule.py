"""A sweep's GPU schedule replayed on N fake GPUs, through the real scheduler, dispatcher,
admission and placement code, on a virtual clock.

    python bench/bench_schedule.py configs/sweeps/paper.yaml --gpus 8
    python bench/bench_schedule.py configs/sweeps/paper.yaml --gpus 8 --schedule stages   # the old barrier
    python bench/bench_schedule.py configs/sweeps/table1.yaml --gpus 4 [--fraction 0.1]

What is real: ``opteval.cluster.driver.schedule.run_schedule`` (GpuQueue, teardown the moment a model is
done, replica groups on freed GPUs), ``opteval.cluster.driver.dispatch.Dispatcher`` (``run_model``, the
per-model admission pools of ``opteval.cluster.driver.admission``, retries, grading, rows),
``opteval.cluster.serve.llm_serving`` placement (``placement``, ``check_placement``, ``with_replicas``) on fake
nodes of 8 GPUs, the plan (``expand_plan`` over the pinned benchmark sizes) and every model and
method YAML. What is fake: the workers (a trajectory is a sequence of model calls with sandbox
time between them, no harness runs), the replicas (a batch of ``max_num_seqs`` sequences, FIFO
queueing beyond it) and the clock (an event loop whose time jumps to the next timer, so a
paper-sized replay takes minutes of CPU, not days). ``--schedule stages`` replays the policy
this replaced through the same code: ``run_schedule(barrier=True)`` (deploy the models that fit
in config order, wait for all of them, tear them down, next) and the old admission (each model
``max_in_flight_per_model``, then one shared first-come-first-served pool of
``workers x worker_concurrency``).

Figures: per-model batch fill (time-average of busy sequences / ``max_num_seqs`` while its
replicas are held), ``gpu_busy`` = GPU-seconds serving at full batch / GPU-seconds held
(a replica with half its batch busy is half busy; loading counts as held, not busy), and
``wall_vs_ideal`` = wall time / (the work in GPU-seconds at full batch / N). The last line is
``gpu_busy=<fraction> wall_vs_ideal=<ratio> gpus=<N> sweep=<name>``. Targets: >= 0.90 and
<= 1.15 for paper.yaml on 8 GPUs and table1.yaml on 4.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import selectors
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# -- assumptions (printed) -------------------------------------------------------------------
GPUS_PER_NODE = 8
SEQ_RATE_8B = 40.0  # decode tokens/s of one sequence in a full batch, an 8B model on one GPU
PREFILL_TPS = 8000.0  # prompt tokens/s (prefix cache hits not modelled: conservative)
LOAD_S, LOAD_S_PER_B = 60.0, 4.0  # a replica's start: 60 s + 4 s per billion parameters
SANDBOX_S = (1.0, 6.0)  # a program's run between two calls, uniform
COMPLETION_MEAN = 3000  # completion tokens per call, lognormal (sigma 0.6), capped by max_output_tokens
PROMPT_BASE, PROMPT_PER_TURN = 1500, 1200  # prompt tokens: the problem, then history per turn
SINGLE_CALL = {"direct", "orlm", "sirl"}
TURNS = (2, 9)  # calls of a multi-call harness, uniform (inclusive), within budgets.max_calls


def seq_rate(cfg: dict[str, Any]) -> float:
    """Per-sequence decode rate: memory-bound decode reads the weights each step, so the rate
    falls with size (sqrt: batching hides part of it); tensor parallel splits the read."""
    size = max(0.5, float(cfg.get("size_b") or 1.0))
    tp = int(dict(cfg.get("vllm") or {}).get("gpus_per_replica") or 1)
    return SEQ_RATE_8B * math.sqrt(8.0 / size) * math.sqrt(tp)


def assumptions() -> str:
    return (f"assumptions: {GPUS_PER_NODE} GPUs per node; per-sequence decode {SEQ_RATE_8B:g} tok/s x "
            f"sqrt(8 / size_b) x sqrt(TP); prefill {PREFILL_TPS:g} tok/s; completion ~lognormal mean "
            f"{COMPLETION_MEAN} tokens; prompt {PROMPT_BASE} + {PROMPT_PER_TURN}/turn; single-call harnesses "
            f"{sorted(SINGLE_CALL)}: 1 call + 1 run, others {TURNS[0]}-{TURNS[1]} calls with a sandbox run "
            f"of {SANDBOX_S[0]:g}-{SANDBOX_S[1]:g} s between calls; replica load {LOAD_S:g} s + "
            f"{LOAD_S_PER_B:g} s/B params; a batch of max_num_seqs decodes at the per-sequence rate, "
            f"requests beyond it queue FIFO")


# -- the virtual clock -------------------------------------------------------------------------


class _JumpSelector(selectors.SelectSelector):
    """Never sleeps: with nothing ready it moves the loop's clock to the next timer."""

    loop: VirtualClockLoop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:  # no timer at all: only a thread could wake us (the replay starts none)
            return super().select(None)
        self.loop.vt += timeout  # nothing here does real I/O: no fd is polled
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.vt = 0.0
        sel = _JumpSelector()
        super().__init__(sel)
        sel.loop = self

    def time(self) -> float:
        return self.vt


# -- fake replicas, fleet and workers ------------------------------------------------------------


@dataclass
class Replica:
    """One replica group's batch: ``batch`` sequences at once per replica, FIFO beyond."""

    model: str
    gpus: int
    batch: int
    rate: float
    replicas: int
    loop: asyncio.AbstractEventLoop
    active: int = 0
    busy_int: float = 0.0  # integral of min(active, capacity) dt
    last: float = 0.0
    since: float = 0.0
    until: float | None = None
    sem: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.sem = asyncio.Semaphore(self.batch * self.replicas)
        self.last = self.since = self.loop.time()

    def _tick(self) -> None:
        now = self.loop.time()
        self.busy_int += self.active * (now - self.last)
        self.last = now

    async def call(self, prompt: int, completion: int) -> float:
        async with self.sem:
            self._tick()
            self.active += 1
            lat = prompt / PREFILL_TPS + completion / self.rate
            try:
                await asyncio.sleep(lat)
            finally:  # a call cancelled by a trajectory timeout leaves the batch too
                self._tick()
                self.active -= 1
        return lat

    def close(self) -> None:
        self._tick()
        self.until = self.loop.time()

    @property
    def held_s(self) -> float:
        return ((self.until if self.until is not None else self.loop.time()) - self.since)


class FakeFleet:
    """N fake GPUs on nodes of 8; placement by ``opteval.sweepcore.placement``'s rules (the check through
    ``opteval.cluster.serve.llm_serving.check_placement``, as the real fleet does)."""

    def __init__(self, gpus: int, cfg: Any) -> None:
        from opteval.cluster.serve import llm_serving as ls

        self.ls, self.serving = ls, cfg.serving
        self.total_gpus = gpus
        self.free = [{"GPU": float(min(GPUS_PER_NODE, gpus - i)), "CPU": 256.0}
                     for i in range(0, gpus, GPUS_PER_NODE)]
        self.taken: dict[str, list[list[dict[str, float]]]] = defaultdict(list)
        self.replicas: dict[str, Replica] = {}  # by base_url
        self.all: list[Replica] = []

    def fits(self, m: Any, replicas: int) -> bool:
        from opteval.sweepcore.placement import plan_placement, with_replicas

        return not plan_placement([with_replicas(m.cfg, replicas)], self.serving, self.free)

    async def deploy(self, m: Any, replicas: int, group: int) -> Any:
        from opteval.sweepcore.endpoint import Endpoint
        from opteval.sweepcore.placement import _place_replica, placement, with_replicas

        cfg = with_replicas(m.cfg, replicas)
        self.ls.check_placement([cfg], self.serving, self.free)  # placement checked before deploying
        before = [dict(n) for n in self.free]
        pl = placement(cfg, self.serving)
        for _ in range(pl["replicas"]):
            assert _place_replica(self.free, pl)
        self.taken[m.name].append([{k: b.get(k, 0.0) - a.get(k, 0.0) for k in b} for b, a in zip(before, self.free)])
        loop = asyncio.get_running_loop()
        rep = Replica(m.name, m.gpus_per_replica, int(cfg["vllm"]["engine_kwargs"]["max_num_seqs"]),
                      seq_rate(cfg), replicas, loop)
        self.all.append(rep)
        url = f"fake://{m.name}/{group}"
        self.replicas[url] = rep
        await asyncio.sleep(LOAD_S + LOAD_S_PER_B * float(cfg.get("size_b") or 1))  # held, not busy
        return Endpoint(name=m.name, base_url=url, model_id=m.name, app_name=self.ls.llm_app_name(m.name, group))

    async def teardown(self, m: Any) -> list[str]:
        apps = []
        for url, rep in list(self.replicas.items()):
            if rep.model == m.name:
                rep.close()
                del self.replicas[url]
                apps.append(url)
        for diff in self.taken.pop(m.name, []):
            for node, d in zip(self.free, diff):
                for k, v in d.items():
                    node[k] = node.get(k, 0.0) + v
        return apps


class FakeWorker:
    """A worker actor's surface (``run.remote``, ``ping.remote``): a trajectory is its calls to
    the model's fake replica with sandbox time between them."""

    def __init__(self, fleet: FakeFleet, seed: int) -> None:
        self.fleet, self.seed = fleet, seed
        self.run = SimpleNamespace(remote=self._run)
        self.ping = SimpleNamespace(remote=self._ping)
        self.calls = 0

    async def _ping(self) -> bool:
        return True

    async def _run(self, task: Any) -> Any:
        from opteval.evalcore.records import Trajectory

        rng = random.Random(f"{self.seed}/{task.key}")
        rep = self.fleet.replicas[task.endpoint.base_url]
        single = task.harness in SINGLE_CALL
        n = 1 if single else min(task.budgets.max_calls, rng.randint(*TURNS))
        cap = int(task.budgets.max_output_tokens)
        for turn in range(n):
            comp = min(cap, int(rng.lognormvariate(math.log(COMPLETION_MEAN) - 0.18, 0.6)))
            await rep.call(PROMPT_BASE + PROMPT_PER_TURN * turn, comp)
            self.calls += 1
            await asyncio.sleep(rng.uniform(*SANDBOX_S))
        return Trajectory(model=task.model, method=task.method, benchmark=task.problem.benchmark,
                          problem_id=task.problem.id, sample=task.sample, seed=0, key=task.key, simulated=True)


# -- the replay --------------------------------------------------------------------------------


def batches_from(rev: str, model_cfgs: dict[str, dict[str, Any]]) -> None:
    """Put the batch sizes the model YAMLs had at git ``rev`` into ``model_cfgs`` (the before figure)."""
    import subprocess

    import yaml

    for name, cfg in model_cfgs.items():
        if not cfg.get("vllm"):
            continue
        old = yaml.safe_load(subprocess.run(["git", "show", f"{rev}:configs/models/{name}.yaml"], check=True,
                                            capture_output=True, text=True, cwd=Path(__file__).parent).stdout)
        cfg["vllm"]["engine_kwargs"]["max_num_seqs"] = old["vllm"]["engine_kwargs"]["max_num_seqs"]
        cfg["vllm"]["deployment"]["max_ongoing_requests"] = old["vllm"]["deployment"]["max_ongoing_requests"]


def prepared(sweep: str, gpus: int, fraction: float, overrides: list[str] | None = None,
             old_batches: str | None = None) -> Any:
    """The sweep's real config and plan over the pinned benchmark sizes (no data needed)."""
    from opteval.cluster.driver.prepare import Prepared
    from opteval.evalcore.problems import REGISTRY, AnswerKey, ProblemSpec
    from opteval.sweepcore import config as cconf
    from opteval.sweepcore.plan import expand_plan

    cfg = cconf.load_config([sweep, f"serving.gpus={gpus}", "tracking.enabled=false", *(overrides or [])])
    ids: dict[str, list[str]] = {}
    problems, answers = {}, {}
    for slug in cfg.benchmarks:
        count = REGISTRY[slug].count or 10
        n = max(1, math.ceil(count * fraction))
        ids[slug] = [f"{slug}-{i:04d}" for i in range(n)]
        problems.update({(slug, p): ProblemSpec(slug, p, "q") for p in ids[slug]})
        answers[slug] = AnswerKey(slug, dict.fromkeys(ids[slug], 1.0))
    model_cfgs = {m: cconf.as_plain(cconf.model_config(m)) for m in cfg.models}
    if old_batches:
        batches_from(old_batches, model_cfgs)
    method_cfgs = {m: cconf.method_config(m) for m in cfg.methods}
    plan = expand_plan(cfg, ids)
    return Prepared(cfg, model_cfgs, method_cfgs, problems, answers, plan, None, set())  # type: ignore[arg-type]


class CountingCommitter:
    """The Committer's surface without a ledger (the replay measures the schedule)."""

    def __init__(self) -> None:
        self.rows = 0

    def add(self, row: dict[str, Any]) -> None:
        self.rows += 1

    async def flush(self, force: bool = False) -> None:
        return None


def old_admission(cfg: Any) -> Any:
    """The policy before: each model ``max_in_flight_per_model``, then one shared FIFO pool."""
    from opteval.cluster.driver.admission import Admission, Pool, Share

    c = cfg.cluster
    shared = asyncio.Semaphore(max(1, c.workers * c.worker_concurrency))

    class TwoPools(Pool):
        async def acquire(self) -> None:
            await Pool.acquire(self)
            await shared.acquire()

        def release(self) -> None:
            shared.release()
            Pool.release(self)

    class OldAdmission(Admission):
        def open(self, model: str, replicas: int, max_ongoing: int, factor: float) -> Pool:
            pool = TwoPools(c.max_in_flight_per_model)
            self.shares[model] = Share(replicas, max_ongoing, factor, pool)
            return pool

        def grow(self, model: str, replicas: int) -> None:
            pass

        def close(self, model: str) -> None:
            self.shares.pop(model, None)

    return OldAdmission(c.workers * c.worker_concurrency, c.max_in_flight_per_model)


async def replay(prep: Any, gpus: int, schedule: str, seed: int, quiet: bool) -> dict[str, Any]:
    from opteval.cluster.driver.dispatch import Dispatcher
    from opteval.cluster.driver.progress import Progress
    from opteval.cluster.driver.schedule import model_works, run_schedule
    from opteval.cluster.driver.signals import StopState
    from opteval.sweepcore.plan import by_model

    cfg = prep.cfg
    fleet = FakeFleet(gpus, cfg)
    workers = [FakeWorker(fleet, seed) for _ in range(cfg.cluster.workers)]
    items = by_model(prep.pending)
    harnesses = {m: [prep.method_cfgs[me].harness for me in cfg.methods] for m in cfg.models}
    works = model_works({m: prep.model_cfgs[m] for m in cfg.models}, items, harnesses, cfg.serving,
                        cfg.cluster.max_in_flight_per_model)
    committer = CountingCommitter()
    progress = Progress(planned=len(prep.plan), already=0)
    adm = old_admission(cfg) if schedule == "stages" else None
    disp = Dispatcher(prep, workers, committer, progress, StopState(), None, admission=adm,  # type: ignore[arg-type]
                      items=items)

    async def no_server_to_ask(prep: Any, endpoints: dict[str, Any]) -> None:
        """The preflight asks a model's server about the sweep's request shape; fake replicas take any."""

    disp.preflight = no_server_to_ask
    by_name = {w.name: w for w in works}

    def finished(item: Any) -> None:
        by_name[item.model].left -= 1

    disp.on_finish = finished
    say = (lambda s: None) if quiet else (lambda s: print(f"[t={asyncio.get_running_loop().time():9.0f}s] {s}",
                                                          flush=True))
    disp.admission.say = say
    t0 = asyncio.get_running_loop().time()
    log = await run_schedule(works, fleet, lambda m, ep: disp.run_model(m.name, ep), disp.admission,
                             add_endpoint=lambda m, ep: disp.add_endpoint(m.name, ep),
                             barrier=schedule == "stages", say=say)
    wall = asyncio.get_running_loop().time() - t0
    return {"wall": wall, "fleet": fleet, "rows": committer.rows, "planned": len(prep.plan),
            "calls": sum(w.calls for w in workers), "events": log.events}


def report(res: dict[str, Any], gpus: int, sweep: str) -> tuple[float, float]:
    fleet: FakeFleet = res["fleet"]
    per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # busy seq-s, capacity seq-s, gpu-s held
    for r in fleet.all:
        cap = r.batch * r.replicas
        per[r.model][0] += r.busy_int
        per[r.model][1] += cap * r.held_s
        per[r.model][2] += r.gpus * r.replicas * r.held_s
    busy_gpu_s = sum(r.busy_int / r.batch * r.gpus for r in fleet.all)  # GPU-seconds at full batch
    held_gpu_s = sum(v[2] for v in per.values())
    print("model                    batch fill   GPU-h held")
    for m, (b, c, h) in per.items():
        print(f"  {m:24s} {b / c if c else 0:9.3f} {h / 3600:12.1f}")
    ideal = busy_gpu_s / gpus
    busy = busy_gpu_s / held_gpu_s if held_gpu_s else 0.0
    ratio = res["wall"] / ideal if ideal else float("inf")
    print(f"trajectories {res['rows']}/{res['planned']} committed, {res['calls']} model calls")
    print(f"wall {res['wall'] / 3600:.1f} h (virtual), ideal {ideal / 3600:.1f} h (work {busy_gpu_s / 3600:.1f} "
          f"GPU-h at full batch / {gpus}), GPU-h held {held_gpu_s / 3600:.1f}")
    return busy, ratio


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="replay a sweep's GPU schedule on N fake GPUs")
    ap.add_argument("sweep", help="a sweep YAML, e.g. configs/sweeps/paper.yaml")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--schedule", choices=["continuous", "stages"], default="continuous")
    ap.add_argument("--fraction", type=float, default=1.0, help="share of each benchmark's problems (1 = the sweep)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no schedule events")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a sweep config override, e.g. cluster.max_in_flight_per_model=256 (the value before)")
    ap.add_argument("--batches-from", metavar="GIT_REV", default=None,
                    help="the model YAMLs' batch sizes at this git revision (the before figure: 32-64 for all)")
    args = ap.parse_args(argv)
    print(assumptions(), flush=True)
    t = time.process_time()
    prep = prepared(args.sweep, args.gpus, args.fraction, args.set, args.batches_from)
    loop = VirtualClockLoop()
    try:
        res = loop.run_until_complete(replay(prep, args.gpus, args.schedule, args.seed, args.quiet))
    finally:
        loop.close()
    busy, ratio = report(res, args.gpus, args.sweep)
    print(f"schedule {args.schedule}; replay CPU {time.process_time() - t:.0f} s", flush=True)
    name = prep.cfg.sweep.name
    print(f"gpu_busy={busy:.3f} wall_vs_ideal={ratio:.3f} gpus={args.gpus} sweep={name}", flush=True)
    return 0 if res["rows"] == res["planned"] else 1


if __name__ == "__main__":
    sys.exit(main())
