"""A harness's version for the sweep fingerprint: its prompt files and its code, hashed.

Why: keys and the changed-config check must notice an edited prompt or harness loop, or a
resumed sweep silently mixes two versions under the same keys. The code hash covers the
modules of the harness class and its bases inside ``opteval.evalcore.harnesses`` plus ``_common.py``
(the metering and the prompt loader), and the prompts hash covers every prompt file the
harness reads, shared fragments included.
"""
from __future__ import annotations

import hashlib
import inspect
import re
import sys
from pathlib import Path

from opteval.evalcore.harnesses import _common
from opteval.evalcore.harnesses.registry import get_harness

# The code moved under the one import namespace `opteval` (issue 35): its import lines grew the
# prefix and nothing else. Hashing them without it keeps every existing sweep's fingerprints.
_NAMESPACED = re.compile(rb"\bopteval\.(evalcore|sweepcore|cluster|jobs)\b")


def _without_namespace(code: bytes) -> bytes:
    return _NAMESPACED.sub(rb"\1", code)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    root = _common.PROMPTS_DIR.parent
    for path in sorted(set(paths)):
        h.update(str(path.relative_to(root) if root in path.parents else path.name).encode() + b"\0")
        h.update(_without_namespace(path.read_bytes()) + b"\0")
    return h.hexdigest()[:16]


def code_files(harness: object) -> list[Path]:
    files = {Path(_common.__file__).resolve()}
    for cls in type(harness).__mro__:
        module = sys.modules.get(cls.__module__)
        # this package's modules, and the harness's own module wherever it lives (a registered
        # harness from outside the package)
        if module is not None and (cls.__module__.startswith("opteval.evalcore.harnesses") or cls is type(harness)):
            files.add(Path(inspect.getfile(module)).resolve())
    return sorted(files)


def harness_version(name: str) -> dict[str, str]:
    """``{"prompts": <sha>, "code": <sha>}`` for the registered harness ``name``."""
    harness = get_harness(name)
    prompt_dir = getattr(harness, "prompt_dir", name)
    prompts = _common.prompt_files(prompt_dir) if _common.prompt_folder(prompt_dir).is_dir() else []
    return {"prompts": _digest(prompts), "code": _digest(code_files(harness))}
