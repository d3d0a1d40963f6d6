"""opteval.evalcore.rewards: the three schemes on hand-made execution results (no sandbox, no Ray)."""
from __future__ import annotations

import pytest

from opteval.evalcore.rewards import (
    ORR1_FIELDS,
    RewardItem,
    UnknownSchemeError,
    orr1_format,
    score,
    sirl_accurate,
)
from opteval.evalcore.sandbox.types import ERROR, OK, TIMEOUT, ExecResult

SIRL_TEXT = "<think>plan</think>\n<model>max 3x+2y</model>\n<python>\n```python\nsubmit(12)\n```\n</python>"
ORR1_TEXT = "\n".join(ORR1_FIELDS) + "\nx = 1\n```\n"


def ok(value=None, models=()):
    return ExecResult(outcome=OK, submission=value, models=list(models))


def binary_model():
    return {"library": "pulp", "sense": "max", "n_vars": 3, "n_continuous": 1, "n_binary": 2, "n_integer": 0,
            "n_constraints": 2, "status": "optimal", "objective": 12.0}


def items(*rows):
    return [RewardItem(*r) for r in rows]


def test_correct_is_one_or_zero_by_the_grading_profile():
    its = items(("a", "c", 12), ("b", "c", 12), ("c", "c", 12), ("d", "c", "infeasible"))
    res = [ok(12.0), ok(12.5), None, ok("No Best Solution")]
    got = score("correct", its, res, "submit", "optagentbench")
    assert [r.reward for r in got] == [1.0, 0.0, 0.0, 1.0]
    assert [r.correct for r in got] == [True, False, False, True]
    assert got[0].parts == {"correct": 1.0}
    # orlm rounds to integers and allows 5%: 12.4 rounds to 12
    assert score("correct", its[:1], [ok(12.4)], "submit", "orlm")[0].reward == 1.0
    assert score("correct", its[:1], [ok(12.4)], "submit", "optagentbench")[0].reward == 0.0


def test_sirl_stage2_adds_up_all_four_terms():
    got = score("sirl", items(("p", SIRL_TEXT, 12)), [ok(12.0, [binary_model()])], "submit", "sirl")[0]
    assert got.parts == {"format": 0.5, "execution": 1.0, "accuracy": 2.0, "bonus": 1.0}
    assert got.reward == 4.5 and got.correct is True


def test_sirl_terms_fail_one_at_a_time():
    # tags out of order: no format; a crashed run: no execution, but a submission before the crash still counts
    bad_order = "<model>m</model><think>t</think><python>```python\nsubmit(12)\n```</python>"
    crashed = ExecResult(outcome=ERROR, submission=12.0, models=[binary_model()])
    got = score("sirl", items(("p", bad_order, 12)), [crashed], "submit", "sirl")[0]
    assert got.parts == {"format": 0.0, "execution": 0.0, "accuracy": 2.0, "bonus": 1.0}
    # wrong value: no accuracy and so no bonus, even with binary variables
    got = score("sirl", items(("p", SIRL_TEXT, 12)), [ok(12.02, [binary_model()])], "submit", "sirl")[0]
    assert got.parts == {"format": 0.5, "execution": 1.0, "accuracy": 0.0, "bonus": 0.0}
    # correct but continuous only: no bonus
    lp = {**binary_model(), "n_binary": 0, "n_continuous": 3}
    got = score("sirl", items(("p", SIRL_TEXT, 12)), [ok(12.0, [lp])], "submit", "sirl")[0]
    assert got.parts["bonus"] == 0.0 and got.reward == 3.5
    # stage 1 never has a bonus term
    got = score("sirl-stage1", items(("p", SIRL_TEXT, 12)), [ok(12.0, [binary_model()])], "submit", "sirl")[0]
    assert got.parts == {"format": 0.5, "execution": 1.0, "accuracy": 2.0} and got.reward == 3.5
    # no code at all
    got = score("sirl", items(("p", "no code here", 12)), [None], "submit", "sirl")[0]
    assert got.reward == 0.0 and got.correct is False


def test_sirl_accuracy_is_absolute_0_01_inclusive_while_correct_follows_the_profile():
    assert sirl_accurate(1160.01, 1160.0) and sirl_accurate(-0.01, 0.0)
    assert not sirl_accurate(1160.0101, 1160.0)
    assert sirl_accurate("infeasible", "infeasible") and not sirl_accurate("infeasible", 0.0)
    got = score("sirl", items(("p", SIRL_TEXT, 1160)), [ok(1160.005)], "submit", "sirl")[0]
    assert got.parts["accuracy"] == 2.0 and got.correct is False  # sirl profile: relative 1e-6


def test_orr1_format_counts_the_six_fields():
    assert orr1_format(ORR1_TEXT) == 1.0
    assert orr1_format("") == 0.0
    # ORLM writes "### Decision Variables:", which contains the "## Decision Variables:" field
    assert orr1_format("### Decision Variables:\n## Constraints:\n") == pytest.approx(2 / 6)


def test_orr1_votes_within_each_id_group_over_numbers_only():
    its = items(("g1", ORR1_TEXT, None), ("g1", ORR1_TEXT, None), ("g2", ORR1_TEXT, 5), ("g1", ORR1_TEXT, None),
                ("g1", "prose", None), ("g2", ORR1_TEXT, 5))
    res = [ok(7.0), ok("infeasible"), ok(5.0), ok(7.0), None, ExecResult(outcome=TIMEOUT)]
    got = score("orr1", its, res, "submit", "optagentbench")
    # g1: 7, infeasible (does not vote), 7, no code -> majority 7
    assert [r.parts["voting"] for r in got] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert [r.parts["code"] for r in got] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert got[0].reward == 3.0 and got[4].reward == 0.0
    # answers are optional for orr1; correct is None without one, graded with one
    assert got[0].correct is None and got[2].correct is True and got[5].correct is False


def test_orr1_majority_clusters_under_the_grading_profile_and_ties_go_first():
    its = items(*[("g", ORR1_TEXT, None)] * 4)
    got = score("orr1", its, [ok(100.0), ok(100.4), ok(90.0), ok(90.0)], "submit", "orlm")
    assert [r.parts["voting"] for r in got] == [1.0, 1.0, 0.0, 0.0]  # 100 and 100.4 agree under orlm; tie -> first
    got = score("orr1", its, [ok(100.0), ok(100.4), ok(90.0), ok(90.0)], "submit", "optagentbench")
    assert [r.parts["voting"] for r in got] == [0.0, 0.0, 1.0, 1.0]


def test_bad_names_and_missing_answers_are_refused():
    with pytest.raises(UnknownSchemeError, match="known: correct, orr1, orr1-released, sirl, sirl-released, sirl-stage1"):
        score("nope", items(("a", "c", 1)), [None], "submit", "optagentbench")
    with pytest.raises(ValueError, match="needs an answer.*'a'"):
        score("correct", items(("a", "c", None)), [None], "submit", "optagentbench")
    with pytest.raises(ValueError, match="1 items but 2 results"):
        score("correct", items(("a", "c", 1)), [None, None], "submit", "optagentbench")


# A program that never submits: comment-only code runs to a clean exit with nothing submitted
# (issue 27: two such programs got SIRL's execution credit of 1.0).
COMMENT_ONLY = ExecResult(outcome=OK, stdout="", submission=None)


@pytest.mark.parametrize("scheme", ["sirl", "sirl-stage1"])
def test_sirl_gives_no_execution_credit_to_a_program_that_never_submits(scheme):
    got = score(scheme, items(("p", SIRL_TEXT, 12)), [COMMENT_ONLY], "submit", "sirl")[0]
    assert got.parts["execution"] == 0.0 and got.parts["accuracy"] == 0.0
    assert got.reward == 0.5 and got.correct is False  # the format term only
    ran = score(scheme, items(("p", SIRL_TEXT, 12)), [ok(11.0)], "submit", "sirl")[0]
    assert ran.parts["execution"] == 1.0  # ran and submitted (a wrong value): execution credit


def test_orr1_gives_no_code_credit_to_a_program_that_never_submits():
    got = score("orr1", items(("g", ORR1_TEXT, None), ("g", ORR1_TEXT, None)), [COMMENT_ONLY, ok(3.0)],
                "submit", "optagentbench")
    assert [r.parts["code"] for r in got] == [0.0, 1.0]
    assert got[0].reward == 1.0  # format only: no code, no vote


def test_correct_is_zero_for_a_program_that_never_submits():
    got = score("correct", items(("p", "```python\n# nothing\n```", 12)), [COMMENT_ONLY], "submit", "optagentbench")[0]
    assert got.reward == 0.0 and got.correct is False
