"""The sweep's run: prepare -> MLflow -> Ray -> actors -> the continuous GPU schedule (each model
deployed when its GPUs are free, dispatched, torn down the moment it is done) -> commit ->
results from the ledger, with signals honoured at every step.

Importing this module does not import Ray: Ray and the modules that need it (serving,
executors, workers, dispatch) are imported inside the functions that run once the sweep
has started Ray, so a sweep whose plan is all committed never imports it and a signal
during planning is honoured before any slow import.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NoReturn

from opteval.cluster.driver import signals
from opteval.cluster.driver.admission import check_limits
from opteval.cluster.driver.clusterwatch import ClusterWatch, Running
from opteval.cluster.driver.commit import Committer, results_summary
from opteval.cluster.driver.outcome import exit_code
from opteval.cluster.driver.prepare import Prepared, plan_report, prepare
from opteval.cluster.driver.progress import Progress, ProgressPrinter, track_progress_offloop
from opteval.cluster.driver.signals import EXIT_INTERRUPTED, StopState, quiet_signals
from opteval.cluster.runtime import (
    EXECUTOR_RESOURCE,
    PlacementError,
    RayStartupError,
    connect,
    describe_nodes,
    disconnect,
    executor_slots,
    local_services,
    node_resources,
    services_gone,
)
from opteval.exit_codes import ExitCode
from opteval.sweepcore import config as cconf
from opteval.sweepcore.backends import backend_of
from opteval.sweepcore.backends import serves_on_gpus as on_gpus
from opteval.sweepcore.config import SweepConfig, methods_for
from opteval.sweepcore.ledger import LedgerError
from opteval.sweepcore.placement import placement
from opteval.sweepcore.plan import PlanItem, by_model, plan_counts
from opteval.sweepcore.tracking import (
    BackgroundStart,
    OffLoop,
    Tracker,
    end_line,
    ledger_summary,
    model_families,
    results_markdown,
    ui_command,
)

EXIT_CLUSTER_LOST = ExitCode.STARTUP  # jobs/sweep.py's EXIT_STARTUP: Ray did not start, or the cluster it started stopped


def serves_on_gpus(cfg: SweepConfig, model_cfgs: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """Whether the sweep deploys vLLM models (or their stand-ins), which need CPUs beside GPUs.
    ``model_cfgs``: the configs ``prepare`` already read (no config file is read again once
    Ray runs: a job's working directory can be re-unpacked under it)."""
    if model_cfgs is not None:
        return on_gpus(list(model_cfgs.values()))
    return on_gpus([cconf.model_config(m) for m in cfg.models])


def cpu_serving(cfg: SweepConfig, model_cfgs: Mapping[str, Mapping[str, Any]] | None = None) -> float:
    """CPUs the sweep's vLLM models served on CPUs (no GPU in their bundles) hold: their
    replicas' bundles and one ingress; the executors leave them free."""
    models = list(model_cfgs.values()) if model_cfgs is not None else [cconf.model_config(m) for m in cfg.models]
    on_cpus = [m for m in models if backend_of(m, cfg.serving).on_gpus and not backend_of(m, cfg.serving).gpus(m)]
    if not on_cpus:
        return 0.0
    held = 0.0
    for m in on_cpus:
        pl = placement(m, cfg.serving)
        held += float(pl["cpus"]) * int(pl["replicas"])
    return held + float(cfg.serving.ingress_cpus)


def executor_count(cfg: SweepConfig, model_cfgs: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """Executors to start: the ``opteval_executor`` slots the cluster offers (never GPU nodes'
    CPUs that serving needs), or ``cluster.executors`` when it fits; else a PlacementError."""
    nodes = node_resources()
    s = cfg.serving
    slots = executor_slots(nodes, cfg.cluster.executor_cpus, cpus_per_gpu=s.cpus_per_gpu,
                           ingress_cpus=s.ingress_cpus, gpu_serving=serves_on_gpus(cfg, model_cfgs),
                           cpu_serving=cpu_serving(cfg, model_cfgs))
    held = cpu_serving(cfg, model_cfgs)
    if slots < 1 and held > 0:
        raise PlacementError(
            f"no executor can be placed: the models served on CPUs hold {held:g} CPU(s) (their replicas' "
            f"bundles and serving.ingress_cpus={s.ingress_cpus:g}) and an executor needs "
            f"cluster.executor_cpus={cfg.cluster.executor_cpus:g} more ({describe_nodes(nodes)}); lower "
            f"serving.ingress_cpus or cluster.executor_cpus, or start Ray with more CPUs")
    if slots < 1:
        raise PlacementError(
            f"no executor can be placed: no node offers the {EXECUTOR_RESOURCE!r} resource with "
            f"{cfg.cluster.executor_cpus:g} CPU(s) to spare ({describe_nodes(nodes)}); start CPU nodes with "
            f"ray start --resources='{{\"{EXECUTOR_RESOURCE}\": N}}'")
    if cfg.cluster.executors:
        n = cfg.cluster.executors
        if n > slots:
            raise PlacementError(f"cluster.executors={n} but the cluster holds {slots} executor(s) "
                                 f"({describe_nodes(nodes)})")
        return n
    return slots


def fit_ingress(cfg: SweepConfig, model_cfgs: Mapping[str, Mapping[str, Any]] | None,
                nodes: list[dict[str, float]]) -> SweepConfig:
    """On a small machine (a 2-core laptop) a CPU-served model's bundle plus a 1-CPU ingress leave
    no CPU for an executor: the ingress (an async proxy, light on CPU) shrinks to what is left
    beside one executor, said in one line. Unchanged when an executor fits, or when shrinking
    the ingress cannot make one fit (then :func:`executor_count` names the cause)."""
    s = cfg.serving
    held = cpu_serving(cfg, model_cfgs)
    if held <= 0 or s.ingress_cpus <= 0 or executor_slots(
            nodes, cfg.cluster.executor_cpus, cpus_per_gpu=s.cpus_per_gpu, ingress_cpus=s.ingress_cpus,
            gpu_serving=serves_on_gpus(cfg, model_cfgs), cpu_serving=held):
        return cfg
    cpus = max((float(n.get("CPU", 0)) for n in nodes if float(n.get(EXECUTOR_RESOURCE, 0)) > 0), default=0.0)
    room = cpus - (held - float(s.ingress_cpus)) - float(cfg.cluster.executor_cpus)
    if room < 0:
        return cfg
    ingress = min(float(s.ingress_cpus), int(room * 10) / 10)  # Ray takes fractional CPUs; tenths are plenty
    print(f"[sweep] serving.ingress_cpus {s.ingress_cpus:g} -> {ingress:g}: this machine's {cpus:g} CPUs hold the "
          f"model's bundle(s) ({held - float(s.ingress_cpus):g}) and one executor "
          f"({cfg.cluster.executor_cpus:g}) beside it", flush=True)
    return replace(cfg, serving=replace(s, ingress_cpus=ingress))


def start_actors(prep: Prepared) -> tuple[list[Any], list[Any]]:
    """Executor actors and the worker actors that find them by name, started together: the
    executors' fork servers warm up while the workers' processes start (each is seconds on a
    small machine, and every sweep pays them before its first model is deployed)."""
    # the actor modules import Ray: not loaded by plan_only runs, which import this module
    import ray

    # deferred: as above: the actor modules import Ray at load
    from opteval.cluster.actors.executors import executor_name, executors_warmed, launch_executors
    from opteval.cluster.actors.workers import launch_workers

    prep.cfg = fit_ingress(prep.cfg, prep.model_cfgs, node_resources())
    c, name, limits = prep.cfg.cluster, prep.cfg.sweep.name, prep.cfg.limits
    n = executor_count(prep.cfg, prep.model_cfgs)
    execs, warming = launch_executors(name, n, c.executor_cpus, limits, prep.cfg.solvers, c.sandbox_pool)
    names = [executor_name(name, i) for i in range(n)]
    workers, pings = launch_workers(name, c.workers, c.worker_concurrency, names, limits)
    try:
        executors_warmed(execs, ray.get(warming, timeout=300))
        ray.get(pings, timeout=300)
    except BaseException:
        stop_actors(workers + execs)  # a refused executor (ConfigError), a timeout, a signal
        raise
    if prep.ledger is not None and not prep.ledger.read_only:
        prep.ledger.record_manifest_section("executors", executor_environment(execs[0]))
    return execs, workers


def executor_environment(handle: Any) -> dict[str, Any]:
    """What programs ran with: the solver set, the versions installed on the executors, and
    the modules their fork server pre-imported (one executor asked: they share an image)."""
    # deferred: Ray loads only once the sweep starts it (see docstring)
    import ray

    return ray.get(handle.environment.remote(), timeout=60)


def stop_actors(handles: list[Any]) -> None:
    # deferred: Ray loads only once the sweep starts it (see docstring)
    import ray

    for h in handles:
        try:
            ray.kill(h, no_restart=True)
        except Exception:
            pass


async def _periodic(interval_s: float, fn: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return
        except TimeoutError:
            await fn()


async def run_models(prep: Prepared, workers: list[Any], committer: Committer, progress: Progress,
                     stop: StopState, tracker: Tracker | None) -> None:
    """Every model with pending items through the continuous schedule (``opteval.cluster.driver.schedule``):
    its items grouped once, before any replica comes up; deployed when its GPUs are free;
    its apps torn down the moment its last trajectory is done, while the others keep running."""
    # Ray and Serve: imported once models run, never by plan_only
    from opteval.cluster.driver.dispatch import Dispatcher
    from opteval.cluster.driver.schedule import ModelWork, model_works, run_schedule
    from opteval.cluster.serve.fleet import ServeFleet

    cfg = prep.cfg
    items = by_model(prep.pending)
    harnesses = {m: [prep.method_cfgs[me].harness for me in methods_for(cfg, m)] for m in cfg.models}
    works = model_works({m: prep.model_cfgs[m] for m in cfg.models}, items, harnesses, cfg.serving,
                        cfg.cluster.max_in_flight_per_model)
    disp = Dispatcher(prep, workers, committer, progress, stop, tracker, items=items)
    left = {w.name: w for w in works}

    def finished(item: PlanItem) -> None:
        left[item.model].left -= 1

    disp.on_finish = finished
    fleet = await asyncio.to_thread(ServeFleet, cfg, [w.cfg for w in works])

    async def one(m: ModelWork, ep: Any) -> None:
        await disp.run_model(m.name, ep)
        await committer.flush(force=True)

    await run_schedule(works, fleet, one, disp.admission, stop=stop,
                       add_endpoint=lambda m, ep: disp.add_endpoint(m.name, ep))


@dataclass
class RunResult:
    stop: StopState
    progress: Progress
    committer: Committer


async def drive(prep: Prepared, tracker: Tracker | None = None, running: Running | None = None) -> RunResult:
    """The async body of a sweep: actors, the schedule, periodic commits and progress, signals.
    ``running`` is filled in for the cluster watch (a thread that may have to commit)."""
    loop = asyncio.get_running_loop()
    stop = StopState()
    stop.install(loop)
    sweep_cfg = prep.cfg.sweep
    committer = Committer(prep.ledger, sweep_cfg.commit_batch, sweep_cfg.commit_interval_s)
    if running is not None:
        running.loop, running.committer, running.stop = loop, committer, stop
    progress = Progress(planned=len(prep.plan), already=len(prep.plan) - len(prep.pending))
    done = asyncio.Event()
    planned = plan_counts(prep.pending)

    committer.on_failure = lambda exc: _commit_failed(exc, stop)

    async def tick_commit() -> None:
        try:
            await committer.flush()
        except Exception:
            pass

    printer = ProgressPrinter(progress)

    async def tick_progress() -> None:
        printer.tick()
        track_progress_offloop(tracker, progress, planned)

    bg = [asyncio.create_task(_periodic(min(1.0, sweep_cfg.commit_interval_s), tick_commit, done)),
          asyncio.create_task(_periodic(prep.cfg.progress.interval_s, tick_progress, done))]
    execs: list[Any] = []
    workers: list[Any] = []
    try:
        execs, workers = await asyncio.to_thread(start_actors, prep)
        await run_models(prep, workers, committer, progress, stop, tracker)
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
        printer.close()
        stop.uninstall(loop)
        if stop.signum is not None:
            quiet_signals()
        stop_actors(workers + execs)
    if committer.failed is not None:
        raise committer.failed
    return RunResult(stop, progress, committer)


def _commit_failed(exc: Exception, stop: StopState) -> None:
    print(f"[sweep] COMMIT FAILED: {exc}; stopping the sweep (what was committed before stays valid)",
          flush=True)
    stop.abort()


# -- results (from the ledger, never from memory) ----------------------------------------


def finalize(prep: Prepared, tracker: Tracker | None = None, interrupted: bool = False) -> Any:
    """Print the results table (marked SIMULATED when it is), log it to MLflow, say where things are."""
    summary = None
    if tracker is not None:
        # the small columns only: the traced rows' calls, executions and transcripts are read apart
        table, plan = ledger_summary(prep.ledger), prep.ledger.read_plan()
        tracker.ledger_uri = prep.ledger.trajectories_uri
        background = getattr(tracker, "background", None)
        if background is not None:
            if not tracker.active:  # one more chance for a slow start before the results
                background.wait(prep.cfg.tracking.timeout_s)
            background.stop()
        recorded = ((prep.ledger.manifest() or {}).get("plan") or {}).get("recorded_at")
        summary = _tracked(tracker, "log results", tracker.log_results, table, plan, recorded)
        offloop = getattr(tracker, "offloop", None)
        budget = 0.8 * offloop.timeout_s if offloop is not None else None  # within the bound of one call
        # a signal after the last trajectory skips the traces (the slow part); report --sync-mlflow logs them
        traced = (None if signals.pending() else
                  _tracked(tracker, "log traces", tracker.log_traces, table, plan, budget, prep.ledger))
        if traced is not None:
            left = (f"; {traced.left} left: opteval report sweep.name={prep.cfg.sweep.name} --sync-mlflow logs them"
                    if traced.left else "")
            print(f"[sweep] MLflow traces: {traced.line(tracker.traces)}{left}", flush=True)
        status = "KILLED" if interrupted else "FINISHED"
        _tracked(tracker, "end runs", tracker.finish, status)
        if not tracker.finished:  # a time bound fired (tracking went off): no run is left RUNNING
            tracker.finish_anyway(status, prep.cfg.tracking.timeout_s)
    if summary is None:
        summary = results_summary(prep)
    title = f"sweep {prep.cfg.sweep.name}" + (" (interrupted: partial)" if interrupted else "")
    print(results_markdown(summary, title, model_families(prep.cfg.models)), flush=True)
    print(f"[sweep] trajectories (Parquet): {prep.ledger.trajectories_uri}", flush=True)
    if tracker is not None and tracker.active:
        print(f"[sweep] MLflow runs: {ui_command(tracker.uri, tracker.experiment_id)}", flush=True)
    line = end_line(tracker)
    if line:
        print(line, flush=True)
    print(f"[sweep] full report (statistics, plots, missing scores): opteval report "
          f"sweep.name={prep.cfg.sweep.name} sweep.output_dir={prep.cfg.sweep.output_dir}", flush=True)
    return summary


# -- MLflow -------------------------------------------------------------------------------


def start_tracker(prep: Prepared) -> Tracker | None:
    """MLflow parent/child runs via opteval.sweepcore.tracking (guarded there); None when disabled.

    Started in the background (:class:`BackgroundStart`): a slow or absent tracking server
    delays nothing, and is retried while the sweep runs instead of turning tracking off."""
    if not prep.cfg.tracking.enabled:
        return None
    tracker = Tracker.from_config(prep.cfg)
    _bound_tracker(tracker, prep.cfg)
    resolved = cconf.resolved(prep.cfg)
    tracker.background = BackgroundStart(  # type: ignore[attr-defined]  # an attribute the driver adds
        tracker, resolved, cconf.sweep_fingerprint(resolved), list(plan_counts(prep.plan))).begin()
    return tracker


def _bound_tracker(tracker: Any, cfg: SweepConfig) -> None:
    """Every tracker call of the driver goes through an OffLoop (threads, ``tracking.timeout_s``).
    ``tracker`` is a :class:`Tracker`; the OffLoop is attached as an attribute it does not declare."""
    tracker.offloop = OffLoop(tracker, cfg.tracking.timeout_s)


def _tracked(tracker: Tracker, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    offloop = getattr(tracker, "offloop", None)
    return fn(*args) if offloop is None else offloop.call(what, fn, *args)


# -- the whole job ------------------------------------------------------------------------


def _connect_recording_sigterm(address: str | None) -> Any:
    """``connect``, with a SIGTERM inside ``ray.init`` honoured like any other startup signal.

    ``ray.init`` first installs its own SIGTERM handler (``sys.exit(15)``), so a SIGTERM that
    lands while it starts the local cluster leaves as ``SystemExit(15)`` instead of being
    recorded: stop what it started and report an interrupted startup (exit 130)."""
    # deferred: Ray loads only once the sweep starts it (see docstring)
    import ray

    try:
        return connect(address, between=signals.checkpoint)  # a signal between attempts: exit 130
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        ray.shutdown()  # also stops the processes of a half-started local cluster
        raise signals.Interrupted(signal.SIGTERM) from None


def _interrupted_line(signum: int, cfg: SweepConfig) -> str:
    return (f"[sweep] interrupted during startup (signal {signum}): nothing was dispatched; "
            f"rerun the same command to start (sweep.name={cfg.sweep.name})")


def _resume_line(cfg: SweepConfig) -> str:
    return f"[sweep] interrupted; resume with the same command (sweep.name={cfg.sweep.name})"


HARD_EXIT_TRACKING_S = 5.0  # ending the MLflow runs on the way to os._exit waits at most this


def _hard_exit(prep: Prepared, tracker: Tracker | None, status: str, line: str, code: int) -> NoReturn:
    """End the process from a watchdog's thread while the main thread is stuck in Ray's C++:
    MLflow runs ended (a tighter OffLoop bound than the sweep's), the lease released, ``line``,
    then ``os._exit(code)`` whatever failed before it. The processes ``ray.init`` started die
    with the driver (Ray starts them fate-sharing)."""
    try:
        if tracker is not None:
            OffLoop(tracker, min(HARD_EXIT_TRACKING_S, float(prep.cfg.tracking.timeout_s))).call(
                "end runs", tracker.finish, status)
        prep.ledger.close()
        print(line, flush=True)
    finally:
        os._exit(code)


def _exit_interrupted(prep: Prepared, tracker: Tracker | None) -> Callable[[int], None]:
    """What the startup watchdog does when ``ray.init`` does not return after a signal: the
    interrupted-startup exit (one line, MLflow runs KILLED, the lease released, 130)."""

    def stop(signum: int) -> None:
        print(f"[sweep] Ray's start-up did not return {signals.STUCK_GRACE_S:g} s after signal {signum}; "
              f"exiting without it", flush=True)
        _hard_exit(prep, tracker, "KILLED", _interrupted_line(signum, prep.cfg), EXIT_INTERRUPTED)

    return stop


def _exit_cluster_lost(prep: Prepared, tracker: Tracker | None, running: Running) -> Callable[[list[str]], None]:
    """What the cluster watch does when the GCS or raylet this driver started exited under the
    sweep: commit what finished, then the hard exit (130 after a signal, which reached them too,
    else 5); Ray's own calls would wait 60 s for the GCS and end the process with exit 1."""

    def lost(gone: list[str]) -> None:
        signum = (running.stop.signum if running.stop is not None else None) or signals.pending()
        cause = f" (signal {signum} reached them too)" if signum else ""
        print(f"[sweep] Ray's local cluster stopped under the sweep: {', '.join(gone)} exited{cause}; "
              f"committing what finished", flush=True)
        print(f"[sweep] {running.commit_now()}", flush=True)
        if signum:
            _hard_exit(prep, tracker, "KILLED", _resume_line(prep.cfg), EXIT_INTERRUPTED)
        else:
            _hard_exit(prep, tracker, "FAILED",
                       f"cluster error: Ray's local cluster stopped while the sweep ran ({', '.join(gone)}); "
                       f"rerun the same command to resume (sweep.name={prep.cfg.sweep.name})", EXIT_CLUSTER_LOST)

    return lost


def run_sweep(cfg: SweepConfig) -> int:
    """The whole job: returns the process exit code (0, or 130 when interrupted).

    A signal during startup (planning, MLflow, ``ray.init``) is recorded by
    :mod:`opteval.cluster.driver.signals` and honoured at the next step: what was started is stopped
    and the exit code is 130. Raises ``opteval.sweepcore.ledger.LedgerError`` (jobs/sweep.py turns it
    into one line): the lease is held by another driver, a ledger file is damaged, or a commit
    failed (``CommitError``). The writer lease is released on every way out."""
    c = cfg.cluster
    check_limits(c.workers, c.worker_concurrency, c.max_in_flight_per_model)  # ConfigError: exit 2
    old = signals.install()
    tracker = rt = prep = None
    late: int | None = None
    try:
        signals.step("planning")
        prep = prepare(cfg)
        print(plan_report(prep), flush=True)
        signals.step("starting MLflow")
        tracker = start_tracker(prep)
        stop = None
        if prep.pending:
            signals.step("starting Ray")
            try:
                with signals.watchdog(_exit_interrupted(prep, tracker)):
                    rt = _connect_recording_sigterm(cfg.cluster.address)
            except RayStartupError:
                if tracker is not None:
                    _tracked(tracker, "end runs", tracker.finish, "FAILED")
                raise
            signals.install()  # ray.init replaces the SIGTERM handler (sys.exit) with its own
            signals.checkpoint()
            running = Running()
            services = local_services() if rt.started_local else {}
            try:
                watch = (ClusterWatch(partial(services_gone, services), _exit_cluster_lost(prep, tracker, running))
                         if services else contextlib.nullcontext())
                with watch:
                    stop = asyncio.run(drive(prep, tracker, running)).stop
            except Exception as exc:
                if isinstance(exc, LedgerError) and tracker is not None:
                    _tracked(tracker, "end runs", tracker.finish, "FAILED")
                raise
            finally:
                signals.install()  # the event loop's handlers are gone; keep recording
                disconnect(rt)
                rt = None
        interrupted = stop is not None and stop.signum is not None
        signals.finishing("writing the results")
        finalize(prep, tracker, interrupted)
        late = None if interrupted else signals.pending()
    except signals.Interrupted as exc:
        if tracker is not None:
            tracker.finish("KILLED")
        print(_interrupted_line(exc.signum, cfg), flush=True)
        return EXIT_INTERRUPTED
    finally:
        if tracker is not None and getattr(tracker, "background", None) is not None:
            tracker.background.stop()  # type: ignore[attr-defined]
        if rt is not None:
            disconnect(rt)
        if prep is not None:
            prep.ledger.close()  # release the writer lease
        signals.restore(old)
        signals.reset()
    if interrupted:
        print(_resume_line(cfg), flush=True)
        return EXIT_INTERRUPTED
    if late is not None:
        print(f"[sweep] interrupted (signal {late}) after the last trajectory: every result is committed; "
              f"opteval report sweep.name={cfg.sweep.name} prints them again", flush=True)
        return EXIT_INTERRUPTED
    return exit_code(prep)  # 0, 2 (a model stopped as a config error) or 4 (status=error rows)
