"""MLflow: one parent run per sweep, one child run per model x method, metrics from the ledger.

The ledger is the truth; MLflow is a view of it. Every MLflow call here is guarded:
if the tracking server is unreachable the sweep goes on, warns once with the command
that re-logs everything later (``python jobs/report.py sweep.name=... --sync-mlflow``),
and stops trying after repeated failures.

Names are chosen for MLflow's run-comparison view: the parent run is named
``<sweep>``, child runs ``<sweep>/<model>/<method>`` (so two sweeps' runs never look
alike), and carry the tags ``model`` and ``method``; metrics are
``acc/<bench>``, ``tokens/<bench>``, ``exec_rate/<bench>``, ``planned/<bench>``,
``missing/<bench>``, ``acc/macro``, ``tokens/macro`` (accuracies are fractions 0..1),
so the children line up column by column. Runs are found again by tags
(``opteval.sweep``, ``opteval.role``), so a resumed sweep or a later sync reuses them;
final metrics are logged at step 0 with a timestamp derived from the ledger, so
re-logging an unchanged ledger adds nothing (MLflow drops identical metric rows).

Every run a simulated policy touched (children of simulated models and their parent)
carries ``opteval.simulated=true`` from the moment it is created. Run durations count
only the time the sweep was running: on each finish the end time is set to start time +
the accumulated active seconds (tag ``opteval.active_s``), so idle days between a stop
and a resume are left out. The experiment is tagged as a classic ML experiment
(``mlflow.experimentKind``) and :func:`runs_url` opens its runs table (MLflow 3's UI
otherwise opens on the GenAI traces page).

No Ray import here. MLflow is imported lazily (it is slow to import).
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from opteval.sweepcore.backends import is_simulated
from opteval.sweepcore.config import SweepConfig
from opteval.sweepcore.dependencies import resolved_versions
from opteval.sweepcore.ledger import Ledger
from opteval.sweepcore.tracking.library_logs import route_library_logs
from opteval.sweepcore.tracking.names import (
    ACTIVE_TAG,
    EXPERIMENT_KIND_TAG,
    LEDGER_TAG,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_PER_BATCH,
    ROLE_TAG,
    SIMULATED_TAG,
    SWEEP_TAG,
    TrackingWarning,
    sync_command,
    tracking_uri,
)
from opteval.sweepcore.tracking.params import _version, git_revision, plan_params, run_params
from opteval.sweepcore.tracking.summary import ledger_summary, results_markdown, run_metrics, summarize_ledger

log = logging.getLogger("opteval.tracking")
MAX_FAILURES = 3
# An MLflow child's artifact: its rows' scoring columns; the detail stays in the ledger (its URI is a tag)
ARTIFACT_DROP = ("calls", "execs", "transcript", "budgets")


class TraceCount(NamedTuple):
    """What a trace logging pass left in the store: ``logged`` chosen trajectories the store holds
    (counted there after the export queue drained), ``left`` not reached before the time bound,
    ``selected`` chosen by ``tracking.traces``, ``capped`` of those past ``tracking.max_traces``,
    ``lost`` handed to MLflow but not in the store (never silent: the line says so)."""

    logged: int
    left: int
    selected: int = 0
    capped: int = 0
    lost: int = 0

    def line(self, policy: str) -> str:
        text = f"{self.logged} of {self.selected} traces logged (tracking.traces={policy})"
        if self.capped:
            text += f"; {self.capped} over tracking.max_traces, the rest not selected"
        if self.lost:
            text += f"; {self.lost} handed to MLflow are not in its store (re-run --sync-mlflow)"
        return text


# -- locations ---------------------------------------------------------------------------------
# -- metrics from the ledger ------------------------------------------------------------------------


# -- the tracker ------------------------------------------------------------------------------------
class Tracker:
    """Parent + child runs for one sweep; every call is guarded (see the module docstring)."""

    def __init__(self, uri: str, experiment: str, sweep: str, output_dir: str, *, enabled: bool = True,
                 traces: str = "sample", traces_per_cell: int = 3, max_traces: int | None = None):
        self.uri = uri
        self.experiment = experiment
        self.sweep = sweep
        self.output_dir = output_dir
        self.enabled = enabled
        self.traces, self.traces_per_cell, self.max_traces = traces, traces_per_cell, max_traces
        self.finished = False  # finish() ended every run (finish_anyway() does it past a fired time bound)
        self.failures = 0
        self.client: Any = None
        self.experiment_id: str | None = None
        self.parent_id: str | None = None
        self.children: dict[tuple[str, str], str] = {}
        self._session_start: float | None = None  # set when runs start; finish() adds the active time
        self.quiet = False  # BackgroundStart's retries: one line per outage, not a warning per attempt
        self.synced = False  # the last log_results reached MLflow: it holds every result of the ledger
        self.ledger_uri: str | None = None  # tagged on each child (LEDGER_TAG): where its transcripts are
        if enabled and uri.startswith(("http://", "https://")):
            # A dead server must not stall the sweep for minutes of retries (user values win).
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

    @classmethod
    def from_config(cls, cfg: SweepConfig) -> Tracker:
        uri = tracking_uri(cfg.tracking.uri, cfg.sweep.output_dir)
        return cls(uri, cfg.tracking.experiment, cfg.sweep.name, cfg.sweep.output_dir,
                   enabled=cfg.tracking.enabled, traces=cfg.tracking.traces,
                   traces_per_cell=cfg.tracking.traces_per_cell, max_traces=cfg.tracking.max_traces)

    def log_dir(self) -> str | None:
        """The sweep's directory beside the ledger (for MLflow's own log), None off local disk."""
        if "://" in self.output_dir and not self.output_dir.startswith("file://"):
            return None
        return os.path.join(self.output_dir.removeprefix("file://"), self.sweep)

    @property
    def active(self) -> bool:
        return self.enabled and self.client is not None and self.parent_id is not None

    def _guard(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.enabled:
            return None
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            hint = sync_command(self.sweep, self.output_dir, self.uri)
            if self.quiet:
                self.enabled = False if self.parent_id is None else self.enabled
                return None
            warnings.warn(f"MLflow ({self.uri}) failed to {what}: {type(exc).__name__}: {str(exc)[:300]}. "
                          f"The sweep goes on; the ledger is the truth. Re-log later with: {hint}",
                          TrackingWarning, stacklevel=3)
            if self.failures >= MAX_FAILURES or self.parent_id is None:
                self.enabled = False
            return None
        self.failures = 0
        return out

    # ---- setup ----
    def start(self, resolved: Mapping[str, Any], fingerprint: str, pairs: Iterable[tuple[str, str]]) -> bool:
        """Create or reuse the parent run and the children; log their params. True if tracking."""
        pairs = list(pairs)
        self._guard("start runs", self._start, resolved, fingerprint, pairs)
        return self.active

    def _start(self, resolved: Mapping[str, Any], fingerprint: str, pairs: list[tuple[str, str]]) -> None:
        # deferred: mlflow takes seconds to import; only when tracking starts
        from mlflow.tracking import MlflowClient

        route_library_logs(self.log_dir())  # after mlflow's import, which sets its loggers up
        client = MlflowClient(tracking_uri=self.uri)
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            art = None
            if self.uri.startswith("sqlite:///"):
                art = Path(self.uri[len("sqlite:///"):]).parent.joinpath("mlartifacts").as_uri()
            exp_id = client.create_experiment(self.experiment, artifact_location=art,
                                              tags=dict([EXPERIMENT_KIND_TAG]))
        else:
            exp_id = exp.experiment_id
            if EXPERIMENT_KIND_TAG[0] not in (exp.tags or {}):
                client.set_experiment_tag(exp_id, *EXPERIMENT_KIND_TAG)
        runs = client.search_runs([exp_id], filter_string=f"tags.`{SWEEP_TAG}` = '{self.sweep}'", max_results=5000)
        parent = next((r for r in runs if r.data.tags.get(ROLE_TAG) == "parent"), None)
        if parent is None:
            parent_id = client.create_run(exp_id, run_name=self.sweep,
                                          tags={SWEEP_TAG: self.sweep, ROLE_TAG: "parent"}).info.run_id
        else:
            parent_id = parent.info.run_id
            client.update_run(parent_id, status="RUNNING")
        children = {(r.data.tags.get("model"), r.data.tags.get("method")): r.info.run_id
                    for r in runs if r.data.tags.get(ROLE_TAG) == "child"
                    and r.data.tags.get("mlflow.parentRunId") == parent_id}
        self.client, self.experiment_id, self.parent_id = client, exp_id, parent_id
        self._session_start = time.time()
        params = {"sweep": self.sweep, "config_fingerprint": fingerprint, "opteval_version": _version(),
                  "git_revision": git_revision() or "unknown",
                  "models": ",".join(resolved.get("models", [])), "methods": ",".join(resolved.get("methods", [])),
                  **plan_params(resolved)}
        self._log_params(parent_id, params)
        deps = resolved_versions()  # the versions that produced these scores, as in the manifest
        client.log_dict(parent_id, deps, "dependencies.json")
        for name, version in deps.items():
            client.set_tag(parent_id, f"dep.{name}", version or "not installed")
        model_cfgs = resolved.get("model_configs", {}) or {}
        simulated = {m for m in resolved.get("models", []) if m in model_cfgs and is_simulated(model_cfgs[m])}
        if simulated & {m for m, _ in pairs}:
            client.set_tag(parent_id, SIMULATED_TAG, "true")
        for model, method in pairs:
            run_id = children.get((model, method))
            if run_id is None:
                tags = {SWEEP_TAG: self.sweep, ROLE_TAG: "child", "model": model, "method": method,
                        "mlflow.parentRunId": parent_id}
                if model in simulated:
                    tags[SIMULATED_TAG] = "true"
                run_id = client.create_run(exp_id, run_name=f"{self.sweep}/{model}/{method}", tags=tags).info.run_id
            else:
                client.update_run(run_id, status="RUNNING")
                if model in simulated:
                    client.set_tag(run_id, SIMULATED_TAG, "true")
            self.children[(model, method)] = run_id
            self._log_params(run_id, run_params(resolved, model, method, fingerprint))

    def _log_params(self, run_id: str, params: Mapping[str, str]) -> None:
        # deferred: keeps mlflow out of the module top (_start loaded it)
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        # Params are immutable in MLflow: log only new ones; a changed value (a sweep
        # continued with allow_config_change) is recorded as a tag instead.
        new = [Param(k, v) for k, v in params.items() if k not in existing]
        changed = {f"param_changed.{k}": v for k, v in params.items() if k in existing and existing[k] != v}
        for i in range(0, len(new), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=new[i:i + MAX_PARAMS_PER_BATCH])
        for k, v in changed.items():
            self.client.set_tag(run_id, k, v)

    def _log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int, ts_ms: int) -> None:
        # deferred: keeps mlflow out of the module top (_start loaded it)
        from mlflow.entities import Metric

        items = [Metric(k, float(v), ts_ms, step) for k, v in sorted(metrics.items())]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=items[i:i + MAX_METRICS_PER_BATCH])

    # ---- while running ----
    def progress(self, model: str, method: str, done: int, correct: int, planned: int | None = None) -> None:
        """``progress/done`` and ``progress/acc`` (running accuracy over done) at step=done."""
        run_id = self.children.get((model, method))
        if not self.active or run_id is None:
            return
        m = {"progress/done": done, "progress/acc": (correct / done) if done else 0.0}
        if planned:
            m["progress/frac"] = done / planned
        self._guard("log progress", self._log_metrics, run_id, m, done, int(time.time() * 1000))

    def progress_total(self, done: int, planned: int) -> None:
        if self.active:
            self._guard("log progress", self._log_metrics, self.parent_id,
                        {"progress/done": done, "progress/planned": planned}, done, int(time.time() * 1000))

    # ---- at the end (and --sync-mlflow) ----
    def log_results(self, table: pa.Table, plan: pa.Table, plan_recorded_at: str | None = None) -> Any:
        """Metrics and artifacts for every child and the parent, computed from the ledger."""
        summary = summarize_ledger(table, plan)
        self.synced = False
        if self.active:
            self._guard("log results", self._log_results, table, plan, summary, plan_recorded_at)
        return summary

    def _log_results(self, table: pa.Table, plan: pa.Table, summary: Any, plan_recorded_at: str | None) -> None:
        assert self.parent_id is not None  # only called while active
        ts = _stable_ts(table, plan_recorded_at)
        planned_keys = plan.column("key")
        with tempfile.TemporaryDirectory(prefix="opteval-mlflow-") as tmp:
            for (model, method), run_id in self.children.items():
                self._log_metrics(run_id, run_metrics(summary, model, method), 0, ts)
                mask = pc.and_(pc.and_(pc.equal(table.column("model"), model), pc.equal(table.column("method"), method)),
                               pc.is_in(table.column("key"), value_set=planned_keys))
                d = Path(tmp) / f"{model}__{method}"
                d.mkdir()
                cell = table.filter(mask)
                artifact = cell.drop_columns([c for c in ARTIFACT_DROP if c in cell.column_names])
                pq.write_table(artifact, d / "trajectories.parquet", compression="zstd")
                part = summary[(summary["model"] == model) & (summary["method"] == method)]
                self._final_progress(run_id, cell, int(part["planned"].sum()), ts)
                if "simulated" in part.columns and bool(part["simulated"].fillna(False).any()):
                    self.client.set_tag(run_id, SIMULATED_TAG, "true")
                    self.client.set_tag(self.parent_id, SIMULATED_TAG, "true")
                (d / "results.md").write_text(results_markdown(part, f"{self.sweep}: {model}/{method}"))
                self.client.log_artifact(run_id, str(d / "trajectories.parquet"))
                if self.ledger_uri:
                    self.client.set_tag(run_id, LEDGER_TAG, self.ledger_uri)
                self.client.log_artifact(run_id, str(d / "results.md"))
            total = {"planned": float(summary["planned"].sum()), "missing": float(summary["missing"].sum()),
                     "committed": float(table.num_rows)}
            self._log_metrics(self.parent_id, total, 0, ts)
            done = int(total["planned"] - total["missing"])
            self._log_metrics(self.parent_id, {"progress/done": done, "progress/planned": total["planned"]},
                              done, ts)
            (Path(tmp) / "results.md").write_text(results_markdown(summary, self.sweep))
            self.client.log_artifact(self.parent_id, str(Path(tmp) / "results.md"))
        self.synced = True

    def _final_progress(self, run_id: str, cell: pa.Table, planned: int, ts: int) -> None:
        """``progress/*`` as the ledger ends the cell: the periodic snapshots stop short of the
        end (a finished cell showed ``progress/frac=0.40``). Logged at step=done, which no
        snapshot passed (MLflow's latest value is the highest step's), with the results' stable
        time so a re-sync of an unchanged ledger adds no row."""
        done = cell.num_rows
        correct = int(pc.sum(cell.column("correct")).as_py() or 0) if done else 0
        m = {"progress/done": done, "progress/acc": correct / done if done else 0.0}
        if planned:
            m["progress/frac"] = done / planned
        self._log_metrics(run_id, m, done, ts)

    def log_traces(self, table: pa.Table, plan: pa.Table, budget_s: float | None = None,
                   ledger: Ledger | None = None) -> TraceCount | None:
        """Trajectories as traces on their child runs (sweepcore/tracking/traces.py), None when off.
        ``budget_s`` bounds the time spent; what is left is logged by the next sync. ``table`` may hold
        the small columns only (:func:`ledger_summary`): the chosen rows' calls, executions and
        transcripts are then read from ``ledger`` a few rows at a time. The count is what the store
        holds once the export queue has drained, never what was handed to it."""
        if not self.active or self.traces == "none":
            return None
        return self._guard("log traces", self._log_traces, table, plan, budget_s, ledger)

    def _log_traces(self, table: pa.Table, plan: pa.Table, budget_s: float | None,
                    ledger: Ledger | None) -> TraceCount:
        # deferred: mlflow takes seconds to import; only when traces are logged
        import mlflow

        # deferred: traces loads the reporting package (matplotlib, jinja2)
        from opteval.sweepcore.tracking.traces import cap, log_traces, logged_keys, rows_of, select

        assert self.experiment_id is not None  # only called while active
        # MLflow exports client-made traces through the process's global tracking URI, not the client's
        mlflow.set_tracking_uri(self.uri)
        chosen = select(table, plan, self.traces, self.traces_per_cell)
        selected = len(chosen)
        chosen = cap(chosen, self.max_traces)
        before = logged_keys(self.client, self.experiment_id, self.sweep)
        todo = chosen[~chosen["key"].isin(before)]
        rows = rows_of(todo, ledger if "calls" not in table.column_names else None)
        deadline = None if budget_s is None else time.monotonic() + budget_s
        try:
            attempted, left = log_traces(self.client, self.experiment_id, self.sweep, self.children, rows, deadline,
                                         flush=mlflow.flush_trace_async_logging, done=before)
        finally:
            mlflow.flush_trace_async_logging()  # exported before the sweep says they are there
        held = logged_keys(self.client, self.experiment_id, self.sweep) & set(chosen["key"])
        lost = attempted - len(held - before)
        return TraceCount(logged=len(held), left=left, selected=selected, capped=selected - len(chosen), lost=max(0, lost))

    def log_report(self, paths: Iterable[Path], root: Path, folder: str = "report") -> None:
        """Attach written files (a report, the viewer) to the sweep's parent run under ``folder/``."""
        if self.active:
            self._guard(f"log the {folder}", self._log_report, list(paths), root, folder)

    def _log_report(self, paths: list[Path], root: Path, folder: str) -> None:
        for path in paths:
            rel = path.relative_to(root).parent
            sub = folder if str(rel) == "." else f"{folder}/{rel.as_posix()}"
            self.client.log_artifact(self.parent_id, str(path), sub)

    def finish(self, status: str = "FINISHED") -> None:
        """End every run; its end time = start + the active seconds of all sessions (no idle gaps)."""
        if not self.active:
            return
        for run_id in [*self.children.values(), self.parent_id]:
            self._guard("end runs", self._terminate, run_id, status)
        self.finished = self.enabled

    def finish_anyway(self, status: str, timeout_s: float) -> bool:
        """End every run with ``status`` after a time bound turned tracking off (a slow trace
        export, a slow server): one more bounded try on a daemon thread, so no run is left
        RUNNING by a sweep that ended. True when every run was ended."""
        if self.finished or self.client is None or self.parent_id is None:
            return self.finished
        runs = [*self.children.values(), self.parent_id]
        done = threading.Event()

        def end() -> None:
            try:
                for run_id in runs:
                    self.client.set_terminated(run_id, status)
                self.finished = True
            except Exception as exc:  # the server is down: the runs stay as they are, said once
                self.last_error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            finally:
                done.set()

        threading.Thread(target=end, name="opteval-mlflow-end", daemon=True).start()
        done.wait(timeout_s)
        return self.finished

    def _terminate(self, run_id: str, status: str) -> None:
        now = time.time()
        started = self._session_start
        run = self.client.get_run(run_id)
        try:
            before = float(run.data.tags.get(ACTIVE_TAG, "0"))
        except ValueError:
            before = 0.0
        if started is None:  # a --sync-mlflow re-log: keep the sweep's active time as the duration
            end = int(run.info.start_time + before * 1000) if ACTIVE_TAG in run.data.tags else None
            self.client.set_terminated(run_id, status, end_time=end)
            return
        active = round(before + max(0.0, now - max(started, run.info.start_time / 1000.0)), 3)
        self.client.set_tag(run_id, ACTIVE_TAG, f"{active:.3f}")
        self.client.set_terminated(run_id, status, end_time=int(run.info.start_time + active * 1000))


def _stable_ts(table: pa.Table, plan_recorded_at: str | None) -> int:
    """Timestamp (ms) for final metrics that only changes when the ledger or plan does."""
    ms = 0
    if table.num_rows and "committed_at" in table.column_names:
        latest = pc.max(table.column("committed_at")).as_py()
        if latest is not None:
            ms = int(latest.timestamp() * 1000)
    if plan_recorded_at:
        try:
            ms = max(ms, int(_dt.datetime.fromisoformat(plan_recorded_at).timestamp() * 1000))
        except ValueError:
            pass
    return ms


def sync_from_ledger(ledger: Ledger, tracker: Tracker) -> Any:
    """Re-log a sweep from its ledger (``report.py --sync-mlflow``); idempotent. Returns the summary."""
    man = ledger.manifest() or {}
    plan = ledger.read_plan()
    if plan is None:
        raise RuntimeError(f"ledger {ledger.uri} has no {'plan.parquet'}: nothing to sync")
    pairs = list(dict.fromkeys(zip(plan.column("model").to_pylist(), plan.column("method").to_pylist())))
    tracker.start(man.get("config", {}), man.get("fingerprint", ""), pairs)
    tracker._session_start = None  # re-logging is not sweep time: durations stay as the sweep left them
    tracker.ledger_uri = ledger.trajectories_uri
    table = ledger_summary(ledger)  # small columns only; the traced rows' details are read apart
    summary = tracker.log_results(table, plan, (man.get("plan") or {}).get("recorded_at"))
    traced = tracker.log_traces(table, plan, ledger=ledger)
    if traced is not None:
        print(f"MLflow traces: {traced.line(tracker.traces)}")
    tracker.finish()
    if not tracker.finished:
        tracker.finish_anyway("FINISHED", 30.0)
    return summary


# -- started in the background, retried while MLflow is down ------------------------------------
# -- off the event loop, bounded in time --------------------------------------------------------


