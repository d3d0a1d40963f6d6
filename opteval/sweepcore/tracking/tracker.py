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
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.backoff import Backoff
from opteval.evalcore.finish_reasons import COLUMNS as FINISH_COLUMNS
from opteval.evalcore.finish_reasons import with_counts
from opteval.evalcore.formulation import with_unsolved
from opteval.evalcore.harnesses.base import Budgets
from opteval.evalcore.metrics import summarize
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.protocols import protocol_notes
from opteval.evalcore.records import LEDGER_SCHEMA
from opteval.sweepcore.backends import BACKEND_KEY, is_simulated
from opteval.sweepcore.config import ConfigError, SweepConfig, as_plain, model_config, overlay
from opteval.sweepcore.dependencies import resolved_versions
from opteval.sweepcore.ledger import DETAIL_COLUMNS, Ledger, columns_without, open_filesystem
from opteval.sweepcore.ledger.manifest import _version as _ledger_version
from opteval.sweepcore.tracking.library_logs import route_library_logs, sqlite_problem

log = logging.getLogger("opteval.tracking")

MAX_METRICS_PER_BATCH = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
MAX_PARAMS_PER_BATCH = 100  # MAX_PARAMS_TAGS_PER_BATCH
MAX_PARAM_CHARS = 6000  # MAX_PARAM_VAL_LENGTH
SWEEP_TAG = "opteval.sweep"
SUMMARY_BOOTSTRAP = (2000, 0)  # resamples and seed of the results table's intervals: the report's defaults
ROLE_TAG = "opteval.role"
SIMULATED_TAG = "opteval.simulated"
ACTIVE_TAG = "opteval.active_s"
# MLflow 3's UI picks the experiment page by this tag (older 3.x) or by the
# ``workflowType`` URL parameter / the top-bar GenAI | Model training toggle (3.17).
EXPERIMENT_KIND_TAG = ("mlflow.experimentKind", "custom_model_development")
MAX_FAILURES = 3
# problem_id: intervals are a cluster bootstrap over problems (k samples of one problem are not
# independent); without it summarize falls back to Wilson over trajectories
SUMMARY_COLUMNS = ["key", "model", "method", "benchmark", "problem_id", "status", "correct", "prompt_tokens",
                   "completion_tokens", "exec_ok", "submission_value", "submission_status",
                   "simulated", "committed_at"]
# What summarize_ledger reads (the calls column for the truncated/rejected counts): callers read only
# these (Ledger.read_table(columns=SUMMARY_READ)), never the transcripts
SUMMARY_READ = [*SUMMARY_COLUMNS, "calls"]
# An MLflow child's artifact: its rows' scoring columns; the detail stays in the ledger (its URI is a tag)
ARTIFACT_DROP = ("calls", "execs", "transcript", "budgets")
LEDGER_TAG = "opteval.ledger"


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


class TrackingWarning(UserWarning):
    """MLflow could not be reached or refused a call; the sweep continues."""


# -- locations ---------------------------------------------------------------------------------


def tracking_uri(tracking_cfg_uri: str | None, output_dir: str) -> str:
    """Config value, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///<output_dir>/mlflow.db``
    (absolute). An object-store output_dir cannot hold SQLite: then ``./mlflow.db``."""
    if tracking_cfg_uri:
        return str(tracking_cfg_uri)
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    fs, path = open_filesystem(output_dir)
    if fs.type_name != "local":
        path = os.path.abspath(".")
        warnings.warn(f"sweep.output_dir {output_dir} is not local: MLflow store at {path}/mlflow.db "
                      "(set tracking.uri to a tracking server on a cluster)", TrackingWarning, stacklevel=2)
    os.makedirs(path, exist_ok=True)
    return f"sqlite:///{path}/mlflow.db"


def ui_command(uri: str, experiment_id: str | None = None) -> str:
    """The command that opens the MLflow UI on this store, and the page with the runs table."""
    if uri.startswith("sqlite:"):
        # one worker and a long health-check timeout: on a loaded machine uvicorn's supervisor
        # killed the default 4 workers in a loop (5 s health check) and the UI never served
        cmd = (f"mlflow ui --backend-store-uri {uri} --port 5000 --workers 1 "
               "--uvicorn-opts '--timeout-worker-healthcheck 120'")
        return cmd + (f", then open {runs_url('http://127.0.0.1:5000', experiment_id)}" if experiment_id else "")
    if experiment_id and uri.startswith(("http://", "https://")):
        return f"open {runs_url(uri, experiment_id)} in a browser"
    return f"open {uri} in a browser"


def runs_url(server: str, experiment_id: str | None) -> str:
    """The experiment's runs table (not the GenAI traces page MLflow 3 opens by default)."""
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def sync_command(sweep: str, output_dir: str, uri: str | None = None) -> str:
    """The command that re-logs a sweep from its ledger (to the same tracking server)."""
    where = f" tracking.uri={uri}" if uri else ""
    return f"opteval report sweep.name={sweep} sweep.output_dir={output_dir}{where} --sync-mlflow"


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


# -- metrics from the ledger ------------------------------------------------------------------------


def planned_counts_from(plan: pa.Table) -> dict[tuple[str, str, str], int]:
    """(model, method, benchmark) -> planned trajectories, from ``plan.parquet``."""
    grouped = plan.group_by(["model", "method", "benchmark"]).aggregate([("key", "count")])
    return {(m, x, b): int(n) for m, x, b, n in zip(*(grouped.column(c).to_pylist() for c in
                                                      ("model", "method", "benchmark", "key_count")))}


SCORING_READ = columns_without(*DETAIL_COLUMNS)  # every column but the JSON details: a child's artifact


def ledger_summary(ledger: Ledger, columns: Iterable[str] | None = None, batch_rows: int = 8192) -> pa.Table:
    """The ledger's small columns (``columns``, default every column but the JSON detail ones) plus
    the four finish-reason counts (``opteval.evalcore.finish_reasons.COLUMNS``) derived from each
    row's ``calls`` as the record batches are read: what :func:`summarize_ledger`, the sweep's end
    and ``--sync-mlflow`` need, never the transcripts or executions, nor the calls held (issue 44)."""
    from opteval.evalcore.finish_reasons import trajectory_counts
    from opteval.evalcore.ledger_detail import calls_of

    cols = [c for c in (columns or SCORING_READ) if c not in DETAIL_COLUMNS]
    if "status" not in cols:
        cols.append("status")
    parts = []
    for batch in ledger.scan([*cols, "calls"], batch_rows):
        counts = [trajectory_counts(calls_of(raw), st) for raw, st in
                  zip(batch.column("calls").to_pylist(), batch.column("status").to_pylist())]
        t = pa.Table.from_batches([batch]).drop_columns(["calls"])
        for name in FINISH_COLUMNS:
            t = t.append_column(name, pa.array([c[name] for c in counts], pa.int64()))
        parts.append(t)
    if parts:
        return pa.concat_tables(parts)
    empty = LEDGER_SCHEMA.empty_table().select(cols)
    for name in FINISH_COLUMNS:
        empty = empty.append_column(name, pa.array([], pa.int64()))
    return empty


def summarize_ledger(table: pa.Table, plan: pa.Table) -> Any:
    """``opteval.evalcore.metrics.summarize`` over the rows whose keys are planned, per
    (model, method, benchmark), with the plan's counts as denominators."""
    planned = pc.is_in(table.column("key"), value_set=plan.column("key"))
    cols = [c for c in SUMMARY_COLUMNS if c in table.column_names]
    summary = summarize(table.select(cols).filter(planned), planned=planned_counts_from(plan),
                        problem_planned=problem_counts_from(plan), n_resamples=SUMMARY_BOOTSTRAP[0],
                        seed=SUMMARY_BOOTSTRAP[1])
    calls = [c for c in ("key", "model", "method", "benchmark", "status", "calls", *FINISH_COLUMNS)
             if c in table.column_names]  # the calls themselves, or their counts (ledger_summary)
    sources = [c for c in ("model", "method", "benchmark", "correct", "answer_source") if c in table.column_names]
    return with_unsolved(with_counts(summary, table.select(calls).filter(planned)),
                         table.select(sources).filter(planned).to_pandas())


def problem_counts_from(plan: pa.Table) -> dict[tuple[str, str, str], dict[str, int]]:
    """(model, method, benchmark) -> problem id -> planned samples, from ``plan.parquet``."""
    grouped = plan.group_by(["model", "method", "benchmark", "problem_id"]).aggregate([("key", "count")])
    out: dict[tuple[str, str, str], dict[str, int]] = {}
    for m, x, b, p, n in zip(*(grouped.column(c).to_pylist() for c in
                               ("model", "method", "benchmark", "problem_id", "key_count"))):
        out.setdefault((m, x, b), {})[str(p)] = int(n)
    return out


def run_metrics(summary: Any, model: str, method: str) -> dict[str, float]:
    """The child run's metrics for one model x method from a :func:`summarize_ledger` frame."""
    g = summary[(summary["model"] == model) & (summary["method"] == method)]
    out: dict[str, float] = {}
    accs, toks = {}, {}
    for r in g.to_dict("records"):
        b = r["benchmark"]
        out[f"planned/{b}"] = float(r["planned"])
        out[f"missing/{b}"] = float(r["missing"])
        if r.get("errors") is not None:
            # status=error rows are scored but wrong; the MLflow view daggers them too
            out[f"errors/{b}"] = float(r["errors"])
        if r.get("avg") is not None:
            out[f"acc/{b}"] = accs[b] = float(r["avg"])
        if r.get("exec_rate") is not None:
            out[f"exec_rate/{b}"] = float(r["exec_rate"])
        if r.get("correct_unsolved") is not None:  # correct without a solve behind the answer (issue 36)
            out[f"correct_unsolved/{b}"] = float(r["correct_unsolved"])
        for c in FINISH_COLUMNS:  # truncated / rejected calls and the trajectories they ended
            if r.get(c) is not None:
                out[f"{c}/{b}"] = float(r[c])
        tm = r.get("tokens_mean")
        if tm is not None and tm == tm:
            out[f"tokens/{b}"] = toks[b] = float(tm)
    if accs and len(accs) == len(g):
        out["acc/macro"] = sum(accs.values()) / len(accs)
    if toks and len(toks) == len(g):
        out["tokens/macro"] = sum(toks.values()) / len(toks)
    return out


def model_families(models: Iterable[str]) -> dict[str, str | None]:
    """Each configured model's ``family`` (names without a readable config are left out)."""
    out: dict[str, str | None] = {}
    for name in models:
        try:
            out[str(name)] = model_config(str(name)).family
        except (ConfigError, OSError, ValueError):
            continue
    return out


def results_markdown(summary: Any, title: str = "", families: Mapping[str, str | None] | None = None) -> str:
    """Accuracy (%, avg@k with a problem-level CI) per model x method x benchmark, macro, tokens, missing;
    a line for each model x method that ran under a stand-in for its published protocol
    (``opteval.evalcore.protocols``; ``families``: model -> config family)."""
    simulated = "simulated" in summary.columns and bool(summary["simulated"].fillna(False).any())
    lines = [f"# {title}" if title else "# Results", ""]
    if simulated:
        lines += ["**SIMULATED**: produced by the simulated policy; not a model's accuracy.", ""]
    if len(summary):
        lines += [f"**Not its protocol**: {n}" for n in protocol_notes(zip(summary["model"], summary["method"]),
                                                                         families)]
        lines += [""] if lines[-1] != "" else []
    methods = sorted({str(m) for m in summary.get("ci_method", []) if m}) if len(summary) else []
    if methods:
        lines += [f"95% CI: {'; '.join(methods)} (percentile, B={SUMMARY_BOOTSTRAP[0]}, seed {SUMMARY_BOOTSTRAP[1]}: "
                  "the report's defaults, so its intervals are these; avg@k over planned trajectories).", ""]
    lines += ["| model | method | benchmark | acc % | 95% CI | planned | missing | errors | tokens | exec rate "
              "| truncated calls | rejected calls | ended by them | correct unsolved |",
              "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def pct(v: Any) -> str:
        return "-" if v is None or v != v else f"{100 * v:.1f}"

    for r in summary.to_dict("records"):
        tm = r.get("tokens_mean")
        lines.append(
            f"| {r['model']} | {r['method']} | {r['benchmark']} | {pct(r.get('avg'))} | "
            f"{pct(r.get('ci_low'))}-{pct(r.get('ci_high'))} | {r['planned']} | {r['missing']} | "
            f"{r.get('errors', 0)} | {'-' if tm is None or tm != tm else f'{tm:.0f}'} | {pct(r.get('exec_rate'))} | "
            f"{int(r.get('truncated_calls') or 0)} | {int(r.get('rejected_calls') or 0)} | "
            f"{int(r.get('ended_truncated') or 0) + int(r.get('ended_rejected') or 0)} | "
            f"{int(r.get('correct_unsolved') or 0)} |")
    lines += ["", "| model | method | macro acc % | tokens macro | planned | missing |", "|---|---|---:|---:|---:|---:|"]
    for (m, x), _ in summary.groupby(["model", "method"], sort=False):
        met = run_metrics(summary, m, x)
        g = summary[(summary["model"] == m) & (summary["method"] == x)]
        tmac = met.get("tokens/macro")
        lines.append(f"| {m} | {x} | {pct(met.get('acc/macro'))} | {'-' if tmac is None else f'{tmac:.0f}'} | "
                     f"{int(g['planned'].sum())} | {int(g['missing'].sum())} |")
    return "\n".join(lines) + "\n"


def run_params(resolved: Mapping[str, Any], model: str, method: str, fingerprint: str) -> dict[str, str]:
    """Params of a child run, from the resolved sweep config (as stored in the manifest): the
    model's effective sampling and the method's effective budgets (``opteval.sweepcore.config.overlay``)."""
    mcfg = resolved.get("model_configs", {}).get(model, {})
    method_cfg = resolved.get("method_configs", {}).get(method, {})
    sampling = as_plain(overlay(Sampling(**resolved.get("sampling", {})), mcfg.get("sampling") or {}))
    extra = sampling.pop("extra_body")
    budgets = as_plain(overlay(Budgets(**resolved.get("budgets", {})), method_cfg.get("budgets") or {}))
    budgets.pop("exec_limits")  # logged as limits.*
    params: dict[str, Any] = {
        "model": model, "method": method, "backend": mcfg.get(BACKEND_KEY), "family": mcfg.get("family"),
        "size_b": mcfg.get("size_b"), "harness": method_cfg.get("harness"),
        "grading_profile": resolved.get("grading", {}).get("profile"),
        "benchmarks": ",".join(resolved.get("benchmarks", [])),
        "config_fingerprint": fingerprint, "opteval_version": _version(),
        "git_revision": git_revision() or "unknown",
    }
    params.update(plan_params(resolved))
    params.update({f"sampling.{k}": v for k, v in sampling.items()})
    if extra:
        params["sampling.extra_body"] = extra
    params.update({f"budgets.{k}": v for k, v in budgets.items()})
    params.update({f"limits.{k}": v for k, v in resolved.get("limits", {}).items()})
    return {k: str(v)[:MAX_PARAM_CHARS] for k, v in params.items()}


def samples_per_benchmark(resolved: Mapping[str, Any]) -> dict[str, int]:
    """Samples per problem for each benchmark, as the plan uses them (opteval.sweepcore.config.samples_for):
    ``samples.per_benchmark``, else the benchmark yaml's ``samples``, else ``samples.default``."""
    samples = resolved["samples"]  # a resolved config states every key: no default here
    per, bcfg = samples["per_benchmark"], resolved["benchmark_configs"]
    return {b: int(per.get(b) or bcfg[b]["samples"] or samples["default"]) for b in resolved["benchmarks"]}


def plan_params(resolved: Mapping[str, Any]) -> dict[str, str]:
    """What shapes the plan: benchmarks, samples per problem for each, the problem limit."""
    out = {f"samples.{b}": str(n) for b, n in samples_per_benchmark(resolved).items()}
    out["limit_problems"] = str(resolved.get("limit_problems"))
    out["benchmarks"] = ",".join(resolved.get("benchmarks", []))
    return out


def _version() -> str:
    return _ledger_version()


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
                import pyarrow.parquet as pq

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
        import mlflow

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


class BackgroundStart:
    """Starts a tracker's runs on a daemon thread and retries with backoff while MLflow is down
    or slow (a SQLite store creating its schema on a loaded machine took 82 s), so the sweep
    never waits for it and tracking is not turned off for the whole run by a slow start. While
    it is down the tracker is inactive (progress calls are no-ops); once up, progress flows again
    and the end of the sweep logs every result from the ledger (the ledger is the truth, so
    nothing committed meanwhile is lost to MLflow). One line when it goes down, one when it is up."""

    def __init__(self, tracker: Tracker, resolved: Mapping[str, Any], fingerprint: str,
                 pairs: Iterable[tuple[str, str]], *, backoff_s: float = 5.0, max_backoff_s: float = 60.0) -> None:
        self.tracker, self.resolved, self.fingerprint, self.pairs = tracker, resolved, fingerprint, list(pairs)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.up = threading.Event()
        self._stop = threading.Event()
        self.attempts = 0
        self._thread = threading.Thread(target=self._run, name="opteval-mlflow-start", daemon=True)

    def begin(self) -> BackgroundStart:
        self._thread.start()
        return self

    def _run(self) -> None:
        t = self.tracker
        schedule = Backoff(self.backoff_s, self.max_backoff_s)
        t.quiet = True
        while not self._stop.is_set():
            self.attempts += 1
            t.enabled = True
            t.failures = 0
            if t.start(self.resolved, self.fingerprint, self.pairs) and t.failures == 0:
                t.quiet = False
                self.up.set()
                if self.attempts > 1:
                    print(f"[sweep] MLflow ({t.uri}) is up after {self.attempts} attempts; tracking resumes "
                          "(results are logged from the ledger at the end)", flush=True)
                return
            t.enabled = False
            t.client = t.parent_id = None  # half-started runs are found again by their tags next time
            if self.attempts == 1:
                print(f"[sweep] MLflow ({t.uri}) is not reachable ({getattr(t, 'last_error', 'no answer')}); "
                      f"the sweep goes on and retries it in the background", flush=True)
            self._stop.wait(schedule.delay(self.attempts - 1))

    def wait(self, timeout_s: float) -> bool:
        """Up within ``timeout_s``? (The end of the sweep gives a slow start one more chance.)"""
        return self.up.wait(max(0.0, float(timeout_s)))

    def stop(self) -> None:
        self._stop.set()
        if not self.up.is_set():
            self.tracker.enabled = False  # a start still in flight must not log after the end


def end_line(tracker: Tracker | None) -> str | None:
    """The end-of-sweep line: does MLflow hold every result, or how to put them there."""
    if tracker is None:
        return None
    if tracker.active and tracker.synced:
        return (f"[sweep] MLflow holds every result of this sweep ({len(tracker.children)} runs, logged from the "
                "ledger)")
    why = sqlite_problem(tracker.uri) or getattr(tracker, 'last_error', None) or 'not reachable or too slow'
    return (f"[sweep] MLflow does NOT hold all results ({tracker.uri}: {why}); the ledger does. Re-log with: "
            f"{sync_command(tracker.sweep, tracker.output_dir, tracker.uri)}")


# -- off the event loop, bounded in time --------------------------------------------------------


class OffLoop:
    """Runs a tracker's calls on daemon threads with a time bound, so a hung tracking server
    never blocks the sweep: the driver's event loop only hands work over (:meth:`submit`,
    progress: skipped while the previous one is still running), and the calls the driver
    waits for (:meth:`call`: start, results, finish) give up after ``timeout_s``. A call that
    times out turns tracking off for the run with the re-log hint; the ledger stays the truth.
    Daemon threads, so a call stuck in a socket never keeps the process alive."""

    def __init__(self, tracker: Tracker, timeout_s: float) -> None:
        self.tracker, self.timeout_s = tracker, float(timeout_s)
        self._pending: tuple[threading.Event, float] | None = None
        self.skipped = 0

    def _spawn(self, fn: Any, args: tuple) -> tuple[threading.Event, dict[str, Any]]:
        done, box = threading.Event(), {}

        def run() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=run, name="opteval-mlflow", daemon=True).start()
        return done, box

    def _give_up(self, what: str) -> None:
        t = self.tracker
        if t.enabled:
            t.enabled = False
            warnings.warn(f"MLflow ({t.uri}) did not answer within {self.timeout_s:g}s while trying to {what}; "
                          f"tracking is off for the rest of this run (the ledger is the truth). Re-log later with: "
                          f"{sync_command(t.sweep, t.output_dir, t.uri)}", TrackingWarning, stacklevel=3)

    def submit(self, what: str, fn: Any, *args: Any) -> bool:
        """Start ``fn(*args)`` and return at once; False (skipped) while the previous one runs."""
        if not self.tracker.enabled:
            return False
        if self._pending is not None and not self._pending[0].is_set():
            self.skipped += 1
            if time.monotonic() - self._pending[1] > self.timeout_s:
                self._give_up(what)
            return False
        done, _ = self._spawn(fn, args)
        self._pending = (done, time.monotonic())
        return True

    def call(self, what: str, fn: Any, *args: Any, default: Any = None) -> Any:
        """``fn(*args)`` waited for at most ``timeout_s`` (after any progress call still running)."""
        if not self.tracker.enabled:
            return default
        start = time.monotonic()
        if self._pending is not None and not self._pending[0].wait(self.timeout_s):
            self._give_up(what)
            return default
        done, box = self._spawn(fn, args)
        if not done.wait(max(0.0, self.timeout_s - (time.monotonic() - start)) or 0.001):
            self._give_up(what)
            return default
        if "error" in box:
            raise box["error"]
        return box.get("value", default)
