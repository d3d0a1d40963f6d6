"""Re-grade published outputs through the real sandbox.

    python jobs/regrade.py --completions C.jsonl --answers A.jsonl \\
        --extraction orlm --grading orlm [--workers N] [--wall-s S] [--details OUT.jsonl]

``C`` (JSONL or Parquet, read by ``opteval.evalcore.models.replay.load_records``): rows
``{"id", "completion", "sample"?}``. ``A`` (JSONL): rows ``{"id", "answer"}``, the answer
a number or a status word (``No Best Solution``, ``infeasible``, ...). Every completion
is extracted with the ``--extraction`` profile, run once in ``opteval.evalcore.sandbox`` (a
thread pool of ``--workers``), and graded with ``opteval.evalcore.grading.grade``.

Output (stdout), one line per failure reason, always all of them in this order, then
the accuracy line last::

    no_code <n>        the profile found no program in the completion
    exec_error <n>     the program did not finish cleanly and left no submission
    no_submission <n>  it ran, but submitted nothing
    unparseable <n>    it submitted something that is neither a number nor a status
    wrong <n>          graded wrong
    correct_solve <n>      of the correct: the answer is a solve's objective (or status)
    correct_unsolved <n>   of the correct: submitted without a matching solve (issue 36)
    accuracy <correct>/<n> = <pct>%

``n`` counts completions (samples), not problems. Why each ``exec_error`` and
``no_submission`` happened (the program's error, the missing coptpy model, no
``submit`` call) goes to stderr (the first few) and to ``--details`` (every one, key
``why``; and the verification keys ``answer_source``, ``fingerprint``, ``reference_match``,
``reference_feasible``, ``reference_violation``: ``opteval.evalcore.formulation``). Exit code 2 with
one line naming the file and line, or the ids, when an input is bad (not UTF-8, nested too
deeply, an integer over Python's 4300-digit limit, a directory, a damaged Parquet file) or a completion has no answer.

``--ledger DIR --model NAME --benchmark SLUG [--method NAME]`` also writes the results as a ledger
(``DIR`` = ``<output_dir>/<sweep name>``: the sweep ledger's schema, ``simulated=false``), which
``opteval report``, ``opteval view`` and ``opteval audit`` read beside sweeps (issue 37). The
completions' ids must then be the benchmark's own ids.
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

from opteval.evalcore.extraction import PROFILES as EXTRACTION_PROFILES
from opteval.evalcore.extraction import extract_code, extract_submission, missing_packages
from opteval.evalcore.formulation import Verification, verify
from opteval.evalcore.grading import PROFILES as GRADING_PROFILES
from opteval.evalcore.grading import grade, parse_submission
from opteval.evalcore.models.replay import ReplayFileError, ReplayRecord, jsonl_rows, load_records
from opteval.evalcore.sandbox import run_program
from opteval.evalcore.sandbox.types import Limits
from opteval.exit_codes import ExitCode

REASONS = ("no_code", "exec_error", "no_submission", "unparseable", "wrong")
SHOW_WHY = 5  # per reason, on stderr; --details has all

PROFILES_HELP = """\
extraction profiles: the completion format each expects

  submit   the LAST fenced python (or untagged) block is run; the program reports its
           answer by calling submit(value) (a number, "infeasible" or "unbounded").
           {"id": "p1", "completion": "Let x be ...\\n```python\\nimport pulp\\n...\\nsubmit(pulp.value(m.objective))\\n```"}

  orlm     as ORLM's eval/execute.py: the FIRST ```python block, then a footer that
           prints "Just print the best solution: <objval>" for the program's coptpy Model
           (the global `model`, else the last coptpy Model). Needs coptpy code: a PuLP or
           gurobipy program has no coptpy Model, so it ends as no_submission (the reason
           "orlm footer: no coptpy Model found" is shown).
           {"id": "p1", "completion": "```python\\nimport coptpy as cp\\nm = cp.Envr().createModel('m')\\n...\\nm.solve()\\n```"}

  stdout   the LAST fenced python block is run; the answer is the last objective line it
           prints, e.g. "Optimal objective value: 123.4", "Total cost = 5", or a line
           saying infeasible / unbounded. For programs written without submit().
           {"id": "p1", "completion": "```python\\n...\\nprint('Objective value:', pulp.value(m.objective))\\n```"}

answers file (JSONL): {"id": "p1", "answer": 123.4}  (or "infeasible", "No Best Solution", ...)
"""


class RegradeInputError(ValueError):
    """Bad input: the message names the file and line, or the ids concerned."""


@dataclass
class Verdict:
    id: str
    sample: int
    reason: str | None  # None = correct, else one of REASONS
    submission: Any = None
    outcome: str | None = None
    why: str | None = None  # for exec_error / no_submission: the program's error or what was missing
    verification: Verification | None = None  # answer_source, fingerprint, reference_* (issue 36)


def _why(result: Any, extraction: str) -> str:
    """One line saying why a run left no submission: the program's last stderr line, the
    sandbox note, or what the profile looked for and did not find."""
    err = [ln.strip() for ln in (result.stderr or "").splitlines() if ln.strip()]
    parts = []
    if result.outcome != "ok":
        parts.append(f"outcome {result.outcome}" + (f" ({result.note})" if result.note else ""))
    if err:
        parts.append(err[-1][:300])
    elif result.ok:
        parts.append({"submit": "the program never called submit(...)",
                      "orlm": "stdout has no 'Just print the best solution:' line",
                      "stdout": "stdout has no objective line"}.get(extraction, "nothing submitted"))
    return "; ".join(parts) or "no output"


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
    verdict = Verdict(record.id, record.sample, None, raw, result.outcome,
                      verification=verify([result], parse_submission(raw), grading))
    if raw is None:
        verdict.reason = "no_submission" if result.ok else "exec_error"
        verdict.why = _why(result, extraction)
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
    sources = Counter(v.verification.answer_source for v in verdicts if v.reason is None and v.verification)
    return [f"{reason} {counts.get(reason, 0)}" for reason in REASONS] + [
        f"correct_solve {sources.get('solve', 0)}", f"correct_unsolved {sources.get('unsolved', 0)}",
        f"accuracy {correct}/{n} = {pct:.2f}%"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=PROFILES_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--completions", required=True, type=Path,
                        help="JSONL or Parquet: rows {id, completion, sample?} (formats below)")
    parser.add_argument("--answers", required=True, type=Path, help="JSONL: rows {id, answer}")
    parser.add_argument("--extraction", default="submit", choices=sorted(EXTRACTION_PROFILES),
                        help="how a completion becomes a program and its answer (see below)")
    parser.add_argument("--grading", default="optagentbench", choices=sorted(GRADING_PROFILES))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--wall-s", type=float, default=None, help="per-program wall limit (Limits default if unset)")
    parser.add_argument("--details", type=Path, default=None, help="write one JSON line per completion here")
    parser.add_argument("--ledger", type=Path, default=None,
                        help="also write the results as a ledger here (<output_dir>/<sweep name>)")
    parser.add_argument("--model", default=None, help="with --ledger: the model that wrote the completions")
    parser.add_argument("--benchmark", default=None, help="with --ledger: the benchmark slug the ids belong to")
    parser.add_argument("--method", default="published", help="with --ledger: the method column (default published)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_input(args.completions)
        check_input(args.answers, jsonl_only=True)
        check_writable(args.details, "--details")
        if args.ledger is not None and not (args.model and args.benchmark):
            raise RegradeInputError("--ledger needs --model NAME and --benchmark SLUG (the ledger's columns)")
        missing = missing_packages(args.extraction)
        if missing:
            raise RegradeInputError(missing)
        records = load_records(args.completions)
        answers = load_answers(args.answers)
        if not records:
            raise RegradeInputError(f"{args.completions}: no completions")
        limits = Limits(wall_s=args.wall_s, cpu_s=args.wall_s) if args.wall_s else Limits()
        verdicts = regrade(records, answers, args.extraction, args.grading, args.workers, limits)
    except (RegradeInputError, ReplayFileError) as exc:
        print(f"regrade: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except (ValueError, RecursionError, OSError) as exc:  # a reader's own error: still one line
        print(f"regrade: error: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return ExitCode.USAGE
    if args.details:
        with args.details.open("w", encoding="utf-8") as fh:
            for v in verdicts:
                fh.write(json.dumps({"id": v.id, "sample": v.sample, "reason": v.reason or "correct",
                                     "submission": _jsonable(v.submission), "outcome": v.outcome,
                                     "why": v.why, **_verification_keys(v)}) + "\n")
    if args.ledger is not None:
        # deferred: only --ledger writes a ledger (pyarrow, omegaconf)
        from opteval.jobs.regrade_ledger import write_ledger
        from opteval.sweepcore.ledger import LedgerError

        try:
            n = write_ledger(args.ledger, verdicts, records, model=args.model, method=args.method,
                             benchmark=args.benchmark, profile=args.grading, extraction=args.extraction,
                             source=str(args.completions))
        except (LedgerError, OSError) as exc:
            print(f"regrade: error: --ledger {args.ledger}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            return ExitCode.USAGE
        print(f"regrade: ledger {args.ledger}: {n} rows committed (model {args.model}, benchmark {args.benchmark})",
              file=sys.stderr)
    for line in why_lines(verdicts):
        print(line, file=sys.stderr)
    unused = len(set(answers) - {r.id for r in records})
    if unused:
        print(f"regrade: note: {unused} answer(s) have no completion (not counted)", file=sys.stderr)
    for line in summary_lines(verdicts):
        print(line)
    return 0


def why_lines(verdicts: list[Verdict]) -> list[str]:
    """The first few reasons behind exec_error and no_submission (stderr; --details has all)."""
    out = []
    for reason in ("exec_error", "no_submission"):
        hit = [v for v in verdicts if v.reason == reason]
        for v in hit[:SHOW_WHY]:
            out.append(f"regrade: {reason} {v.id} (sample {v.sample}): {v.why}")
        if len(hit) > SHOW_WHY:
            out.append(f"regrade: ... {len(hit) - SHOW_WHY} more {reason} (see --details)")
    return out


def check_input(path: Path, jsonl_only: bool = False) -> None:
    """Validate an input file before it is parsed, so every problem names the file and line:
    a directory, bytes that are not UTF-8, JSON nested too deeply or holding an integer
    over Python's digit limit, a Parquet file that cannot be read."""
    if not path.exists():
        raise RegradeInputError(f"{path}: no such file")
    if path.is_dir():
        raise RegradeInputError(f"{path}: is a directory, expected a file")
    if not jsonl_only and path.suffix in (".parquet", ".pq"):
        # deferred: pyarrow only for a Parquet input; JSONL needs none
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pq.read_table(path)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise RegradeInputError(f"{path}: not a readable Parquet file ({' '.join(str(exc).split())[:200]})") from None
        return
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise RegradeInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RegradeInputError(f"{path}:{lineno}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                        f"{exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                json.loads(line)
            except json.JSONDecodeError:
                continue  # reported by the parser with its column
            except RecursionError:
                raise RegradeInputError(f"{path}:{lineno}: JSON nested too deeply") from None
            except ValueError as exc:  # e.g. an integer over the 4300-digit conversion limit
                raise RegradeInputError(f"{path}:{lineno}: bad JSON value ({' '.join(str(exc).split())[:160]})") \
                    from None


def check_writable(path: Path | None, flag: str) -> None:
    """An output file must be creatable before the work starts (not a traceback at the end)."""
    if path is None:
        return
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise RegradeInputError(f"{flag} {path}: cannot be written ({exc.strerror or exc})") from None


def _verification_keys(v: Verdict) -> dict[str, Any]:
    """The pinned issue-36 keys; a completion with no program has no solve and no submission."""
    if v.verification is None:
        return Verification("no_submission", reason="no program").columns()
    return v.verification.columns()


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, type(None))) else repr(value)


if __name__ == "__main__":
    sys.exit(main())
