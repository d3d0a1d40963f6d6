"""Multi-sample answer selection: majority votes and SIRL's instance-enhanced self-consistency.

All pick one answer from a problem's k samples without looking at that problem's answer,
so they can serve as test-time selection as well as report columns.

Selection profiles (majority vote):

* ``tolerance``: answers that grade equal under the grading profile form one cluster
  (:func:`opteval.evalcore.metrics.majority_answer`); statuses vote.
* ``orr1``: OR-R1's released voting (SCUTE-ZZ/OR-R1@baea665 ``02_grpo_train_8b.py``, the rule
  :func:`opteval.evalcore.rewards_released.orr1_vote` transcribes): only numbers vote (infeasible,
  unbounded and nothing submitted never do), each as ``int(float(x))`` (truncated, as the
  released code keys its counts), and a value wins only with at least two votes; the first
  value to reach the highest count wins a tie. No winner: None (a wrong answer). So a problem
  with one sample never has an ``orr1@n`` answer, as in OR-R1's training chunks.

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

import math
from collections.abc import Sequence
from typing import Any

from opteval.evalcore.grading import Parsed, grade_parsed, parse_submission
from opteval.evalcore.metrics import majority_answer as majority_vote
from opteval.evalcore.rewards_released import orr1_vote as released_vote

__all__ = ["SELECTION_PROFILES", "isc_select", "majority_vote", "orr1_vote",
           "resolve_sense", "select"]

SELECTION_PROFILES = ("tolerance", "orr1")


def orr1_vote(parsed: Sequence[Parsed]) -> float | None:
    """OR-R1's released vote over parsed submissions (:data:`SELECTION_PROFILES`' ``orr1``): the
    winning ``int(float(x))`` as a float, or None when no value has two votes. Numbers are
    handed to the released rule as the strings its footer would print."""
    votes = [parse_submission(p) for p in parsed]  # NaN from a pandas column -> None (no vote)
    winner = released_vote([repr(v) if isinstance(v, float) and math.isfinite(v) else None for v in votes])
    return None if winner is None else float(winner)


def select(parsed: Sequence[Parsed], profile: str, selection: str = "tolerance") -> Parsed:
    """The majority answer under a selection profile (:data:`SELECTION_PROFILES`)."""
    if selection == "tolerance":
        return majority_vote(list(parsed), profile)
    if selection == "orr1":
        return orr1_vote(parsed)
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
