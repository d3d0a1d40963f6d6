"""Ledger rows (``opteval.evalcore.records.LEDGER_SCHEMA``): one per graded trajectory, or an error row for
a trajectory whose infrastructure failed past its retries (it stays in the denominator).

The rows hold logical values, the same whatever the ledger's format: ``calls`` and ``execs`` lists of
dicts, ``transcript`` the trajectory's per-call entries, ``budgets`` a dict, ``error`` a
``{kind, where, message}`` dict classified here (``opteval.evalcore.ledger_detail.error_struct``).
``Ledger.commit`` encodes them for the ledger's format (the one encode boundary)."""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from opteval.evalcore.formulation import Verification
from opteval.evalcore.ledger_detail import error_struct
from opteval.evalcore.records import LEDGER_SCHEMA, STATUS_ERROR, Trajectory

# -- rows ----------------------------------------------------------------------------------------


def _json(obj: Any) -> str:
    return json.dumps(obj, default=str, separators=(",", ":"))


def _submission_text(raw: Any) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return str(raw)
    if isinstance(raw, (int, float)):
        return repr(raw)
    return _json(raw)[:2000]


def trajectory_row(
    traj: Trajectory,
    *,
    key: str,
    correct: bool,
    profile: str,
    fingerprint: str,
    sweep: str,
    parsed: Any = None,
    error: str | None = None,
    attempts: int = 1,
    verification: Verification | None = None,
) -> dict[str, Any]:
    """One ledger row (``LEDGER_SCHEMA``) for a graded trajectory.

    ``parsed`` is ``opteval.evalcore.grading.parse_submission(raw)``: a float, ``"infeasible"``,
    ``"unbounded"`` or None. Token counts a server did not report stay null. ``verification``
    (``opteval.evalcore.formulation.verify``) fills the issue-36 columns; the captured formulations
    leave the ``execs`` JSON (each model keeps its ``fingerprint``): they are stored once per
    fingerprint beside the ledger (``opteval.sweepcore.ledger.models``).
    """
    raw = traj.submission.raw if traj.submission is not None else None
    value = float(parsed) if isinstance(parsed, (int, float)) and not isinstance(parsed, bool) else None
    if value is not None and not math.isfinite(value):
        value = None
    execs = traj.execs
    return {
        "key": key,
        "sweep": sweep,
        "model": traj.model,
        "method": traj.method,
        "benchmark": traj.benchmark,
        "problem_id": traj.problem_id,
        "sample": int(traj.sample),
        "seed": int(traj.seed),
        "status": traj.status,
        "submission": _submission_text(raw),
        "submission_value": value,
        "submission_status": parsed if isinstance(parsed, str) else None,
        "extraction": traj.submission.extraction if traj.submission is not None else None,
        "correct": bool(correct),
        "grading_profile": profile,
        "prompt_tokens": traj.prompt_tokens,
        "completion_tokens": traj.completion_tokens,
        "cached_prompt_tokens": traj.cached_prompt_tokens,
        "n_calls": len(traj.calls),
        "n_execs": len(execs),
        "exec_ok": sum(1 for e in execs if e.outcome == "ok"),
        "first_exec_outcome": execs[0].outcome if execs else None,
        "wall_s": float(traj.wall_s),
        "simulated": bool(traj.simulated),
        # a graded row's error is its last harness note (or the caller's): kind harness, where the method
        "error": error_struct(error if error is not None else (traj.errors[-1] if traj.errors else None),
                              infrastructure=False, method=traj.method),
        "attempts": int(attempts),
        "fingerprint": fingerprint,
        "committed_at": None,
        "calls": [dataclasses.asdict(c) for c in traj.calls],
        "execs": [_without_forms(dataclasses.asdict(e)) for e in execs],
        "transcript": [dict(e) for e in traj.transcript],
        "budgets": dict(traj.budgets),
        **verification_columns(verification),
    }


def verification_columns(v: Verification | None) -> dict[str, Any]:
    """The issue-36 columns of one row (all null without a verification)."""
    if v is None:
        return dict.fromkeys(("answer_source", "model_fingerprint", "reference_match", "reference_feasible",
                              "reference_violation", "reference_gap", "verify_note"))
    note = v.reason + (f"; {v.n_unsupported} solve(s) not captured (unsupported or capped)" if v.n_unsupported else "")
    return {"answer_source": v.answer_source, "model_fingerprint": v.fingerprint,
            "reference_match": v.reference_match, "reference_feasible": v.reference_feasible,
            "reference_violation": v.reference_violation, "reference_gap": v.reference_gap,
            "verify_note": note or None}


def _without_forms(e: dict[str, Any]) -> dict[str, Any]:
    e["models"] = [{k: val for k, val in m.items() if k != "form"} if isinstance(m, dict) else m
                   for m in e.get("models") or []]
    return e


def error_row(
    item: Any,
    reason: str,
    attempts: int,
    *,
    sweep: str,
    seed: int | None = None,
    simulated: bool = False,
    profile: str | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """The row for a trajectory whose infrastructure failed past its retries.

    ``item`` is a ``opteval.sweepcore.plan.PlanItem``. Status ``error``, never correct, tokens
    null: it stays in the denominator and is listed, never dropped.
    """
    row: dict[str, Any] = dict.fromkeys(LEDGER_SCHEMA.names)
    row.update(
        key=item.key, sweep=sweep, model=item.model, method=item.method, benchmark=item.benchmark,
        problem_id=item.problem_id, sample=int(item.sample), seed=seed, status=STATUS_ERROR,
        correct=False, grading_profile=profile, n_calls=0, n_execs=0, exec_ok=0,
        simulated=bool(simulated), error=error_struct(reason, infrastructure=True), attempts=int(attempts),
        fingerprint=fingerprint if fingerprint is not None else getattr(item, "fingerprint", None),
        calls=[], execs=[], transcript=[], budgets={},
    )
    return row
