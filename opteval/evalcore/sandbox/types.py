"""Sandbox contract types: one frozen table of limits, one typed result."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ExecResult.outcome values
OK = "ok"
ERROR = "error"  # the program raised / exited non-zero / crashed on a signal
TIMEOUT = "timeout"  # wall or CPU limit
MEMORY = "memory"  # address-space limit (MemoryError or killed for memory)
OUTPUT_LIMIT = "output_limit"  # stdout+stderr exceeded output_bytes
KILLED = "killed"  # the sandbox itself went away (session crash, executor lost)
OUTCOMES = (OK, ERROR, TIMEOUT, MEMORY, OUTPUT_LIMIT, KILLED)


@dataclass(frozen=True)
class Limits:
    """Per-run limits. Units are in the names; defaults suit benchmark-sized models."""

    wall_s: float = 60.0
    cpu_s: float = 60.0
    memory_mb: int = 4096  # address space (RLIMIT_AS)
    max_procs: int = 64  # processes inside the run (namespace or RLIMIT_NPROC)
    output_bytes: int = 1_000_000  # stdout + stderr captured, then truncated
    file_mb: int = 64  # largest file the program may write (RLIMIT_FSIZE)
    # Executor-wide, not per run: start even where the sandbox cannot contain programs
    # (no root, no user namespaces); every result then says contained=False. Default: refuse.
    allow_uncontained: bool = False

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "max_procs", "output_bytes", "file_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if not isinstance(self.allow_uncontained, bool):
            raise ValueError(f"Limits.allow_uncontained must be true or false, got {self.allow_uncontained!r}")


@dataclass
class ExecResult:
    """What happened to one program or one session cell. Never raised, always returned."""

    outcome: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    submission: Any = None  # the last value passed to submit(), else None
    models: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    contained: bool = True  # False: namespaces unavailable, process-group fallback
    note: str = ""  # why the sandbox classified the outcome so, or a containment warning

    @property
    def ok(self) -> bool:
        return self.outcome == OK
