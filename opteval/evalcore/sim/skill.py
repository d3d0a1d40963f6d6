"""The simulated policy's skill knobs: how often it answers right, wrong, or with an error
(``SimSkill``), and the baseline-only stages' probabilities (``BaselineSkill``).

A leaf module (only ``opteval.evalcore.mutation`` below it), so the policy, the stage modules and the
simulated backend's config check share these without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from opteval.evalcore.mutation import MUTATION_OPS, SIM_MUTATION_OPS


@dataclass(frozen=True)
class SimSkill:
    """How good the simulated model is. The four ``p_*`` answer kinds are relative weights.

    ``p_correct``/``p_mutant`` also decide what an erroneous answer becomes once repaired.
    """

    p_correct: float = 0.6
    p_mutant: float = 0.2
    p_syntax_error: float = 0.05
    p_runtime_error: float = 0.15
    p_repair: float = 0.7  # per turn, after error feedback
    p_no_submit: float = 0.05  # program prints its result instead of calling submit()
    p_bad_formulation: float = 0.1  # OptiState: initial formulation lacks "constraints"
    mutation_ops: tuple[str, ...] = SIM_MUTATION_OPS  # any of MUTATION_OPS may be named

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name.startswith("p_"):
                v = getattr(self, f.name)
                if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                    raise ValueError(f"SimSkill.{f.name} must be a probability in [0, 1], got {v!r}")
        if self.p_correct + self.p_mutant + self.p_syntax_error + self.p_runtime_error <= 0:
            raise ValueError("SimSkill: p_correct + p_mutant + p_syntax_error + p_runtime_error must be > 0")
        bad = [op for op in self.mutation_ops if op not in MUTATION_OPS]
        if bad or not self.mutation_ops:
            raise ValueError(f"SimSkill.mutation_ops: unknown {bad or 'empty'}; known {list(MUTATION_OPS)}")
        object.__setattr__(self, "mutation_ops", tuple(self.mutation_ops))

    @property
    def kind_weights(self) -> dict[str, float]:
        return {
            "correct": self.p_correct,
            "mutant": self.p_mutant,
            "syntax_error": self.p_syntax_error,
            "runtime_error": self.p_runtime_error,
        }



@dataclass(frozen=True)
class BaselineSkill:
    """Skill knobs of the baseline-only stages (probabilities)."""

    p_follow_format: float = 0.9  # CAFA: writes model lines only (else a whole program, which breaks the wrapper)
    p_route: float = 0.8  # CoE conductor: picks the most useful remaining expert (else a random one)
    p_blame: float = 0.8  # CoE backward: the expert that wrote the code claims a code fault
    p_checker_catch: float = 0.6  # ORMind: the counterfactual checker notices a wrong program
    p_false_alarm: float = 0.1  # ORMind: the checker complains about a right program
    p_revise_fix: float = 0.6  # ORMind / OptiMUS: a revision after a complaint fixes a wrong program
    p_component: float = 0.6  # AutoFormulation: a sampled component is the reference's
    p_rank: float = 0.75  # AutoFormulation: the ranking puts a right component first
    p_judge: float = 0.75  # AutoFormulation: a pairwise comparison prefers the more right formulation

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"BaselineSkill.{f.name} must be a probability in [0, 1], got {v!r}")


DEFAULT_BASELINE_SKILL = BaselineSkill()
