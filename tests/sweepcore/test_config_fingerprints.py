"""Fingerprints are the ledger's keys: a refactor of the config code must not move them.

The harness versions (hashes of each harness's code and prompt files) are part of every
fingerprint on purpose, so an edited harness re-runs; they are held fixed here so that these
values pin only what the config code contributes. They were recorded from the config code
before it became typed (and checked equal after)."""
from __future__ import annotations

import pytest

import opteval.sweepcore.config.fingerprints as config  # where the fingerprints look harness_versions up
from opteval.sweepcore.config import item_fingerprint, load_config, sweep_fingerprint

# The GPU sweeps' values moved once, on purpose: their model YAMLs' batch sizes were derived from
# KV memory (sweepcore/batch_size.py), and a model config is hashed whole. The default sweep's did not.
# The table1 sweep's moved again, on purpose: the OptiMUS and AutoFormulation budgets were calibrated
# against the harness paper's token figures (docs/calibration.md); its ORMind item (unchanged) did not.
PINNED = [
    ([], "aa1e6e908eb0410d", ("sim-small", "direct", "sample"), "25c3eeac62ee3ac3"),
    (["configs/sweeps/paper.yaml"], "6e3393ee8cbb1253", ("Qwen3-0.6B", "optistate", "mamo_easy"), "9984df7fded87721"),
    (["configs/sweeps/table1.yaml"], "4b8182ff8874f78c", ("Qwen3-4B", "ormind", "mamo_easy"), "eab18fe2a8e5045b"),
    (["configs/sweeps/extra_backbones.yaml"], "e6a87f8ed1601ed8", None, None),
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


# Every built-in harness's version as of stop 51. A harness's code and prompt files are hashed into
# each of its trajectories' keys, so any byte changed there, a comment included, re-keys (and so
# re-runs) every sweep that used it. Change a harness on purpose, then update its line here and say
# so in CHANGELOG.md; a style pass over the tree must leave these files alone.
HARNESS_VERSIONS = {
    "autoformulation": {"prompts": "c44c109cbfa69a36", "code": "d6099fad04db22aa"},
    "cafa": {"prompts": "bde1c1bc53cef02a", "code": "90cae81c1b5ddf22"},
    "coe": {"prompts": "2d16e8417d6cff15", "code": "e29d5f820447de19"},
    "direct": {"prompts": "df9f89e1a5023b6d", "code": "051bc211fdb8b403"},
    "llmopt": {"prompts": "16d417106264b829", "code": "9387f81f576a553e"},
    "opticycle": {"prompts": "487c473b42b24af9", "code": "75bd31ec4b84c0b3"},
    "optimus": {"prompts": "0c635cf2b791a1e7", "code": "7228d5c7769711d5"},
    "optistate": {"prompts": "634cceece5a510df", "code": "636a1c770973a2ec"},
    "orlm": {"prompts": "4ea98657216fbaaa", "code": "a1d647908a4ddebc"},
    "ormind": {"prompts": "5dd3a20d2292c9ba", "code": "d9f70c4d8e0005fd"},
    "reflexion": {"prompts": "c3e7c08d4ce54e4f", "code": "798042549a8a1383"},
    "semopt": {"prompts": "f5d6c157d23b0d53", "code": "84fc6b78961e9e77"},
    "sirl": {"prompts": "47bb02d682c59686", "code": "58746675a3089cb6"},
    "sirl_roles": {"prompts": "9dd8aeb13f866c8a", "code": "132d771d858e6e3d"},
}


def test_no_harness_changed_by_accident():
    from opteval.evalcore.harnesses.registry import all_harnesses
    from opteval.evalcore.harnesses.version import harness_version

    # the package's own harnesses (other tests register theirs in the same process)
    built_in = sorted(n for n, h in all_harnesses().items() if type(h).__module__.startswith("opteval."))
    assert built_in == sorted(HARNESS_VERSIONS)
    assert {name: harness_version(name) for name in built_in} == HARNESS_VERSIONS
