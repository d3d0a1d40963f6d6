"""Shared pieces of the six adapted baselines (CAFA, Reflexion, CoE, OptiMUS, AutoFormulation, ORMind).

Why a base class: every baseline runs whole programs one-shot in the sandbox (as Direct does),
records each run, keeps its own rule for which run's answer is final, and stops at its budget.
``Baseline`` holds that bookkeeping; being a base class of each harness, this module is also
hashed into each harness's version (``version.code_files`` follows the MRO).

Adaptation shared by all six: programs use
the sweep's solvers (PuLP / PySCIPOpt / SciPy) instead of gurobipy and call the generic
``submit(value)`` instead of filling a dataset-specific function stub; the sandbox is the evaluator.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from opteval.evalcore.harnesses._common import Meter, exec_record, load_prompt, render, system_prompt
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.template import TrajectoryHarness
from opteval.evalcore.models.base import Message
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_NO_SUBMISSION, STATUS_SUBMITTED, Submission, Trajectory
from opteval.evalcore.sandbox.types import ExecResult

STATUS_ANSWERS = ("infeasible", "unbounded")
# solve + submit footer of the PuLP templates (OptiMUS, AutoFormulation): the model object is `model`
PULP_FOOTER = """model.solve(pulp.PULP_CBC_CMD(msg=0))
_status = pulp.LpStatus[model.status]
if _status == "Optimal":
    submit(pulp.value(model.objective))
elif _status in ("Infeasible", "Unbounded"):
    submit(_status.lower())
else:
    raise RuntimeError(f"CBC status {_status}")
"""
_JSON_FENCE = re.compile(r"```(?:json)?[^\n]*\n(.*?)```", re.S)


def python_code(text: str) -> str | None:
    """The last fenced python block of a reply (the ``submit`` profile's rule), else None."""
    from opteval.evalcore.extraction import extract_code  # the other side of the seam; lazy

    return extract_code(text, "submit")


def json_object(text: str) -> Any:
    """The first JSON value in a reply: a fenced ```json block, else the outermost {...} / [...].
    None when nothing parses (a baseline then proceeds as its public code does on a parse failure)."""
    candidates = list(_JSON_FENCE.findall(text))
    for open_, close in (("{", "}"), ("[", "]")):
        i, j = text.find(open_), text.rfind(close)
        if 0 <= i < j:
            candidates.append(text[i:j + 1])
    for cand in candidates:
        try:
            return json.loads(cand)
        except (json.JSONDecodeError, ValueError):
            continue
    return None


_ARITH_OPS = {ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__", ast.Div: "__truediv__", ast.Pow: "__pow__"}


def to_sympy(expr: str) -> Any:
    """A sympy expression for plain arithmetic over names and numbers, built from the AST without
    ``eval`` (model-written text never reaches sympify); None for anything else (calls,
    attributes, subscripts, comparisons)."""
    import sympy

    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return None

    def build(node: ast.AST) -> Any:
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            return getattr(build(node.left), _ARITH_OPS[type(node.op)])(build(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = build(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Name):
            return sympy.Symbol(node.id)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return sympy.Rational(str(node.value)) if isinstance(node.value, float) else sympy.Integer(node.value)
        raise ValueError(type(node).__name__)

    try:
        return build(tree.body)
    except (ValueError, TypeError, ZeroDivisionError):
        return None


def numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def run_succeeded(result: ExecResult) -> bool:
    """A run the baselines count as a success: it ran cleanly and submitted a number (an
    exception, a status answer or no submission is failure feedback, as in Reflexion)."""
    return result.outcome == "ok" and numeric(result.submission)


def feedback(result: ExecResult, limit: int = 2000) -> str:
    """What the model is shown of a failed run: the error tail, or why it is not a success."""
    from opteval.evalcore.harnesses._common import observation, tail

    text = observation(result)
    if result.outcome == "ok" and result.submission is None:
        text += "\n(the program ran but never called submit())"
    elif result.outcome == "ok" and not numeric(result.submission):
        text += f"\n(the program submitted {result.submission!r}, not an optimal objective value)"
    return tail(text, limit)


class Baseline(TrajectoryHarness):
    """A baseline trajectory on the shared template: subclasses implement ``_run``."""

    name = "baseline"
    prompt_dir = "baseline"

    async def trajectory(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> None:
        await self._run(problem, ctx, meter, meter.traj)

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------------
    def messages(self, ctx: HarnessContext, user: str, system: str = "system", **values: Any) -> list[Message]:
        """[system, user] from ``prompts/<dir>/<system>.md`` and ``prompts/<dir>/<user>.md``."""
        return [
            {"role": "system", "content": system_prompt(self.prompt_dir, system, ctx)},
            {"role": "user", "content": self.prompt(user, **values)},
        ]

    def prompt(self, name: str, **values: Any) -> str:
        return render(load_prompt(self.prompt_dir, name), **values)

    async def execute(self, ctx: HarnessContext, traj: Trajectory, turn: int, code: str) -> ExecResult:
        """Run one whole program one-shot in the sandbox and record it."""
        result = await ctx.executor.run(code, ctx.budgets.exec_limits)
        traj.execs.append(exec_record(turn, result, code=code))
        return result

    @staticmethod
    def answer(traj: Trajectory, result: ExecResult) -> None:
        """Make this run's submission the trajectory's answer (or clear it when it has none)."""
        if result.submission is not None:
            traj.submission = Submission(result.submission, "submit")
            traj.status = STATUS_SUBMITTED
        else:
            traj.submission = None
            traj.status = STATUS_NO_SUBMISSION


_P = TypeVar("_P")


def params_from(cls: type[_P], cfg: Mapping[str, Any] | None) -> _P:
    """``cls`` (a dataclass of a harness's ``params:``) from the method YAML's section; an unknown
    key is an error naming ``params`` and the known keys. Each caller checks its values' types."""
    cfg = dict(cfg or {})
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]  # a dataclass type
    unknown = sorted(set(cfg) - set(known))
    if unknown:
        raise ValueError(f"params: unknown key(s) {unknown}; known {known}")
    return cls(**cfg)
