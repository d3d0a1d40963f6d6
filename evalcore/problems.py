"""Problems as a model may see them, kept apart from the answers only the grader sees."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Answer = Union[float, str]  # a finite number, "infeasible" or "unbounded"


@dataclass(frozen=True)
class ProblemSpec:
    """Everything a prompt may be built from. Holds no answer, by construction."""

    benchmark: str
    id: str
    question: str


@dataclass(frozen=True)
class AnswerKey:
    """id -> expected answer for one benchmark; lives with the driver and the grader only."""

    benchmark: str
    answers: dict[str, Answer]

    def __getitem__(self, problem_id: str) -> Answer:
        return self.answers[problem_id]

    def __contains__(self, problem_id: object) -> bool:
        return problem_id in self.answers

    def __len__(self) -> int:
        return len(self.answers)
