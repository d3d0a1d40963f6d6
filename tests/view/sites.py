"""What the viewer's tests read of a written site (its facet index and shards) and a synthetic sweep
of many cells to shard, without a real sweep."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

FIELDS = ("key", "problem", "sample", "status", "correct", "submission", "answer", "prompt_tokens",
          "completion_tokens", "calls", "execs", "wall_s", "error", "page")


def facets(index: Path) -> dict[str, Any]:
    blob = re.search(r'<script id="facets" type="application/json">(.*?)</script>', index.read_text(), re.S)
    assert blob, "index.html carries its facet index"
    return json.loads(blob.group(1))


def shard(path: Path) -> tuple[int, list[list[Any]]]:
    """One shard file: ``opteval_shard(N,[rows]);``."""
    text = path.read_text()
    m = re.fullmatch(r"opteval_shard\((\d+),(.*)\);\n", text, re.S)
    assert m, text[:200]
    return int(m.group(1)), json.loads(m.group(2))


def site_rows(index: Path) -> list[dict[str, Any]]:
    """Every row the index lists, in its order, as the old inlined JSON named them (``page``: the
    trajectory page's file name or None)."""
    f = facets(index)
    assert f["fields"] == list(FIELDS)
    rows = []
    for n, (cell, count, _) in enumerate(f["shards"]):
        at, shard_rows = shard(index.parent / f["dir"] / f"s{n}.js")
        assert at == n and len(shard_rows) == count
        model, method, benchmark = f["cells"][cell]
        for r in shard_rows:
            row = dict(zip(FIELDS, r))
            row.update(model=model, method=method, benchmark=benchmark,
                       page=f"traj-{row['page']}.html" if row["page"] else None)
            rows.append(row)
    return rows


def synthetic(models: int = 2, methods: tuple[str, ...] = ("direct", "opticycle"), benchmarks: int = 2,
              problems: int = 40, skip_every: int = 5) -> tuple[pa.Table, pa.Table]:
    """(ledger table, plan): every cell's problems planned, every ``skip_every``-th never committed;
    statuses and grades in a fixed pattern."""
    rows, plan = [], []
    for m in range(models):
        for meth in methods:
            for b in range(benchmarks):
                for p in range(problems):
                    item = {"key": f"m{m}/{meth}/b{b}/p{p:03d}/0/k", "model": f"m{m}", "method": meth,
                            "benchmark": f"b{b}", "problem_id": f"p{p:03d}", "sample": 0}
                    plan.append(item)
                    if p % skip_every == skip_every - 1:
                        continue
                    status = ("submitted", "no_submission", "error")[p % 3]
                    rows.append({**item, "status": status, "correct": status == "submitted" and p % 2 == 0,
                                 "error": "executor lost" if status == "error" else None, "submission": "1",
                                 "n_calls": 1, "n_execs": 1, "simulated": False, "prompt_tokens": 10, "completion_tokens": 5,
                                 "transcript": json.dumps([{"call": 0, "turn": 0, "purpose": "generate",
                                                            "messages": [{"role": "user", "content": f"q{p}"}],
                                                            "completion": "submit(1)"}]),
                                 "calls": "[]", "execs": "[]"})
    return pa.Table.from_pylist(rows), pa.Table.from_pylist(plan)
