"""Write a sweep's results in formats other tools read.

    opteval export inspect sweep.name=X [sweep.output_dir=results] [--out DIR]
    opteval export lm-eval sweep.name=X [sweep.output_dir=results] [--out DIR]

``inspect``: one inspect_ai log per (model, method, benchmark) (``inspect view DIR`` opens them;
needs the extra ``opteval[inspect]``). ``lm-eval``: per (model, method) lm-evaluation-harness's
``results_<date>.json`` and ``samples_<benchmark>_<date>.jsonl``. Default ``--out``:
``<output_dir>/<sweep.name>/export/<format>``.
``batch-input``: every committed trajectory's recorded requests as one OpenAI batch-input file
(``requests.jsonl``, custom_id = trajectory key, one line per model call: ``#<call>`` appended
after the first) for ``vllm run-batch``; its output file reads back through ``opteval regrade``
or a replay model (``backend: replay``) for single-call methods. Only the ledger columns an exporter needs are
read (column projection). Exit 2 with one line on a bad sweep, format or option.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from opteval.evalcore.exports.cells import COLUMNS, group_cells
from opteval.evalcore.models.batch import request_row
from opteval.evalcore.problems import BenchmarkLoadError, data_dir, load_benchmark
from opteval.exit_codes import ExitCode
from opteval.jobs.args import JobParser, UsageError, help_asked, job_parser, parse, usage_error
from opteval.jobs.report import check_out_dir, default_out, no_plan_message
from opteval.sweepcore.config import ConfigError, SweepConfig, load_config
from opteval.sweepcore.ledger import Ledger, LedgerError
from opteval.sweepcore.tracking.params import git_revision

FORMATS = ("inspect", "lm-eval", "batch-input")


def benchmark_texts(cfg: SweepConfig, benchmarks: list[str]) -> tuple[dict[tuple[str, str], str],
                                                                      dict[tuple[str, str], Any]]:
    """Questions and answers per (benchmark, problem id), for lm-eval's doc and target hashes; a
    benchmark whose data is absent gets none (its hashes then cover the problem id alone)."""
    questions: dict[tuple[str, str], str] = {}
    answers: dict[tuple[str, str], Any] = {}
    for slug in benchmarks:
        try:
            specs, key = load_benchmark(slug, data_dir(cfg.data.dir))
        except (BenchmarkLoadError, LookupError, OSError) as exc:
            print(f"note: no data for {slug} ({exc}); its doc and target hashes omit the question and key",
                  file=sys.stderr)
            continue
        questions.update({(slug, s.id): s.question for s in specs})
        answers.update({(slug, pid): a for pid, a in key.answers.items()})
    return questions, answers


def write_batch_input(groups: dict[Any, list[Any]], out: Path, cfg: SweepConfig) -> Path:
    """``out/requests.jsonl``: each recorded call's messages and the sweep's sampling, in plan order."""
    path = out / "requests.jsonl"
    body = {"temperature": cfg.sampling.temperature, "top_p": cfg.sampling.top_p,
            "max_tokens": cfg.sampling.max_tokens}
    with path.open("w", encoding="utf-8") as fh:
        for (model, _, _), cells in groups.items():
            for cell in cells:
                for i, call in enumerate(cell.transcript()):
                    if isinstance(call, dict) and call.get("messages"):
                        custom_id = cell.key if i == 0 else f"{cell.key}#{i}"
                        fh.write(json.dumps(request_row(custom_id, model, call["messages"], body)) + "\n")
    return path


def build_parser() -> JobParser:
    """``opteval export FORMAT``'s line after FORMAT (the first word, read as a subcommand name is):
    ``--out`` and the sweep's overrides."""
    parser = job_parser("export", __doc__ or "")
    parser.add_argument("--out", dest="--out")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__.strip())
        return ExitCode.USAGE
    parser = build_parser()
    if help_asked(parser, argv):  # FORMAT itself may be --help
        return 0
    fmt, rest = argv[0], argv[1:]
    try:
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {fmt!r} (formats: {', '.join(FORMATS)})")
        args = parse(parser, rest)
        assert args is not None  # no --help in rest: help_asked answered it
        opts, dotlist = vars(args), args.overrides
        cfg = load_config(dotlist)
        ledger = Ledger.open_existing(cfg.sweep.output_dir, cfg.sweep.name)
        plan = ledger.read_plan()
        if plan is None:
            raise UsageError(no_plan_message(ledger))
        out = Path(opts["--out"]) if opts["--out"] else default_out(ledger, f"export/{fmt}")
        check_out_dir(out, what="")
        rows = ledger.read_table(columns=COLUMNS).to_pylist()
        if fmt == "inspect":
            try:
                import inspect_ai  # noqa: F401  # the optional extra: named in one line when absent

                # deferred: optional extra opteval[inspect] (checked just above)
                from opteval.evalcore.exports.inspect_log import write_logs
            except ImportError:
                raise UsageError("opteval export inspect needs inspect_ai: pip install 'opteval[inspect]'") from None
    except (ConfigError, LedgerError, UsageError) as exc:
        return usage_error(exc)
    groups = group_cells(plan.to_pylist(), rows)
    if fmt == "inspect":
        paths = write_logs(groups, cfg.sweep.name, out)
    elif fmt == "batch-input":
        paths = [write_batch_input(groups, out, cfg)]
    else:
        # deferred: only the lm-eval format needs it
        from opteval.evalcore.exports import lm_eval

        questions, answers = benchmark_texts(cfg, sorted({b for _, _, b in groups}))
        paths = lm_eval.write(groups, out, sweep=cfg.sweep.name, git_hash=git_revision(),
                              questions=questions, answers=answers,
                              config={"grading_profile": cfg.grading.profile})
    trajectories = sum(len(c) for c in groups.values())
    missing = sum(c.missing for cells in groups.values() for c in cells)
    print(f"{fmt} export written to {out.resolve()} ({len(paths)} files, {trajectories} trajectories, "
          f"{missing} missing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
