"""The sweep driver: plan -> skip committed -> bounded fan-out -> grade -> commit -> report.

Why the driver grades: it alone holds the answer keys (workers get ``ProblemSpec``s).
Why commits are batched: each batch is one atomic Parquet file; a crash loses at most
the rows not yet committed, which a resume then runs again (never twice committed).

Failure policy: an infrastructure failure (worker died, endpoint unreachable, executor
lost, trajectory timeout) is retried up to ``cluster.retries`` times, then committed
with status ``error`` and its reason; it counts as wrong and stays in the denominator.

Signals: the first SIGINT/SIGTERM stops dispatching and lets the trajectories in flight
finish and commit; a second one abandons those in flight, commits what finished and
exits. Either way the sweep resumes with the same command.
"""
from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from evalcore.problems import AnswerKey, ProblemSpec

EXIT_INTERRUPTED = 130
ETA_MIN_DONE = 8  # finished trajectories before an ETA is printed
WORKER_DOWN_S = 30.0  # a worker whose call failed gets no new work this long while another is up
WORKER_PROBE_S = 5.0  # a worker that failed must answer a ping this fast before it gets work again
WORKER_RESTART_WAIT_S = 180.0  # with no worker answering, wait this long for one to come back


# -- preparation (no Ray) ----------------------------------------------------------------


@dataclass
class Prepared:
    """Everything the driver knows before dispatching; built without importing Ray."""

    cfg: Any
    model_cfgs: dict[str, dict[str, Any]]
    method_cfgs: dict[str, dict[str, Any]]
    problems: dict[tuple[str, str], ProblemSpec]
    answers: dict[str, AnswerKey]
    plan: Any  # cluster.plan.Plan (a Sequence of PlanItem), model-major
    ledger: Any
    committed: set[str]

    _params: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)
    _profiles: dict[str, str] = field(default_factory=dict)
    _pending: Any = None

    @property
    def pending(self) -> Any:
        """The plan minus committed keys, computed once (10x the paper: millions of items)."""
        if self._pending is None:
            from cluster.plan import remaining

            self._pending = remaining(self.plan, self.committed)
        return self._pending

    def run_params(self, model: str, method: str) -> tuple[Any, Any]:
        """(Sampling, Budgets) for a model x method, computed once (config reads are not free)."""
        if (model, method) not in self._params:
            sampling = sampling_for(self.cfg, model)
            self._params[(model, method)] = (sampling, budgets_for(self.cfg, method, sampling))
        return self._params[(model, method)]

    def profile(self, benchmark: str) -> str:
        """Grading profile of a benchmark (its yaml's override, else the sweep's)."""
        if benchmark not in self._profiles:
            from cluster.config import grading_profile_for

            self._profiles[benchmark] = grading_profile_for(self.cfg, benchmark)
        return self._profiles[benchmark]


def load_problems(cfg: Any) -> tuple[dict[tuple[str, str], ProblemSpec], dict[str, AnswerKey], dict[str, list[str]]]:
    """Problems (first ``limit_problems`` of each benchmark) and their answer keys."""
    from evalcore.problems import load_benchmark

    problems, answers, ids = {}, {}, {}
    limit = cfg.limit_problems
    for slug in cfg.benchmarks:
        specs, key = load_benchmark(str(slug), cfg.data.dir)
        specs = specs[: int(limit)] if limit is not None else specs
        answers[str(slug)] = key
        ids[str(slug)] = [s.id for s in specs]
        problems.update({(str(slug), s.id): s for s in specs})
    return problems, answers, ids


def prepare(cfg: Any, read_only: bool = False) -> Prepared:
    """Config -> problems -> plan -> ledger (refusing a changed config) -> committed keys."""
    from cluster import config as cconf
    from cluster.plan import expand_plan

    model_cfgs = {str(m): _plain(cconf.model_config(str(m))) for m in cfg.models}
    method_cfgs = {str(m): _plain(cconf.method_config(str(m))) for m in cfg.methods}
    problems, answers, ids = load_problems(cfg)
    plan = expand_plan(cfg, ids)
    ledger = open_ledger(cfg, plan, read_only=read_only)
    committed = set(ledger.committed_keys()) if ledger is not None else set()
    return Prepared(cfg, model_cfgs, method_cfgs, problems, answers, plan, ledger, committed)


def _plain(obj: Any) -> dict[str, Any]:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(obj):
            return OmegaConf.to_container(obj, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return dict(obj)


def open_ledger(cfg: Any, plan: list[Any], read_only: bool = False) -> Any:
    """The sweep's ledger (refuses a changed config unless ``sweep.allow_config_change``); records the plan."""
    from cluster import config as cconf
    from cluster.ledger import Ledger

    resolved = cconf.resolved(cfg)
    sw = cfg.sweep
    led = Ledger.open(str(sw.output_dir), str(sw.name), resolved, cconf.sweep_fingerprint(resolved),
                      bool(sw.allow_config_change), read_only=read_only,
                      lease_stale_s=None if read_only else float(sw.lease_stale_s),
                      wait_for_lease=bool(sw.wait_for_lease), repair=bool(sw.repair))
    if not read_only:
        try:
            led.record_plan(plan)
            _after_open(led, cfg, plan)
        except BaseException:
            led.close()
            raise
    return led


def _after_open(led: Any, cfg: Any, plan: list[Any]) -> None:
    """Repairs and re-runs decided at open: name the keys quarantined files held; with
    ``sweep.retry_errors`` release committed ``error`` rows so they run again."""
    led.log_quarantined(plan)
    if bool(cfg.sweep.retry_errors):
        planned = {it.key for it in plan}
        released = [k for k in led.supersede_errors() if k in planned]
        if released:
            print(f"[sweep] retry_errors: {len(released)} committed error row(s) superseded; they run again",
                  flush=True)


def plan_report(prep: Prepared) -> str:
    """The ``plan_only`` output: total, per model x method, already committed."""
    from cluster.plan import plan_counts

    todo = plan_counts(prep.pending)  # plan keys are unique: committed = planned - still to run
    lines = [f"planned {len(prep.plan)} trajectories"]
    for (model, method), n in plan_counts(prep.plan).items():
        lines.append(f"  {model} x {method}: {n} planned, {n - todo.get((model, method), 0)} committed")
    lines.append(f"already committed: {len(prep.plan) - len(prep.pending)}; "
                 f"to run: {len(prep.pending)}")
    return "\n".join(lines)


# -- task building and grading ----------------------------------------------------------


def sampling_for(cfg: Any, model: str) -> Any:
    """The sweep's sampling with the model's overrides on top (``extra_body`` merged)."""
    from cluster.config import effective_sampling
    from evalcore.models.base import Sampling

    eff = effective_sampling(cfg, model)
    keys = ("temperature", "top_p", "top_k", "max_tokens", "base_seed")
    return Sampling(**{k: eff[k] for k in keys if k in eff}, extra_body=dict(eff.get("extra_body") or {}))


def budgets_for(cfg: Any, method: str, sampling: Any) -> Any:
    """The sweep's budgets with the method's overrides; per-call output cap = sampling.max_tokens."""
    from cluster.config import effective_budgets, effective_limits
    from evalcore.harnesses.base import Budgets

    kw = effective_budgets(cfg, method)
    kw.setdefault("max_output_tokens", sampling.max_tokens)
    return Budgets.from_config({**kw, "exec_limits": effective_limits(cfg, method)})


# -- committing ---------------------------------------------------------------------------


class Committer:
    """Buffers rows; commits a batch when full or when the interval has passed."""

    def __init__(self, ledger: Any, batch: int, interval_s: float) -> None:
        self._ledger, self._batch, self._interval = ledger, max(1, int(batch)), float(interval_s)
        self._rows: list[dict[str, Any]] = []
        self._keys: set[str] = set()
        self._lock = asyncio.Lock()
        self._last = time.monotonic()
        self.committed = 0
        self.batches = 0

    def add(self, row: dict[str, Any]) -> None:
        if row["key"] in self._keys:
            raise RuntimeError(f"internal error: key {row['key']} finished twice in one run")
        self._keys.add(row["key"])
        self._rows.append(row)

    def due(self) -> bool:
        return len(self._rows) >= self._batch or (
            bool(self._rows) and time.monotonic() - self._last >= self._interval)

    async def flush(self, force: bool = False) -> None:
        async with self._lock:
            if self.failed is not None:
                raise self.failed
            if not self._rows or not (force or self.due()):
                return
            # Take the batch out before the await: rows finishing while the commit runs in its
            # thread go into a fresh list (they are committed next time, never dropped).
            rows, self._rows = self._rows, []
            try:
                await asyncio.to_thread(self._ledger.commit, rows)
            except Exception as exc:
                self._fail(exc)
                raise self.failed from exc  # type: ignore[misc]
            self._last = time.monotonic()
            self.committed += len(rows)
            self.batches += 1

    failed: Exception | None = None
    on_failure: Any = None  # called once with the error (the driver stops the sweep)

    def _fail(self, exc: Exception) -> None:
        """A commit that failed stops the sweep: nothing more is committed by this run, the
        rows in memory are dropped (they run again on resume), what is on disk stays valid."""
        from cluster.ledger import CommitError, LedgerError

        if isinstance(exc, LedgerError):
            self.failed = exc
        else:
            self.failed = CommitError(f"commit failed: {type(exc).__name__}: {exc}")
        if self.on_failure is not None:
            self.on_failure(self.failed)


# -- progress -----------------------------------------------------------------------------


@dataclass
class Progress:
    planned: int
    already: int
    start: float = field(default_factory=time.monotonic)
    done: int = 0
    errors: int = 0
    retries: int = 0
    per: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    first_dispatch: float | None = None
    last_done: float | None = None
    finish_times: list[float] = field(default_factory=list)

    def dispatched(self) -> None:
        if self.first_dispatch is None:
            self.first_dispatch = time.monotonic()

    def dispatch_wall(self) -> float:
        """Seconds from the first dispatch to the last finished trajectory (the bench's clock)."""
        if self.first_dispatch is None or self.last_done is None:
            return 0.0
        return self.last_done - self.first_dispatch

    def steady_rate(self, skip_frac: float = 0.1) -> float:
        """Trajectories/s after the first ``skip_frac`` finished (ramp-up left out), for the bench."""
        t = self.finish_times
        k = int(len(t) * skip_frac)
        if len(t) - k < 2 or t[-1] <= t[k]:
            return 0.0
        return (len(t) - 1 - k) / (t[-1] - t[k])

    def record(self, model: str, method: str, correct: bool, error: bool) -> None:
        self.last_done = time.monotonic()
        self.finish_times.append(self.last_done)
        self.done += 1
        self.errors += int(error)
        self.per[(model, method)][0] += 1
        self.per[(model, method)][1] += int(bool(correct))

    def line(self) -> str:
        # Rate from the first dispatch (startup and deploys left out), and no ETA from the
        # first few finishes: right after a resume that gave "eta 3585s".
        elapsed = max(1e-9, time.monotonic() - (self.first_dispatch or self.start))
        rate = self.done / elapsed
        todo = self.planned - self.already - self.done
        eta = f"{todo / rate:.0f}s" if rate > 0 and (self.done >= ETA_MIN_DONE or todo == 0) else "?"
        total = self.already + self.done
        accs = " ".join(f"{mo}/{me}={c / n:.2f}({n})" for (mo, me), (n, c) in sorted(self.per.items()) if n)
        return (f"[sweep] {total}/{self.planned} ({100 * total / max(1, self.planned):.1f}%) "
                f"{rate:.2f} traj/s eta {eta} errors {self.errors} retries {self.retries} | acc {accs}")


# -- signals ------------------------------------------------------------------------------


class StopState:
    """First signal: stop dispatching. Second: abandon what is in flight."""

    def __init__(self) -> None:
        self.soft = asyncio.Event()
        self.hard = asyncio.Event()
        self.signum: int | None = None

    def trip(self, signum: int) -> None:
        self.signum = self.signum or signum
        if self.soft.is_set():
            self.hard.set()
            print("[sweep] second signal: abandoning trajectories in flight, committing what finished", flush=True)
        else:
            self.soft.set()
            print(f"[sweep] signal {signum}: no new trajectories; finishing those in flight "
                  f"(signal again to stop now)", flush=True)

    def abort(self) -> None:
        """Stop now for a reason that is not a signal (a failed commit): no dispatch, abandon in flight."""
        self.soft.set()
        self.hard.set()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers only work on the main thread (tests drive sweeps from others)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.trip, sig)
        from cluster import signals

        if signals.pending():  # arrived during startup, after the last checkpoint
            self.trip(signals.pending())

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


# -- dispatch -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """One planned trajectory's end: a Trajectory to grade, or the reason it failed for good."""

    traj: Any | None
    error: str | None
    attempts: int


class Dispatcher:
    """Bounded fan-out of one stage's trajectories over the worker actors, with retries."""

    def __init__(self, prep: Prepared, workers: list[Any], committer: Committer, progress: Progress,
                 stop: StopState, tracker: Any = None) -> None:
        c = prep.cfg.cluster
        self.prep, self.workers, self.committer, self.progress, self.stop = prep, workers, committer, progress, stop
        self.tracker = tracker
        self.retries = int(c.retries)
        self.backoff_s = float(c.get("retry_backoff_s", 5.0))
        self.down_until = [0.0] * len(workers)
        self.timeout_s = float(c.trajectory_timeout_s)
        self.per_model = int(c.max_in_flight_per_model)
        self.capacity = asyncio.Semaphore(max(1, len(workers) * int(c.worker_concurrency)))
        self.load = [0] * len(workers)
        self.tasks: set[asyncio.Task] = set()

    def _pick_worker(self, avoid: frozenset[int] = frozenset()) -> int:
        """Least loaded among workers that are up and did not already fail this trajectory;
        else up ones; else ones not tried; else any."""
        now = time.monotonic()
        every = list(range(len(self.workers)))
        up = [i for i in every if self.down_until[i] <= now]
        fresh_up = [i for i in up if i not in avoid]
        untried = [i for i in every if i not in avoid]
        return min(fresh_up or up or untried or every, key=lambda i: self.load[i])

    async def _live_worker(self, avoid: frozenset[int] = frozenset()) -> int:
        """A worker to send to: one that never failed, or a failed one that answers a ping now.
        While none answers (all restarting, e.g. after their node died) wait for one, up to
        ``WORKER_RESTART_WAIT_S``, without spending the trajectory's retries."""
        from ray.exceptions import RayError

        deadline = time.monotonic() + WORKER_RESTART_WAIT_S
        while True:
            idx = self._pick_worker(avoid)
            if self.down_until[idx] == 0.0:
                return idx
            try:
                await asyncio.wait_for(_await(self.workers[idx].ping.remote()), timeout=WORKER_PROBE_S)
                self.down_until[idx] = 0.0
                return idx
            except (TimeoutError, RayError):
                self.down_until[idx] = time.monotonic() + WORKER_DOWN_S
            if time.monotonic() >= deadline:
                return idx
            await asyncio.sleep(1.0)  # never spin on workers that fail at once

    def _retry_wait(self, attempt: int) -> float:
        """Backoff before retry ``attempt`` (1-based): ``retry_backoff_s * 2**(attempt-1)``, long
        enough for a killed actor to restart (a few seconds) by the second retry."""
        return self.backoff_s * (2 ** (attempt - 1))

    def _task(self, item: Any, ep: Any) -> Any:
        from cluster.workers import TrajectoryTask

        me = self.prep.method_cfgs[item.method]
        sampling, budgets = self.prep.run_params(item.model, item.method)
        return TrajectoryTask(
            key=item.key, model=item.model, method=item.method, harness=str(me.get("harness", item.method)),
            extraction=str(me.get("extraction", "submit")), problem=self.prep.problems[(item.benchmark, item.problem_id)],
            sample=int(item.sample), sampling=sampling, budgets=budgets, endpoint=ep,
            stages=dict(me.get("stages") or {}), solvers=tuple(self.prep.cfg.solvers),
            prompt=_contract(self.prep.model_cfgs[item.model]), params=dict(me.get("params") or {}))

    async def _attempt(self, task: Any, avoid: frozenset[int] = frozenset(),
                       used: list[int] | None = None) -> tuple[Any | None, str | None]:
        """One remote run: (trajectory, None) or (partial trajectory or None, failure reason).
        The worker's index is appended to ``used`` (a retry avoids it)."""
        from ray.exceptions import RayError

        from cluster.workers import WorkerFailure

        idx = await self._live_worker(avoid)
        if used is not None:
            used.append(idx)
        self.load[idx] += 1
        ref = self.workers[idx].run.remote(task)
        try:
            res = await asyncio.wait_for(_await(ref), timeout=self.timeout_s)
        except TimeoutError:
            _cancel(ref)
            return None, f"trajectory timeout after {self.timeout_s:g}s"
        except RayError as exc:
            self.down_until[idx] = time.monotonic() + WORKER_DOWN_S
            return None, f"worker {idx} failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
        finally:
            self.load[idx] -= 1
        if isinstance(res, WorkerFailure):
            return res.trajectory, res.reason
        return res, None

    async def run_item(self, item: Any, ep: Any) -> Outcome:
        task = self._task(item, ep)
        last_traj, reason = None, "not attempted"
        tried: list[int] = []
        for attempt in range(1, self.retries + 2):
            traj, reason = await self._attempt(task, frozenset(tried), tried)
            if reason is None:
                return Outcome(traj, None, attempt)
            last_traj = traj or last_traj
            if attempt <= self.retries:
                self.progress.retries += 1
                print(f"[sweep] retry {attempt}/{self.retries} {item.key}: {reason}", flush=True)
                await asyncio.sleep(self._retry_wait(attempt))
        return Outcome(last_traj, reason, self.retries + 1)

    async def _one(self, item: Any, ep: Any, sem: asyncio.Semaphore) -> None:
        try:
            out = await self.run_item(item, ep)
            self.finish(item, out)
        finally:
            sem.release()
            self.capacity.release()

    def finish(self, item: Any, out: Outcome) -> None:
        try:
            row, correct = build_row(self.prep, item, out)
        except Exception as exc:
            reason = f"driver could not grade/record: {type(exc).__name__}: {exc}"
            print(f"[sweep] error {item.key}: {reason}", flush=True)
            row, correct = build_row(self.prep, item, Outcome(None, reason, out.attempts))
            out = Outcome(None, reason, out.attempts)
        self.committer.add(row)
        self.progress.record(item.model, item.method, correct, out.error is not None)

    async def _produce(self, items: list[Any], ep: Any) -> None:
        """Dispatch one model's items in plan order, at most ``max_in_flight_per_model`` at once."""
        sem = asyncio.Semaphore(max(1, self.per_model))
        for item in items:
            await sem.acquire()
            await self.capacity.acquire()
            if self.stop.soft.is_set():
                sem.release()
                self.capacity.release()
                return
            self.progress.dispatched()
            t = asyncio.create_task(self._one(item, ep, sem))
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)

    async def run_stage(self, items_by_model: dict[str, list[Any]], endpoints: dict[str, Any]) -> None:
        producers = [asyncio.create_task(self._produce(items, endpoints[m])) for m, items in items_by_model.items()]
        await _until(asyncio.gather(*producers), self.stop.hard)
        while self.tasks and not self.stop.hard.is_set():
            await _until(asyncio.wait(set(self.tasks)), self.stop.hard)
        if self.stop.hard.is_set():
            for t in list(self.tasks) + producers:
                t.cancel()
            await asyncio.gather(*self.tasks, *producers, return_exceptions=True)


async def _await(ref: Any) -> Any:
    return await ref


def _cancel(ref: Any) -> None:
    try:
        import ray

        ray.cancel(ref)
    except Exception:
        pass


async def _until(aw: Any, event: asyncio.Event) -> None:
    """Await ``aw`` unless ``event`` fires first (then leave ``aw`` to the caller to cancel)."""
    fut = asyncio.ensure_future(aw)
    ev = asyncio.ensure_future(event.wait())
    await asyncio.wait({fut, ev}, return_when=asyncio.FIRST_COMPLETED)
    ev.cancel()
    if fut.done() and not fut.cancelled():
        fut.result()


# -- rows ---------------------------------------------------------------------------------


def build_row(prep: Prepared, item: Any, out: Outcome) -> tuple[dict[str, Any], bool]:
    """Grade in the driver and shape the ledger row; an error row is never correct."""
    from cluster.ledger import error_row, trajectory_row
    from evalcore.grading import grade_submission, parse_submission

    profile, sweep = prep.profile(item.benchmark), str(prep.cfg.sweep.name)
    if out.error is not None:
        sampling, _ = prep.run_params(item.model, item.method)
        simulated = bool(out.traj.simulated) if out.traj is not None else \
            prep.model_cfgs[item.model].get("backend") == "simulated"
        row = error_row(item, out.error, out.attempts, sweep=sweep, seed=sampling.seed_for(item.sample),
                        simulated=simulated, profile=profile, fingerprint=item.fingerprint)
        return row, False
    traj = out.traj
    parsed = parse_submission(traj.submission.raw if traj.submission is not None else None)
    expected = parse_submission(prep.answers[item.benchmark][item.problem_id])
    correct = bool(grade_submission(traj.submission, expected, profile))  # SIRL's alternate included
    row = trajectory_row(traj, key=item.key, correct=correct, profile=profile, fingerprint=item.fingerprint,
                         sweep=sweep, parsed=parsed, attempts=out.attempts)
    return row, correct


# -- the run ------------------------------------------------------------------------------


def stages_for(prep: Prepared) -> list[list[str]]:
    """Model-major stages restricted to models that still have work."""
    from cluster.plan import plan_counts
    from cluster.serving import plan_stages

    todo = {model for model, _ in plan_counts(prep.pending)}
    models = [prep.model_cfgs[m] for m in prep.cfg.models if m in todo]
    return [s for s in plan_stages(models, prep.cfg) if s]


def serves_on_gpus(cfg: Any) -> bool:
    """Whether the sweep deploys vLLM models (or their stand-ins), which need CPUs beside GPUs."""
    from cluster.config import model_config

    return any(str(model_config(str(m)).backend) == "vllm" for m in cfg.models)


def executor_count(cfg: Any) -> int:
    """Executors to start: the ``opteval_executor`` slots the cluster offers (never GPU nodes'
    CPUs that serving needs), or ``cluster.executors`` when it fits; else a PlacementError."""
    from cluster.runtime import EXECUTOR_RESOURCE, PlacementError, describe_nodes, executor_slots, node_resources

    nodes = node_resources()
    s = cfg.serving
    slots = executor_slots(nodes, float(cfg.cluster.executor_cpus), cpus_per_gpu=float(s.cpus_per_gpu),
                           ingress_cpus=float(s.ingress_cpus), gpu_serving=serves_on_gpus(cfg))
    if slots < 1:
        raise PlacementError(
            f"no executor can be placed: no node offers the {EXECUTOR_RESOURCE!r} resource with "
            f"{float(cfg.cluster.executor_cpus):g} CPU(s) to spare ({describe_nodes(nodes)}); start CPU nodes with "
            f"ray start --resources='{{\"{EXECUTOR_RESOURCE}\": N}}'")
    if cfg.cluster.executors:
        n = int(cfg.cluster.executors)
        if n > slots:
            raise PlacementError(f"cluster.executors={n} but the cluster holds {slots} executor(s) "
                                 f"({describe_nodes(nodes)})")
        return n
    return slots


def start_actors(prep: Prepared) -> tuple[list[Any], list[Any]]:
    """Executor actors, then worker actors that hold their handles."""
    from cluster.executors import executor_name, start_executors
    from cluster.workers import start_workers
    from evalcore.sandbox.types import Limits

    c, name = prep.cfg.cluster, str(prep.cfg.sweep.name)
    limits = Limits(**_plain(prep.cfg.limits))
    n = executor_count(prep.cfg)
    execs = start_executors(name, n, float(c.executor_cpus), limits, tuple(prep.cfg.solvers),
                            int(c.get("sandbox_pool", 2)))
    if prep.ledger is not None and not prep.ledger.read_only:
        prep.ledger.record_manifest_section("executors", executor_environment(execs[0]))
    names = [executor_name(name, i) for i in range(n)]
    workers = start_workers(name, int(c.workers), int(c.worker_concurrency), names, limits)
    return execs, workers


def _contract(model_cfg: dict[str, Any]) -> dict[str, Any]:
    """The model's prompt contract, empty when it is the default (keep the harness's messages)."""
    prompt = dict(model_cfg.get("prompt") or {})
    return prompt if prompt.get("system", "keep") != "keep" or prompt.get("system_prefix") else {}


def executor_environment(handle: Any) -> dict[str, Any]:
    """What programs ran with: the solver set, the versions installed on the executors, and
    the modules their fork server pre-imported (one executor asked: they share an image)."""
    import ray

    return ray.get(handle.environment.remote(), timeout=60)


def stop_actors(handles: list[Any]) -> None:
    import ray

    for h in handles:
        try:
            ray.kill(h, no_restart=True)
        except Exception:
            pass


async def _periodic(interval_s: float, fn: Any, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return
        except TimeoutError:
            await fn()


async def run_stages(prep: Prepared, workers: list[Any], committer: Committer, progress: Progress,
                     stop: StopState, tracker: Any) -> None:
    """For each stage: deploy its models, run all their methods, tear down, next."""
    from cluster.serving import deploy_stage, teardown_stage

    disp = Dispatcher(prep, workers, committer, progress, stop, tracker)
    for stage in stages_for(prep):
        if stop.soft.is_set():
            break
        models = [prep.model_cfgs[m] for m in stage]
        print(f"[sweep] stage {stage}: deploying", flush=True)
        endpoints: dict[str, Any] = {}
        try:  # a failed deploy is torn down too (deploy_stage cleans up, teardown_stage makes sure)
            endpoints = await asyncio.to_thread(deploy_stage, models, prep.cfg)
            print(f"[sweep] stage {stage}: ready", flush=True)
            by_model: dict[str, list[Any]] = defaultdict(list)
            for it in prep.pending:
                if it.model in endpoints:
                    by_model[it.model].append(it)
            await disp.run_stage(dict(by_model), endpoints)
            await committer.flush(force=True)
        finally:
            apps = await asyncio.to_thread(teardown_stage, endpoints, models)
            print(f"[sweep] stage {stage}: torn down (Serve apps deleted: {', '.join(apps) or 'none'})", flush=True)


@dataclass
class RunResult:
    stop: StopState
    progress: Progress
    committer: Committer


async def drive(prep: Prepared, tracker: Any = None) -> RunResult:
    """The async body of a sweep: actors, stages, periodic commits and progress, signals."""
    loop = asyncio.get_running_loop()
    stop = StopState()
    stop.install(loop)
    sweep_cfg = prep.cfg.sweep
    committer = Committer(prep.ledger, int(sweep_cfg.commit_batch), float(sweep_cfg.commit_interval_s))
    progress = Progress(planned=len(prep.plan), already=len(prep.plan) - len(prep.pending))
    done = asyncio.Event()
    from cluster.plan import plan_counts

    planned = plan_counts(prep.pending)

    committer.on_failure = lambda exc: _commit_failed(exc, stop)

    async def tick_commit() -> None:
        try:
            await committer.flush()
        except Exception:
            pass

    printed = [-1]  # progress.done at the last printed line (the final line is not printed twice)

    async def tick_progress() -> None:
        printed[0] = progress.done
        print(progress.line(), flush=True)
        _track_progress_offloop(tracker, progress, planned)

    bg = [asyncio.create_task(_periodic(min(1.0, float(sweep_cfg.commit_interval_s)), tick_commit, done)),
          asyncio.create_task(_periodic(float(prep.cfg.progress.interval_s), tick_progress, done))]
    execs: list[Any] = []
    workers: list[Any] = []
    try:
        execs, workers = await asyncio.to_thread(start_actors, prep)
        await run_stages(prep, workers, committer, progress, stop, tracker)
    except Exception:
        if committer.failed is None:
            raise
    finally:
        done.set()
        await asyncio.gather(*bg, return_exceptions=True)
        try:
            await committer.flush(force=True)
        except Exception:
            if committer.failed is None:
                raise
        if progress.done != printed[0]:
            print(progress.line(), flush=True)
        stop.uninstall(loop)
        if stop.signum is not None:
            _quiet_signals()
        stop_actors(workers + execs)
    if committer.failed is not None:
        raise committer.failed
    return RunResult(stop, progress, committer)


def _quiet_signals() -> None:
    """After an interrupted run's loop ended: another SIGINT/SIGTERM (the user insisting while
    the results are printed) exits at once with 130 and one line, never a traceback. What
    finished is committed already; the lease is released on the way out."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: Any) -> None:
        print(f"[sweep] signal {signum} again: exiting now; resume with the same command", flush=True)
        raise SystemExit(EXIT_INTERRUPTED)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def _commit_failed(exc: Exception, stop: StopState) -> None:
    print(f"[sweep] COMMIT FAILED: {exc}; stopping the sweep (what was committed before stays valid)",
          flush=True)
    stop.abort()


def _track_progress_offloop(tracker: Any, progress: Progress, planned: dict[tuple[str, str], int]) -> None:
    """Hand a snapshot of the progress to the tracker's thread: the event loop never waits on MLflow."""
    if tracker is None or not tracker.active:
        return
    snap = Progress(planned=progress.planned, already=progress.already, done=progress.done)
    snap.per.update({k: list(v) for k, v in progress.per.items()})
    offloop = getattr(tracker, "offloop", None)
    if offloop is None:
        _track_progress(tracker, snap, planned)
    else:
        offloop.submit("log progress", _track_progress, tracker, snap, planned)


def _track_progress(tracker: Any, progress: Progress, planned: dict[tuple[str, str], int]) -> None:
    """Running progress into MLflow (the tracker guards its own failures)."""
    if tracker is None:
        return
    for (model, method), (n, correct) in list(progress.per.items()):
        tracker.progress(model, method, n, correct, planned.get((model, method)))
    tracker.progress_total(progress.already + progress.done, progress.planned)


# -- results (from the ledger, never from memory) ----------------------------------------


def results_summary(prep: Prepared) -> Any:
    """Per model x method x benchmark accounting recomputed from the committed ledger and its plan."""
    from cluster.tracking import summarize_ledger

    return summarize_ledger(prep.ledger.read_table(), prep.ledger.read_plan())


def finalize(prep: Prepared, tracker: Any = None, interrupted: bool = False) -> Any:
    """Print the results table (marked SIMULATED when it is), log it to MLflow, say where things are."""
    from cluster.tracking import results_markdown, ui_command

    table, plan = prep.ledger.read_table(), prep.ledger.read_plan()
    summary = None
    if tracker is not None:
        recorded = ((prep.ledger.manifest() or {}).get("plan") or {}).get("recorded_at")
        summary = _tracked(tracker, "log results", tracker.log_results, table, plan, recorded)
        _tracked(tracker, "end runs", tracker.finish, "KILLED" if interrupted else "FINISHED")
    if summary is None:
        summary = results_summary(prep)
    title = f"sweep {prep.cfg.sweep.name}" + (" (interrupted: partial)" if interrupted else "")
    print(results_markdown(summary, title), flush=True)
    print(f"[sweep] trajectories (Parquet): {prep.ledger.trajectories_uri}", flush=True)
    if tracker is not None and tracker.active:
        print(f"[sweep] MLflow runs: {ui_command(tracker.uri, tracker.experiment_id)}", flush=True)
    print(f"[sweep] full report (statistics, plots, missing scores): python jobs/report.py "
          f"sweep.name={prep.cfg.sweep.name} sweep.output_dir={prep.cfg.sweep.output_dir}", flush=True)
    return summary


def start_tracker(prep: Prepared) -> Any:
    """MLflow parent/child runs via cluster.tracking (guarded there); None when disabled."""
    if not bool(prep.cfg.tracking.enabled):
        return None
    from cluster import config as cconf
    from cluster.plan import plan_counts
    from cluster.tracking import Tracker

    tracker = Tracker.from_config(prep.cfg)
    _bound_tracker(tracker, prep.cfg)
    resolved = cconf.resolved(prep.cfg)
    _tracked(tracker, "start runs", tracker.start, resolved, cconf.sweep_fingerprint(resolved),
             list(plan_counts(prep.plan)))
    return tracker


def _bound_tracker(tracker: Any, cfg: Any) -> None:
    """Every tracker call of the driver goes through an OffLoop (threads, ``tracking.timeout_s``)."""
    from cluster.tracking import OffLoop

    tracker.offloop = OffLoop(tracker, float(cfg.tracking.get("timeout_s", 30.0)))


def _tracked(tracker: Any, what: str, fn: Any, *args: Any) -> Any:
    offloop = getattr(tracker, "offloop", None)
    return fn(*args) if offloop is None else offloop.call(what, fn, *args)


def run_sweep(cfg: Any) -> int:
    """The whole job: returns the process exit code (0, or 130 when interrupted).

    A signal during startup (planning, MLflow, ``ray.init``) is recorded by
    :mod:`cluster.signals` and honoured at the next step: what was started is stopped and
    the exit code is 130. Raises ``cluster.ledger.LedgerError`` (jobs/sweep.py turns it into
    one line): the lease is held by another driver, a ledger file is damaged, or a commit
    failed (``CommitError``). The writer lease is released on every way out."""
    from cluster import signals
    from cluster.runtime import connect, disconnect

    old = signals.install()
    tracker = rt = prep = None
    try:
        signals.step("planning")
        prep = prepare(cfg)
        print(plan_report(prep), flush=True)
        signals.step("starting MLflow")
        tracker = start_tracker(prep)
        stop = None
        if prep.pending:
            signals.step("starting Ray")
            rt = connect(cfg.cluster.address)
            signals.install()  # ray.init replaces the SIGTERM handler (sys.exit) with its own
            signals.checkpoint()
            try:
                stop = asyncio.run(drive(prep, tracker)).stop
            except Exception as exc:
                from cluster.ledger import LedgerError

                if isinstance(exc, LedgerError) and tracker is not None:
                    _tracked(tracker, "end runs", tracker.finish, "FAILED")
                raise
            finally:
                signals.install()  # the event loop's handlers are gone; keep recording
                disconnect(rt)
                rt = None
        interrupted = stop is not None and stop.signum is not None
        finalize(prep, tracker, interrupted)
    except signals.Interrupted as exc:
        if tracker is not None:
            tracker.finish("KILLED")
        print(f"[sweep] interrupted during startup (signal {exc.signum}): nothing was dispatched; "
              f"rerun the same command to start (sweep.name={cfg.sweep.name})", flush=True)
        return EXIT_INTERRUPTED
    finally:
        if rt is not None:
            disconnect(rt)
        if prep is not None:
            prep.ledger.close()  # release the writer lease
        signals.restore(old)
        signals.reset()
    if interrupted:
        print(f"[sweep] interrupted; resume with the same command (sweep.name={cfg.sweep.name})", flush=True)
        return EXIT_INTERRUPTED
    return 0
