"""What an answer-key audit changes in a report (``opteval report --audit DIR``; issue 37).

Accuracy on trusted keys: the problems the audit calls ``suspect`` leave the numerator and the
denominator; everything else is as the report computes it (avg@k over the planned trajectories, a
missing score counts as wrong, macro = the mean of the benchmarks). The key sensitivity of a paired
comparison: its difference and interval recomputed on the trusted problems, flagged where the winner
or the significance changes. Pure: pandas in, tables and lines out."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opteval.evalcore.metrics import bootstrap_seed, paired_bootstrap

AUDIT_FILE = "audit.parquet"


class AuditFileError(ValueError):
    """The --audit directory has no readable audit.parquet with the pinned columns."""


def load_suspects(directory: str | Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], dict[str, str]]]:
    """(benchmark -> suspect problem ids, (benchmark, id) -> that row's evidence, alternative and why)."""
    # deferred: pyarrow only to read audit.parquet
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(directory) / AUDIT_FILE
    if not path.is_file():
        raise AuditFileError(f"--audit {directory}: no {AUDIT_FILE} (write one with opteval audit ... --out {directory})")
    try:
        df = pq.read_table(path, columns=["benchmark", "problem_id", "key", "verdict", "alternative", "evidence",
                                          "support", "why"]).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise AuditFileError(f"--audit {path}: cannot be read ({' '.join(str(exc).split())[:200]})") from None
    suspects: dict[str, set[str]] = {}
    detail: dict[tuple[str, str], dict[str, str]] = {}
    for r in df[df["verdict"] == "suspect"].to_dict("records"):
        suspects.setdefault(r["benchmark"], set()).add(r["problem_id"])
        detail[(r["benchmark"], r["problem_id"])] = {k: r[k] for k in ("key", "alternative", "evidence", "support",
                                                                        "why")}
    return suspects, detail


def _grades(table: Any, plan: Any) -> dict[tuple[str, str, str], dict[str, list[bool]]]:
    """(model, method, benchmark) -> problem -> the planned samples' grades (missing = wrong)."""
    ok = set(table.loc[(table["status"] != "error") & table["correct"].astype(bool), "key"])
    out: dict[tuple[str, str, str], dict[str, list[bool]]] = {}
    for key, model, method, bench, pid in zip(plan["key"], plan["model"], plan["method"], plan["benchmark"],
                                              plan["problem_id"], strict=True):
        out.setdefault((model, method, bench), {}).setdefault(pid, []).append(key in ok)
    return out


def _acc(problems: dict[str, list[bool]], keep: Any = None) -> tuple[float | None, int]:
    rows = [sum(g) / len(g) for pid, g in problems.items() if g and (keep is None or keep(pid))]
    return (sum(rows) / len(rows) if rows else None), len(rows)


@dataclass
class Trusted:
    cells: Any  # DataFrame: model, method, benchmark, problems, raw, suspect, trusted_problems, trusted
    macro: Any  # DataFrame: model, method, raw, trusted
    compare: Any  # DataFrame or None
    lines: list[str]


def trusted_report(table: Any, plan: Any, suspects: dict[str, set[str]], compare: tuple[str, str] | None = None,
                   n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95) -> Trusted:
    # deferred: pandas only for the trusted tables
    import pandas as pd

    grades = _grades(table, plan)
    cells = []
    for (model, method, bench), problems in sorted(grades.items()):
        sus = suspects.get(bench, set())
        raw, n = _acc(problems)
        trusted, nt = _acc(problems, lambda p, sus=sus: p not in sus)
        cells.append({"model": model, "method": method, "benchmark": bench, "problems": n, "raw": raw,
                      "suspect": n - nt, "trusted_problems": nt, "trusted": trusted})
    cdf = pd.DataFrame(cells, columns=["model", "method", "benchmark", "problems", "raw", "suspect",
                                       "trusted_problems", "trusted"])
    macro = (cdf.groupby(["model", "method"], sort=True)[["raw", "trusted"]].mean().reset_index()
             if len(cdf) else pd.DataFrame(columns=["model", "method", "raw", "trusted"]))
    pct = lambda x: "n/a" if x is None or x != x else f"{100 * x:.1f}"  # noqa: E731
    lines = ["## Accuracy on trusted keys (opteval audit)", "",
             "Raw: every planned problem. Trusted: the problems whose key the audit calls `suspect` are left out of "
             "numerator and denominator (avg@k, missing scores wrong; macro = mean of the benchmarks).", "",
             "| model | method | benchmark | raw % | trusted % | problems | suspect left out |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in cells:
        lines.append(f"| {r['model']} | {r['method']} | {r['benchmark']} | {pct(r['raw'])} | {pct(r['trusted'])} | "
                     f"{r['problems']} | {r['suspect']} |")
    for r in macro.to_dict("records"):
        lines.append(f"| {r['model']} | {r['method']} | macro | {pct(r['raw'])} | {pct(r['trusted'])} | | |")
    cmp_df = None
    if compare is not None:
        a_name, b_name = compare
        rows = []
        for (model, method, bench), pa_ in sorted(grades.items()):
            if method != a_name or (model, b_name, bench) not in grades:
                continue
            pb = grades[(model, b_name, bench)]
            common = sorted(set(pa_) & set(pb))
            sus = suspects.get(bench, set())
            kept = [p for p in common if p not in sus]
            row: dict[str, Any] = {"model": model, "benchmark": bench, "a": a_name, "b": b_name}
            for tag, ids in (("raw", common), ("trusted", kept)):
                if not ids:
                    row.update({f"{tag}_diff": None, f"{tag}_low": None, f"{tag}_high": None, f"{tag}_n": 0})
                    continue
                est, low, high = paired_bootstrap([pa_[p] for p in ids], [pb[p] for p in ids], confidence,
                                                  n_resamples, bootstrap_seed(seed, model, bench)[0])
                row.update({f"{tag}_diff": est, f"{tag}_low": low, f"{tag}_high": high, f"{tag}_n": len(ids)})
            flags = []
            if row["raw_diff"] is not None and row["trusted_diff"] is not None:
                sign = lambda d: (d > 0) - (d < 0)  # noqa: E731
                if sign(row["raw_diff"]) != sign(row["trusted_diff"]):
                    flags.append("winner changes")
                sig = lambda lo, hi: lo > 0 or hi < 0  # noqa: E731
                if sig(row["raw_low"], row["raw_high"]) != sig(row["trusted_low"], row["trusted_high"]):
                    flags.append("significance changes")
            row["flag"] = "; ".join(flags)
            rows.append(row)
        cmp_df = pd.DataFrame(rows)
        lines += ["", f"### Key sensitivity of {a_name} - {b_name} (paired by problem, {int(confidence * 100)}% "
                      "cluster-bootstrap interval)", "",
                  "| model | benchmark | raw diff [interval] | trusted diff [interval] | flag |", "|---|---|---|---|---|"]
        show = lambda d, lo, hi: "n/a" if d is None else f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"  # noqa: E731
        for r in rows:
            lines.append(f"| {r['model']} | {r['benchmark']} | {show(r['raw_diff'], r['raw_low'], r['raw_high'])} | "
                         f"{show(r['trusted_diff'], r['trusted_low'], r['trusted_high'])} | {r['flag'] or '-'} |")
    return Trusted(cdf, macro, cmp_df, lines)


def write(result: Trusted, out: Path) -> list[Path]:
    """``trusted.csv`` (and ``trusted_compare.csv``) under ``out/tables``; the section appended to report.md."""
    tables = out / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    paths = [tables / "trusted.csv"]
    result.cells.to_csv(paths[0], index=False)
    if result.compare is not None:
        paths.append(tables / "trusted_compare.csv")
        result.compare.to_csv(paths[-1], index=False)
    md = out / "report.md"
    if md.is_file():
        with md.open("a", encoding="utf-8") as fh:
            fh.write("\n" + "\n".join(result.lines) + "\n")
    return paths
