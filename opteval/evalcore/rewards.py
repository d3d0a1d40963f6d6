"""Verifiable rewards for RL trainers: pure schemes over (completion, answer, execution result).

The sandbox run happens elsewhere (executor actors, a Serve replica, a local fork server);
this module only turns what came back into a number, so the same rule scores a trainer's
rollouts and an evaluation. Every scheme returns one :class:`Reward` per completion:
``reward`` (what the trainer optimises), ``correct`` (graded with the *grading profile*
against the answer; None when no answer was given) and ``parts`` (the named terms that
sum to ``reward``, for logging).

Schemes (``SCHEMES``):

``correct``
    1 when the submission grades correct under the grading profile, else 0.
``sirl`` / ``sirl-stage1``
    SIRL's staged rule-based reward (SIRL paper, Section 3.3 and Appendix Section 10):
    format 0.5 + execution 1 + accuracy 2, plus in stage 2 (``sirl``) a bonus of 1. See
    :func:`sirl_reward`.
``orr1``
    OR-R1's composite reward (OR-R1 paper, "Reward Function", Eqs. 5-8): format (fields found
    / 6) + valid code (0/1) + majority voting (0/1) over the group of completions of one
    prompt. See :func:`orr1_rewards`. The answer is not used by the reward (OR-R1 trains on
    unlabelled data); ``correct`` still reports it when an answer is given.

``require_solve`` (an option of every scheme, :func:`score`): an answer no solve produced
(``answer_source`` ``unsolved``: a typed or memorised number, ``opteval.evalcore.formulation``) earns
no answer term: ``correct``, ``accuracy``, ``bonus`` and ``voting`` become 0, format and
execution terms stay. Every reward reports its ``answer_source``.

Groups: completions that share an ``id`` are completions of the same prompt (the files of
``jobs/regrade.py`` use the problem id that way); only ``orr1`` looks at groups.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from opteval.evalcore.extraction import extract_submission
from opteval.evalcore.extraction import get_profile as get_extraction
from opteval.evalcore.formulation import verify
from opteval.evalcore.grading import Parsed, grade_parsed, parse_submission
from opteval.evalcore.grading import get_profile as get_grading
from opteval.evalcore.metrics import majority_answer
from opteval.evalcore.reward_registry import (  # noqa: F401  (re-exported: the names callers import from here)
    SCHEMES,
    Reward,
    RewardItem,
    Scheme,
    UnknownSchemeError,
    _Run,
    get_scheme,
    register_scheme,
)
from opteval.evalcore.sandbox.types import OK, ExecResult


def _runs(items: Sequence[RewardItem], results: Sequence[ExecResult | None],
          extraction: str, grading: str) -> list[_Run]:
    if len(items) != len(results):
        raise ValueError(f"{len(items)} items but {len(results)} results")
    out = []
    for item, result in zip(items, results):
        raw = None if result is None else extract_submission(result, extraction)
        parsed = parse_submission(raw)
        expected = parse_submission(item.answer)
        correct = None if item.answer is None else grade_parsed(parsed, expected, grading)
        out.append(_Run(item, result, parsed, correct))
    return out


def _ran_clean(run: _Run) -> bool:
    return run.result is not None and run.result.outcome == OK


def _executed(run: _Run) -> bool:
    """Execution credit: the program ran to a clean exit AND submitted a value the grader reads
    (a number, ``infeasible``, ``unbounded``). A program that only comments, prints or defines
    exits cleanly too, and earned the execution term of 1.0 without solving anything (issue 27);
    SIRL's execution reward is for code that "executes successfully" to solve the model
    (Section 3.3), OR-R1's code term for code that "can correctly call" the solver (Eq. 6): a run
    that submitted nothing did neither."""
    return _ran_clean(run) and run.submission is not None


# -- correct ---------------------------------------------------------------------------------


def correct_rewards(runs: Sequence[_Run], grading: str) -> list[Reward]:
    """1/0 by the grading profile (``opteval.evalcore.grading.grade``); no answer counts as 0."""
    return [Reward(float(bool(r.correct)), r.correct, {"correct": float(bool(r.correct))}) for r in runs]


# -- SIRL ------------------------------------------------------------------------------------

# <think>..</think>, then <model>..</model>, then <python>..</python>, in that order.
_SIRL_TAGS = re.compile(r"<think>.*?</think>.*?<model>.*?</model>.*?<python>.*?</python>", re.S)
SIRL_FORMAT = 0.5
SIRL_EXECUTION = 1.0
SIRL_ACCURACY = 2.0
SIRL_BONUS = 1.0
SIRL_TOLERANCE = 0.01
_SLACK = 1e-9  # 1160.01 - 1160 is 0.0100000000002 in binary; the rule means 0.01 as written


def sirl_accurate(submitted: Parsed, expected: Parsed) -> bool:
    """SIRL's training accuracy test |y - y*| <= 0.01 (Appendix Section 10). A status
    (infeasible/unbounded) is accurate only against the same status, as in our grading."""
    if submitted is None or expected is None:
        return False
    if isinstance(submitted, str) or isinstance(expected, str):
        return submitted == expected
    return abs(submitted - expected) <= SIRL_TOLERANCE * (1.0 + _SLACK)


def sirl_advanced(result: ExecResult | None) -> bool:
    """Stage-2 feature test on the captured model structure (``ExecResult.models``).

    SIRL inspects the .lp file for advanced structures: Big-M, binary variables, nonlinear
    terms (Section 3.3). The capture records variable counts, not coefficients, so the test
    here is "some solved model has a binary variable", which Big-M indicator formulations
    also need. Nonlinear terms and Big-M constants themselves are not detected; a model from
    a library without a capture hook (``evalcore/sandbox/capture.py`` hooks PuLP, PySCIPOpt,
    highspy, SciPy, gurobipy and coptpy) never earns the bonus.
    """
    if result is None:
        return False
    return any(isinstance(m, dict) and "error" not in m and (m.get("n_binary") or 0) > 0 for m in result.models)


def sirl_reward(run: _Run, stage: int = 2) -> Reward:
    """SIRL's staged reward (SIRL paper, Section 3.3; Appendix Section 10, PDF p. 28).

    * format 0.5 when the completion has ``<think>``, ``<model>`` and ``<python>`` tag pairs
      in that order (the displayed formula gives 0.5; the prose says "binary");
    * execution 1 when the extracted code ran to a clean exit (``outcome == ok``) and submitted
      a value (:func:`_executed`: a comment-only program earns nothing). The code
      comes from the extraction profile, which reads fenced blocks: SIRL's ``<python>``
      section must hold a ```` ```python ```` fence to be found;
    * accuracy 2 when the submitted objective y satisfies |y - y*| <= 0.01
      (:func:`sirl_accurate`; the paper's evaluation uses a relative 1e-6 instead, which is
      the ``sirl`` grading profile and decides ``correct``);
    * stage 2 only: bonus 1 when accuracy holds AND the solved model uses an advanced
      structure (:func:`sirl_advanced`). The prose requires both; the displayed bonus
      formula mentions only the feature.
    """
    text = run.item.completion or ""
    parts = {
        "format": SIRL_FORMAT if _SIRL_TAGS.search(text) else 0.0,
        "execution": SIRL_EXECUTION if _executed(run) else 0.0,
        "accuracy": SIRL_ACCURACY if sirl_accurate(run.submission, parse_submission(run.item.answer)) else 0.0,
    }
    if stage >= 2:
        parts["bonus"] = SIRL_BONUS if parts["accuracy"] and sirl_advanced(run.result) else 0.0
    return Reward(sum(parts.values()), run.correct, parts)


# -- OR-R1 -----------------------------------------------------------------------------------

ORR1_FIELDS = (
    "## Mathematical Model:",
    "## Decision Variables:",
    "## Objective Function:",
    "## Constraints:",
    "## Python Code Solution Using `coptpy`:",
    "```python",
)


def orr1_format(text: str) -> float:
    """Eq. 5: the share of the six required fields present (substring test, so a
    ``### Decision Variables:`` heading also contains ``## Decision Variables:``)."""
    text = text or ""
    return sum(1 for f in ORR1_FIELDS if f in text) / len(ORR1_FIELDS)


def orr1_rewards(runs: Sequence[_Run], grading: str) -> list[Reward]:
    """OR-R1's composite reward R = format + code + voting for ONE group (OR-R1 paper, Eqs. 5-8).

    * format (Eq. 5): :func:`orr1_format`;
    * code (Eq. 6): 1 when "the code can correctly call coptpy"; read here, solver-agnostic,
      as: code was extracted, ran to a clean exit and submitted a value (:func:`_executed`);
    * voting (Eq. 7): 1 when this completion's executed value y_i equals the group's
      majority value y. Only numeric results vote ("No Best Solution" and None are ignored,
      as the paper says); values equal under the grading profile form one cluster
      (``opteval.evalcore.metrics.majority_answer``; ties go to the earliest). No numeric result in
      the group: every voting term is 0.
    """
    numbers = [r.submission if isinstance(r.submission, float) else None for r in runs]
    majority = majority_answer(numbers, grading)
    out = []
    for run, y in zip(runs, numbers):
        parts = {
            "format": orr1_format(run.item.completion),
            "code": 1.0 if _executed(run) else 0.0,
            "voting": 1.0 if y is not None and majority is not None and grade_parsed(y, majority, grading) else 0.0,
        }
        out.append(Reward(sum(parts.values()), run.correct, parts))
    return out


def _grouped(runs: Sequence[_Run], grading: str) -> list[Reward]:
    """Apply :func:`orr1_rewards` per id group, answering in input order."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(r.item.id, []).append(i)
    out: list[Reward | None] = [None] * len(runs)
    for idx in groups.values():
        for i, reward in zip(idx, orr1_rewards([runs[i] for i in idx], grading)):
            out[i] = reward
    return [r for r in out if r is not None]


for _s in (
    Scheme("correct", True, correct_rewards, "1/0 by the grading profile"),
    Scheme("sirl", True, lambda runs, g: [sirl_reward(r, 2) for r in runs],
           "SIRL stage 2: format 0.5 + execution 1 + accuracy 2 + bonus 1"),
    Scheme("sirl-stage1", True, lambda runs, g: [sirl_reward(r, 1) for r in runs],
           "SIRL stage 1: format 0.5 + execution 1 + accuracy 2"),
    Scheme("orr1", False, _grouped, "OR-R1: format/6 + valid code + majority vote in the id group"),
):
    SCHEMES.add(_s.name, _s)


def check_names(scheme: str, extraction: str, grading: str) -> Scheme:
    """Resolve all three names up front (each unknown one raises, naming the known ones)."""
    get_extraction(extraction)
    get_grading(grading)
    return get_scheme(scheme)


ANSWER_TERMS = ("correct", "accuracy", "bonus", "voting")  # what require_solve zeroes for an unsolved answer


def score(scheme: str, items: Sequence[RewardItem], results: Sequence[ExecResult | None],
          extraction: str, grading: str, require_solve: bool = False) -> list[Reward]:
    """One :class:`Reward` per item, in order. ``results[i]`` is the run of
    ``extract_code(items[i].completion, extraction)``, None when there was no code.
    ``require_solve``: an unsolved answer earns no answer term (module docstring)."""
    s = check_names(scheme, extraction, grading)
    if s.needs_answer:
        missing = [it.id for it in items if it.answer is None]
        if missing:
            raise ValueError(f"scheme {scheme!r} needs an answer for every item; none for id(s) {missing[:10]}")
    runs = _runs(items, results, extraction, grading)
    out = []
    for run, reward in zip(runs, s.score(runs, grading), strict=True):
        source = verify([run.result] if run.result is not None else [], run.submission, grading).answer_source
        if require_solve and source == "unsolved":
            parts = {k: (0.0 if k in ANSWER_TERMS else v) for k, v in reward.parts.items()}
            reward = dataclasses.replace(reward, reward=sum(parts.values()), parts=parts)
        out.append(dataclasses.replace(reward, answer_source=source))
    return out

