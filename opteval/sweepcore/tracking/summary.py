"""The results table a sweep logs and prints, from the ledger's small columns and the plan
(never the transcripts)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.finish_reasons import COLUMNS as FINISH_COLUMNS
from opteval.evalcore.finish_reasons import trajectory_counts, with_counts
from opteval.evalcore.formulation import with_unsolved
from opteval.evalcore.ledger_detail import calls_of
from opteval.evalcore.metrics import summarize
from opteval.evalcore.protocols import protocol_notes
from opteval.evalcore.records import LEDGER_SCHEMA
from opteval.sweepcore.config import ConfigError, model_config
from opteval.sweepcore.ledger import DETAIL_COLUMNS, Ledger, columns_without

SCORING_READ = columns_without(*DETAIL_COLUMNS)  # every column but the JSON details: a child's artifact
SUMMARY_BOOTSTRAP = (2000, 0)  # resamples and seed of the results table's intervals: the report's defaults
# problem_id: intervals are a cluster bootstrap over problems (k samples of one problem are not
# independent); without it summarize falls back to Wilson over trajectories
SUMMARY_COLUMNS = ["key", "model", "method", "benchmark", "problem_id", "status", "correct", "prompt_tokens",
                   "completion_tokens", "exec_ok", "submission_value", "submission_status",
                   "simulated", "committed_at"]
# What summarize_ledger reads (the calls column for the truncated/rejected counts): callers read only
# these (Ledger.read_table(columns=SUMMARY_READ)), never the transcripts
SUMMARY_READ = [*SUMMARY_COLUMNS, "calls"]


def planned_counts_from(plan: pa.Table) -> dict[tuple[str, str, str], int]:
    """(model, method, benchmark) -> planned trajectories, from ``plan.parquet``."""
    grouped = plan.group_by(["model", "method", "benchmark"]).aggregate([("key", "count")])
    return {(m, x, b): int(n) for m, x, b, n in zip(*(grouped.column(c).to_pylist() for c in
                                                      ("model", "method", "benchmark", "key_count")))}


def ledger_summary(ledger: Ledger, columns: Iterable[str] | None = None, batch_rows: int = 8192) -> pa.Table:
    """The ledger's small columns (``columns``, default every column but the JSON detail ones) plus
    the four finish-reason counts (``opteval.evalcore.finish_reasons.COLUMNS``) derived from each
    row's ``calls`` as the record batches are read: what :func:`summarize_ledger`, the sweep's end
    and ``--sync-mlflow`` need, never the transcripts or executions, nor the calls held (issue 44)."""
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
