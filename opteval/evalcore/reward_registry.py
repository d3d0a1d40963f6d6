"""The reward schemes' registry and the types every scheme module shares.

A leaf: ``opteval.evalcore.rewards`` (the paper-text schemes) and ``opteval.evalcore.rewards_released`` (the
released-code ones) both register here, and ``opteval.evalcore.rewards`` imports the released module so
one import loads every scheme; neither imports the other back.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opteval.evalcore.grading import Parsed
from opteval.evalcore.registry import Registry, UnknownNameError
from opteval.evalcore.sandbox.types import ExecResult

# the one error class of every registry (opteval.evalcore.registry), under the name callers know
UnknownSchemeError = UnknownNameError


@dataclass(frozen=True)
class RewardItem:
    """One completion to score. ``answer`` None: no label (only ``orr1`` accepts that)."""

    id: str
    completion: str
    answer: Any = None


@dataclass(frozen=True)
class Reward:
    reward: float
    correct: bool | None
    parts: dict[str, float] = field(default_factory=dict)
    # solve / unsolved / no_submission (opteval.evalcore.formulation; set by opteval.evalcore.rewards.score)
    answer_source: str | None = None

    def to_json(self, item_id: str) -> dict[str, Any]:
        out = {"id": item_id, "reward": self.reward, "correct": self.correct, "parts": dict(self.parts)}
        if self.answer_source is not None:
            out["answer_source"] = self.answer_source
        return out


@dataclass(frozen=True)
class _Run:
    """What scoring needs from one completion's run (None result: no code was found)."""

    item: RewardItem
    result: ExecResult | None
    submission: Parsed  # parsed with grading.parse_submission
    correct: bool | None


@dataclass(frozen=True)
class Scheme:
    name: str
    needs_answer: bool
    score: Callable[[Sequence[_Run], str], list[Reward]]
    description: str


SCHEMES: Registry[Scheme] = Registry("reward scheme")
# the released training code's schemes register when opteval.evalcore.rewards_released is imported,
# which happens the first time one of them is named
SCHEMES.add_lazy("sirl-released", "opteval.evalcore.rewards_released:sirl_released")
SCHEMES.add_lazy("orr1-released", "opteval.evalcore.rewards_released:orr1_released")


def register_scheme(name: str, *, needs_answer: bool, description: str
                    ) -> Callable[[Callable[[Sequence[_Run], str], list[Reward]]], Callable[[Sequence[_Run], str], list[Reward]]]:
    """The one way in for a reward scheme, as a decorator on its ``score(runs, grading) ->
    list[Reward]``: ``@register_scheme("mine", needs_answer=True, description="...")``. A taken
    name is an error; the decorated function is returned unchanged."""
    def add(score: Callable[[Sequence[_Run], str], list[Reward]]) -> Callable[[Sequence[_Run], str], list[Reward]]:
        SCHEMES.add(name, Scheme(name, needs_answer, score, description))
        return score
    return add


def get_scheme(name: str) -> Scheme:
    return SCHEMES[name]
