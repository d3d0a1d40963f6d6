"""Parsing and the three grading profiles, at their tolerance boundaries."""
from __future__ import annotations

import decimal
import fractions

import numpy as np
import pytest

from opteval.evalcore.grading import (
    PROFILES,
    UnknownProfileError,
    grade,
    parse_submission,
    round_half_away,
    submission_fields,
)


@pytest.mark.parametrize(
    "raw, parsed",
    [
        (42, 42.0),
        (-3.5, -3.5),
        ("1.2e+05", 120000.0),
        ("1,234.5", 1234.5),
        ("1,234,567", 1234567.0),
        (" 42 ", 42.0),
        ("-.5", -0.5),
        ("$1,000", 1000.0),
        ("-$5", -5.0),
        ("5€", 5.0),
        (b"17", 17.0),
        (np.float32(1.5), 1.5),
        (np.int64(7), 7.0),
        (np.array(3.0), 3.0),
        (decimal.Decimal("2.25"), 2.25),
        (fractions.Fraction(1, 4), 0.25),
        ("Infeasible", "infeasible"),
        ("INFEASIBLE", "infeasible"),
        ("No Best Solution", "infeasible"),
        ("infeasible problem", "infeasible"),
        ("The problem is infeasible.", "infeasible"),
        ("unbounded", "unbounded"),
        ("Unbounded", "unbounded"),
        ("UNBOUNDED", "unbounded"),
    ],
)
def test_parse_accepts(raw, parsed):
    assert parse_submission(raw) == parsed


@pytest.mark.parametrize(
    "raw",
    [
        None, True, False, np.bool_(True), float("nan"), float("inf"), -float("inf"), np.float64("nan"),
        "nan", "inf", "-Infinity", "1e400", "", "   ", "abc", "42 units", "50%", "1,5", "1_000", "0x10",
        "$$5", "+-5", "INF_OR_UNBD", "infeasible or unbounded", [1.0], {"x": 1}, np.array([1.0, 2.0]),
        10**400, b"\xff\xfe", complex(1, 0), "Optimal objective 12",
    ],
)
def test_parse_rejects(raw):
    assert parse_submission(raw) is None


def test_none_nan_garbage_never_correct_under_any_profile():
    for profile in PROFILES:
        for bad in (None, float("nan"), "garbage", True):
            assert not grade(bad, 0.0, profile)
            assert not grade(bad, bad, profile)
            assert not grade(1.0, bad, profile)


# -- optagentbench: |a-b| <= max(1e-2, 1e-4*max(|a|,|b|)) ------------------------------------


@pytest.mark.parametrize(
    "submitted, expected, ok",
    [
        (0.01, 0.0, True),  # absolute tolerance at zero, inclusive
        (-0.01, 0.0, True),
        (0.0101, 0.0, False),
        (100.01, 100.0, True),  # tol = max(0.01, 0.010001)
        (100.0101, 100.0, False),
        (1_000_000.0, 999_900.0, True),  # |diff| = 100 = 1e-4 * 1e6, inclusive
        (1_000_000.01, 999_900.0, False),
        (999_900.0, 1_000_000.0, True),  # symmetric
        (-1_000_000.0, -999_900.0, True),  # negative
        (-1_000_000.02, -999_900.0, False),
        (4.08e35 * (1 + 0.9e-4), 4.08e35, True),  # very large
        (4.08e35 * (1 + 1.1e-4), 4.08e35, False),
        ("1.2e+05", 120_005.0, True),
        ("1,234.5", 1234.51, True),
    ],
)
def test_optagentbench_boundaries(submitted, expected, ok):
    assert grade(submitted, expected) is ok
    assert grade(submitted, expected, "optagentbench") is ok


# -- orlm: Python round (half to even), relative error <= 5%; equal when the answer rounds to 0 -----


def test_round_half_away_from_zero():
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, -0.5, -2.5, 2.4999, 0.49999999999999994)] == [
        1, 2, 3, -1, -3, 2, 0,
    ]
    assert round_half_away(1e20) == 10**20


@pytest.mark.parametrize(
    "submitted, expected, ok",
    [
        (105, 100, True),  # exactly 5%
        (105.4, 100, True),  # rounds to 105
        (105.5, 100, False),  # rounds to 106
        (94.5, 100, False),  # round(94.5) == 94 (even): 6% off
        (95.5, 100, True),  # round(95.5) == 96
        (94.49, 100, False),
        (0.4, 0, True),  # answer 0: must also round to 0
        (-0.4, 0, True),
        (0.5, 0, True),  # round(0.5) == 0 in Python
        (-0.5, 0, True),
        (0.51, 0, False),
        (1.5, 0, False),
        (0, 0.4, True),  # the answer itself rounds to 0
        (2, 2.5, True),  # ORLM uses Python's round: 2.5 -> 2 (half to even)
        (3, 2.5, False),
        (4, 3.5, True),  # 3.5 -> 4
        (-210, -200, True),  # negative
        (-210.5, -200, True),  # round(-210.5) == -210 (even)
        (-211.5, -200, False),
        (1.05e12, 1e12, True),  # very large
        (1.0500001e12, 1e12, False),
    ],
)
def test_orlm_boundaries(submitted, expected, ok):
    assert grade(submitted, expected, "orlm") is ok


# -- sirl: |a-b|/(|b|+1) < 1e-6, strict -----------------------------------------------------------


@pytest.mark.parametrize(
    "submitted, expected, ok",
    [
        (0.0, 0.0, True),
        (9.99e-7, 0.0, True),
        (1e-6, 0.0, False),  # strict
        (999_999.999, 999_999.0, True),
        (1_000_000.0, 999_999.0, False),  # 1/1e6 is not < 1e-6
        (-999_999.5, -999_999.0, True),  # negative
        (-1_000_000.0, -999_999.0, False),
        (4.08e35 * (1 + 0.9e-6), 4.08e35, True),
        (4.08e35 * (1 + 1.1e-6), 4.08e35, False),
        (100.01, 100.0, False),  # passes optagentbench, fails sirl
    ],
)
def test_sirl_boundaries(submitted, expected, ok):
    assert grade(submitted, expected, "sirl") is ok


def test_sirl_is_relative_to_the_expected_value():
    assert grade(0.0, 1e-6, "sirl")  # |diff| / (1e-6 + 1) < 1e-6
    assert not grade(1e-6, 0.0, "sirl")


# -- semopt: |a-b| < 1e-6, absolute, strict (SemOPT 5.1) ---------------------------------------------


@pytest.mark.parametrize(
    "submitted, expected, ok",
    [
        (0.0, 0.0, True),
        (9.99e-7, 0.0, True),
        (1e-6, 0.0, False),  # strict
        (1.5e-6, 2e-6, True),
        (1234.5 + 5e-7, 1234.5, True),
        (1234.5 + 2e-6, 1234.5, False),  # absolute: a relative rule would pass it
        (999_999.999, 999_999.0, False),  # passes sirl (relative to |b| + 1), fails semopt
        (100.01, 100.0, False),  # passes optagentbench
        (-7.0, -7.0, True),
    ],
)
def test_semopt_boundaries(submitted, expected, ok):
    assert grade(submitted, expected, "semopt") is ok


def test_semopt_profile_leaves_the_others_as_they_were():
    assert grade(999_999.999, 999_999.0, "sirl") and grade(100.01, 100.0) and grade(100.5, 100, "orlm")
    assert PROFILES["semopt"].description.startswith("|a-b| < 1e-6")
    assert [p for p in PROFILES if p != "semopt"][:4] == ["optagentbench", "optagentbench_numpy", "orlm", "sirl"]


# -- statuses ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_statuses_match_exactly_and_never_a_number(profile):
    assert grade("INFEASIBLE", "infeasible", profile)
    assert grade("No Best Solution", "infeasible", profile)
    assert grade("Unbounded", "unbounded", profile)
    assert not grade("infeasible", "unbounded", profile)
    assert not grade("infeasible", 0.0, profile)
    assert not grade(0, "infeasible", profile)
    assert not grade(-99999, "infeasible", profile)
    assert not grade("unbounded", 1e300, profile)


def test_numpy_and_string_inputs_grade_like_floats():
    assert grade(np.float64(12.0), "12")
    assert grade(np.int32(12), 12.004)


def test_unknown_profile_names_known_ones():
    with pytest.raises(UnknownProfileError, match=r"'strict'.*optagentbench, optagentbench_numpy, orlm, semopt, sirl"):
        grade(1.0, 1.0, "strict")
    with pytest.raises(UnknownProfileError):
        grade(None, 1.0, "strict")  # a typo fails even when the submission is missing


def test_submission_fields_for_the_ledger():
    assert submission_fields(None) == {"submission": None, "submission_value": None, "submission_status": None}
    assert submission_fields(2) == {"submission": "2.0", "submission_value": 2.0, "submission_status": None}
    assert submission_fields(" INFEASIBLE ") == {
        "submission": " INFEASIBLE ", "submission_value": None, "submission_status": "infeasible",
    }
    assert submission_fields("n/a") == {"submission": "n/a", "submission_value": None, "submission_status": None}
