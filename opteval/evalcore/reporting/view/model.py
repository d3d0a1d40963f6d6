"""One trajectory as something to read: the ledger row's JSON columns unpacked, its grade explained.

The HTML viewer and ``opteval show`` both render these, so the two never disagree on what a
trajectory did or why it was graded as it was. Everything comes from the ledger (plus the
answer key where the data is present): nothing is re-run.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from opteval.evalcore.grading import PROFILES, parse_submission
from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.reporting.frame import _loads, _nn, number, to_frame

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


def page_name(key: str) -> str:
    """A trajectory page's file name: keys hold '/' and problem ids any character."""
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
        return f"infrastructure error after its retries, counted as wrong: {row.get('error') or 'no reason recorded'}"
    if status == "no_submission":
        why = row.get("error") or "the trajectory ended without submitting"
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
    transcript = _loads(row.get("transcript"))
    records = _loads(row.get("calls"))
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
        for i, e in enumerate(x for x in _loads(row.get("execs")) if isinstance(x, dict))
    ]
    return Detail(
        key=str(row["key"]), model=str(row["model"]), method=str(row["method"]), benchmark=str(row["benchmark"]),
        problem_id=str(row["problem_id"]), sample=int(row["sample"]), status=str(row["status"]),
        correct=bool(_nn(row.get("correct")) or False), submission=_nn(row.get("submission")), answer=answer,
        why=explain(row, answer), error=_nn(row.get("error")),
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
