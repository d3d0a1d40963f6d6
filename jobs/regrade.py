"""Re-grade published outputs through the real sandbox.

    python jobs/regrade.py --completions C.jsonl --answers A.jsonl \\
        --extraction orlm --grading orlm [--workers N] [--wall-s S] [--details OUT.jsonl]

``C`` (JSONL or Parquet, read by ``evalcore.models.replay.load_records``): rows
``{"id", "completion", "sample"?}``. ``A`` (JSONL): rows ``{"id", "answer"}``, the answer
a number or a status word (``No Best Solution``, ``infeasible``, ...). Every completion
is extracted with the ``--extraction`` profile, run once in ``evalcore.sandbox`` (a
thread pool of ``--workers``), and graded with ``evalcore.grading.grade``.

Output (stdout), one line per failure reason, always all of them in this order, then
the accuracy line last::

    no_code <n>        the profile found no program in the completion
    exec_error <n>     the program did not finish cleanly and left no submission
    no_submission <n>  it ran, but submitted nothing
    unparseable <n>    it submitted something that is neither a number nor a status
    wrong <n>          graded wrong
    accuracy <correct>/<n> = <pct>%

``n`` counts completions (samples), not problems. Exit code 2 with a message naming
the file and line, or the ids, when an input is bad or a completion has no answer.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalcore.extraction import PROFILES as EXTRACTION_PROFILES, extract_code, extract_submission
from evalcore.grading import PROFILES as GRADING_PROFILES, grade, parse_submission
from evalcore.models.replay import ReplayFileError, ReplayRecord, jsonl_rows, load_records
from evalcore.sandbox import run_program
from evalcore.sandbox.types import Limits

REASONS = ("no_code", "exec_error", "no_submission", "unparseable", "wrong")


class RegradeInputError(ValueError):
    """Bad input: the message names the file and line, or the ids concerned."""


@dataclass
class Verdict:
    id: str
    sample: int
    reason: str | None  # None = correct, else one of REASONS
    submission: Any = None
    outcome: str | None = None


def load_answers(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise RegradeInputError(f"{path}: no such file")
    answers: dict[str, Any] = {}
    for where, row in jsonl_rows(path, RegradeInputError):
        if not isinstance(row, dict) or "id" not in row or "answer" not in row:
            raise RegradeInputError(f"{where}: expected an object with keys 'id' and 'answer'")
        problem_id = str(row["id"])
        if problem_id in answers:
            raise RegradeInputError(f"{where}: duplicate id {problem_id!r}")
        if parse_submission(row["answer"]) is None:
            raise RegradeInputError(
                f"{where}: answer {row['answer']!r} for id {problem_id!r} is neither a number nor a status"
            )
        answers[problem_id] = row["answer"]
    return answers


def regrade_one(record: ReplayRecord, expected: Any, extraction: str, grading: str, limits: Limits) -> Verdict:
    code = extract_code(record.completion, extraction)
    if code is None:
        return Verdict(record.id, record.sample, "no_code")
    result = run_program(code, limits)
    raw = extract_submission(result, extraction)
    verdict = Verdict(record.id, record.sample, None, raw, result.outcome)
    if raw is None:
        verdict.reason = "no_submission" if result.ok else "exec_error"
    elif parse_submission(raw) is None:
        verdict.reason = "unparseable"
    elif not grade(raw, expected, grading):
        verdict.reason = "wrong"
    return verdict


def regrade(
    records: list[ReplayRecord], answers: dict[str, Any], extraction: str, grading: str,
    workers: int = 4, limits: Limits | None = None,
) -> list[Verdict]:
    """Grade every record (in input order). Raises RegradeInputError if one has no answer."""
    missing = sorted({r.id for r in records if r.id not in answers})
    if missing:
        shown = ", ".join(repr(m) for m in missing[:20]) + (" ..." if len(missing) > 20 else "")
        raise RegradeInputError(f"{len(missing)} completion id(s) have no answer: {shown}")
    limits = limits or Limits()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(regrade_one, r, answers[r.id], extraction, grading, limits) for r in records]
        return [f.result() for f in futures]


def summary_lines(verdicts: list[Verdict]) -> list[str]:
    counts = Counter(v.reason for v in verdicts)
    n = len(verdicts)
    correct = counts.get(None, 0)
    pct = 100.0 * correct / n if n else 0.0
    return [f"{reason} {counts.get(reason, 0)}" for reason in REASONS] + [f"accuracy {correct}/{n} = {pct:.2f}%"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--completions", required=True, type=Path)
    parser.add_argument("--answers", required=True, type=Path)
    parser.add_argument("--extraction", default="submit", choices=sorted(EXTRACTION_PROFILES))
    parser.add_argument("--grading", default="optagentbench", choices=sorted(GRADING_PROFILES))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--wall-s", type=float, default=None, help="per-program wall limit (Limits default if unset)")
    parser.add_argument("--details", type=Path, default=None, help="write one JSON line per completion here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        records = load_records(args.completions)
        answers = load_answers(args.answers)
        if not records:
            raise RegradeInputError(f"{args.completions}: no completions")
        limits = Limits(wall_s=args.wall_s, cpu_s=args.wall_s) if args.wall_s else Limits()
        verdicts = regrade(records, answers, args.extraction, args.grading, args.workers, limits)
    except (RegradeInputError, ReplayFileError) as exc:
        print(f"regrade: error: {exc}", file=sys.stderr)
        return 2
    if args.details:
        with args.details.open("w", encoding="utf-8") as fh:
            for v in verdicts:
                fh.write(json.dumps({"id": v.id, "sample": v.sample, "reason": v.reason or "correct",
                                     "submission": _jsonable(v.submission), "outcome": v.outcome}) + "\n")
    unused = len(set(answers) - {r.id for r in records})
    if unused:
        print(f"regrade: note: {unused} answer(s) have no completion (not counted)", file=sys.stderr)
    for line in summary_lines(verdicts):
        print(line)
    return 0


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, type(None))) else repr(value)


if __name__ == "__main__":
    sys.exit(main())
