"""Answer parsing and grading profiles.

``grade(submitted, expected, profile)`` is the one place that decides correctness. Both
sides go through :func:`parse_submission`, so a raw value a program passed to
``submit(...)`` and a stored answer are compared the same way.

Parsing (what counts as an answer)
----------------------------------
* numbers: ``int``/``float``, ``decimal``/``fractions``, numpy scalars and 0-d arrays
  -> ``float``; non-finite values (NaN, +-inf) -> None.
* numeric strings, after trimming whitespace: plain and scientific notation
  (``"1.2e+05"``, ``" 42 "``, ``"-.5"``); thousands separators only in the strict
  ``1,234,567.8`` grouping (``"1,5"`` is ambiguous between locales -> None); one currency
  symbol (``$ € £ ¥``) before or after the number (``"$1,000"``, ``"-$5"``, ``"5€"``) is
  accepted because cost-minimisation answers are often written that way and the symbol
  cannot change the value. Anything else around the number (units, ``%``, words,
  underscores, hex, ``"nan"``, ``"inf"``) -> None: guessing would risk marking garbage
  correct.
* status words, case-insensitive, with ``_ - : .`` read as spaces: a fixed set of phrases
  meaning infeasible (``Infeasible``, ``INFEASIBLE``, ``infeasible problem``,
  ``No Best Solution``, ``no feasible solution``, ...) or unbounded (``unbounded``,
  ``Unbounded``, ``problem is unbounded``, ...). Ambiguous solver statuses such as
  Gurobi's ``INF_OR_UNBD`` -> None.
* None, bools (``True`` is not 1 here: a program that submits a flag did not submit an
  objective), containers, bytes that are not text, everything else -> None.

None is never correct, whatever the expected side is.
"""
from __future__ import annotations

import decimal
import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opteval.evalcore.registry import Registry, UnknownNameError

Parsed = float | str | None  # float, "infeasible", "unbounded" or None

INFEASIBLE = "infeasible"
UNBOUNDED = "unbounded"
STATUSES = (INFEASIBLE, UNBOUNDED)

_INFEASIBLE_PHRASES = frozenset(
    {
        "infeasible",
        "infeasible problem",
        "infeasible model",
        "problem infeasible",
        "problem is infeasible",
        "the problem is infeasible",
        "model is infeasible",
        "the model is infeasible",
        "status infeasible",
        "primal infeasible",
        "integer infeasible",
        "not feasible",
        "no feasible solution",
        "no feasible solution found",
        "no best solution",
        "no solution",
        "no solution exists",
    }
)
_UNBOUNDED_PHRASES = frozenset(
    {
        "unbounded",
        "unbounded problem",
        "unbounded model",
        "problem unbounded",
        "problem is unbounded",
        "the problem is unbounded",
        "model is unbounded",
        "the model is unbounded",
        "status unbounded",
        "primal unbounded",
        "objective is unbounded",
        "the objective is unbounded",
    }
)

_SEPARATORS = re.compile(r"[\s_\-:.!]+")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_GROUPED_NUMBER = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?$")


def _parse_status(text: str) -> str | None:
    words = _SEPARATORS.sub(" ", text.lower()).strip()
    if words in _INFEASIBLE_PHRASES:
        return INFEASIBLE
    if words in _UNBOUNDED_PHRASES:
        return UNBOUNDED
    return None


_CURRENCY_FORM = re.compile(
    r"^(?P<s1>[+-]?)\s*(?P<c1>[$€£¥]?)\s*(?P<s2>[+-]?)(?P<num>[^$€£¥+\-\s][^$€£¥]*?)\s*(?P<c2>[$€£¥]?)$"
)


def _strip_currency(s: str) -> str | None:
    """Drop one currency symbol before (``$5``, ``-$5``, ``$-5``) or after (``5€``) the
    number; None for two symbols or two signs."""
    m = _CURRENCY_FORM.match(s)
    if m is None:
        return None
    if (m["c1"] and m["c2"]) or (m["s1"] and m["s2"]):
        return None
    if m["s2"] and not m["c1"]:
        return None  # "+-5"
    return (m["s1"] or m["s2"]) + m["num"]


def _parse_number_text(text: str) -> float | None:
    s = _strip_currency(text)
    if s is None:
        return None
    if _GROUPED_NUMBER.match(s):
        s = s.replace(",", "")
    elif not _PLAIN_NUMBER.match(s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


def parse_submission(x: Any) -> Parsed:
    """Normalize a submitted or expected answer: a finite float, ``"infeasible"``,
    ``"unbounded"``, or None when it is none of these (never correct)."""
    if x is None or isinstance(x, bool):
        return None
    if type(x).__module__ == "numpy":
        # numpy scalars and 0-d arrays; numpy.bool_ is not a number here either.
        if getattr(x, "dtype", None) is not None and x.dtype.kind == "b":
            return None
        if getattr(x, "ndim", 0) != 0:
            return None
        return parse_submission(x.item())
    if isinstance(x, (numbers.Real, decimal.Decimal)):
        try:
            value = float(x)
        except (OverflowError, ValueError):
            return None
        return value if math.isfinite(value) else None
    if isinstance(x, bytes):
        try:
            x = x.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(x, str):
        s = x.strip()
        if not s or len(s) > 200:
            return None
        status = _parse_status(s)
        if status is not None:
            return status
        return _parse_number_text(s)
    return None


# -- profiles ---------------------------------------------------------------------------


def round_half_away(x: float) -> int:
    """Round to the nearest integer, halves away from zero (2.5 -> 3, -2.5 -> -3).

    Python's ``round`` rounds halves to even (2.5 -> 2, 3.5 -> 4), so two answers that
    differ by exactly 1 could round to the same integer or not depending on parity;
    half-away-from-zero is what "rounded to an integer" means on paper, and it is
    symmetric for negative objectives. ``x - floor(x)`` is exact in binary floating
    point, so the 0.5 test has no representation error.
    """
    ax = abs(x)
    f = math.floor(ax)
    r = f + 1 if ax - f >= 0.5 else f
    return int(r) if x >= 0 else -int(r)


# Slack for binary representation on the inclusive optagentbench boundary: 100 vs
# 100.01 differ by 0.010000000000005 in floating point, but by exactly 0.01 as written.
# The error of a difference is below 1e-15 of the operands and the tolerance is at least
# 1e-4 of them, so 1e-9 of the tolerance covers it without widening the rule.
_BOUNDARY_SLACK = 1e-9


def _optagentbench(a: float, b: float) -> bool:
    tol = max(1e-2, 1e-4 * max(abs(a), abs(b)))
    return abs(a - b) <= tol * (1.0 + _BOUNDARY_SLACK)


def _optagentbench_numpy(a: float, b: float) -> bool:
    # The same two tolerances read as numpy.isclose(a, b, rtol=1e-4, atol=1e-2) does:
    # |a - b| <= atol + rtol * |b|, relative to the expected side. It is looser than the
    # max() reading everywhere (the sum exceeds the max), by up to 1e-2 near |b| ~ 100
    # where the two tolerances are equal. Kept for the grading-sensitivity table.
    return abs(a - b) <= (1e-2 + 1e-4 * abs(b)) * (1.0 + _BOUNDARY_SLACK)


def _orlm(a: float, b: float) -> bool:
    # Both rounded to integers first, then |ra - rb| <= 5% of |rb|, in exact integer
    # arithmetic. When the rounded answer is 0 the rule is absolute (|ra - rb| <= 0.05),
    # which for integers means equal: the submission must also round to 0.
    # Rounding is Python's round() (halves to even, 2.5 -> 2), because ORLM's own
    # eval/execute.py uses it and this profile exists to reproduce published ORLM numbers.
    ra, rb = round(a), round(b)
    if rb == 0:
        return ra == 0
    return abs(ra - rb) * 100 <= 5 * abs(rb)


def _sirl(a: float, b: float) -> bool:
    return abs(a - b) / (abs(b) + 1.0) < 1e-6


def _semopt(a: float, b: float) -> bool:
    # SemOPT 5.1: "correct when its solver result differs from the ground truth by less than 10^-6":
    # an absolute difference, strict. Tighter than ``sirl`` away from 0 (|b| + 1 scales that one).
    return abs(a - b) < 1e-6


@dataclass(frozen=True)
class GradingProfile:
    """A named numeric-match rule; statuses always match exactly, never a number.

    ``numbers_match(submitted, expected)`` may be asymmetric (``orlm`` and ``sirl`` are
    relative to the expected value).
    """

    name: str
    description: str
    numbers_match: Callable[[float, float], bool]


PROFILES: Registry[GradingProfile] = Registry("grading profile")
for _p in (
    GradingProfile("optagentbench", "|a-b| <= max(1e-2, 1e-4*max(|a|,|b|))", _optagentbench),
    GradingProfile("optagentbench_numpy", "|a-b| <= 1e-2 + 1e-4*|b| (numpy.isclose reading)",
                   _optagentbench_numpy),
    GradingProfile(
        "orlm",
        "round both with Python round (half to even, as ORLM); |ra-rb| <= 5% of |rb|, equal when rb == 0",
        _orlm,
    ),
    GradingProfile("sirl", "|a-b|/(|b|+1) < 1e-6", _sirl),
    GradingProfile("semopt", "|a-b| < 1e-6 (SemOPT's accuracy rule)", _semopt),
):
    PROFILES.add(_p.name, _p)
DEFAULT_PROFILE = "optagentbench"

# the one error class of every registry (opteval.evalcore.registry), under the name callers know
UnknownProfileError = UnknownNameError


def register_profile(profile: GradingProfile) -> GradingProfile:
    """The one way in for a grading profile: ``register_profile(GradingProfile(name, description,
    numbers_match))`` (from a plugin's entry point, or the module that defines it); then every
    ``grading.profile`` / benchmark ``grading:`` setting and :func:`grade` accept its name. A taken
    name is an error."""
    return PROFILES.add(profile.name, profile)


def get_profile(name: str) -> GradingProfile:
    return PROFILES[name]


def grade_parsed(submitted: Parsed, expected: Parsed, profile: str = DEFAULT_PROFILE) -> bool:
    """:func:`grade` for values already through :func:`parse_submission`."""
    rule = get_profile(profile)
    if submitted is None or expected is None:
        return False
    if isinstance(submitted, str) or isinstance(expected, str):
        return submitted == expected  # status vs status exactly; status vs number never
    return rule.numbers_match(submitted, expected)


def grade(submitted: Any, expected: Any, profile: str = DEFAULT_PROFILE) -> bool:
    """True when the submission matches the expected answer under ``profile``.

    Both sides are parsed with :func:`parse_submission`; an unparseable side is never
    correct. An unknown profile raises :class:`UnknownProfileError` even when a side is
    None, so a typo in a config fails on the first trajectory rather than scoring 0.
    """
    get_profile(profile)
    return grade_parsed(parse_submission(submitted), parse_submission(expected), profile)


def grade_submission(submission: Any, expected: Parsed, profile: str = DEFAULT_PROFILE) -> bool:
    """Grade a ``records.Submission`` (or None) against a parsed expected answer.

    With ``submission.alternate`` set (SIRL's variable-type forgiveness, made by the ``sirl``
    harness), a wrong first submission is forgiven when the alternate matches -- unless the
    alternate is a status: SIRL accepts a retried run only when it is not infeasible.
    """
    if submission is None:
        return False
    if grade_parsed(parse_submission(submission.raw), expected, profile):
        return True
    alternate = parse_submission(getattr(submission, "alternate", None))
    return isinstance(alternate, float) and grade_parsed(alternate, expected, profile)


def submission_fields(raw: Any) -> dict[str, Any]:
    """The ledger's three submission columns for a raw submitted value:
    ``submission`` (text: a number's repr, the status, or the raw string; None when
    nothing was submitted), ``submission_value`` (parsed float or None) and
    ``submission_status`` (parsed status or None)."""
    parsed = parse_submission(raw)
    if raw is None:
        text = None
    elif isinstance(parsed, float) and not isinstance(raw, str):
        text = repr(parsed)
    else:
        text = raw if isinstance(raw, str) else repr(raw)
    return {
        "submission": text,
        "submission_value": parsed if isinstance(parsed, float) else None,
        "submission_status": parsed if isinstance(parsed, str) else None,
    }
