"""Run each reference program once in the sandbox and keep its captured models (issue 36):
``reference_models.jsonl``, one line ``{"id", "models"}`` per problem, read by
``opteval.evalcore.data.reference_models``. Why kept in a file: the driver grades without a sandbox of
its own, and the reference's model is the same every run. A test runs them again and compares.

Regenerate: ``python -m opteval.evalcore.data._reference_models``.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opteval.evalcore.data import REFERENCE_MODELS, reference_ids, reference_program
from opteval.evalcore.sandbox import run_program


def capture(problem_id: str) -> dict[str, Any]:
    """The reference's captured models (formulation and decision vector when supported)."""
    result = run_program(reference_program(problem_id) or "")
    if result.outcome != "ok":
        raise RuntimeError(f"{problem_id}: reference ended {result.outcome}: {result.stderr[-300:]}")
    return {"id": problem_id, "models": result.models}


def main() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        rows = list(pool.map(capture, reference_ids()))
    with REFERENCE_MODELS.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {len(rows)} reference models to {REFERENCE_MODELS}")


if __name__ == "__main__":
    main()
