"""Audit the answer keys: which to trust, from the evidence in one or more ledgers (docs/audit.md).

    opteval audit sweep.name=A [sweep.name=B ...] [sweep.output_dir=DIR] [--ledger DIR ...]
                  [--benchmarks b1,b2] --out DIR [thresholds]

Reads the ledgers (sweeps, and published runs regraded with ``opteval regrade --ledger``) column by
column and batch by batch (never the transcripts), and writes ``DIR/audit.csv`` and
``DIR/audit.parquet`` (one row per benchmark and problem: key, verdict ok|suspect|unknown,
alternative, evidence, support, why, ...) and ``DIR/audit.md`` (a summary per benchmark, the variant
match counts and a few worked examples). ``--benchmarks`` audits those benchmarks too (with no
ledger: the ``variants`` evidence alone). Evidence: ``variants`` (the original and ``@sirl`` keys of
the same problem, matched by content), ``consensus`` (solve-sourced answers agreeing off the key),
``reference`` (the reference's formulation solved off the key).

Options:
    --ledger DIR            a ledger directory (<output_dir>/<sweep name>); repeatable
    --benchmarks b1,b2      benchmarks to audit besides the ledgers' own
    --out DIR               where audit.csv, audit.parquet and audit.md go (required)
    --independence H        formulations | models | either (default either)
    --min-independent N     independent backers of the alternative (default 2)
    --min-trajectories N    solve-sourced trajectories behind it (default 3)
    --min-share X           its share of the solve-sourced answers (default 0.4; and the largest group)
    --max-key-share X       the key's share at or below which the key counts as unreached (default 0.1)
    --no-variants           skip the variants evidence

Exit 2 with one line on a bad argument, an absent ledger or benchmark file. No Ray import.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from opteval.evalcore.audit import (
    COLUMNS,
    EVIDENCE_KINDS,
    LEDGER_COLUMNS,
    VERDICTS,
    AuditRow,
    AuditSettings,
    Collector,
    VariantReport,
    audit,
    invert,
    parse_key,
    rows_as_dicts,
    summary,
    variant_report,
)
from opteval.evalcore.problems import REGISTRY, BenchmarkLoadError, data_dir, load_benchmark
from opteval.jobs.args import JobParser, UsageError, job_parser, parse, usage_error
from opteval.jobs.report import check_out_dir
from opteval.sweepcore.config import ConfigError, load_config
from opteval.sweepcore.ledger import Ledger, LedgerError

VALUED = ("--ledger", "--benchmarks", "--out", "--independence", "--min-independent", "--min-trajectories",
          "--min-share", "--max-key-share")
FLAGS = ("--no-variants",)
EXAMPLES = 5  # worked examples per benchmark in audit.md


def build_parser() -> JobParser:
    """``opteval audit``'s line: the flags by name (``opts["--out"]``; ``--ledger`` repeats), the
    rest the sweep names and overrides."""
    parser = job_parser("audit", __doc__ or "")
    for flag in FLAGS:
        parser.add_argument(flag, dest=flag, action="store_true")
    for flag in VALUED:
        if flag == "--ledger":
            parser.add_argument(flag, dest=flag, action="append", default=None)
        else:
            parser.add_argument(flag, dest=flag)
    return parser


def parse_line(argv: list[str]) -> tuple[dict[str, Any], list[str], list[str]] | None:
    """(options, sweep names, other dotlist items); --ledger may repeat. None: --help was printed."""
    args = parse(build_parser(), argv)
    if args is None:
        return None
    opts, dotlist = vars(args), args.overrides
    opts["--ledger"] = opts["--ledger"] or []
    names: list[str] = []
    rest: list[str] = []
    for arg in dotlist:
        name, _, value = arg.partition("=")
        if name == "sweep.name":
            names += [n for n in value.split(",") if n]
        else:
            rest.append(arg)
    if not opts.get("--out"):
        raise UsageError("--out DIR is required (audit.csv, audit.parquet and audit.md go there)")
    return opts, names, rest


def settings(opts: dict[str, Any]) -> AuditSettings:
    kw: dict[str, Any] = {}
    for flag, field_, kind in (("--independence", "independence", str), ("--min-independent", "min_independent", int),
                               ("--min-trajectories", "min_trajectories", int), ("--min-share", "min_share", float),
                               ("--max-key-share", "max_key_share", float)):
        if opts.get(flag) is not None:
            try:
                kw[field_] = kind(opts[flag])
            except ValueError:
                raise UsageError(f"{flag} takes {'an integer' if kind is int else 'a number'}, got {opts[flag]!r}") \
                    from None
    try:
        return AuditSettings(**kw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def open_ledgers(names: list[str], dirs: list[str], rest: list[str]) -> tuple[list[Ledger], Any]:
    cfg = load_config(rest + ([f"sweep.name={names[0]}"] if names else []))
    ledgers = [Ledger.open_existing(cfg.sweep.output_dir, n) for n in names]
    for d in dirs:
        p = Path(d).expanduser()
        ledgers.append(Ledger.open_existing(str(p.parent.resolve()), p.name))
    return ledgers, cfg


def load_keys(slugs: list[str], data: Any) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
    """Parsed keys and questions per benchmark; an absent benchmark file is a usage error."""
    keys, questions = {}, {}
    for slug in slugs:
        try:
            specs, key = load_benchmark(slug, data)
        except (BenchmarkLoadError, LookupError, OSError) as exc:
            raise UsageError(f"benchmark {slug!r}: {exc}") from None
        keys[slug] = {pid: parse_key(v) for pid, v in key.answers.items()}
        questions[slug] = {s.id: s.question for s in specs}
    return keys, questions


def variant_reports(slugs: list[str], data: Any) -> tuple[dict[str, tuple[str, dict[str, Any], VariantReport]],
                                                           list[str]]:
    """Each audited benchmark that has a pinned counterpart (``x`` and ``x@sirl``) with its data."""
    out: dict[str, tuple[str, dict[str, Any], VariantReport]] = {}
    notes = []
    done: dict[str, VariantReport] = {}
    for slug in slugs:
        base = slug.removesuffix("@sirl")
        other = base if slug.endswith("@sirl") else f"{base}@sirl"
        if other not in REGISTRY or base not in REGISTRY:
            continue
        try:
            keys, questions = load_keys([base, f"{base}@sirl"], data)
        except UsageError as exc:
            notes.append(f"no variants evidence for {slug}: {exc}")
            continue
        if base not in done:
            done[base] = variant_report(base, f"{base}@sirl", questions[base], keys[base], questions[f"{base}@sirl"],
                                        keys[f"{base}@sirl"])
        rep = done[base] if slug == base else invert(done[base])
        out[slug] = (other, keys[other], rep)
    return out, notes


def markdown(rows: list[AuditRow], variants: dict[str, tuple[str, dict[str, Any], VariantReport]],
             s: AuditSettings, sources: list[str], notes: list[str]) -> str:
    lines = ["# Answer-key audit", "", f"Ledgers: {', '.join(sources) or 'none (variants evidence only)'}.", "",
             f"Consensus thresholds: independence={s.independence}, min_independent={s.min_independent}, "
             f"min_trajectories={s.min_trajectories}, min_share={s.min_share}, max_key_share={s.max_key_share} "
             "(docs/audit.md says what each trades).", "",
             "| benchmark | problems | " + " | ".join(VERDICTS) + " | " + " | ".join(EVIDENCE_KINDS) + " |",
             "|---|" + "---:|" * (1 + len(VERDICTS) + len(EVIDENCE_KINDS))]
    for bench, c in summary(rows).items():
        lines.append(f"| {bench} | {c['problems']} | " + " | ".join(str(c[v]) for v in VERDICTS) + " | "
                     + " | ".join(str(c[k]) for k in EVIDENCE_KINDS) + " |")
    if variants:
        lines += ["", "## Variants matched by content", "",
                  "| benchmark | counterpart | matched (same data) | changed (other data) | ambiguous | no counterpart "
                  "| near-duplicates keyed differently |", "|---|---|---:|---:|---:|---:|---:|"]
        for bench, (other, _keys, rep) in variants.items():
            c = rep.counts()
            dups = sum(1 for b, *_ in rep.duplicates if b == bench)
            lines.append(f"| {bench} | {other} | {c['matched']} | {c['changed']} | {c['ambiguous']} | "
                         f"{c['no_counterpart']} | {dups} |")
    lines += ["", "## Worked examples (suspect keys)", ""]
    for bench in dict.fromkeys(r.benchmark for r in rows):
        sus = [r for r in rows if r.benchmark == bench and r.verdict == "suspect"]
        sus.sort(key=lambda r: (-len(r.evidence.split(",")), -r.support_trajectories))
        for r in sus[:EXAMPLES]:
            lines.append(f"- {bench} {r.problem_id}: key {r.key}, alternative {r.alternative} "
                         f"({r.evidence}): {r.why}")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def write(rows: list[AuditRow], out: Path, md: str) -> list[Path]:
    # deferred: pyarrow.csv only for audit.csv (pa, pq are loaded)
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    data = rows_as_dicts(rows)
    ints = {"support_trajectories", "support_models", "support_formulations", "key_trajectories",
            "solved_trajectories", "trajectories"}
    schema = pa.schema([(c, pa.int64() if c in ints else pa.string()) for c in COLUMNS])
    table = pa.table({c: [d[c] for d in data] for c in COLUMNS}, schema=schema)
    paths = [out / "audit.parquet", out / "audit.csv", out / "audit.md"]
    pq.write_table(table, paths[0])
    pacsv.write_csv(table, paths[1])
    paths[2].write_text(md, encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    try:
        line = parse_line(argv)
        if line is None:
            return 0
        opts, names, rest = line
        s = settings(opts)
        out = Path(opts["--out"])
        check_out_dir(out, what="the audit")
        ledgers, cfg = open_ledgers(names, opts["--ledger"], rest)
        if not ledgers and not opts.get("--benchmarks"):
            raise UsageError("nothing to audit: name a sweep (sweep.name=A), a --ledger DIR or --benchmarks b1,b2")
        data = data_dir(cfg.data.dir)
        collector = Collector()
        for led in ledgers:
            for batch in led.scan([c for c in LEDGER_COLUMNS], batch_rows=65536):
                collector.add_batch(batch)
        slugs = list(dict.fromkeys([b for b, _ in collector.problems]
                                   + [b for b in (opts.get("--benchmarks") or "").split(",") if b]))
        keys, _questions = load_keys(slugs, data)
        variants, notes = ({}, []) if opts["--no-variants"] else variant_reports(slugs, data)
    except (ConfigError, LedgerError, UsageError) as exc:
        return usage_error(exc, prefix="audit: error: ")
    unknown = sorted({pid for b, pid in collector.problems if pid not in keys.get(b, {})})
    if unknown:
        notes.append(f"{len(unknown)} problem id(s) in the ledgers are not in their benchmark's key (ignored): "
                     + ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else ""))
    rows = audit(keys, collector, s, variants)
    sources = [led.uri for led in ledgers]
    md = markdown(rows, variants, s, sources, notes)
    paths = write(rows, out, md)
    print(md, end="")
    print(f"audited {len(rows)} problems from {collector.rows} ledger rows in {time.perf_counter() - t0:.1f} s; "
          f"written to {out} ({', '.join(p.name for p in paths)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
