"""Every tier the README's test command deselects may start processes (CI's stop 45 failure:
the wheel tier was refused by the fast tier's guard)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.conftest import SLOW_TIERS

REPO = Path(__file__).resolve().parents[2]


def test_the_subprocess_guard_exempts_every_deselected_tier():
    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    deselected = set(re.findall(r"not (\w+)", addopts))
    assert deselected, addopts
    assert deselected <= set(SLOW_TIERS), deselected - set(SLOW_TIERS)


def test_every_ci_tier_marker_is_one_the_guard_knows():
    """.ci/run's tiers, and .ci/vllm's (its `-m gpu` run failed the guard the same way)."""
    for script in ("run", "vllm"):
        ci = (REPO / ".ci" / script).read_text()
        used = set(re.findall(r"pytest -q (?:-rs )?(?:-p no:cacheprovider )?(?:-W \S+ )?-m '?(\w+)", ci))
        assert used, f".ci/{script}: the scan finds no tier"
        assert used <= set(SLOW_TIERS), (script, used - set(SLOW_TIERS))
