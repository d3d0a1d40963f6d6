"""Synthetic sweeps shaped like ``table1``, ``paper`` and ``figure4`` (and ``extra_backbones``'
Phi-4-reasoning, folded into ``paper``), every number worked out by hand in test_paper_report.py.

Two benchmarks, two problems each, one sample: per (model, method) four trajectories in the
order (mamo_easy e1, e2, nl4opt n1, n2). Outcomes: R right, W wrong, - not run, E status error.

table1  Qwen3-4B   direct    R W R W   mamo 50  nl4opt 50  Macro 50     1.5k tokens
                   cafa      R R W W        100         0        50     1.5k
                   opticycle R R R W        100        50        75     4.0k
                   optistate R R R R        100       100       100     1.5k
paper   Qwen3-0.6B direct    W W W W          0         0         0
                   opticycle R W - W         50†        0        25†
                   optistate R W R W         50        50        50
        Qwen3-4B   direct    W W W W   (also in table1: table1's is used)
        Phi-4-reasoning direct R W W W 50 0 25; opticycle R R W W 100 0 50; optistate R R R W 100 50 75
figure4 Qwen3-8B   opticycle R W R W   50 50 50;  optistate R R W W  100 0 50
        ORLM-LLaMA-3-8B orlm W W R W   0 50 25
        StepORLM-Qwen3-8B direct R E W W   50† 0 25†
"""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.reporting.paper import SweepData

ANSWERS = {"mamo_easy": AnswerKey("mamo_easy", {"e1": 10.0, "e2": 20.0}),
           "nl4opt": AnswerKey("nl4opt", {"n1": 30.0, "n2": 40.0})}
CELLS = [("mamo_easy", "e1"), ("mamo_easy", "e2"), ("nl4opt", "n1"), ("nl4opt", "n2")]
GRADING = {"mamo_easy": "optagentbench", "nl4opt": "optagentbench"}
META = {"Qwen3-0.6B": {"family": "Qwen3", "size_b": 0.6}, "Qwen3-4B": {"family": "Qwen3", "size_b": 4},
        "Qwen3-8B": {"family": "Qwen3", "size_b": 8}}

TABLE1 = {("Qwen3-4B", "direct"): "RWRW", ("Qwen3-4B", "cafa"): "RRWW", ("Qwen3-4B", "opticycle"): "RRRW",
          ("Qwen3-4B", "optistate"): "RRRR"}
PAPER = {("Qwen3-0.6B", "direct"): "WWWW", ("Qwen3-0.6B", "opticycle"): "RW-W", ("Qwen3-0.6B", "optistate"): "RWRW",
         ("Qwen3-4B", "direct"): "WWWW", ("Phi-4-reasoning", "direct"): "RWWW",
         ("Phi-4-reasoning", "opticycle"): "RRWW", ("Phi-4-reasoning", "optistate"): "RRRW"}
FIGURE4 = {("Qwen3-8B", "opticycle"): "RWRW", ("Qwen3-8B", "optistate"): "RRWW",
           ("ORLM-LLaMA-3-8B", "orlm"): "WWRW", ("StepORLM-Qwen3-8B", "direct"): "REWW"}
TOKENS = {"opticycle": (3000, 1000)}  # prompt, completion; every other method (1000, 500)


def rows_and_plan(sweep: str, spec: dict[tuple[str, str], str], *, match: str | None = None,
                  extra_problem: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ledger rows (every LEDGER_SCHEMA column the report reads) and plan rows of one sweep;
    ``match``: the budgets JSON says ``budgets.match`` (e.g. ``tokens=8000``)."""
    rows, plan = [], []
    cells = CELLS + ([("nl4opt", "n3")] if extra_problem else [])
    for (model, method), outcomes in spec.items():
        for (bench, pid), o in zip(cells, outcomes + ("W" if extra_problem else "")):
            key = f"{sweep}/{model}/{method}/{bench}/{pid}/0"
            plan.append({"key": key, "model": model, "method": method, "benchmark": bench, "problem_id": pid,
                         "sample": 0})
            if o == "-":
                continue
            answer = ANSWERS[bench].answers.get(pid, 1.0)
            sub = None if o == "E" else (answer if o == "R" else float(answer) + 5)
            pt, ct = TOKENS.get(method, (1000, 500))
            budgets: dict[str, Any] = {"max_calls": 16, "max_total_tokens": 400000}
            if match:
                kind, _, value = match.partition("=")
                budgets.update(match=kind, match_to=value,
                               **({"max_total_tokens": int(value)} if kind == "tokens" else {"max_calls": int(value)}))
            rows.append({"key": key, "sweep": sweep, "model": model, "method": method, "benchmark": bench,
                         "problem_id": pid, "sample": 0, "seed": 42,
                         "status": "error" if o == "E" else "submitted",
                         "submission": None if sub is None else json.dumps(sub), "correct": o == "R",
                         "grading_profile": "optagentbench", "prompt_tokens": None if o == "E" else pt,
                         "completion_tokens": None if o == "E" else ct, "simulated": True,
                         "error": "worker lost" if o == "E" else None, "attempts": 1, "fingerprint": "f",
                         "budgets": json.dumps(budgets), "calls": "[]", "execs": "[]", "transcript": "[]"})
    return rows, plan


def sweep(name: str, spec: dict[tuple[str, str], str], grading: dict[str, str] | None = None,
          with_keys: bool = True, **kw: Any) -> SweepData:
    rows, plan = rows_and_plan(name, spec, **kw)
    return SweepData(name=name, plan=pd.DataFrame(plan), rows=pd.DataFrame(rows), grading=grading or GRADING,
                     answer_keys=ANSWERS if with_keys and not kw.get("extra_problem") else {})


def three() -> list[SweepData]:
    return [sweep("table1", TABLE1), sweep("paper", PAPER), sweep("figure4", FIGURE4)]
