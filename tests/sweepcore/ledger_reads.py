"""Ledger reads the tests expect to find: a missing manifest or plan fails with the ledger's URI."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from opteval.sweepcore.ledger import Ledger


def manifest_of(led: Ledger) -> dict[str, Any]:
    man = led.manifest()
    assert man is not None, f"{led.uri} has no manifest"
    return man


def plan_of(led: Ledger) -> pa.Table:
    plan = led.read_plan()
    assert plan is not None, f"{led.uri} has no plan"
    return plan
