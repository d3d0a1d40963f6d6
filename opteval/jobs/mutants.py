"""Hard negatives for a semantic reward model: mutants of faithful programs (SemOPT 3.1).

    python jobs/mutants.py [--programs P.jsonl] --out PAIRS.jsonl \\
        [--ops flip_sense,drop_constraint,...] [--per-program L] [--seed S] [--workers N] [--wall-s S]

``P`` rows ``{"id", "question", "code"}`` (faithful programs that call ``submit``); without
``--programs``, the embedded sample benchmark's reference programs. For every program, ``L``
operators (default: all of ``opteval.evalcore.mutation.MUTATION_OPS``, in a seeded order) are each
injected independently; the original and every mutant run in ``opteval.evalcore.sandbox``. A mutant
is kept only when it runs, submits a number (paper: candidates that fail or are judged
infeasible are discarded) and that number differs from the original's beyond the
``optagentbench`` tolerance. Each kept mutant is one JSON line::

    {"problem_id", "problem", "faithful", "mutant", "operator", "faithful_result", "mutant_result"}

A program whose own run submits no number (it fails, or its answer is a status such as
``infeasible``) is skipped and counted. Printed (stdout), one line
each: ``programs <n>``, ``originals_not_numeric <n>``, ``not_applicable <n>``, ``failed <n>``
(mutant did not run or submitted no number), ``same_result <n>``, ``pairs <n>``, then
``op <name> tried <n> kept <n>`` per operator. Bad input: one line naming the file and line
(or the flag), exit 2.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opteval.evalcore.grading import grade, parse_submission
from opteval.evalcore.models.replay import jsonl_rows
from opteval.evalcore.mutation import MUTATION_OPS, apply_operator
from opteval.evalcore.sandbox import run_program
from opteval.evalcore.sandbox.types import Limits
from opteval.exit_codes import ExitCode

COUNTS = ("programs", "originals_not_numeric", "not_applicable", "failed", "same_result", "pairs")


class MutantsInputError(ValueError):
    """Bad input: the message names the file and line, or the flag."""


@dataclass(frozen=True)
class Program:
    id: str
    question: str
    code: str


def load_programs(path: Path | None) -> list[Program]:
    """Programs from a JSONL file (``id``, ``question``, ``code``), else the sample benchmark's."""
    if path is None:
        # deferred: only without --programs (the embedded sample's)
        from opteval.evalcore.data import load_sample_rows, reference_program

        return [Program(r["id"], r["question"], src) for r in load_sample_rows()
                if (src := reference_program(r["id"]))]
    if not path.is_file():
        raise MutantsInputError(f"{path}: no such file")
    out: list[Program] = []
    seen: set[str] = set()
    for where, row in jsonl_rows(path, MutantsInputError):
        if not isinstance(row, dict):
            raise MutantsInputError(f"{where}: expected a JSON object with keys 'id', 'question', 'code'")
        bad = [k for k in ("id", "question", "code") if not isinstance(row.get(k), str) or not row.get(k)]
        if bad:
            raise MutantsInputError(f"{where}: missing or non-string key(s) {bad}")
        if row["id"] in seen:
            raise MutantsInputError(f"{where}: duplicate id {row['id']!r}")
        seen.add(row["id"])
        out.append(Program(row["id"], row["question"], row["code"]))
    if not out:
        raise MutantsInputError(f"{path}: no programs")
    return out


def numeric_result(code: str, limits: Limits) -> Any:
    """What the program submitted when it ran cleanly and submitted a number, else None."""
    result = run_program(code, limits)
    if not result.ok or result.submission is None:
        return None
    parsed = parse_submission(result.submission)
    return result.submission if isinstance(parsed, float) else None


def mutants_of(program: Program, ops: tuple[str, ...], per_program: int, seed: int,
               limits: Limits) -> tuple[list[dict[str, Any]], Counter]:
    """(pairs, counts) for one program; every random choice is seeded by (seed, id)."""
    counts: Counter = Counter(programs=1)
    original = numeric_result(program.code, limits)
    if original is None:
        counts["originals_not_numeric"] += 1
        return [], counts
    rng = random.Random(f"{seed}\x1f{program.id}")
    chosen = rng.sample(list(ops), min(per_program, len(ops)))
    pairs = []
    for op in chosen:
        counts[f"tried:{op}"] += 1
        mutant = apply_operator(program.code, op, random.Random(f"{seed}\x1f{program.id}\x1f{op}"))
        if mutant is None:
            counts["not_applicable"] += 1
            continue
        value = numeric_result(mutant, limits)
        if value is None:
            counts["failed"] += 1
        elif grade(value, original):
            counts["same_result"] += 1
        else:
            counts["pairs"] += 1
            counts[f"kept:{op}"] += 1
            pairs.append({"problem_id": program.id, "problem": program.question, "faithful": program.code,
                          "mutant": mutant, "operator": op, "faithful_result": original, "mutant_result": value})
    return pairs, counts


def parse_ops(text: str | None) -> tuple[str, ...]:
    if not text:
        return MUTATION_OPS
    ops = tuple(o.strip() for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in MUTATION_OPS]
    if bad or not ops:
        raise MutantsInputError(f"--ops: unknown operator(s) {bad or 'none given'}; known {list(MUTATION_OPS)}")
    return ops


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=Path, default=None,
                        help="JSONL of {id, question, code}; default: the sample benchmark")
    parser.add_argument("--out", type=Path, required=True, help="where the preference pairs go (JSONL)")
    parser.add_argument("--ops", default=None, help="comma-separated operators (default: all)")
    parser.add_argument("--per-program", type=int, default=len(MUTATION_OPS), help="operators sampled per program (L)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--wall-s", type=float, default=None, help="per-run wall limit (Limits default if unset)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ops = parse_ops(args.ops)
        if args.per_program < 1:
            raise MutantsInputError(f"--per-program must be >= 1, got {args.per_program}")
        programs = load_programs(args.programs)
    except MutantsInputError as exc:
        print(f"mutants: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    limits = Limits(wall_s=args.wall_s, cpu_s=args.wall_s) if args.wall_s else Limits()
    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        results = list(pool.map(lambda p: mutants_of(p, ops, args.per_program, args.seed, limits), programs))
    total: Counter = Counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for pairs, counts in results:
            total.update(counts)
            for pair in pairs:
                fh.write(json.dumps(pair) + "\n")
    for name in COUNTS:
        print(f"{name} {total.get(name, 0)}")
    for op in ops:
        print(f"op {op} tried {total.get(f'tried:{op}', 0)} kept {total.get(f'kept:{op}', 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
