"""Untrusted-code execution: a warm fork server, per-run limits and namespaces, persistent sessions.

Public API (DESIGN.md / INTERFACES.md): ``run_program``, ``Session``, ``ForkServer``,
``LocalExecutor``, ``Limits``, ``ExecResult`` and the outcome constants.
"""
from __future__ import annotations

from typing import Any

from opteval.evalcore.sandbox.host import (
    ENV_ALLOW_UNCONTAINED,
    ENV_NAMESPACES,
    ForkServer,
    SandboxUnavailable,
    Session,
    default_server,
    run_program,
)
from opteval.evalcore.sandbox.types import (
    ERROR,
    KILLED,
    MEMORY,
    OK,
    OUTCOMES,
    OUTPUT_LIMIT,
    TIMEOUT,
    ExecResult,
    Limits,
)

__all__ = [
    "ENV_ALLOW_UNCONTAINED", "ENV_NAMESPACES", "ERROR", "KILLED", "MEMORY", "OK", "OUTCOMES", "OUTPUT_LIMIT", "TIMEOUT",
    "ExecResult", "ForkServer", "Limits", "LocalExecutor", "LocalSession", "SandboxUnavailable", "Session", "default_server",
    "run_program",
]


def __getattr__(name: str) -> Any:
    # local.py imports asyncio; keep it out of the fork server's small pre-import footprint
    if name in ("LocalExecutor", "LocalSession"):
        # deferred: local imports asyncio (see the comment above)
        from opteval.evalcore.sandbox import local

        return getattr(local, name)
    raise AttributeError(f"module 'opteval.evalcore.sandbox' has no attribute {name!r}")
