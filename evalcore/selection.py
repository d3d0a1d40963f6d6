"""Multi-sample answer selection: majority votes and SIRL's instance-enhanced self-consistency.

All pick one answer from a problem's k samples without looking at that problem's answer,
so they can serve as test-time selection as well as report columns.

Selection profiles (majority vote):

* ``tolerance``: answers that grade equal under the grading profile form one cluster
  (:func:`evalcore.metrics.majority_answer`); statuses vote.
* ``orr1``: OR-R1's majority-voting pseudo-label (paper 002, "Majority Voting Reward"):
  only normal numeric results vote ("No Best Solution"/None, i.e. infeasible, unbounded
  and unparseable, are ignored), and answers agree when they are *exactly equal* after
  rounding to the benchmark's decimals (:func:`benchmark_decimals`). Nothing voting: None.

ISC (SIRL, Section 3.1): each candidate r (a sample with a parseable submission) has
features O_r (its answer; answers that grade equal under the profile agree), D_r (the
captured model's sense), N_bin,r and N_int,r (its binary and general-integer variable
counts). psi(f_r) is how many candidates share r's value of feature f (r included);
S(r) = sqrt psi(O_r) + sqrt psi(D_r) + sqrt psi(N_bin,r) + sqrt psi(N_int,r), all
weights 1. A feature that was not captured contributes 0 (no evidence, not agreement):
a sample whose solver was not captured is scored on its objective alone (reported as
unscored). SciPy always minimizes, so its sense is read from the submission
(:func:`resolve_sense`). The highest score wins; ties go to the earliest sample.
"""
from __future__ import annotations

import decimal
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from evalcore.grading import Parsed, grade_parsed, parse_submission
from evalcore.metrics import majority_answer as majority_vote

__all__ = ["SELECTION_PROFILES", "benchmark_decimals", "isc_select", "majority_vote", "orr1_vote",
           "resolve_sense", "select"]

SELECTION_PROFILES = ("tolerance", "orr1")
MAX_DECIMALS = 6


def benchmark_decimals(answers: Iterable[Any]) -> int:
    """The benchmark's rounding: the most decimals any of its numeric answers is written
    with (shortest round-trip repr; capped at 6). A property of the benchmark, not of one
    problem, so a vote using it does not see the problem's answer."""
    most = 0
    for a in answers:
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(float(a)):
            continue
        exp = decimal.Decimal(repr(float(a))).normalize().as_tuple().exponent
        most = max(most, -int(exp) if isinstance(exp, int) and exp < 0 else 0)
    return min(most, MAX_DECIMALS)


def orr1_vote(parsed: Sequence[Parsed], decimals: int) -> float | None:
    """OR-R1's majority vote over parsed submissions: numbers only, compared exactly after
    ``round(x, decimals)``; the most frequent rounded value wins, ties to the value seen
    first. Returns the first submission (unrounded) of the winning value; None if no number
    was submitted."""
    votes = [parse_submission(p) for p in parsed]  # NaN from a pandas column -> None (no vote)
    nums = [(round(p, decimals), p) for p in votes if isinstance(p, float)]
    if not nums:
        return None
    counts = Counter(r for r, _ in nums)  # insertion-ordered: most_common breaks ties by first seen
    best = counts.most_common(1)[0][0]
    return next(p for r, p in nums if r == best)


def select(parsed: Sequence[Parsed], profile: str, selection: str = "tolerance", decimals: int = MAX_DECIMALS) -> Parsed:
    """The majority answer under a selection profile (:data:`SELECTION_PROFILES`)."""
    if selection == "tolerance":
        return majority_vote(list(parsed), profile)
    if selection == "orr1":
        return orr1_vote(parsed, decimals)
    raise ValueError(f"unknown selection profile {selection!r}; known: {', '.join(SELECTION_PROFILES)}")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-2, 1e-4 * max(abs(a), abs(b)))


def resolve_sense(model: Any, submitted: Parsed) -> str | None:
    """The problem's optimization sense behind a captured model.

    SciPy records (``library`` ``scipy.*``) always minimize; a program maximizes by
    negating the objective and submitting ``-res.fun``. Their sense is ``"min"`` when the
    submission equals the solver's objective, ``"max"`` when it equals its negation, else
    (or for an objective of about 0, where the two coincide) None. Other libraries report
    the sense they were given."""
    if not isinstance(model, dict):
        return None
    if not str(model.get("library", "")).startswith("scipy"):
        s = model.get("sense")
        return s if s in ("min", "max") else None
    obj = model.get("objective")
    if not isinstance(submitted, float) or not isinstance(obj, (int, float)) or abs(obj) <= 1e-2:
        return None
    as_min, as_max = _close(submitted, obj), _close(submitted, -obj)
    if as_min and not as_max:
        return "min"
    if as_max and not as_min:
        return "max"
    return None


def _feature(fm: Any, name: str) -> Any:
    if not isinstance(fm, dict):
        return None
    return fm.get(name)


def isc_select(parsed: Sequence[Any], models: Sequence[Any], profile: str) -> tuple[Any, list[float]]:
    """SIRL instance-enhanced self-consistency: the selected answer and every candidate's
    score (None-answer candidates score 0 and are never selected). See the module doc.
    ``models`` are the captured models (dicts or None); a SciPy model's sense is resolved
    against its candidate's submission here."""
    parsed = [parse_submission(p) for p in parsed]  # NaN from a pandas column -> None (not a candidate)
    cand = [i for i, p in enumerate(parsed) if p is not None]
    scores = [0.0] * len(parsed)
    if not cand:
        return None, scores
    feats = {i: {"sense": resolve_sense(models[i], parsed[i]),
                 "n_binary": _feature(models[i], "n_binary"),
                 "n_integer": _feature(models[i], "n_integer")} for i in cand}
    # O: greedy clustering of answers that grade equal (as the majority vote does)
    reps: list[Any] = []
    cluster = {}
    for i in cand:
        for j, rep in enumerate(reps):
            if grade_parsed(parsed[i], rep, profile):
                cluster[i] = j
                break
        else:
            reps.append(parsed[i])
            cluster[i] = len(reps) - 1
    o_count = {j: sum(1 for i in cand if cluster[i] == j) for j in range(len(reps))}
    for i in cand:
        s = math.sqrt(o_count[cluster[i]])
        for name in ("sense", "n_binary", "n_integer"):
            v = feats[i][name]
            if v is None:
                continue
            psi = sum(1 for k in cand if feats[k][name] == v)
            s += math.sqrt(psi)
        scores[i] = s
    best = max(cand, key=lambda i: (scores[i], -i))
    return parsed[best], scores


def unscored(parsed: Sequence[Any], models: Sequence[Any]) -> int:
    """Candidates (parseable submissions) without a captured solver model: ISC has no
    structural evidence for them."""
    return sum(1 for p, m in zip(parsed, models) if parse_submission(p) is not None and not isinstance(m, dict))
