"""The optagentbench tolerance, restated for the sample data's own checks.

`evalcore.grading` (another module) is the grader; this copy exists so that the data builder
and its tests do not depend on it while it is being written, and documents the rule that the
recorded answers were checked against: numbers match when |a-b| <= max(1e-2, 1e-4*max(|a|,|b|)),
statuses ("infeasible", "unbounded") match exactly.
"""
from __future__ import annotations

import math

STATUSES = ("infeasible", "unbounded")


def grades_equal(submitted: float | str | None, expected: float | str | None) -> bool:
    if isinstance(expected, str) or isinstance(submitted, str):
        return (isinstance(submitted, str) and isinstance(expected, str)
                and submitted.strip().lower() == expected.strip().lower()
                and expected.strip().lower() in STATUSES)
    if submitted is None or expected is None or isinstance(submitted, bool):
        return False
    a, b = float(submitted), float(expected)
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(1e-2, 1e-4 * max(abs(a), abs(b)))
