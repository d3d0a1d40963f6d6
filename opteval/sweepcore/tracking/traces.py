"""Trajectories as MLflow traces: one trace per trajectory, a span per model call and per execution.

MLflow 3's Traces page is built for reading agent runs (inputs, outputs, token usage per LLM
span), so a sweep's trajectories go there, attached to their (model, method) child run. Which
ones: ``tracking.traces`` = ``sample`` (default: every error, unsubmitted and wrong trajectory,
plus ``tracking.traces_per_cell`` others per model x method x benchmark), ``all`` or ``none``.
Built from the ledger alone (the same reading as ``opteval view``), found again by the
``opteval.key`` tag so a resumed sweep or ``opteval report --sync-mlflow`` logs only what is
not there yet. The ledger keeps no clock per call: spans are laid end to end from the
trajectory's start (commit time minus wall time) using each call's latency and each
execution's wall time, in turn order; their order is exact, their offsets approximate.
No Ray import.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pandas as pd
import pyarrow.compute as pc

from opteval.evalcore.ledger_detail import calls_of, execs_of
from opteval.evalcore.records import LEDGER_SCHEMA
from opteval.evalcore.reporting.frame import to_frame
from opteval.evalcore.reporting.view.model import Detail, detail
from opteval.sweepcore.config import TRACE_MODES

__all__ = ["KEY_TAG", "TRACE_MODES", "cap", "log_trace", "log_traces", "logged_keys", "rows_of", "select"]
KEY_TAG = "opteval.key"
SEARCH_PAGE = 500
# Back-pressure: MLflow's async export queue holds 1,000 tasks and discards a put when full (a trace is
# a task per span and one for the trace); the queue is drained (flush) after this many spans handed over
FLUSH_SPANS = 200
DETAIL_BATCH = 64  # rows whose calls, executions and transcripts are read at once (rows_of)


def select(table: Any, plan: Any, mode: str, per_cell: int) -> pd.DataFrame:
    """The committed rows to trace: all, none, or every row a reader opens plus ``per_cell`` per cell."""
    df = to_frame(table)  # every ledger column, the last attempt per key
    if plan is not None and len(df):
        df = df[df["key"].isin(set(plan.column("key").to_pylist()))]
    if mode == "none" or not len(df):
        return df.iloc[0:0]
    if mode == "all":
        return df
    df = df.sort_values(["model", "method", "benchmark", "problem_id", "sample"], kind="stable")
    notable = (df["status"] != "submitted") | ~df["correct"].fillna(False).astype(bool)
    rest = df[~notable].groupby(["model", "method", "benchmark"], sort=False).head(per_cell)
    return pd.concat([df[notable], rest]).sort_index()


def cap(chosen: pd.DataFrame, max_traces: int | None) -> pd.DataFrame:
    """At most ``max_traces`` of the chosen rows, by priority: errors, then unsubmitted, then wrong,
    then the correct samples (each in the selection's order). None: no cap."""
    if max_traces is None or len(chosen) <= max_traces:
        return chosen
    status, ok = chosen["status"], chosen["correct"].fillna(False).astype(bool)
    rank = (status != "error").astype(int) + (status == "submitted").astype(int) + ok.astype(int)
    order = rank.reset_index(drop=True).sort_values(kind="stable").index[:max_traces]
    return chosen.iloc[sorted(order)]


def rows_of(chosen: pd.DataFrame, ledger: Any = None) -> Iterator[dict[str, Any]]:
    """The chosen rows as dicts; with ``ledger`` (``chosen`` holds the small columns only) their full
    rows come from one filtered streaming read of it, ``DETAIL_BATCH`` rows a batch (the ledger's
    order), the attempt ``chosen`` kept per key."""
    if ledger is None:
        yield from chosen.to_dict("records")
        return
    when = dict(zip(chosen["key"], chosen["committed_at"]))
    if not when:
        return
    seen: set[str] = set()
    for batch in ledger.scan(list(LEDGER_SCHEMA.names), DETAIL_BATCH, filter=pc.field("key").isin(list(when))):
        for row in to_frame(batch).to_dict("records"):
            key, at = row["key"], when.get(row["key"])
            if key in seen or not (at is None or pd.isna(at) or row["committed_at"] == at):
                continue
            seen.add(key)
            yield row


def logged_keys(client: Any, experiment_id: str, sweep: str) -> set[str]:
    """Keys of this sweep's trajectories already in MLflow (by tag; spans not fetched)."""
    keys: set[str] = set()
    token = None
    while True:
        page = client.search_traces(locations=[experiment_id], filter_string=f"tags.`opteval.sweep` = '{sweep}'",
                                    max_results=SEARCH_PAGE, page_token=token, include_spans=False)
        keys.update(t.info.tags.get(KEY_TAG, "") for t in page)
        token = page.token
        if not token:
            return keys - {""}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _steps(d: Detail) -> list[tuple[str, Any]]:
    """Calls and executions in the order they happened: by turn, a turn's call before its run."""
    steps: list[tuple[int, int, int, str, Any]] = []
    steps += [(c.turn if isinstance(c.turn, int) else i, 0, i, "call", c) for i, c in enumerate(d.calls)]
    steps += [(e.turn if isinstance(e.turn, int) else i, 1, i, "exec", e) for i, e in enumerate(d.execs)]
    return [(kind, item) for *_, kind, item in sorted(steps, key=lambda s: s[:3])]


def log_trace(client: Any, experiment_id: str, run_id: str | None, sweep: str, row: Mapping[str, Any]) -> str:
    """One trajectory as one trace; returns its trace id."""
    d = detail(row)
    committed = row.get("committed_at")
    end = pd.Timestamp(committed).timestamp() if committed is not None and not pd.isna(committed) else time.time()
    t = end - (d.wall_s or 0.0)
    tags = {KEY_TAG: d.key, "opteval.sweep": sweep, "model": d.model, "method": d.method, "benchmark": d.benchmark,
            "problem_id": d.problem_id, "sample": str(d.sample), "status": d.status, "correct": str(d.correct).lower()}
    root = client.start_trace(name=f"{d.method}/{d.benchmark}/{d.problem_id}/{d.sample}", span_type="AGENT",
                              inputs={"problem_id": d.problem_id, "benchmark": d.benchmark, "sample": d.sample},
                              tags=tags, experiment_id=experiment_id, start_time_ns=_ns(t), run_id=run_id)
    trace_id = root.trace_id
    for kind, item in _steps(d):
        if kind == "call":
            took = float(item.latency_s or 0.0)
            span = client.start_span(name=f"call {item.index}: {item.purpose}", trace_id=trace_id,
                                     parent_id=root.span_id, span_type="CHAT_MODEL",
                                     inputs={"messages": item.messages}, start_time_ns=_ns(t),
                                     attributes={"stage": item.stage or "", "turn": item.turn})
            usage = {"input_tokens": item.prompt_tokens, "output_tokens": item.completion_tokens}
            attrs: dict[str, Any] = {"finish_reason": item.finish_reason or ""}
            if None not in usage.values():
                attrs["mlflow.chat.tokenUsage"] = {**usage, "total_tokens": sum(usage.values())}
            client.end_span(trace_id=trace_id, span_id=span.span_id,
                            outputs={"choices": [{"message": {"role": "assistant", "content": item.reply},
                                                  "finish_reason": item.finish_reason}]},
                            attributes=attrs, end_time_ns=_ns(t + took))
        else:
            took = float(item.wall_s or 0.0)
            span = client.start_span(name=f"execution {item.index}", trace_id=trace_id, parent_id=root.span_id,
                                     span_type="TOOL", inputs={"code": item.code}, start_time_ns=_ns(t),
                                     attributes={"turn": item.turn})
            client.end_span(trace_id=trace_id, span_id=span.span_id,
                            outputs={"outcome": item.outcome, "stdout": item.stdout, "stderr": item.stderr,
                                     "submission": item.submission},
                            status="OK" if item.outcome == "ok" else "ERROR", end_time_ns=_ns(t + took))
        t += took
    client.end_trace(trace_id=trace_id, outputs={"status": d.status, "submission": d.submission, "correct": d.correct,
                                                 "error": d.error},
                     status="ERROR" if d.status == "error" else "OK", end_time_ns=_ns(max(t, end)))
    return str(trace_id)


def log_traces(client: Any, experiment_id: str, sweep: str, runs: Mapping[tuple[str, str], str],
               rows: Iterable[Mapping[str, Any]], deadline: float | None = None,
               flush: Callable[[], Any] | None = None, done: set[str] | None = None) -> tuple[int, int]:
    """Log the rows not yet in MLflow (``done``: keys known to be there, else searched); stops at
    ``deadline`` (time.monotonic()). ``flush`` drains MLflow's export queue every ``FLUSH_SPANS``
    spans (back-pressure: the queue never fills, so nothing is discarded). (handed over, left)."""
    if done is None:
        done = logged_keys(client, experiment_id, sweep)
    todo = (r for r in rows if r["key"] not in done)
    n = spans = 0
    for row in todo:
        if deadline is not None and time.monotonic() > deadline:
            return n, 1 + sum(1 for _ in todo)
        log_trace(client, experiment_id, runs.get((str(row["model"]), str(row["method"]))), sweep, row)
        n += 1
        spans += 2 + len(calls_of(row.get("calls"))) + len(execs_of(row.get("execs")))
        if flush is not None and spans >= FLUSH_SPANS:
            flush()
            spans = 0
    return n, 0

