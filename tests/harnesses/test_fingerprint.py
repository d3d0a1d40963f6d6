"""The sweep fingerprint covers each method's prompt files and harness code."""
from __future__ import annotations

import shutil

import pytest

import opteval.evalcore.harnesses._common as common
from opteval.evalcore.harnesses.version import harness_version
from opteval.sweepcore.config import item_fingerprint, load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import ConfigChangedError, Ledger


@pytest.fixture
def prompts_copy(tmp_path, monkeypatch):
    """The prompt tree copied to tmp and used instead of the package's (edits stay in tmp)."""
    root = tmp_path / "prompts"
    shutil.copytree(common.PROMPTS_DIR, root)
    monkeypatch.setattr(common, "PROMPTS_DIR", root)
    common.load_prompt.cache_clear()
    yield root
    common.load_prompt.cache_clear()


def _open(cfg, allow=False):
    res = resolved(cfg)
    return Ledger.open(str(cfg.sweep.output_dir), str(cfg.sweep.name), res, sweep_fingerprint(res), allow)


def _cfg(tmp_path, *extra):
    return load_config([f"sweep.output_dir={tmp_path / 'out'}", "sweep.name=fp", "models=[sim-fast]",
                        "methods=[direct,opticycle,optistate]", "benchmarks=[sample]", *extra])


def test_an_edited_shared_fragment_is_refused_under_the_same_sweep_name(tmp_path, prompts_copy):
    cfg = _cfg(tmp_path)
    _open(cfg)
    before = {m: item_fingerprint(cfg, "sim-fast", m, "sample") for m in ("direct", "opticycle", "optistate")}
    # the modeling checklist is shared by OptiCycle and OptiState (and not read by direct)
    checklist = prompts_copy / "_shared" / "modeling_checklist.md"
    checklist.write_text(checklist.read_text() + "- Also check the units.\n")
    with pytest.raises(ConfigChangedError) as err:
        _open(cfg)
    msg = str(err.value)
    assert "harness_versions.opticycle.prompts" in msg and "harness_versions.optistate.prompts" in msg
    assert "harness_versions.direct" not in msg
    assert "sweep.allow_config_change=true" in msg
    after = {m: item_fingerprint(cfg, "sim-fast", m, "sample") for m in before}
    assert after["direct"] == before["direct"]
    assert after["opticycle"] != before["opticycle"] and after["optistate"] != before["optistate"]
    # the same explicit override as any config change
    _open(_cfg(tmp_path, "sweep.allow_config_change=true"), allow=True)


def test_harness_code_is_part_of_the_version(tmp_path, monkeypatch):
    before = harness_version("opticycle")
    fake = tmp_path / "_common.py"
    fake.write_text(open(common.__file__).read() + "\n# an edit\n")
    monkeypatch.setattr(common, "__file__", str(fake))
    after = harness_version("opticycle")
    assert after["code"] != before["code"] and after["prompts"] == before["prompts"]


def test_version_is_stable_and_differs_between_harnesses():
    assert harness_version("optistate") == harness_version("optistate")
    versions = {n: harness_version(n) for n in ("direct", "opticycle", "optistate")}
    assert len({v["prompts"] for v in versions.values()}) == 3
    assert len({v["code"] for v in versions.values()}) == 3
