"""Each extension point has one way in, and a registered entry is usable by name everywhere the
built-in ones are: grading profiles, extraction profiles, reward schemes, harnesses."""
from __future__ import annotations

import pytest

from opteval.evalcore import extraction, grading, rewards
from opteval.evalcore.harnesses import get_harness, register_harness
from opteval.evalcore.harnesses.direct import Direct
from opteval.evalcore.harnesses.registry import HARNESSES, REGISTRY
from opteval.evalcore.registry import Registry
from opteval.evalcore.rewards import RewardItem, register_scheme
from opteval.evalcore.sandbox.types import ExecResult


@pytest.fixture
def cleanup():
    added: list[tuple[Registry, str]] = []
    yield added
    for table, name in added:
        table.remove(name)


def test_a_registered_grading_profile_grades(cleanup):
    cleanup.append((grading.PROFILES, "exact"))
    grading.register_profile(grading.GradingProfile("exact", "a == b", lambda a, b: a == b))
    assert grading.grade(3.0, 3, profile="exact") and not grading.grade(3.001, 3, profile="exact")
    assert grading.grade(3.001, 3)  # the default profile is untouched
    with pytest.raises(ValueError, match="'exact' is already registered"):
        grading.register_profile(grading.GradingProfile("exact", "other", lambda a, b: True))


def test_a_registered_extraction_profile_extracts(cleanup):
    cleanup.append((extraction.PROFILES, "tagged"))
    extraction.register_profile(extraction.ExtractionProfile(
        "tagged", lambda text: text.split("<code>")[1].split("</code>")[0] if "<code>" in text else None,
        lambda result: result.submission, "code between <code> tags; the submit() value"))
    assert extraction.extract_code("see <code>submit(1)</code>", "tagged") == "submit(1)"
    assert extraction.extract_submission(ExecResult(outcome="ok", submission=4.0), "tagged") == 4.0
    with pytest.raises(ValueError, match="already registered"):
        extraction.register_profile(extraction.PROFILES["submit"].__class__("tagged", str, str, ""))


def test_a_registered_reward_scheme_scores(cleanup):
    cleanup.append((rewards.SCHEMES, "always_half"))

    @register_scheme("always_half", needs_answer=False, description="0.5 for every completion")
    def half(runs, grading_profile):
        return [rewards.Reward(0.5, None) for _ in runs]

    items = [RewardItem("a", "no code here", None)]
    out = rewards.score("always_half", items, [None], "submit", "optagentbench")
    assert [r.reward for r in out] == [0.5]
    assert rewards.get_scheme("always_half").score is half


def test_a_harness_name_is_taken_once(cleanup):
    class Other(Direct):
        name = "direct"

    with pytest.raises(ValueError, match="'direct' is taken by Direct"):
        register_harness(Other())

    class Mine(Direct):
        name = "mine_for_test"

    cleanup.append((REGISTRY, "mine_for_test"))
    mine = register_harness(Mine())
    assert get_harness("mine_for_test") is mine and HARNESSES["mine_for_test"] is mine


def test_an_unimportable_harness_module_is_named():
    with pytest.raises(KeyError, match="cannot import module 'no_such_pkg.harness'"):
        get_harness("no_such_pkg.harness:mine")


def test_a_pickled_registry_comes_back_as_the_same_registry():
    # Ray ships a Serve deployment's globals by value (the rewards service reads SCHEMES):
    # a registry must cross processes as a name, never as a copy or a lock
    import pickle

    from ray import cloudpickle

    for reg in (REGISTRY, rewards.SCHEMES, grading.PROFILES, extraction.PROFILES):
        assert pickle.loads(cloudpickle.dumps(reg)) is reg
    local: Registry[object] = Registry("thing made here")
    assert pickle.loads(pickle.dumps(local)) is local
