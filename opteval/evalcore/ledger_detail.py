"""The ledger's detail columns (``calls``, ``execs``, ``transcript``) and its ``error``, in both formats:
the one place that encodes them and the one place every reader decodes them. No Ray, no pandas.

Why one module: format 1 stored JSON text and free-text errors; format 2 (issue 35 item 4, issue 44
item 2) stores Arrow nested types (``opteval.evalcore.records.CALL_TYPE`` ...) and the transcript as
the row's distinct messages, each once, with per-call indices (it grew with the square of the turns).
A reader gets a value as it arrives (JSON text, None, a ``to_pylist()`` list or dict, a pandas
``to_pandas()`` numpy array of dicts) and asks :func:`calls_of`, :func:`execs_of`,
:func:`transcript_of` or :func:`error_message`: it never looks at the format.

The encode boundary: rows are built (``opteval.sweepcore.ledger.rows``) with *logical* values, the
same for both formats: ``calls`` / ``execs`` lists of dicts (``CallRecord`` / ``ExecRecord`` fields),
``transcript`` the trajectory's per-call entries (format 1's structure), ``budgets`` a dict, ``error``
an :func:`error_struct` dict or None. The ledger's commit calls :func:`encode_row` with its format
(the manifest's ``format``), so one ledger's files never mix schemas. JSON text and error text are
accepted there too (older callers, hand-built rows)."""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.records import STATUS_ERROR

# a transcript entry's fields that format 2 keeps in the call struct (and the entry's own index)
ENTRY_KEYS = ("call", "turn", "purpose", "stage", "messages", "completion", "finish_reason")
CALL_FIELDS = ("turn", "purpose", "stage", "prompt_tokens", "completion_tokens", "cached_prompt_tokens",
               "latency_s", "finish_reason")
EXEC_FIELDS = ("turn", "outcome", "wall_s", "cpu_s", "exit_code", "submission", "models", "stdout_tail",
               "stderr_tail", "contained", "code")
_ENTRY_SHARED = ("turn", "purpose", "stage", "finish_reason")  # in both the CallRecord and its entry
# markers inside an ``extra`` JSON (never a key a harness writes: they start with "_opteval")
_JSON_CONTENT = "_opteval_json_content"  # the message's content was not a string: JSON-encoded
_ABSENT = "_opteval_absent"  # entry keys the original lacked
_ENTRY_ONLY = "_opteval_entry_only"  # a transcript entry with no call record of its own


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str, separators=(",", ":"))


# -- normalizing a value as it arrives --------------------------------------------------------------


def plain(v: Any) -> Any:
    """numpy arrays (pandas' nested cells) and numpy scalars as Python; NaN as None."""
    if v is None:
        return None
    if isinstance(v, float):
        return None if math.isnan(v) else v
    if isinstance(v, (str, int, bool)):
        return v
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "tolist") and hasattr(v, "dtype"):  # a numpy array or scalar
        return plain(v.tolist())
    if type(v).__name__ in ("NAType", "NaTType"):  # pandas' missing values
        return None
    return v


def _list(v: Any) -> list[Any]:
    """A detail column's value as a Python list: JSON text decoded, nested values as they are."""
    v = plain(v)
    if v is None or v == "":
        return []
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except (TypeError, ValueError, RecursionError):
            return []
    return v if isinstance(v, list) else []


def _is_format2_calls(items: list[Any]) -> bool:
    return any(isinstance(c, dict) and ("prompt" in c or "completion" in c) for c in items)


def _loads_or(text: Any, default: Any) -> Any:
    if not isinstance(text, str):
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return default


# -- decoding (every reader) ----------------------------------------------------------------------------


def calls_of(v: Any) -> list[dict[str, Any]]:
    """A row's ``calls`` as format 1's ``CallRecord`` dicts, from either format."""
    out = []
    for c in _list(v):
        if not isinstance(c, dict):
            continue
        if "prompt" in c or "completion" in c:  # format 2: drop the transcript's part
            if _loads_or(c.get("extra"), {}).get(_ENTRY_ONLY):
                continue
            c = {k: c.get(k) for k in CALL_FIELDS}
        out.append(c)
    return out


def execs_of(v: Any) -> list[dict[str, Any]]:
    """A row's ``execs`` as format 1's ``ExecRecord`` dicts (``submission`` and ``models`` decoded)."""
    out = []
    for e in _list(v):
        if not isinstance(e, dict):
            continue
        if isinstance(e.get("models"), str):  # format 2: submission and models are JSON text
            e = dict(e)
            e["models"] = _loads_or(e.get("models"), [])
            sub = e.get("submission")
            e["submission"] = None if sub is None else _loads_or(sub, sub)
        out.append(e)
    return out


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    """A stored message struct back as the dict that was sent."""
    extra = _loads_or(m.get("extra"), {}) if m.get("extra") is not None else {}
    msg: dict[str, Any] = {}
    if m.get("role") is not None:
        msg["role"] = m["role"]
    content = m.get("content")
    if content is not None:
        msg["content"] = _loads_or(content, content) if extra.pop(_JSON_CONTENT, False) else content
    msg.update(extra)
    return msg


def transcript_of(calls_v: Any, transcript_v: Any) -> list[dict[str, Any]]:
    """A row's transcript as format 1's per-call entries (``{"call", "turn", "purpose", "stage",
    "messages", "completion", "finish_reason"}`` and any extra keys), from either format: format 1's
    ``transcript`` is that list already; format 2 rebuilds it from ``calls`` (the per-call indices)
    and ``transcript`` (the distinct messages), so a reader of the transcript reads both columns."""
    stored = _list(transcript_v)
    calls = _list(calls_v)
    if not _is_format2_calls(calls):  # format 1 (or no calls at all): the entries as stored
        return [e for e in stored if isinstance(e, dict) and not set(e) <= {"role", "content", "extra"}]
    messages = [_message(m) if isinstance(m, dict) else {} for m in stored]
    out = []
    i = 0
    for c in calls:
        if not isinstance(c, dict):
            continue
        extra = _loads_or(c.get("extra"), {}) if c.get("extra") is not None else {}
        entry_only = bool(extra.pop(_ENTRY_ONLY, False))
        absent = set(extra.pop(_ABSENT, []))
        prompt, done = c.get("prompt"), c.get("completion")
        if prompt is None and done is None and not entry_only and not extra:
            i += 1  # a call without a transcript entry
            continue
        entry: dict[str, Any] = {"call": i}
        entry.update({k: c.get(k) for k in ("turn", "purpose", "stage")})
        entry["messages"] = [dict(messages[j]) for j in (prompt or []) if 0 <= j < len(messages)]
        entry["completion"] = (messages[done].get("content") if done is not None and 0 <= done < len(messages)
                               else None)
        entry["finish_reason"] = c.get("finish_reason")
        entry.update(extra)
        for k in absent:
            entry.pop(k, None)
        out.append(entry)
        if not entry_only:
            i += 1
    return out


# the executions' text a summary never reads: the program and its output tails (~4 KB a run)
EXEC_TEXT = ("code", "stdout_tail", "stderr_tail")


def without_exec_text(batch: pa.RecordBatch, fields: tuple[str, ...] = EXEC_TEXT) -> pa.RecordBatch:
    """``batch`` with the ``execs`` structs' ``fields`` set to null, before it becomes Python.

    Why: a reader that only counts (the report) would otherwise turn every run's program and
    output into Python strings and drop them: at 589,116 rows that churn, not the values kept,
    set the report's peak memory. Same schema, so readers see ``None`` where the text was.
    Format 1 (JSON text) is returned as it is."""
    i = batch.schema.get_field_index("execs")
    if i < 0:
        return batch
    col = batch.column(i)
    if not (pa.types.is_list(col.type) and pa.types.is_struct(col.type.value_type)):
        return batch
    # a scanned batch is a slice: rebase its offsets on the values it covers (a fresh array)
    start, end = col.offsets[0].as_py(), col.offsets[-1].as_py()
    offsets = pc.subtract(col.offsets, pa.scalar(start, col.offsets.type))
    values = col.values.slice(start, end - start)
    struct = values.type
    children = [pa.nulls(len(values), struct.field(j).type) if struct.field(j).name in fields else values.field(j)
                for j in range(struct.num_fields)]
    slim = pa.StructArray.from_arrays(children, fields=list(struct),
                                      mask=values.is_null() if values.null_count else None)
    lists = pa.ListArray.from_arrays(offsets, slim, type=col.type, mask=col.is_null() if col.null_count else None)
    return batch.set_column(i, batch.schema.field(i), lists)


def error_message(v: Any) -> str | None:
    """A row's ``error`` as today's text (format 1's value; format 2's ``message``), or None."""
    v = plain(v)
    if isinstance(v, dict):
        msg = v.get("message")
        return None if msg is None else str(msg)
    return None if v is None or v == "" else str(v)


def error_of(v: Any, *, status: str | None = None, method: str | None = None) -> dict[str, Any] | None:
    """A row's ``error`` as ``{kind, where, message}``: format 2's struct as stored; format 1's text
    classified now by :func:`error_struct` (``status``, ``method``: the row's, when known)."""
    v = plain(v)
    if isinstance(v, dict):
        return {k: v.get(k) for k in ("kind", "where", "message")}
    msg = error_message(v)
    infrastructure = status == STATUS_ERROR if status is not None else _infra(msg or "") is not None
    return None if msg is None else error_struct(msg, infrastructure=infrastructure, method=method)


# -- error kinds (docs/errors.md "Error kinds") ---------------------------------------------------------

# An infrastructure reason's producer, by the start of its text: cluster/driver/dispatch.py writes the
# first three, the worker actors (cluster/actors/workers.py, WorkerFailure) the rest.
_INFRA: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"trajectory timeout after "), "timeout", "driver"),
    (re.compile(r"worker \d+ failed: "), "worker_lost", "worker"),
    (re.compile(r"driver could not grade/record: "), "internal", "driver"),
    (re.compile(r"executor lost: "), "executor_lost", "executor"),
    (re.compile(r"endpoint unreachable: "), "endpoint", "model"),
    (re.compile(r"harness crashed: "), "harness_crash", "worker"),
)
INFRASTRUCTURE = "infrastructure"  # any other status=error reason (a harness's own STATUS_ERROR note)
HARNESS = "harness"  # a graded row's last harness note (traj.errors[-1]); where: the method
KINDS = tuple(k for _, k, _ in _INFRA) + (INFRASTRUCTURE, HARNESS)


def _infra(message: str) -> tuple[str, str] | None:
    for pattern, kind, where in _INFRA:
        if pattern.match(message):
            return kind, where
    return None


def error_struct(message: str | None, *, infrastructure: bool, method: str | None = None) -> dict[str, Any] | None:
    """The ``error`` of a row, classified when the row is made: ``infrastructure`` (a ``status=error``
    row from ``error_row``) by its reason's producer, else a harness note (kind ``harness``, where
    ``method``). ``message`` stays today's text exactly; None when there is no error."""
    if message is None:
        return None
    if infrastructure:
        kind, where = _infra(message) or (INFRASTRUCTURE, "worker")
    else:
        kind, where = HARNESS, method or "harness"
    return {"kind": kind, "where": where, "message": message}


# -- encoding (the ledger's commit) ------------------------------------------------------------------


class _Messages:
    """The row's distinct messages in first-seen order (dedup by exact role, content and extra)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._index: dict[tuple[Any, Any, Any], int] = {}

    def add(self, msg: Any) -> int:
        if not isinstance(msg, Mapping):
            msg = {"content": msg}
        role = msg.get("role")
        extra = {k: v for k, v in msg.items() if k not in ("role", "content")}
        if "role" in msg and not isinstance(role, str):
            extra["role"], role = role, None  # an odd role kept as it was
        content = msg.get("content")
        if "content" in msg and not isinstance(content, str):
            content = _dumps(content)
            extra[_JSON_CONTENT] = True
        ex = _dumps(extra) if extra else None
        key = (role, content, ex)
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append({"role": role, "content": content, "extra": ex})
        return self._index[key]


def _int(v: Any) -> int | None:
    return None if v is None or isinstance(v, bool) else int(v)


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def encode_calls_transcript(calls_v: Any, transcript_v: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Format 2's ``calls`` and ``transcript`` from the logical values (CallRecord dicts, per-call
    entries). Each entry joins the call it names (``call``, else its position); an entry field that
    differs from its call record, and any extra key, goes to the call's ``extra``; an entry with no
    call of its own becomes an entry-only call struct that :func:`calls_of` skips."""
    records = calls_of(calls_v)
    entries = [e for e in transcript_of(calls_v, transcript_v)] if _is_format2_calls(_list(calls_v)) \
        else [e for e in _list(transcript_v) if isinstance(e, dict)]
    msgs = _Messages()
    by_call: dict[int, dict[str, Any]] = {}
    orphans: list[dict[str, Any]] = []
    for pos, e in enumerate(entries):
        idx = e.get("call", pos)
        if isinstance(idx, int) and not isinstance(idx, bool) and 0 <= idx < len(records) and idx not in by_call:
            by_call[idx] = e
        else:
            orphans.append(e)

    def struct(rec: Mapping[str, Any], e: Mapping[str, Any] | None, entry_only: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"turn": _int(rec.get("turn")), "purpose": _str(rec.get("purpose")),
                               "stage": _str(rec.get("stage")), "prompt_tokens": _int(rec.get("prompt_tokens")),
                               "completion_tokens": _int(rec.get("completion_tokens")),
                               "cached_prompt_tokens": _int(rec.get("cached_prompt_tokens")),
                               "latency_s": _float(rec.get("latency_s")), "finish_reason": _str(rec.get("finish_reason")),
                               "prompt": None, "completion": None, "extra": None}
        if e is None:
            return out
        extra: dict[str, Any] = {k: v for k, v in e.items() if k not in ENTRY_KEYS}
        for k in _ENTRY_SHARED:  # the entry's own value where it differs from the record's
            if k in e and e[k] != out[k]:
                extra[k] = e[k]
        absent = [k for k in ENTRY_KEYS if k not in e]
        if absent:
            extra[_ABSENT] = absent
        if "call" in e and (e["call"] != rec.get("_position") or isinstance(e["call"], bool)):
            extra["call"] = e["call"]
        if entry_only:
            extra[_ENTRY_ONLY] = True
        out["prompt"] = [msgs.add(m) for m in (e.get("messages") or [])]
        if e.get("completion") is not None:
            out["completion"] = msgs.add({"role": "assistant", "content": e["completion"]})
        out["extra"] = _dumps(extra) if extra else None
        return out

    calls = [struct({**rec, "_position": i}, by_call.get(i), False) for i, rec in enumerate(records)]
    calls += [struct({"_position": None}, e, True) for e in orphans]
    return calls, msgs.items


def encode_execs(v: Any) -> list[dict[str, Any]]:
    """Format 2's ``execs`` from ExecRecord dicts (``submission`` and ``models`` as JSON text)."""
    out = []
    for e in execs_of(v):
        sub = e.get("submission")
        out.append({"turn": _int(e.get("turn")), "outcome": _str(e.get("outcome")), "wall_s": _float(e.get("wall_s")),
                    "cpu_s": _float(e.get("cpu_s")), "exit_code": _int(e.get("exit_code")),
                    "submission": None if sub is None else _dumps(sub), "models": _dumps(e.get("models") or []),
                    "stdout_tail": _str(e.get("stdout_tail")), "stderr_tail": _str(e.get("stderr_tail")),
                    "contained": None if e.get("contained") is None else bool(e.get("contained")),
                    "code": _str(e.get("code"))})
    return out


def encode_row(row: Mapping[str, Any], fmt: int) -> dict[str, Any]:
    """``row`` (logical values, or format 1's text) as the ledger of format ``fmt`` stores it."""
    out = dict(row)
    status, method = row.get("status"), row.get("method")
    if fmt >= 2:
        out["calls"], out["transcript"] = encode_calls_transcript(row.get("calls"), row.get("transcript"))
        out["execs"] = encode_execs(row.get("execs"))
        out["error"] = error_of(row.get("error"), status=status, method=method)
    else:
        calls = row.get("calls")
        out["calls"] = _dumps(calls_of(calls)) if not isinstance(calls, str) else calls
        execs = row.get("execs")
        out["execs"] = _dumps(execs_of(execs)) if not isinstance(execs, str) else execs
        tr = row.get("transcript")
        out["transcript"] = _dumps(transcript_of(calls, tr)) if not isinstance(tr, str) else tr
        out["error"] = error_message(row.get("error"))
    budgets = row.get("budgets")
    out["budgets"] = budgets if budgets is None or isinstance(budgets, str) else _dumps(budgets)
    return out
