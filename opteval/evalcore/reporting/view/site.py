"""Write the viewer: ``index.html`` (every trajectory, filterable), its rows in ``shards/``, one page
per trajectory beside it, and ``compare.html`` (two trajectories side by side).

Self-contained on purpose: no server, no CDN, no fetch() of local files (browsers refuse it from
``file://``), so the folder opens from the file system and from an MLflow artifact alike. At the
paper's scale (589,116 trajectories) one inlined JSON blob made a 212 MB index that took 90 s to show
(issue 44), so the rows are sharded: ``shards/s<N>.js`` holds the rows of one (model, method,
benchmark) cell, split further to stay under ``shard_bytes``, as a classic script that calls a global
callback (a ``<script src>`` inserted at run time loads from ``file://``; fetch() would not). The
index inlines only a facet index (each shard's cell and its counts by status and correct), so it
knows every filter's row count without loading a shard and loads only the shards the shown page
needs; a text search loads the candidate shards one after another and says how far it got.

The ledger is read as a stream (:func:`opteval.evalcore.reporting.view.model.index_rows`: the small
columns only); the JSON detail columns are read, in batches, only for the rows that get a page:
at most ``max_pages`` of them, errors, missing, unsubmitted and wrong ones first, because one file
per trajectory is more than anyone will open.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from jinja2 import Environment, FileSystemLoader, select_autoescape

from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.reporting.view.model import (
    DETAIL_READ,
    STATUS_MISSING,
    RowSource,
    answer_text,
    as_source,
    detail,
    index_rows,
    page_name,
)

DEFAULT_MAX_PAGES = 20_000
# no site file over 5 MB at any row count (issue 44); smaller shards make the first page and a
# filter change faster (one shard of ~10,000 rows parses in tens of milliseconds)
DEFAULT_SHARD_BYTES = 2_000_000
SHARD_DIR = "shards"
BATCH_ROWS = 8192  # rows per record batch of the index's read (small columns only)
PAGE_BATCH = 64  # rows per record batch of the pages' read (their transcripts: ~86 KB each at the paper)
TEXT_CAP = 300  # characters of an error or submission kept in the index (its page has all of it)
TEMPLATES = Path(__file__).with_name("templates")
# which rows get a page first when there are more than max_pages: the ones a reader opens
_PRIORITY = {"error": 0, STATUS_MISSING: 1, "no_submission": 2}
# a shard row: positions, not names (the names would be half a shard's bytes); index.html.j2 reads these
ROW_FIELDS = ("key", "problem", "sample", "status", "correct", "submission", "answer", "prompt_tokens",
              "completion_tokens", "calls", "execs", "wall_s", "error", "page")
CALLBACK = "opteval_shard"


@dataclass(frozen=True)
class Site:
    index: Path
    trajectories: int
    pages: int
    missing: int
    errors: int


class Sibling(NamedTuple):
    """Another paged trajectory of the same problem, as its page links it."""

    key: str
    page: str
    model: str
    method: str
    sample: int
    status: str
    correct: bool


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


def _cap(text: Any) -> Any:
    if isinstance(text, str) and len(text) > TEXT_CAP:
        return text[:TEXT_CAP] + "…"
    return text


class _Answers:
    """answer_text per (benchmark, problem), looked up once per problem, not once per row."""

    def __init__(self, keys: Mapping[str, AnswerKey]) -> None:
        self.keys = keys
        self.seen: dict[tuple[str, str], str | None] = {}

    def __call__(self, benchmark: str, problem_id: str) -> str | None:
        at = (benchmark, problem_id)
        if at not in self.seen:
            self.seen[at] = answer_text(self.keys, benchmark, problem_id)
        return self.seen[at]


def _slices(table: pa.Table, rows: int = BATCH_ROWS) -> Iterator[dict[str, list[Any]]]:
    """The table as Python lists, ``rows`` at a time (never 589,116 rows of Python objects at once)."""
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows).to_pydict()


class _Shards:
    """Writes the index's rows as shards of one cell each, none over ``limit`` bytes; keeps the facets.
    A cell's rows are encoded in one go and split only when they are over the limit (one
    ``json.dumps`` a row was most of the writer's time at 589,116 rows)."""

    def __init__(self, out: Path, limit: int) -> None:
        self.dir, self.limit = out / SHARD_DIR, limit
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cells: list[list[str]] = []
        self.shards: list[list[Any]] = []  # [cell, rows, {status: [wrong, correct]}]

    def _frame(self, n: int, body: str) -> str:
        return f"{CALLBACK}({n},{body});\n"

    def add_cell(self, cell: tuple[str, str, str], rows: list[list[Any]]) -> None:
        self.cells.append(list(cell))
        self._add(rows)

    def _add(self, rows: list[list[Any]]) -> None:
        text = self._frame(len(self.shards), json.dumps(rows, default=str, separators=(",", ":")))
        if len(text) > self.limit:
            if len(rows) == 1:
                raise ValueError(f"shard_bytes={self.limit} is smaller than one index row ({len(text)} bytes)")
            parts = min(len(rows), max(2, -(-len(text) * 10 // (self.limit * 9))))  # ~90% full each
            step = -(-len(rows) // parts)
            for at in range(0, len(rows), step):
                self._add(rows[at:at + step])
            return
        counts: dict[str, list[int]] = {}
        for r in rows:
            counts.setdefault(r[3], [0, 0])[int(r[4])] += 1
        _write(self.dir / f"s{len(self.shards)}.js", text)
        self.shards.append([len(self.cells) - 1, len(rows), counts])

    def clean(self) -> None:
        """Shards of an earlier, larger site in the same folder would be loaded by nobody: removed."""
        for path in self.dir.glob("s*.js"):
            stem = path.stem[1:]
            if stem.isdigit() and int(stem) >= len(self.shards):
                path.unlink()


def _write_shards(table: pa.Table, paged: np.ndarray, answers: _Answers, out: Path, limit: int) -> _Shards:
    shards = _Shards(out, limit)
    wall = pc.round(table.column("wall_s"), 2)
    wall = pc.if_else(pc.is_nan(wall), pa.scalar(None, pa.float64()), wall)  # NaN is not JSON
    table = table.set_column(table.schema.get_field_index("wall_s"), "wall_s", wall)
    cell: tuple[str, str, str] | None = None
    rows: list[list[Any]] = []
    at = 0
    for cols in _slices(table):
        keys, models, methods, benches, pids = (cols[c] for c in ("key", "model", "method", "benchmark", "problem_id"))
        samples, statuses, corrects, subs, errors = (cols[c] for c in ("sample", "status", "correct", "submission",
                                                                         "error"))
        pin, pout, calls, execs, walls = (cols[c] for c in ("prompt_tokens", "completion_tokens", "n_calls",
                                                            "n_execs", "wall_s"))
        for i, key in enumerate(keys):
            here = (models[i], methods[i], benches[i])
            if here != cell:
                if cell is not None:
                    shards.add_cell(cell, rows)
                cell, rows = here, []
            rows.append([key, pids[i], samples[i], statuses[i], bool(corrects[i]), _cap(subs[i]),
                         answers(benches[i], pids[i]), pin[i], pout[i], calls[i] or 0, execs[i] or 0, walls[i],
                         _cap(errors[i]), page_name(key)[5:-5] if paged[at] else None])
            at += 1
    if cell is not None:
        shards.add_cell(cell, rows)
    shards.clean()
    return shards


def _paged(table: pa.Table, max_pages: int) -> np.ndarray:
    """Which rows get a page: errors, missing, unsubmitted and wrong first, then the index's order."""
    n = table.num_rows
    mask = np.zeros(n, dtype=bool)
    if not n or not max_pages:
        return mask
    status = table.column("status").to_numpy(zero_copy_only=False)
    rank = 3 + table.column("correct").fill_null(False).to_numpy(zero_copy_only=False).astype(np.int8)
    for name, first in _PRIORITY.items():
        rank[status == name] = first
    mask[np.argsort(rank, kind="stable")[:max_pages]] = True
    return mask


def _write_pages(source: RowSource, paged: pa.Table, answers: _Answers, out: Path, title: str,
                 batch_rows: int) -> None:
    """One page per paged row: the missing ones from the index's columns, the committed ones from one
    filtered streaming read of their detail columns, ``batch_rows`` rows a batch (the transcripts
    of rows without a page are never kept, and not read at all when no committed row gets one)."""
    light = paged.to_pylist()
    by_problem: dict[tuple[str, str], list[Sibling]] = {}
    for r in light:
        by_problem.setdefault((r["benchmark"], r["problem_id"]), []).append(
            Sibling(r["key"], page_name(r["key"]), r["model"], r["method"], r["sample"], r["status"],
                    bool(r["correct"])))
    tpl = _env().get_template("trajectory.html.j2")

    def render(row: dict[str, Any], simulated: bool) -> None:
        d = detail(row, answers(str(row["benchmark"]), str(row["problem_id"])))
        siblings = [s for s in by_problem[(d.benchmark, d.problem_id)] if s.key != d.key]
        _write(out / d.page, tpl.render(t=d, siblings=siblings, title=title, simulated=simulated))

    when: dict[str, tuple[Any, bool]] = {}  # key -> (the attempt the index lists, simulated)
    for r in light:
        if r["status"] == STATUS_MISSING:
            render(r, False)
        else:
            when[r["key"]] = (r["committed_at"], bool(r["simulated"]))
    del light
    if not when:
        return
    done: set[str] = set()
    for batch in source.scan(list(DETAIL_READ), batch_rows, filter=pc.field("key").isin(list(when))):
        for row in batch.to_pylist():
            key = row["key"]
            if key in done or key not in when:
                continue
            at, simulated = when[key]
            if at is not None and row["committed_at"] != at:
                continue  # an earlier attempt of a key committed twice
            done.add(key)
            render(row, simulated)


def write_site(rows: Any, plan: Any, out_dir: str | Path, answer_keys: Mapping[str, AnswerKey] | None = None,
               *, title: str = "opteval sweep", max_pages: int = DEFAULT_MAX_PAGES,
               shard_bytes: int = DEFAULT_SHARD_BYTES, batch_rows: int = BATCH_ROWS,
               page_batch: int = PAGE_BATCH) -> Site:
    """Write the viewer of one sweep into ``out_dir``; returns where ``index.html`` is and what it holds.

    ``rows``: a :class:`opteval.sweepcore.ledger.Ledger` (read as a stream) or a ledger table
    (pyarrow or pandas). ``plan``: the sweep's plan (its never-committed keys are listed as missing)
    or None. ``shard_bytes``: the most bytes of one shard file."""
    if max_pages < 0:
        raise ValueError(f"max_pages must be >= 0, got {max_pages}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = as_source(rows)
    answers = _Answers(answer_keys or {})
    table = index_rows(source, plan, batch_rows)
    paged = _paged(table, max_pages)
    # the simulated policy's outputs are never a model's: every page says so (docs/DESIGN.md's rule)
    sim = bool(pc.any(table.column("simulated").fill_null(False)).as_py())
    shards = _write_shards(table, paged, answers, out, shard_bytes)
    counts = {str(s): int(n) for s, n in sorted(_status_counts(table).items(), key=lambda kv: (-kv[1], kv[0]))}
    n_rows, n_pages = table.num_rows, int(paged.sum())
    lean = table.filter(pa.array(paged))  # at most max_pages rows
    del table
    _write_pages(source, lean, answers, out, title, page_batch)
    env = _env()
    facets = {"cells": shards.cells, "shards": shards.shards, "dir": SHARD_DIR, "fields": list(ROW_FIELDS)}
    _write(out / "index.html", env.get_template("index.html.j2").render(
        facets=facets, n_rows=n_rows, title=title, counts=counts, max_pages=max_pages, n_pages=n_pages,
        simulated=sim, callback=CALLBACK))
    _write(out / "compare.html", env.get_template("compare.html.j2").render(title=title, simulated=sim))
    return Site(index=out / "index.html", trajectories=n_rows, pages=n_pages,
                missing=int(counts.get(STATUS_MISSING, 0)), errors=int(counts.get("error", 0)))


def _status_counts(table: pa.Table) -> dict[str, int]:
    if not table.num_rows:
        return {}
    vc = pc.value_counts(table.column("status"))
    return {str(v["values"]): int(v["counts"]) for v in vc.to_pylist()}
