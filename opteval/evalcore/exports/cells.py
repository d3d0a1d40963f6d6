"""Planned trajectories grouped per (model, method, benchmark), each with its ledger row or
None when missing: the exporters' one shared view of a sweep, so the missing-score rule (a
missing or ``status=error`` trajectory is wrong and stays in the denominator) is applied once."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opteval.evalcore.ledger_detail import error_message, execs_of, transcript_of
from opteval.evalcore.records import STATUS_ERROR

# the ledger columns the exporters read (jobs/export.py projects on them)
# (the transcript needs ``calls`` too: format 2 keeps each call's messages as indices there)
COLUMNS = ["key", "model", "method", "benchmark", "problem_id", "sample", "status", "submission", "correct",
           "grading_profile", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "n_calls", "error",
           "calls", "transcript", "execs", "simulated", "extraction"]


@dataclass(frozen=True)
class Cell:
    """One planned trajectory: its plan entry and its committed row (None: not run)."""

    key: str
    problem_id: str
    sample: int
    row: Mapping[str, Any] | None

    @property
    def missing(self) -> bool:
        return self.row is None or self.row.get("status") == STATUS_ERROR

    @property
    def correct(self) -> bool:
        return bool(self.row is not None and not self.missing and self.row.get("correct"))

    @property
    def why_missing(self) -> str:
        if self.row is None:
            return "not run: planned but never committed"
        return f"status error: {error_message(self.row.get('error')) or 'unknown'}"

    def transcript(self) -> list[dict[str, Any]]:
        """The row's per-call transcript entries (either ledger format); [] when absent."""
        if self.row is None:
            return []
        return transcript_of(self.row.get("calls"), self.row.get("transcript"))

    def execs(self) -> list[dict[str, Any]]:
        """The row's executions (either ledger format); [] when absent."""
        return execs_of(self.row.get("execs")) if self.row is not None else []

    def conversation(self) -> list[dict[str, str]]:
        """The transcript (one entry per call: the messages sent and the completion) as one list
        of ``{role, content}``: each call's messages not already shown, then its completion."""
        out: list[dict[str, str]] = []
        for call in self.transcript():
            if not isinstance(call, dict):
                continue
            sent = [{"role": str(m.get("role")), "content": _text(m.get("content"))}
                    for m in call.get("messages") or [] if isinstance(m, dict)]
            out += sent[len(out):] if sent[:len(out)] == out else sent
            out.append({"role": "assistant", "content": _text(call.get("completion"))})
        return out

    def prompt(self) -> str:
        """The first user message the model was sent ("" when none was recorded)."""
        return next((m["content"] for m in self.conversation() if m["role"] == "user"), "")

    def completion(self) -> str:
        """The model's last completion ("" when none was recorded)."""
        return next((m["content"] for m in reversed(self.conversation()) if m["role"] == "assistant"), "")


def _text(content: Any) -> str:
    return content if isinstance(content, str) else ("" if content is None else json.dumps(content, default=str))


Group = tuple[str, str, str]


def group_cells(plan: Iterable[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]]) -> dict[Group, list[Cell]]:
    """``{(model, method, benchmark): [Cell, ...]}`` in plan order; rows off the plan are ignored."""
    by_key = {r["key"]: r for r in rows}
    out: dict[Group, list[Cell]] = {}
    for p in plan:
        group = (p["model"], p["method"], p["benchmark"])
        out.setdefault(group, []).append(Cell(p["key"], p["problem_id"], int(p["sample"]), by_key.get(p["key"])))
    return out
