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
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from evalcore.problems import AnswerKey, ProblemSpec

EXIT_INTERRUPTED = 130
RETRY_BACKOFF_S = 0.5


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
    led = Ledger.open(str(cfg.sweep.output_dir), str(cfg.sweep.name), resolved, cconf.sweep_fingerprint(resolved),
                      bool(cfg.sweep.allow_config_change), read_only=read_only)
    if not read_only:
        led.record_plan(plan)
    return led


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
    from cluster.config import effective_budgets
    from evalcore.harnesses.base import Budgets

    kw = effective_budgets(cfg, method)
    kw.setdefault("max_output_tokens", sampling.max_tokens)
    return Budgets.from_config({**kw, "exec_limits": _plain(cfg.limits)})


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
            if not self._rows or not (force or self.due()):
                return
            rows, self._rows = self._rows, []
            await asyncio.to_thread(self._ledger.commit, rows)
            self._last = time.monotonic()
            self.committed += len(rows)
            self.batches += 1


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
        elapsed = max(1e-9, time.monotonic() - self.start)
        rate = self.done / elapsed
        todo = self.planned - self.already - self.done
        eta = f"{todo / rate:.0f}s" if rate > 0 else "?"
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
            print(f"[sweep] second signal: abandoning trajectories in flight, committing what finished", flush=True)
        else:
            self.soft.set()
            print(f"[sweep] signal {signum}: no new trajectories; finishing those in flight "
                  f"(signal again to stop now)", flush=True)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers only work on the main thread (tests drive sweeps from others)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.trip, sig)

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
        self.timeout_s = float(c.trajectory_timeout_s)
        self.per_model = int(c.max_in_flight_per_model)
        self.capacity = asyncio.Semaphore(max(1, len(workers) * int(c.worker_concurrency)))
        self.load = [0] * len(workers)
        self.tasks: set[asyncio.Task] = set()

    def _pick_worker(self) -> int:
        return min(range(len(self.workers)), key=lambda i: self.load[i])

    def _task(self, item: Any, ep: Any) -> Any:
        from cluster.workers import TrajectoryTask

        me = self.prep.method_cfgs[item.method]
        sampling, budgets = self.prep.run_params(item.model, item.method)
        return TrajectoryTask(
            key=item.key, model=item.model, method=item.method, harness=str(me.get("harness", item.method)),
            extraction=str(me.get("extraction", "submit")), problem=self.prep.problems[(item.benchmark, item.problem_id)],
            sample=int(item.sample), sampling=sampling, budgets=budgets, endpoint=ep)

    async def _attempt(self, task: Any) -> tuple[Any | None, str | None]:
        """One remote run: (trajectory, None) or (partial trajectory or None, failure reason)."""
        from ray.exceptions import RayError

        from cluster.workers import WorkerFailure

        idx = self._pick_worker()
        self.load[idx] += 1
        ref = self.workers[idx].run.remote(task)
        try:
            res = await asyncio.wait_for(_await(ref), timeout=self.timeout_s)
        except asyncio.TimeoutError:
            _cancel(ref)
            return None, f"trajectory timeout after {self.timeout_s:g}s"
        except RayError as exc:
            return None, f"worker {idx} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        finally:
            self.load[idx] -= 1
        if isinstance(res, WorkerFailure):
            return res.trajectory, res.reason
        return res, None

    async def run_item(self, item: Any, ep: Any) -> Outcome:
        task = self._task(item, ep)
        last_traj, reason = None, "not attempted"
        for attempt in range(1, self.retries + 2):
            traj, reason = await self._attempt(task)
            if reason is None:
                return Outcome(traj, None, attempt)
            last_traj = traj or last_traj
            if attempt <= self.retries:
                self.progress.retries += 1
                print(f"[sweep] retry {attempt}/{self.retries} {item.key}: {reason}", flush=True)
                await asyncio.sleep(RETRY_BACKOFF_S * attempt)
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
        except Exception as exc:  # noqa: BLE001 - a driver-side bug still leaves a listed record
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
    except Exception:  # noqa: BLE001 - best effort: the worker may be gone already
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
    from evalcore.grading import grade_parsed, parse_submission

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
    correct = bool(grade_parsed(parsed, expected, profile))
    row = trajectory_row(traj, key=item.key, correct=correct, profile=profile, fingerprint=item.fingerprint,
                         sweep=sweep, parsed=parsed, attempts=out.attempts)
    return row, correct


# -- the run ------------------------------------------------------------------------------


def stages_for(prep: Prepared) -> list[list[str]]:
    """Model-major stages restricted to models that still have work."""
    from cluster.serving import plan_stages

    from cluster.plan import plan_counts

    todo = {model for model, _ in plan_counts(prep.pending)}
    models = [prep.model_cfgs[m] for m in prep.cfg.models if m in todo]
    return [s for s in plan_stages(models, prep.cfg) if s]


def executor_count(cfg: Any) -> int:
    from cluster.runtime import available_cpus

    if cfg.cluster.executors:
        return int(cfg.cluster.executors)
    return max(1, int(available_cpus() // max(1, float(cfg.cluster.executor_cpus))))


def start_actors(prep: Prepared) -> tuple[list[Any], list[Any]]:
    """Executor actors, then worker actors that hold their handles."""
    from cluster.executors import executor_name, start_executors
    from cluster.workers import start_workers
    from evalcore.sandbox.types import Limits

    c, name = prep.cfg.cluster, str(prep.cfg.sweep.name)
    limits = Limits(**_plain(prep.cfg.limits))
    n = executor_count(prep.cfg)
    execs = start_executors(name, n, float(c.executor_cpus), limits, int(c.get("sandbox_pool", 2)))
    names = [executor_name(name, i) for i in range(n)]
    workers = start_workers(name, int(c.workers), int(c.worker_concurrency), names, limits)
    return execs, workers


def stop_actors(handles: list[Any]) -> None:
    import ray

    for h in handles:
        try:
            ray.kill(h, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


async def _periodic(interval_s: float, fn: Any, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return
        except asyncio.TimeoutError:
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
        endpoints = await asyncio.to_thread(deploy_stage, models, prep.cfg)
        try:
            by_model: dict[str, list[Any]] = defaultdict(list)
            for it in prep.pending:
                if it.model in endpoints:
                    by_model[it.model].append(it)
            await disp.run_stage(dict(by_model), endpoints)
            await committer.flush(force=True)
        finally:
            await asyncio.to_thread(teardown_stage, endpoints)


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

    async def tick_commit() -> None:
        await committer.flush()

    async def tick_progress() -> None:
        print(progress.line(), flush=True)
        _track_progress(tracker, progress, planned)

    bg = [asyncio.create_task(_periodic(min(1.0, float(sweep_cfg.commit_interval_s)), tick_commit, done)),
          asyncio.create_task(_periodic(float(prep.cfg.progress.interval_s), tick_progress, done))]
    execs: list[Any] = []
    workers: list[Any] = []
    try:
        execs, workers = await asyncio.to_thread(start_actors, prep)
        await run_stages(prep, workers, committer, progress, stop, tracker)
    finally:
        done.set()
        await asyncio.gather(*bg, return_exceptions=True)
        await committer.flush(force=True)
        print(progress.line(), flush=True)
        stop.uninstall(loop)
        stop_actors(workers + execs)
    return RunResult(stop, progress, committer)


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
    if tracker is not None:
        recorded = ((prep.ledger.manifest() or {}).get("plan") or {}).get("recorded_at")
        summary = tracker.log_results(table, plan, recorded)
        tracker.finish("KILLED" if interrupted else "FINISHED")
    else:
        summary = results_summary(prep)
    title = f"sweep {prep.cfg.sweep.name}" + (" (interrupted: partial)" if interrupted else "")
    print(results_markdown(summary, title), flush=True)
    print(f"[sweep] trajectories (Parquet): {prep.ledger.trajectories_uri}", flush=True)
    if tracker is not None and tracker.active:
        print(f"[sweep] MLflow runs: {ui_command(tracker.uri)}", flush=True)
    return summary


def start_tracker(prep: Prepared) -> Any:
    """MLflow parent/child runs via cluster.tracking (guarded there); None when disabled."""
    if not bool(prep.cfg.tracking.enabled):
        return None
    from cluster import config as cconf
    from cluster.plan import plan_counts
    from cluster.tracking import Tracker

    tracker = Tracker.from_config(prep.cfg)
    resolved = cconf.resolved(prep.cfg)
    tracker.start(resolved, cconf.sweep_fingerprint(resolved), list(plan_counts(prep.plan)))
    return tracker


def run_sweep(cfg: Any) -> int:
    """The whole job: returns the process exit code (0, or 130 when interrupted)."""
    from cluster.runtime import connect, disconnect

    prep = prepare(cfg)
    print(plan_report(prep), flush=True)
    tracker = start_tracker(prep)
    stop = None
    if prep.pending:
        rt = connect(cfg.cluster.address)
        try:
            stop = asyncio.run(drive(prep, tracker)).stop
        finally:
            disconnect(rt)
    interrupted = stop is not None and stop.signum is not None
    finalize(prep, tracker, interrupted)
    if interrupted:
        print(f"[sweep] interrupted; resume with the same command (sweep.name={cfg.sweep.name})", flush=True)
        return EXIT_INTERRUPTED
    return 0
