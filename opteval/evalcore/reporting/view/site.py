"""Write the viewer: ``index.html`` (every trajectory, filterable), one page per trajectory beside it,
and ``compare.html`` (two trajectories side by side).

Self-contained on purpose: no server, no CDN, no fetch() of local files (browsers refuse it from
``file://``), so the folder opens from the file system and from an MLflow artifact alike. The index
carries its rows as JSON and pages through them in the browser; trajectory pages are written for at
most ``max_pages`` trajectories, errors, missing, unsubmitted and wrong ones first, because at the
paper's scale (about 200,000 trajectories) one file each is more than anyone will open.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, FileSystemLoader, select_autoescape

from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.reporting.view.model import STATUS_MISSING, Detail, answer_text, detail, rows_with_missing

DEFAULT_MAX_PAGES = 20_000
TEMPLATES = Path(__file__).with_name("templates")
# which rows get a page first when there are more than max_pages: the ones a reader opens
_PRIORITY = {"error": 0, STATUS_MISSING: 1, "no_submission": 2}


@dataclass(frozen=True)
class Site:
    index: Path
    trajectories: int
    pages: int
    missing: int
    errors: int


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson_script"] = _json_for_script
    return env


def _json_for_script(value: Any) -> str:
    """JSON safe inside <script>: '</' and HTML-significant characters escaped."""
    text = json.dumps(value, default=str, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write(path: Path, text: str) -> None:
    """Atomic, so a viewer open in a browser never reads half a page; 0644 like the report and the
    ledger (mkstemp's 0600 hid the pages from a web server or a colleague)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    # what open() would give (0644 under the usual umask 022), not mkstemp's 0600: colleagues sharing a
    # results folder must be able to open the viewer
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def _index_row(d: Detail, has_page: bool) -> dict[str, Any]:
    return {
        "key": d.key, "model": d.model, "method": d.method, "benchmark": d.benchmark, "problem": d.problem_id,
        "sample": d.sample, "status": d.status, "correct": d.correct, "submission": d.submission,
        "answer": d.answer, "prompt_tokens": d.prompt_tokens, "completion_tokens": d.completion_tokens,
        "calls": d.n_calls, "execs": d.n_execs,
        "wall_s": None if d.wall_s is None else round(d.wall_s, 2), "error": d.error,
        "page": d.page if has_page else None,
    }


def write_site(table: Any, plan: Any, out_dir: str | Path, answer_keys: Mapping[str, AnswerKey] | None = None,
               *, title: str = "opteval sweep", max_pages: int = DEFAULT_MAX_PAGES) -> Site:
    """Write the viewer of one sweep into ``out_dir``; returns where ``index.html`` is and what it holds."""
    if max_pages < 0:
        raise ValueError(f"max_pages must be >= 0, got {max_pages}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keys = answer_keys or {}
    df = rows_with_missing(table, plan)
    if len(df):
        df = df.sort_values(["model", "method", "benchmark", "problem_id", "sample"], kind="stable")
        rank = df["status"].map(_PRIORITY).fillna(3 + df["correct"].fillna(False).astype(int))
        paged = set(df.assign(_rank=rank).sort_values("_rank", kind="stable")["key"].head(max_pages))
    else:
        paged = set()
    details = [detail(row, answer_text(keys, str(row["benchmark"]), str(row["problem_id"])))
               for row in df.to_dict("records")]
    by_problem: dict[tuple[str, str], list[Detail]] = {}
    for d in details:
        by_problem.setdefault((d.benchmark, d.problem_id), []).append(d)
    # the simulated policy's outputs are never a model's: every page says so (docs/DESIGN.md's rule)
    sim = {str(k) for k in df.loc[df["simulated"].fillna(False).astype(bool), "key"]} if "simulated" in df else set()
    env = _env()
    page_tpl = env.get_template("trajectory.html.j2")
    for d in details:
        if d.key not in paged:
            continue
        siblings = [s for s in by_problem[(d.benchmark, d.problem_id)] if s.key != d.key and s.key in paged]
        _write(out / d.page, page_tpl.render(t=d, siblings=siblings, title=title, simulated=d.key in sim))
    rows = [_index_row(d, d.key in paged) for d in details]
    counts = pd.Series([d.status for d in details], dtype="object").value_counts().to_dict() if details else {}
    _write(out / "index.html", env.get_template("index.html.j2").render(
        rows=rows, title=title, counts=counts, max_pages=max_pages, n_pages=len(paged), simulated=bool(sim)))
    _write(out / "compare.html", env.get_template("compare.html.j2").render(title=title, simulated=bool(sim)))
    return Site(index=out / "index.html", trajectories=len(details), pages=len(paged),
                missing=int(counts.get(STATUS_MISSING, 0)), errors=int(counts.get("error", 0)))
