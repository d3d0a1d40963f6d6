"""``opteval view ... --audit DIR``: the viewer marks the problems whose key the audit calls suspect
(issue 37). Added after the site is written, so the viewer's own templates stay as they are: a banner
on the index and on every trajectory page of a suspect problem, and ``audit.html`` listing each
suspect key with its evidence and links to its trajectories. Pure file work, no Ray.

The index's rows live in shards/ (issue 44); the banner goes on index.html itself, so a marked site
still shows it before any shard loads."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.audit_report import load_suspects
from opteval.evalcore.reporting.view.model import page_name

# what mark_site reads of the ledger: never the detail columns
MARK_COLUMNS = ("key", "benchmark", "problem_id", "model", "method", "sample")
STYLE = ("background:#fff3cd;border:1px solid #e0a800;padding:.5em 1em;margin:.5em 0;font-family:sans-serif")


def _banner(text: str) -> str:
    return f'<div class="opteval-audit" style="{STYLE}">{text}</div>'


def _insert(path: Path, banner: str) -> bool:
    page = path.read_text(encoding="utf-8")
    if 'class="opteval-audit"' in page or "<body>" not in page:
        return False
    path.write_text(page.replace("<body>", "<body>\n" + banner, 1), encoding="utf-8")
    return True


def _suspect_rows(table: Any, problems: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The rows of the suspect problems only, as dicts (a paper sweep's 589,116 rows are not turned
    into Python objects for a few suspect problems)."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table[list(MARK_COLUMNS)], preserve_index=False)
    table = table.select(list(MARK_COLUMNS))
    if not problems or not table.num_rows:
        return []
    joined = pc.binary_join_element_wise(table.column("benchmark").cast(pa.string()),
                                         table.column("problem_id").cast(pa.string()), "\x00")
    wanted = pa.array([f"{b}\x00{p}" for b, p in sorted(problems)], pa.string())
    return table.filter(pc.is_in(joined, value_set=wanted)).to_pylist()


def mark_site(out: Path, audit_dir: str | Path, table: Any) -> int:
    """Mark the site under ``out`` from ``audit_dir``'s audit.parquet; returns the pages marked.
    ``table``: the ledger's :data:`MARK_COLUMNS` (pyarrow or pandas)."""
    _, detail = load_suspects(audit_dir)
    keys = _suspect_rows(table, set(detail))
    by_problem: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in keys:
        by_problem.setdefault((r["benchmark"], r["problem_id"]), []).append(r)
    marked = 0
    items = []
    for (bench, pid), d in sorted(detail.items()):
        trajs = by_problem.get((bench, pid), [])
        why = html.escape(f"{d['why']}")
        text = (f"<b>Suspect answer key</b> for {html.escape(bench)}/{html.escape(pid)}: key {html.escape(d['key'])}"
                + (f", the evidence points to {html.escape(d['alternative'])}" if d["alternative"] else "")
                + f" ({html.escape(d['evidence'])}). {why} <a href=\"audit.html\">every suspect key</a>")
        links = []
        for r in trajs:
            page = out / page_name(r["key"])
            if page.is_file():
                marked += _insert(page, _banner(text))
                links.append(f'<a href="{html.escape(page.name)}">{html.escape(r["model"])} · '
                             f'{html.escape(r["method"])} · sample {r["sample"]}</a>')
        if trajs:
            items.append(f"<li>{text}<br>{' | '.join(links) or 'no trajectory page written'}</li>")
    (out / "audit.html").write_text(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>suspect answer keys</title></head><body>\n"
        f"<h1>Suspect answer keys ({len(items)} problems in this sweep)</h1>\n"
        f"<p>From opteval audit ({html.escape(str(audit_dir))}); docs/audit.md says what each evidence means.</p>\n"
        f"<ul>{''.join(items)}</ul><p><a href=\"index.html\">back to the index</a></p></body></html>\n",
        encoding="utf-8")
    index = out / "index.html"
    if index.is_file():
        _insert(index, _banner(f"{len(items)} problem(s) of this sweep have a suspect answer key "
                               "(opteval audit): <a href=\"audit.html\">which, and why</a>"))
    return marked
