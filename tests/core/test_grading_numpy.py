"""The ``optagentbench_numpy`` profile: the benchmark's "absolute 1e-2 and relative
1e-4" read as numpy.isclose reads it, |a - b| <= 1e-2 + 1e-4*|b|, next to ``optagentbench``'s
max() reading. Hand cases where the two readings part, and numpy itself as the reference."""
from __future__ import annotations

import numpy as np
import pytest

from opteval.evalcore.grading import grade


@pytest.mark.parametrize(
    "a, b, max_reading, numpy_reading",
    [
        (100.015, 100.0, False, True),    # |b| = 100: max(0.01, 0.01) = 0.01 vs 0.01 + 0.01 = 0.02
        (100.01, 100.0, True, True),      # on the max() boundary
        (100.021, 100.0, False, False),   # past both
        (0.01, 0.0, True, True),          # near 0 both are absolute 1e-2
        (0.011, 0.0, False, False),
        (1e6 - 100.005, 1e6, False, True),  # relative part 100 (max of |a|, |b| = 1e6); numpy adds 0.01
        (5.0, 5.0, True, True),
    ],
)
def test_numpy_reading_against_the_max_reading(a, b, max_reading, numpy_reading):
    assert grade(a, b, "optagentbench") is max_reading
    assert grade(a, b, "optagentbench_numpy") is numpy_reading


def test_numpy_reading_agrees_with_numpy_isclose():
    rng = np.random.default_rng(0)
    b = rng.choice([-1, 1], 4000) * 10 ** rng.uniform(-3, 6, 4000)
    a = b + rng.normal(0, 1, 4000) * (1e-2 + 1e-4 * np.abs(b))
    ours = np.array([grade(x, y, "optagentbench_numpy") for x, y in zip(a, b)])
    ref = np.isclose(a, b, rtol=1e-4, atol=1e-2)
    # identical except within floating-point rounding of the boundary (relative slack 1e-9)
    edge = np.abs(np.abs(a - b) - (1e-2 + 1e-4 * np.abs(b))) <= 1e-8 * (1e-2 + 1e-4 * np.abs(b))
    assert (ours[~edge] == ref[~edge]).all() and ours.sum() > 1000 and (~ours).sum() > 100
    # statuses still match only exactly
    assert grade("infeasible", "infeasible", "optagentbench_numpy") and not grade(0.0, "infeasible", "optagentbench_numpy")
