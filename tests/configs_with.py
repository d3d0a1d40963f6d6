"""The repository's configs plus a few files of a test's own, in one call.

A test that needs one more model, method or benchmark YAML (or one shipped file changed) gets a
copy of ``opteval/configs`` with those files written into it; the product finds it through
``$OPTEVAL_CONFIGS`` (the ``configs_with`` fixture in tests/conftest.py sets it for the test).
Where a single model, method or benchmark YAML is all a test adds, ``models=[path.yaml]``
(``methods=``, ``benchmarks=``) takes the file directly and needs no copy; a method or benchmark
given by path stays registered under its stem for the process, so such a file must not be
another test's file of the same stem.
"""
from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "opteval" / "configs"

Files = Mapping[str, "str | Mapping[str, Any]"]


def write_configs(dest: Path, files: Files | None = None) -> Path:
    """``dest`` (made; it must not exist): a copy of the repository's configs with ``files`` in it.

    ``files`` maps a path relative to the configs folder (``"models/mine.yaml"``) to the file's
    YAML text, or to data dumped as YAML; a shipped file of the same path is replaced."""
    shutil.copytree(CONFIGS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, content in (files or {}).items():
        path = dest / rel
        if dest.resolve() not in path.resolve().parents:
            raise ValueError(f"{rel!r} is outside the configs folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(dict(content), sort_keys=False))
    return dest


def shipped(rel: str) -> str:
    """The text of a shipped config file (``"methods/optistate.yaml"``), to write a changed copy of."""
    return (CONFIGS / rel).read_text()
