"""Fingerprints are the ledger's keys: a refactor of the config code must not move them.

The harness versions (hashes of each harness's code and prompt files) are part of every
fingerprint on purpose, so an edited harness re-runs; they are held fixed here so that these
values pin only what the config code contributes. They were recorded from the config code
before it became typed (and checked equal after)."""
from __future__ import annotations

import pytest

import cluster.config as config
from cluster.config import item_fingerprint, load_config, sweep_fingerprint

PINNED = [
    ([], "aa1e6e908eb0410d", ("sim-small", "direct", "sample"), "25c3eeac62ee3ac3"),
    (["configs/sweeps/paper.yaml"], "fb987704d0dd1630", ("Qwen3-0.6B", "optistate", "mamo_easy"), "5fdfa8c3f80281ae"),
    (["configs/sweeps/table1.yaml"], "1daf3a8962c8f87c", ("Qwen3-4B", "ormind", "mamo_easy"), "cad584f04772f763"),
    (["configs/sweeps/extra_backbones.yaml"], "0abdf8f88e8da962", None, None),
]


def _fixed_versions(methods):
    return {m: {"prompts": "p-" + m, "code": "c-" + m} for m in methods}


@pytest.mark.parametrize("argv, sweep_fp, item, item_fp", PINNED)
def test_fingerprints_are_pinned(argv, sweep_fp, item, item_fp, monkeypatch):
    monkeypatch.setattr(config, "harness_versions", _fixed_versions)
    cfg = load_config(argv)
    assert sweep_fingerprint(cfg) == sweep_fp
    if item is not None:
        assert item_fingerprint(cfg, *item) == item_fp


def test_a_harness_edit_moves_the_fingerprint(monkeypatch):
    monkeypatch.setattr(config, "harness_versions", _fixed_versions)
    cfg = load_config([])
    before = sweep_fingerprint(cfg), item_fingerprint(cfg, "sim-small", "direct", "sample")
    monkeypatch.setattr(config, "harness_versions",
                        lambda ms: {m: {"prompts": "p-" + m, "code": "edited-" + m} for m in ms})
    after = sweep_fingerprint(cfg), item_fingerprint(cfg, "sim-small", "direct", "sample")
    assert before[0] != after[0] and before[1] != after[1]
