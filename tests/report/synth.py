"""A small synthetic ledger whose every number is worked out by hand in the tests.

Benchmarks: A (a1 = 10, a2 = infeasible; 3 samples), B (b1 = 5, b2 = 7; 2 samples, every
trajectory wrong), C (c1 = 100, c2 = 200; 1 sample, pass@k undefined for k > 1).
Backbones: M1 (real) and M2 (simulated, C only). Methods: direct, opticycle.

M1 direct                      M1 opticycle
 A a1 s0 10      ok             A a1 s0 10    first exec error, then ok (repaired)
 A a1 s1 10.001  ok (not sirl)  A a1 s1 11    semantic
 A a1 s2 "10"    ok             A a1 s2 --    status error "timeout exception"
 A a2 s0 infeas. ok (no model)  A a2 s0 infeasible ok
 A a2 s1 12      semantic (max,0,0) A a2 s1 infeasible ok
 A a2 s2 --      not run        A a2 s2 unbounded semantic
 B b1 s0 None    exec error -> syntactic      B b1 s0 6  [error, ok] semantic
 B b1 s1 infeasible (answer 5) -> syntactic   B b1 s1 6  semantic
 B b2 s0 8       semantic                     B b2 s0 70 semantic
 B b2 s1 None    ran ok -> no_submission      B b2 s1 None  timeout -> syntactic
 C c1 s0 100     ok                           C c1 s0 100.5 wrong (ok under orlm)
 C c2 s0 250     semantic, no token count     C c2 s0 200 ok
M2 (simulated): direct C 100, 200 (both ok); opticycle C 1 (wrong), 200 (ok).
"""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from opteval.evalcore.grading import grade, submission_fields
from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.records import empty_table

ANSWERS = {
    "A": AnswerKey("A", {"a1": 10.0, "a2": "infeasible"}),
    "B": AnswerKey("B", {"b1": 5.0, "b2": 7.0}),
    "C": AnswerKey("C", {"c1": 100.0, "c2": 200.0}),
}
PLANNED = {
    ("M1", "direct", "A"): 6, ("M1", "direct", "B"): 4, ("M1", "direct", "C"): 2,
    ("M1", "opticycle", "A"): 6, ("M1", "opticycle", "B"): 4, ("M1", "opticycle", "C"): 2,
    ("M2", "direct", "C"): 2, ("M2", "opticycle", "C"): 2,
}
MODEL_META = {"M1": {"family": "Fam", "size_b": 4}, "M2": {"family": "Fam", "size_b": 9}}

MIN20 = {"library": "pulp", "sense": "min", "n_vars": 3, "n_continuous": 1, "n_binary": 2, "n_integer": 0,
         "n_constraints": 2, "status": "optimal", "objective": 10.0}
MAX00 = {"library": "pulp", "sense": "max", "n_vars": 2, "n_continuous": 2, "n_binary": 0, "n_integer": 0,
         "n_constraints": 1, "status": "optimal", "objective": 12.0}


def _row(model: str, method: str, bench: str, pid: str, sample: int, sub: Any, *,
         outcomes: tuple[str, ...] = ("ok",), status: str | None = None, error: str | None = None,
         models: list[dict[str, Any]] | None = None, pt: int | None = None, ct: int | None = None,
         cached: int | None = None, wall: float = 1.0, call_lat: tuple[float, ...] = (0.5,),
         simulated: bool = False) -> dict[str, Any]:
    if status is None:
        status = "submitted" if sub is not None else "no_submission"
    if status == "error":
        outcomes, call_lat = (), ()
    execs = [{"turn": i, "outcome": o, "wall_s": 0.1, "cpu_s": 0.1, "exit_code": 0 if o == "ok" else 1,
              "submission": sub if i == len(outcomes) - 1 else None,
              "models": (models or []) if i == len(outcomes) - 1 else []} for i, o in enumerate(outcomes)]
    calls = [{"turn": i, "purpose": "generate", "prompt_tokens": pt, "completion_tokens": ct,
              "cached_prompt_tokens": cached, "latency_s": lat, "finish_reason": "stop"} for i, lat in enumerate(call_lat)]
    fields = submission_fields(sub)
    return {
        "key": f"{model}/{method}/{bench}/{pid}/{sample}/h", "sweep": "s", "model": model, "method": method,
        "benchmark": bench, "problem_id": pid, "sample": sample, "seed": 42 + sample, "status": status,
        **fields, "extraction": "submit",
        "correct": status != "error" and grade(sub, ANSWERS[bench].answers[pid]),
        "grading_profile": "optagentbench",
        "prompt_tokens": None if status == "error" else pt, "completion_tokens": None if status == "error" else ct,
        "cached_prompt_tokens": None if status == "error" else cached,
        "n_calls": len(calls), "n_execs": len(execs), "exec_ok": sum(o == "ok" for o in outcomes),
        "first_exec_outcome": outcomes[0] if outcomes else None, "wall_s": wall, "simulated": simulated,
        "error": error, "attempts": 1, "fingerprint": "f", "committed_at": None,
        "calls": json.dumps(calls), "execs": json.dumps(execs), "transcript": "[]", "budgets": "{}",
    }


def rows() -> list[dict[str, Any]]:
    out = []

    def d(b, pid, s, sub, **kw):  # M1 direct: prompt 100 + 10*sample, completion 50, wall 1 + sample
        kw.setdefault("pt", 100 + 10 * s)
        kw.setdefault("ct", 50)
        out.append(_row("M1", "direct", b, pid, s, sub, wall=1.0 + s, **kw))

    def o(b, pid, s, sub, **kw):  # M1 opticycle: 300 + 100 tokens per call, 200 cached, two calls 1 s and 3 s
        out.append(_row("M1", "opticycle", b, pid, s, sub, pt=300, ct=100, cached=200, wall=5.0,
                        call_lat=kw.pop("call_lat", (1.0, 3.0)), **kw))

    d("A", "a1", 0, 10, models=[MIN20])
    d("A", "a1", 1, "10.001", models=[MIN20])
    d("A", "a1", 2, "10", models=[MIN20])
    d("A", "a2", 0, "infeasible")
    d("A", "a2", 1, 12.0, models=[MAX00])
    d("B", "b1", 0, None, outcomes=("error",))
    d("B", "b1", 1, "infeasible")
    d("B", "b2", 0, 8)
    d("B", "b2", 1, None)
    d("C", "c1", 0, 100)
    d("C", "c2", 0, 250, pt=None)

    o("A", "a1", 0, 10, outcomes=("error", "ok"), models=[MIN20])
    o("A", "a1", 1, 11, models=[MIN20])
    o("A", "a1", 2, None, status="error", error="timeout exception")
    o("A", "a2", 0, "infeasible")
    o("A", "a2", 1, "Infeasible")
    o("A", "a2", 2, "unbounded", models=[MIN20])
    o("B", "b1", 0, 6, outcomes=("error", "ok"))
    o("B", "b1", 1, 6)
    o("B", "b2", 0, 70)
    o("B", "b2", 1, None, outcomes=("timeout",))
    o("C", "c1", 0, 100.5)
    o("C", "c2", 0, 200)

    for method, subs in (("direct", (100, 200)), ("opticycle", (1, 200))):
        for pid, sub in zip(("c1", "c2"), subs):
            out.append(_row("M2", method, "C", pid, 0, sub, pt=10, ct=10, simulated=True))
    return out


def ledger_frame(fmt: int = 2) -> pd.DataFrame:
    """The rows as a pandas frame with exactly the columns and types of ledger format ``fmt`` (format 2's
    detail columns nested, as pandas holds them: numpy arrays of dicts), encoded as the ledger's commit does."""
    import pyarrow as pa

    from opteval.evalcore.ledger_detail import encode_row
    from opteval.evalcore.records import ledger_schema

    schema = ledger_schema(fmt)
    assert schema.names == empty_table().schema.names
    table = pa.Table.from_pylist([encode_row(r, fmt) for r in rows()], schema=schema)
    return table.to_pandas()
