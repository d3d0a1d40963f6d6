"""configs/methods/*.yaml: every budget or limit value states its source in a comment."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from opteval.evalcore.harnesses.base import Budgets

METHODS = sorted((Path(__file__).resolve().parents[2] / "configs" / "methods").glob("*.yaml"))
SOURCE = re.compile(r"#.*\b(paper|ours|public implementation|ORLM|SIRL|LLMOPT)\b")  # the last three: their public code


@pytest.mark.parametrize("path", METHODS, ids=[p.stem for p in METHODS])
def test_every_budget_and_limit_value_states_its_source(path):
    data = yaml.safe_load(path.read_text())
    lines = path.read_text().splitlines()
    for section in ("budgets", "limits"):
        for key in (data.get(section) or {}):
            line = next(ln for ln in lines if re.match(rf"\s+{key}\s*:", ln))
            assert SOURCE.search(line), f"{path.name}: {section}.{key} has no source comment: {line!r}"


def test_the_paper_methods_state_every_budget():
    for name in ("direct", "opticycle", "optistate"):
        data = yaml.safe_load((METHODS[0].parent / f"{name}.yaml").read_text())
        stated = set(data["budgets"])
        assert {"max_calls", "max_turns", "max_output_tokens", "max_total_tokens"} <= stated, name
        assert data["budgets"]["max_output_tokens"] == 16384  # paper A.1
    opti = yaml.safe_load((METHODS[0].parent / "optistate.yaml").read_text())["budgets"]
    cycle = yaml.safe_load((METHODS[0].parent / "opticycle.yaml").read_text())["budgets"]
    assert opti["max_calls"] == cycle["max_calls"] + 1  # the formulation call, nothing else differs
    assert {k: v for k, v in opti.items() if k != "max_calls"} == {k: v for k, v in cycle.items() if k != "max_calls"}
    Budgets.from_config(opti)
