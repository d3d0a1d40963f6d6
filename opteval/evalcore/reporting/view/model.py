"""One trajectory as something to read: the ledger row's JSON columns unpacked, its grade explained.

The HTML viewer and ``opteval show`` both render these, so the two never disagree on what a
trajectory did or why it was graded as it was. Everything comes from the ledger (plus the
answer key where the data is present): nothing is re-run.
"""
from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from opteval.evalcore.grading import PROFILES, parse_submission
from opteval.evalcore.ledger_detail import calls_of, error_message, execs_of, plain, transcript_of
from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.records import FORMAT_COLUMNS, LEDGER_SCHEMA
from opteval.evalcore.reporting.frame import _nn, number, to_frame

STATUS_MISSING = "missing"  # planned, never committed: counts as wrong in every table


@dataclass
class Call:
    index: int
    turn: int | None
    purpose: str
    stage: str | None
    messages: list[dict[str, Any]]
    reply: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. SemOPT's per-candidate scores


@dataclass
class Execution:
    index: int
    turn: int | None
    outcome: str
    code: str
    stdout: str
    stderr: str
    submission: Any
    wall_s: float | None
    exit_code: int | None


@dataclass
class Detail:
    """Everything the viewer shows of one trajectory."""

    key: str
    model: str
    method: str
    benchmark: str
    problem_id: str
    sample: int
    status: str
    correct: bool
    submission: str | None
    answer: str | None
    why: str  # one sentence: how the grade came about
    error: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    n_calls: int
    n_execs: int
    wall_s: float | None
    calls: list[Call]
    execs: list[Execution]

    @property
    def page(self) -> str:
        return page_name(self.key)


@functools.lru_cache(maxsize=1 << 16)
def page_name(key: str) -> str:
    """A trajectory page's file name: keys hold '/' and problem ids any character. Cached: a page
    names each of its siblings' pages twice, and a paper sweep has ~20 siblings a problem."""
    return f"traj-{hashlib.sha256(key.encode()).hexdigest()[:16]}.html"


def _int(v: Any) -> int | None:
    v = _nn(v)
    return None if v is None else int(v)


def answer_text(keys: Mapping[str, AnswerKey], benchmark: str, problem_id: str) -> str | None:
    key = keys.get(benchmark)
    if key is None or problem_id not in key:
        return None
    return str(key[problem_id])


def explain(row: Mapping[str, Any], answer: str | None) -> str:
    """Why the row is graded as it is, in the grader's own terms (profile, tolerance, extraction)."""
    status = row.get("status")
    if status == STATUS_MISSING:
        return "planned but never committed: counted as wrong (missing score)"
    if status == "error":
        return ("infrastructure error after its retries, counted as wrong: "
                f"{error_message(row.get('error')) or 'no reason recorded'}")
    if status == "no_submission":
        why = error_message(row.get("error")) or "the trajectory ended without submitting"
        return f"nothing submitted ({why}): counted as wrong"
    profile = _nn(row.get("grading_profile")) or "optagentbench"
    rule = PROFILES[profile].description if profile in PROFILES else "unknown profile"
    extraction = _nn(row.get("extraction")) or "submit"
    parsed = parse_submission(_nn(row.get("submission")))
    verdict = "correct" if bool(row.get("correct")) else "wrong"
    against = f" against the answer {answer}" if answer is not None else ""
    shown = "unparseable (never correct)" if parsed is None else parsed
    return (f"submitted {shown!s} (extraction {extraction}){against}: {verdict} under grading profile "
            f"{profile} ({rule})")


def detail(row: Mapping[str, Any], answer: str | None = None) -> Detail:
    transcript = transcript_of(row.get("calls"), row.get("transcript"))
    records = calls_of(row.get("calls"))
    calls = []
    for i, entry in enumerate(e for e in transcript if isinstance(e, dict)):
        idx = entry.get("call", i)
        rec = records[idx] if isinstance(idx, int) and 0 <= idx < len(records) else {}
        known = {"call", "turn", "purpose", "stage", "messages", "completion", "finish_reason"}
        calls.append(Call(
            index=int(idx) if isinstance(idx, int) else i, turn=entry.get("turn"),
            purpose=str(entry.get("purpose") or ""), stage=entry.get("stage"),
            messages=[m for m in entry.get("messages") or [] if isinstance(m, dict)],
            reply=str(entry.get("completion") or ""), finish_reason=entry.get("finish_reason"),
            prompt_tokens=rec.get("prompt_tokens"), completion_tokens=rec.get("completion_tokens"),
            latency_s=rec.get("latency_s"), extra={k: v for k, v in entry.items() if k not in known},
        ))
    execs = [
        Execution(index=i, turn=e.get("turn"), outcome=str(e.get("outcome") or ""), code=str(e.get("code") or ""),
                  stdout=str(e.get("stdout_tail") or ""), stderr=str(e.get("stderr_tail") or ""),
                  submission=e.get("submission"), wall_s=e.get("wall_s"), exit_code=e.get("exit_code"))
        for i, e in enumerate(execs_of(row.get("execs")))
    ]
    return Detail(
        key=str(row["key"]), model=str(row["model"]), method=str(row["method"]), benchmark=str(row["benchmark"]),
        problem_id=str(row["problem_id"]), sample=int(row["sample"]), status=str(row["status"]),
        correct=bool(_nn(row.get("correct")) or False), submission=_nn(row.get("submission")), answer=answer,
        why=explain(row, answer), error=error_message(row.get("error")),
        prompt_tokens=_int(row.get("prompt_tokens")), completion_tokens=_int(row.get("completion_tokens")),
        n_calls=_int(row.get("n_calls")) or len(calls), n_execs=_int(row.get("n_execs")) or len(execs),
        wall_s=number(row.get("wall_s")), calls=calls, execs=execs,
    )


def rows_with_missing(table: Any, plan: Any) -> pd.DataFrame:
    """The ledger's rows (last attempt per key) plus one ``missing`` row per planned key never committed."""
    df = to_frame(table)
    if plan is None:
        return df
    planned = plan.to_pandas() if hasattr(plan, "to_pandas") else pd.DataFrame(plan)
    if not len(planned):
        return df
    absent = planned[~planned["key"].isin(set(df["key"]))]
    if not len(absent):
        return df
    missing = pd.DataFrame({name: absent[name].to_numpy() if name in absent.columns else None
                            for name in df.columns})
    missing["status"] = STATUS_MISSING
    missing["correct"] = False
    missing["error"] = "planned, not committed"
    return pd.concat([df, missing], ignore_index=True) if len(df) else missing.reset_index(drop=True)


# -- the viewer's streaming read (issue 44): small columns for every row, detail only for pages ---

# what the index shows of every row (plus what orders and deduplicates them): never the JSON detail
INDEX_COLUMNS = ("key", "model", "method", "benchmark", "problem_id", "sample", "status", "correct", "submission",
                 "prompt_tokens", "completion_tokens", "n_calls", "n_execs", "wall_s", "error", "simulated",
                 "committed_at")
# what :func:`detail` reads of a row that gets a page
DETAIL_READ = ("key", "model", "method", "benchmark", "problem_id", "sample", "status", "correct", "submission",
               "error", "prompt_tokens", "completion_tokens", "n_calls", "n_execs", "wall_s", "grading_profile",
               "extraction", "committed_at", "transcript", "calls", "execs")
ORDER = ("model", "method", "benchmark", "problem_id", "sample")  # the index's row order
# ``error`` as its text in both ledger formats (format 2's struct gives its ``message``)
INDEX_SCHEMA = pa.schema([(LEDGER_SCHEMA.field(c) if c != "error" else pa.field("error", pa.string())).with_nullable(True)
                          for c in INDEX_COLUMNS])


class RowSource(Protocol):
    """What the viewer reads rows from: a :class:`opteval.sweepcore.ledger.Ledger` (streamed from
    disk) or :class:`TableSource` (a table already in memory: tests, small tools)."""

    def scan(self, columns: list[str], batch_rows: int = ..., filter: Any = None) -> Iterator[pa.RecordBatch]: ...


class TableSource:
    """An in-memory ledger table (pyarrow or pandas, any subset of the ledger's columns) read as a
    :class:`RowSource`: the same projected, filtered batches a ledger gives, absent columns null."""

    def __init__(self, table: Any) -> None:
        if isinstance(table, pa.Table):
            df = None
            cols = {n: table.column(n) for n in table.column_names}
        else:
            df = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
            cols = {n: df[n] for n in df.columns}
        n = table.num_rows if df is None else len(df)
        fields, arrays = [], []
        for f in LEDGER_SCHEMA:
            if f.name not in cols:
                arr: Any = pa.nulls(n, f.type)
            elif f.name in FORMAT_COLUMNS:  # either ledger format's type, as it came
                arr = _format_column(f.name, cols[f.name])
            else:
                arr = _as_type(cols[f.name], f.type)
            fields.append(pa.field(f.name, arr.type))
            arrays.append(arr)
        self.table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def scan(self, columns: list[str], batch_rows: int = 8192, filter: Any = None) -> Iterator[pa.RecordBatch]:
        yield from ds.dataset(self.table).to_batches(columns=columns, filter=filter, batch_size=batch_rows)


def _as_type(values: Any, typ: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """One column as the ledger's type (a pandas frame built by hand holds objects of any kind)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if values.type == typ else values.cast(typ, safe=False)
    try:
        return pa.array(values, type=typ, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError):
        cells = [_nn(v) for v in values]
        if pa.types.is_string(typ):
            return pa.array([None if v is None else str(v) for v in cells], type=typ)
        return pa.array(cells).cast(typ, safe=False)


def _format_column(name: str, values: Any) -> pa.Array | pa.ChunkedArray:
    """A column whose type depends on the ledger's format: an Arrow one as it is; Python or pandas
    values as text (``error`` its message; nested detail values as JSON, which
    ``opteval.evalcore.ledger_detail`` reads in either format)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    cells = [plain(v) for v in values]
    if name == "error":
        return pa.array([error_message(v) for v in cells], pa.string())
    return pa.array([v if v is None or isinstance(v, str) else json.dumps(v, default=str) for v in cells],
                    pa.string())


def as_source(rows: Any) -> RowSource:
    """A ledger as it is; a table or frame wrapped in :class:`TableSource`."""
    return rows if hasattr(rows, "scan") else TableSource(rows)


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    arrays = [_error_text(batch.column(f.name)) if f.name == "error"
              else batch.column(f.name) if batch.column(f.name).type == f.type else batch.column(f.name).cast(f.type)
              for f in INDEX_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=INDEX_SCHEMA)


def _error_text(col: pa.Array) -> pa.Array:
    """The ``error`` column as text: format 1's as it is, format 2's struct as its ``message`` (in Arrow)."""
    if pa.types.is_struct(col.type):
        return pc.struct_field(col, "message")
    return col if col.type == pa.string() else col.cast(pa.string())


def _last_per_key(table: pa.Table) -> pa.Table:
    """A key committed twice keeps its last committed row (:func:`to_frame`'s rule), in Arrow."""
    if not table.num_rows or pc.count_distinct(table.column("key")).as_py() == table.num_rows:
        return table
    order = np.arange(table.num_rows)
    at = table.column("committed_at")
    if at.null_count == 0:
        order = np.argsort(at.cast(pa.int64()).to_numpy(), kind="stable")
    keys = pd.Series(table.column("key").take(pa.array(order)).to_numpy(zero_copy_only=False))
    keep = np.sort(order[~keys.duplicated(keep="last").to_numpy()])
    return table.take(pa.array(keep))


def index_rows(source: RowSource, plan: Any, batch_rows: int = 8192) -> pa.Table:
    """Every row the viewer lists, as Arrow in the index's order: the committed rows' small columns
    (:data:`INDEX_COLUMNS`, last attempt per key), read in record batches, plus one ``missing`` row
    per planned key never committed (what :func:`rows_with_missing` gives, without the detail
    columns or a pandas frame: 589,116 planned keys stay ~100 bytes each)."""
    batches = [_conform(b) for b in source.scan(list(INDEX_COLUMNS), batch_rows)]
    table = _last_per_key(pa.Table.from_batches(batches, schema=INDEX_SCHEMA))
    if plan is not None:
        plan = plan if isinstance(plan, pa.Table) else pa.Table.from_pandas(pd.DataFrame(plan), preserve_index=False)
    if plan is not None and plan.num_rows:
        absent = plan.filter(pc.invert(pc.is_in(plan.column("key"), value_set=table.column("key"))))
        n = absent.num_rows
        fixed = {"status": pa.array([STATUS_MISSING] * n, pa.string()), "correct": pa.array([False] * n, pa.bool_()),
                 "error": pa.array(["planned, not committed"] * n, pa.string())}
        arrays = [fixed[f.name] if f.name in fixed
                  else _as_type(absent.column(f.name), f.type) if f.name in absent.column_names
                  else pa.nulls(n, f.type) for f in INDEX_SCHEMA]
        if n:
            table = pa.concat_tables([table, pa.Table.from_arrays(arrays, schema=INDEX_SCHEMA)])
    if not table.num_rows:
        return table
    return table.take(pc.sort_indices(table, sort_keys=[(c, "ascending") for c in ORDER]))
