"""Multi-sample answer selection: majority vote and SIRL's instance-enhanced self-consistency.

Both pick one answer from a problem's k samples without looking at the answer key, so they
can serve as test-time selection as well as report columns.

ISC (SIRL, Section 3.1): each candidate r (a sample with a parseable submission) has
features O_r (its answer; answers that grade equal under the profile agree), D_r (the
captured model's sense), N_bin,r and N_int,r (its binary and general-integer variable
counts). psi(f_r) is how many candidates share r's value of feature f (r included);
S(r) = sqrt psi(O_r) + sqrt psi(D_r) + sqrt psi(N_bin,r) + sqrt psi(N_int,r), all
weights 1. A feature that was not captured contributes 0 (no evidence, not agreement).
The highest score wins; ties go to the earliest sample, like the majority vote.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from evalcore.grading import grade_parsed
from evalcore.metrics import majority_answer as majority_vote

__all__ = ["majority_vote", "isc_select"]


def _feature(fm: Any, name: str) -> Any:
    if not isinstance(fm, dict):
        return None
    v = fm.get(name)
    return None if v is None else v


def isc_select(parsed: Sequence[Any], models: Sequence[Any], profile: str) -> tuple[Any, list[float]]:
    """SIRL instance-enhanced self-consistency: the selected answer and every candidate's
    score (None-answer candidates score 0 and are never selected). See the module doc."""
    cand = [i for i, p in enumerate(parsed) if p is not None]
    scores = [0.0] * len(parsed)
    if not cand:
        return None, scores
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
            v = _feature(models[i], name)
            if v is None:
                continue
            psi = sum(1 for k in cand if _feature(models[k], name) == v)
            s += math.sqrt(psi)
        scores[i] = s
    best = max(cand, key=lambda i: (scores[i], -i))
    return parsed[best], scores
