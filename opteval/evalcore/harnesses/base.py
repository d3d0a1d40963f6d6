"""What a harness sees (``HarnessContext``) and what it must be (``Harness``).

A harness never sees an answer: the context carries no AnswerKey, and the driver
grades the returned Trajectory afterwards.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol, runtime_checkable

from opteval.evalcore.models.base import ChatModel, Sampling
from opteval.evalcore.models.contract import PromptContract
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory
from opteval.evalcore.sandbox.types import ExecResult, Limits
from opteval.evalcore.solvers import PAPER_SOLVERS

MATCH_FIELDS = ("match", "match_to")  # Budgets' two non-integer fields
MATCH_KINDS = {"tokens": "max_total_tokens", "calls": "max_calls"}  # budgets.match -> the field it sets


@dataclass(frozen=True)
class Budgets:
    """Per-trajectory budgets; recorded in every trajectory."""

    max_turns: int = 12  # code cells executed (multi-turn harnesses)
    max_calls: int = 16  # model calls of any kind
    max_output_tokens: int = 16384  # per call (sent as max_tokens)
    max_total_tokens: int = 400_000  # prompt + completion over the trajectory
    summary_chars: int = 2000  # per action output kept in the rolling summary
    summary_actions: int = 6  # most recent actions shown to the model
    exec_limits: Limits = field(default_factory=Limits)
    # matched budgets (the sweep's, never a method's): "tokens" sets every method's max_total_tokens,
    # "calls" its max_calls, to ``match_to`` (a number, or a method whose own budget is taken)
    match: str | None = None
    match_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, base: Budgets | None = None) -> Budgets:
        """``base`` (default: the defaults) with the keys of ``cfg`` overridden; ``exec_limits``
        may be a mapping of ``Limits`` fields. Unknown keys are an error naming them."""
        base = base or cls()
        cfg = dict(cfg or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"budgets: unknown key(s) {unknown}; known {sorted(known)}")
        limits = cfg.pop("exec_limits", None)
        if limits is not None and not isinstance(limits, Limits):
            lim_known = {f.name for f in fields(Limits)}
            bad = sorted(set(limits) - lim_known)
            if bad:
                raise ValueError(f"budgets.exec_limits: unknown key(s) {bad}; known {sorted(lim_known)}")
            limits = replace(base.exec_limits, **dict(limits))
        out = replace(base, **cfg)
        if limits is not None:
            out = replace(out, exec_limits=limits)
        for name in known - {"exec_limits", *MATCH_FIELDS}:
            value = getattr(out, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"budgets.{name} must be a non-negative integer, got {value!r}")
        return out


class SessionHandle(Protocol):
    """A persistent interpreter pinned to one executor for a trajectory's life.

    A cell that ends the interpreter (a limit hit, a crash) returns outcome ``killed``, and so
    does every later cell until ``restart()``, which starts a fresh, empty interpreter.
    """

    async def run_cell(self, code: str, limits: Limits | None = None) -> ExecResult: ...

    async def restart(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class Executor(Protocol):
    """One-shot runs and persistent sessions; local or on Ray executor actors."""

    async def run(self, code: str, limits: Limits | None = None) -> ExecResult: ...

    async def open_session(self) -> SessionHandle: ...


@dataclass
class HarnessContext:
    model: ChatModel
    executor: Executor
    sampling: Sampling
    sample: int
    budgets: Budgets = field(default_factory=Budgets)
    model_name: str = ""
    method: str = ""
    extraction: str = "submit"  # answer-extraction profile (opteval.evalcore.extraction)
    # per-stage request overrides from the method config (``stages: {formulate: {extra_body: ...}}``)
    stages: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    solvers: tuple[str, ...] = PAPER_SOLVERS  # what the prompts offer (opteval.evalcore.solvers)
    prompt_contract: PromptContract | None = None  # the model's own prompt conventions
    # the harness's own parameters from the method config (``params:``), e.g. semopt's search settings
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        return self.sampling.seed_for(self.sample)


@runtime_checkable
class Harness(Protocol):
    name: str

    async def run(self, problem: ProblemSpec, ctx: HarnessContext) -> Trajectory: ...
