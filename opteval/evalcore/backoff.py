"""One backoff schedule for every retry loop of the project (issue 35: four loops each did the
arithmetic by hand).

Only the schedule is shared, not the loops: a model call's loop waits for a refusing route without
spending an attempt and honours ``Retry-After``; the driver waits between a trajectory's attempts
on other workers; Ray's start-up shuts a half-started cluster down between attempts; MLflow's
background start retries on a daemon thread until stopped. tenacity's ``Retrying`` owns the loop
itself, which none of the four can hand over, so its wait strategies would bring a dependency for
one line of arithmetic.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """``base_s * 2**n`` before retry ``n`` (0-based), times a jitter factor in [0.5, 1.5) when
    ``jitter`` (many clients retrying one server do not come back in step), never below a server's
    ``at_least`` (Retry-After), never above ``max_s``."""

    base_s: float
    max_s: float = math.inf
    jitter: bool = False

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.max_s < 0:
            raise ValueError(f"backoff times must be >= 0, got base_s={self.base_s}, max_s={self.max_s}")

    def delay(self, n: int, at_least: float | None = None, rng: Callable[[], float] = random.random) -> float:
        if n < 0:
            raise ValueError(f"retry index must be >= 0, got {n}")
        d = self.base_s * 2.0 ** min(n, 1000)  # float ** raises past 2**1023; the cap wins long before
        if self.jitter:
            d *= 0.5 + rng()
        if at_least is not None:
            d = max(d, at_least)
        return min(d, self.max_s)
