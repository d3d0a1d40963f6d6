"""Synthetic ledgers for the audit tests: simulated models of different skill answering the sample.

Each model (skill p) writes, per problem and sample, the right formulation with probability p (the
true value; every model the same fingerprint, as the simulated policy writes the reference program),
else one of eight wrong formulations shared by every model (clones share code: a mutant has one
fingerprint and one value whichever model wrote it), else nothing. Worked out without Ray."""
from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from opteval.evalcore.records import LEDGER_SCHEMA

SKILLS = {"sim-a": 0.8, "sim-b": 0.6, "sim-c": 0.4}


def row(model: str, method: str, bench: str, pid: str, sample: int, value: Any, fp: str | None,
        source: str | None = "solve", ref: str | None = None, correct: bool = False) -> dict[str, Any]:
    r: dict[str, Any] = dict.fromkeys(LEDGER_SCHEMA.names)
    status = "submitted" if value is not None else "no_submission"
    r.update(key=f"{model}|{method}|{bench}|{pid}|{sample}", sweep="synth", model=model, method=method,
             benchmark=bench, problem_id=pid, sample=sample, seed=sample, status=status,
             submission=None if value is None else str(value),
             submission_value=value if isinstance(value, float) else None,
             submission_status=value if isinstance(value, str) else None, correct=correct,
             grading_profile="optagentbench", n_calls=1, n_execs=1, exec_ok=1, wall_s=1.0, simulated=True,
             attempts=1, fingerprint="f", calls="[]", execs="[]", transcript="[]", budgets="{}",
             answer_source=source if value is not None else "no_submission", model_fingerprint=fp,
             reference_match=ref)
    return r


def wrong_value(truth: Any, m: int) -> Any:
    if isinstance(truth, str):
        return "unbounded" if m == 0 else 17.0 + m
    return float(truth) * (1.0 + 0.13 * (m + 1)) + 1.0


def sim_rows(keys: dict[str, Any], samples: int = 5, seed: int = 0, skills: dict[str, float] | None = None,
             bench: str = "sample", method: str = "direct") -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for model, p in (skills or SKILLS).items():
        for pid, truth in keys.items():
            for s in range(samples):
                u = rng.random()
                if u < p:
                    out.append(row(model, method, bench, pid, s, truth, f"ref-{pid}", ref="same", correct=True))
                elif u < 0.9 + 0.1 * p:
                    m = rng.randrange(8)
                    out.append(row(model, method, bench, pid, s, wrong_value(truth, m), f"mut-{pid}-{m}",
                                   ref="different"))
                else:
                    out.append(row(model, method, bench, pid, s, None, None))
    return out


def write_ledger(root: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    """A real ledger (manifest, plan.parquet, committed rows) holding ``rows``."""
    from opteval.sweepcore.ledger import Ledger

    led = Ledger.open(str(root), name, {"grading": {"profile": "optagentbench"}, "benchmark_configs": {}}, "fp-" + name)
    led.record_plan([SimpleNamespace(key=r["key"], model=r["model"], method=r["method"], benchmark=r["benchmark"],
                                     problem_id=r["problem_id"], sample=r["sample"]) for r in rows])
    led.commit([{k: v for k, v in r.items() if v is not None} for r in rows])
    led.close()
    return root / name
