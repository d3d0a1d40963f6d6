"""Fingerprints are the ledger's keys: a refactor of the config code must not move them.

The values below were recorded before the config became typed; a change here means every
existing sweep would re-run from scratch (or refuse to resume)."""
from __future__ import annotations

import pytest

from cluster.config import item_fingerprint, load_config, sweep_fingerprint

PINNED = [
    ([], "8848b61141ecbfc6", ("sim-small", "direct", "sample"), "56411bdf6e5af6d3"),
    (["configs/sweeps/paper.yaml"], "28382fe2bc0f5138", ("Qwen3-0.6B", "optistate", "mamo_easy"), "ddf64dde84269976"),
    (["configs/sweeps/table1.yaml"], "70fe6f16012e084a", None, None),
]


@pytest.mark.parametrize("argv, sweep_fp, item, item_fp", PINNED)
def test_fingerprints_are_pinned(argv, sweep_fp, item, item_fp):
    cfg = load_config(argv)
    assert sweep_fingerprint(cfg) == sweep_fp
    if item is not None:
        assert item_fingerprint(cfg, *item) == item_fp
