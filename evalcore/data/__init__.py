"""The embedded sample benchmark: original problems written for opteval, with reference programs.

`sample.jsonl` holds one problem per line (`id`, `question`, `answer`, `source`, plus `kind`,
`library`, `n_vars`); `reference/<id>.py` is the program whose `submit(...)` produced the answer.
Answers live here only for the loader in `evalcore.problems`, which splits them off into an
AnswerKey so that nothing building a prompt can reach them. Regenerate with
`python -m evalcore.data._build` (see that module).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

SAMPLE_JSONL: Path = Path(__file__).resolve().parent / "sample.jsonl"
REFERENCE_DIR: Path = Path(__file__).resolve().parent / "reference"

_ID_RE = re.compile(r"^sample-\d{4}$")


def reference_ids() -> list[str]:
    """Ids that have a reference program, sorted."""
    return sorted(p.stem for p in REFERENCE_DIR.glob("sample-*.py") if _ID_RE.match(p.stem))


def reference_program(problem_id: str) -> str | None:
    """Source of the reference program for `problem_id`, or None if there is none."""
    if not isinstance(problem_id, str) or not _ID_RE.match(problem_id):
        return None  # also keeps ids like "../x" from reaching the filesystem
    path = REFERENCE_DIR / f"{problem_id}.py"
    return path.read_text() if path.is_file() else None


def load_sample_rows() -> list[dict]:
    """Raw rows of sample.jsonl, answers included; errors name the file and line."""
    rows = []
    with SAMPLE_JSONL.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{SAMPLE_JSONL}:{lineno}: bad JSON: {e}") from e
            if not isinstance(row, dict):
                raise ValueError(f"{SAMPLE_JSONL}:{lineno}: expected an object, got {type(row).__name__}")
            rows.append(row)
    return rows
