"""Answers from recorded completions: re-grade published outputs, reproduce a run without a model.

File format (JSONL, or Parquet with the same columns), one row per recorded call::

    {"id": "nl4opt-0001", "completion": "...", "sample": 0, "call": 0,
     "usage": {"prompt_tokens": 812, "completion_tokens": 430,
               "prompt_tokens_details": {"cached_tokens": 0}},
     "finish_reason": "stop", "simulated": false}

An OpenAI batch-output file (``{custom_id, response|error}`` per line, ``vllm run-batch``'s
output) is read too, line by line: :mod:`opteval.evalcore.models.batch`.

Only ``id`` and ``completion`` are required; other keys are ignored (published files
carry many). ``sample`` defaults to the number of
earlier rows with the same id (so a published pass@8 file with eight unlabeled rows per
question becomes samples 0..7); ``call`` (the n-th model call of a multi-turn
trajectory) defaults to 0. Usage is missing (None) unless the row has it.

How the problem id reaches the model: ``chat()`` only sees messages, so the replay
model is *bound* to one trajectory with ``for_problem(problem_id, sample)`` (the
worker does it when it builds the harness context; ``jobs/regrade.py`` reads the
records directly). Matching by question text was rejected: published files rarely
carry the exact prompt, and two benchmarks can share a question. The bound model
returns call 0, then call 1, ... and raises ``ModelError`` when the recording ends.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opteval.evalcore.models.base import CallMeta, Completion, Message, ModelError, Sampling, Usage
from opteval.evalcore.models.batch import is_batch_output, replay_row
from opteval.evalcore.models.openai_backend import parse_usage


class ReplayFileError(ValueError):
    """A recording could not be read; the message names the file and the line (or row)."""


@dataclass(frozen=True)
class ReplayRecord:
    id: str
    sample: int
    call: int
    completion: str
    usage: Usage
    finish_reason: str | None
    simulated: bool
    where: str  # "file:line" (JSONL) or "file:row N" (Parquet), for error messages


def load_records(path: str | Path) -> list[ReplayRecord]:
    """Read a JSONL or Parquet recording (by suffix); errors name the file and line."""
    path = Path(path)
    if not path.exists():
        raise ReplayFileError(f"{path}: no such file")
    rows = _parquet_rows(path) if path.suffix in (".parquet", ".pq") else jsonl_rows(path)
    records: list[ReplayRecord] = []
    seen: dict[tuple[str, int, int], str] = {}
    per_id: dict[str, int] = {}
    for where, row in rows:
        record = _record(where, row, per_id)
        key = (record.id, record.sample, record.call)
        if key in seen:
            raise ReplayFileError(
                f"{where}: duplicate id={record.id!r} sample={record.sample} call={record.call} "
                f"(first at {seen[key]})"
            )
        seen[key] = where
        records.append(record)
    return records


def jsonl_rows(path: Path, error: type[Exception] | None = None) -> Iterator[tuple[str, Any]]:
    """(``"file:line"``, parsed row) for each non-blank line; bad JSON raises ``error`` naming the line."""
    error = error or ReplayFileError
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: bad JSON ({exc.msg} at column {exc.colno})") from exc
            yield f"{path}:{lineno}", row


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    # deferred: pyarrow only for Parquet recordings; JSONL needs none
    import pyarrow.parquet as pq

    for index, row in enumerate(pq.read_table(path).to_pylist()):
        yield f"{path}:row {index}", row


def _record(where: str, row: Any, per_id: dict[str, int]) -> ReplayRecord:
    if not isinstance(row, dict):
        raise ReplayFileError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if is_batch_output(row):  # an OpenAI batch-output line (evalcore/models/batch.py)
        row = replay_row(where, row, ReplayFileError)
    for key in ("id", "completion"):
        if row.get(key) is None:
            raise ReplayFileError(f"{where}: missing key {key!r}")
    if not isinstance(row["completion"], str):
        raise ReplayFileError(f"{where}: key 'completion' must be a string, got {type(row['completion']).__name__}")
    problem_id = str(row["id"])
    ordinal = per_id.get(problem_id, 0)
    per_id[problem_id] = ordinal + 1
    sample = _int_field(where, row, "sample", default=ordinal)
    call = _int_field(where, row, "call", default=0)
    usage = row.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ReplayFileError(f"{where}: key 'usage' must be an object, got {type(usage).__name__}")
    if isinstance(usage, dict) and "cached_prompt_tokens" in usage and "prompt_tokens_details" not in usage:
        usage = {**usage, "prompt_tokens_details": {"cached_tokens": usage["cached_prompt_tokens"]}}
    return ReplayRecord(
        id=problem_id,
        sample=sample,
        call=call,
        completion=row["completion"],
        usage=parse_usage(usage),
        finish_reason=row.get("finish_reason"),
        simulated=bool(row.get("simulated", False)),
        where=where,
    )


def _int_field(where: str, row: dict[str, Any], key: str, default: int) -> int:
    value = row.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReplayFileError(f"{where}: key {key!r} must be a non-negative integer, got {value!r}")
    return value


class ReplayModel:
    """All recorded completions of one file; bind it to a trajectory with ``for_problem``."""

    def __init__(self, name: str, records: list[ReplayRecord]) -> None:
        self.name = name
        self._by_key = {(r.id, r.sample, r.call): r for r in records}
        self.records = list(records)

    @classmethod
    def from_file(cls, path: str | Path, name: str = "replay") -> ReplayModel:
        return cls(name, load_records(path))

    def get(self, problem_id: str, sample: int = 0, call: int = 0) -> ReplayRecord | None:
        return self._by_key.get((problem_id, sample, call))

    def for_problem(self, problem_id: str, sample: int = 0) -> BoundReplayModel:
        return BoundReplayModel(self, problem_id, sample)

    async def chat(
        self, messages: list[Message], sampling: Sampling, seed: int, meta: CallMeta | None = None
    ) -> Completion:  # meta is ignored: a recording is replayed in call order
        raise ModelError(
            f"replay model {self.name!r} does not know which problem this call is for: "
            "bind it first with ReplayModel.for_problem(problem_id, sample)"
        )


class BoundReplayModel:
    """A ``ChatModel`` that replays one (problem, sample): call 0, call 1, ..."""

    def __init__(self, replay: ReplayModel, problem_id: str, sample: int) -> None:
        self.name = replay.name
        self.problem_id = problem_id
        self.sample = sample
        self._replay = replay
        self._next_call = 0

    async def chat(
        self, messages: list[Message], sampling: Sampling, seed: int, meta: CallMeta | None = None
    ) -> Completion:  # meta is ignored: a recording is replayed in call order
        start = time.perf_counter()
        record = self._replay.get(self.problem_id, self.sample, self._next_call)
        if record is None:
            raise ModelError(
                f"replay model {self.name!r}: no recorded completion for id={self.problem_id!r} "
                f"sample={self.sample} call={self._next_call}"
            )
        self._next_call += 1
        return Completion(
            text=record.completion,
            usage=Usage(**vars(record.usage)),
            finish_reason=record.finish_reason,
            latency_s=time.perf_counter() - start,
            simulated=record.simulated,
        )
