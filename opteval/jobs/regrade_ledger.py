"""``opteval regrade --ledger DIR --model NAME --benchmark SLUG``: the regraded published outputs as a
ledger (the sweep ledger's schema, ``simulated=false``, the model named), so ``opteval report``,
``opteval view`` and ``opteval audit`` read them beside sweeps (issue 37). Not a job: jobs/regrade.py
calls it. No Ray import."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from opteval.evalcore.grading import parse_submission
from opteval.evalcore.ledger_detail import error_struct
from opteval.evalcore.records import LEDGER_SCHEMA, STATUS_NO_SUBMISSION, STATUS_SUBMITTED, config_fingerprint, trajectory_key
from opteval.sweepcore.ledger import Ledger
from opteval.sweepcore.ledger.rows import _submission_text, verification_columns


def ledger_rows(verdicts: list[Any], completions: dict[tuple[str, int], str], *, sweep: str, model: str, method: str,
                benchmark: str, profile: str, extraction: str, fingerprint: str) -> list[dict[str, Any]]:
    """One ledger row per regraded completion; its completion is the transcript's one entry."""
    rows = []
    for v in verdicts:
        parsed = parse_submission(v.submission) if v.submission is not None else None
        value = float(parsed) if isinstance(parsed, (int, float)) and not isinstance(parsed, bool) else None
        row: dict[str, Any] = dict.fromkeys(LEDGER_SCHEMA.names)
        row.update(
            key=trajectory_key(sweep, model, method, benchmark, v.id, v.sample, fingerprint), sweep=sweep,
            model=model, method=method, benchmark=benchmark, problem_id=v.id, sample=int(v.sample), seed=None,
            status=STATUS_SUBMITTED if v.submission is not None else STATUS_NO_SUBMISSION,
            submission=_submission_text(v.submission), submission_value=value,
            submission_status=parsed if isinstance(parsed, str) else None, extraction=extraction,
            correct=v.reason is None, grading_profile=profile, n_calls=1, n_execs=0 if v.reason == "no_code" else 1,
            exec_ok=1 if v.outcome == "ok" else 0, first_exec_outcome=v.outcome, wall_s=0.0, simulated=False,
            error=error_struct(v.why, infrastructure=False, method=method), attempts=1, fingerprint=fingerprint,
            calls=[], execs=[], transcript=[{"published_completion": completions.get((v.id, v.sample), "")}],
            budgets={},
            **verification_columns(v.verification))
        rows.append(row)
    return rows


def write_ledger(directory: Path, verdicts: list[Any], records: list[Any], *, model: str, method: str,
                 benchmark: str, profile: str, extraction: str, source: str) -> int:
    """Write (or replace the rows of) the ledger ``directory`` = ``<output_dir>/<sweep name>``; returns
    the rows written. A rerun with the same inputs rewrites the same keys (refused by the ledger as
    duplicates), so a ledger directory holds one regrade: a second needs a new directory."""
    directory = directory.expanduser().resolve()
    sweep = directory.name
    config = {"regrade": {"model": model, "method": method, "benchmark": benchmark, "grading": profile,
                          "extraction": extraction, "completions": source},
              "grading": {"profile": profile}, "models": [model], "methods": [method], "benchmarks": [benchmark]}
    fingerprint = config_fingerprint(config)
    completions = {(r.id, r.sample): r.completion for r in records}
    rows = ledger_rows(verdicts, completions, sweep=sweep, model=model, method=method, benchmark=benchmark,
                       profile=profile, extraction=extraction, fingerprint=fingerprint)
    led = Ledger.open(str(directory.parent), sweep, config, fingerprint)
    try:
        done = led.committed_keys()
        led.record_plan([SimpleNamespace(key=r["key"], model=model, method=method, benchmark=benchmark,
                                         problem_id=r["problem_id"], sample=r["sample"]) for r in rows])
        new = [r for r in rows if r["key"] not in done]
        if new:
            led.commit(new)
    finally:
        led.close()
    return len(new)
