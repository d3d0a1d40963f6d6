"""Print one trajectory readably: its grade and why, every model call, every program and its output.

    opteval show KEY sweep.name=NAME [sweep.output_dir=DIR] [--width N]

KEY is a ledger key or any unique prefix of one, e.g. ``sim-small/direct/sample/sample-0001/0``
(model/method/benchmark/problem/sample); a planned key never committed shows as missing. The same
reading as ``opteval view``'s trajectory page. No Ray import.
"""
from __future__ import annotations

import sys
import textwrap
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.formulation import verification_lines
from opteval.jobs.args import JobParser, UsageError, job_parser, parse, usage_error
from opteval.jobs.report import answer_keys
from opteval.sweepcore.config import ConfigError, load_config
from opteval.sweepcore.ledger import Ledger, LedgerError
from opteval.sweepcore.ledger.models import read_model

MAX_LISTED = 10


def find(rows: Any, key: str) -> Any:
    """The one row whose key is ``key`` or starts with it; a usage error naming the candidates otherwise."""
    exact = rows[rows["key"] == key]
    if len(exact):
        return exact.iloc[-1]
    hits = rows[rows["key"].str.startswith(key)]
    if len(hits) == 1:
        return hits.iloc[0]
    if not len(hits):
        raise UsageError(f"no trajectory key starts with {key!r} (keys read model/method/benchmark/problem/sample/…; "
                         "opteval view lists them all)")
    listed = "\n  ".join(hits["key"].head(MAX_LISTED))
    more = f"\n  ... and {len(hits) - MAX_LISTED} more" if len(hits) > MAX_LISTED else ""
    raise UsageError(f"{len(hits)} trajectory keys start with {key!r}; give more of it:\n  {listed}{more}")


def locate(ledger: Ledger, key: str) -> Any:
    """``find`` over the committed and planned keys, then only that trajectory read whole: the keys
    of a paper-sized sweep are tens of MB, its transcripts tens of GB (issue 44)."""
    # deferred: importing this job stays light (reporting: matplotlib, scipy)
    from opteval.evalcore.reporting.view import rows_with_missing

    plan = ledger.read_plan()
    columns = [ledger.read_table(columns=["key"]).column("key")] + ([plan.column("key")] if plan is not None else [])
    keys = pa.chunked_array([c.cast(pa.string()) for col in columns for c in col.chunks], pa.string())
    hits = pc.unique(keys.filter(pc.starts_with(keys, key)))
    chosen = str(find(pd.DataFrame({"key": pd.Series(hits.to_pylist(), dtype=object)}), key)["key"])
    one = pc.field("key") == chosen
    return find(rows_with_missing(ledger.read_table(filter=one), None if plan is None else plan.filter(one)), chosen)


def render(d: Any, width: int = 100) -> str:
    """The terminal form of a :class:`opteval.evalcore.reporting.view.Detail`."""
    rule = "-" * width
    fmt = lambda v: "?" if v is None else str(v)  # noqa: E731
    lines = [f"{d.model} · {d.method} · {d.benchmark}/{d.problem_id} · sample {d.sample}", f"key {d.key}",
             f"status {d.status} · correct {'yes' if d.correct else 'no'} · submission {fmt(d.submission)} · "
             f"answer {fmt(d.answer)}",
             f"tokens in/out {fmt(d.prompt_tokens)}/{fmt(d.completion_tokens)} · calls {d.n_calls} · "
             f"execs {d.n_execs} · time {fmt(None if d.wall_s is None else round(d.wall_s, 2))} s",
             *textwrap.wrap(f"grade: {d.why}", width)]
    for c in d.calls:
        lines += [rule, f"call {c.index} · turn {c.turn} · {c.purpose}" + (f" · stage {c.stage}" if c.stage else "")
                  + f" · finish {fmt(c.finish_reason)} · tokens {fmt(c.prompt_tokens)}/{fmt(c.completion_tokens)}"]
        for m in c.messages:
            lines += [f"[{m.get('role', '?')}]", str(m.get("content", ""))]
        lines += ["[reply]", c.reply]
    for e in d.execs:
        lines += [rule, f"execution {e.index} · turn {e.turn} · outcome {e.outcome}"
                  + (f" · exit {e.exit_code}" if e.exit_code is not None else "")
                  + (f" · submitted {e.submission}" if e.submission is not None else "")]
        lines += ["[program]", e.code] if e.code else ["[program text not recorded]"]
        if e.stdout:
            lines += ["[output]", e.stdout.rstrip()]
        if e.stderr:
            lines += ["[error output]", e.stderr.rstrip()]
    return "\n".join(lines)


def build_parser() -> JobParser:
    """``opteval show``'s line: ``--width``, then KEY and the overrides in one positional list
    (KEY: the one word without ``=``). ``--width`` with no value is the bad value ``''``."""
    parser = job_parser("show", __doc__ or "")
    parser.add_argument("--width", nargs="?", const="", default="100")
    return parser


def main(argv: list[str] | None = None) -> int:
    # deferred: importing this job stays light (reporting: matplotlib, scipy)
    from opteval.evalcore.reporting.view import detail
    from opteval.evalcore.reporting.view.model import answer_text

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(build_parser(), argv)
        if args is None:
            return 0
        value = args.width
        if not value.isdigit() or int(value) < 20:
            raise UsageError(f"--width takes an integer >= 20, got {value!r}")
        width = int(value)
        dotlist = [a for a in args.overrides if "=" in a]
        keys = [a for a in args.overrides if "=" not in a]
        if len(keys) != 1:
            raise UsageError("give exactly one trajectory KEY (or a unique prefix of one); opteval show --help")
        cfg = load_config(dotlist)
        ledger = Ledger.open_existing(cfg.sweep.output_dir, cfg.sweep.name)
        row = locate(ledger, keys[0])
    except (ConfigError, LedgerError, UsageError) as exc:
        return usage_error(exc)
    answers = answer_keys(cfg, [str(row["benchmark"])])
    print(render(detail(row.to_dict(), answer_text(answers, str(row["benchmark"]), str(row["problem_id"]))), width))
    fp = row.get("model_fingerprint")
    for line in verification_lines(row.to_dict(), read_model(ledger, fp) if isinstance(fp, str) else None):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
