"""ORMind (Wang et al., ACL 2025 Industry): encoder, formalizer, compiler, supervisor, repair, check.

Public workflow (XiaoAI1989/ORMind, paper mode, Algorithm 1):
1. Semantic Encoder (stage ``encode``): problem -> JSON ``{param: {Type, Definition}}``;
2. Formalization Thinking (``formalize``): problem + pool -> JSON ``{VARIABLES, CONSTRAINTS, OBJECTIVE}``;
3. Executive Compiler (``compile``): a general PuLP program;
4. Metacognitive Supervisor, forward (``supervise``): reformat to the interface plus an
   "Attention" note; the program runs;
5. on an error, at most ``MAX_REPAIRS=1``: System-2 Reasoner diagnosis (``diagnose``), Supervisor
   backward revision (``revise``), re-run;
6. once, after the first clean run: the Reasoner writes a checker function from the problem text
   (``counterfactual``); it runs in the sandbox on the returned variable values; unless it says
   "Don't need to modify any constraints!", the Supervisor revises once (``revise``) and the program
   re-runs.
At most 4 + 2 + 2 = 8 calls. Final answer: the last program run's submission.
Adaptation: the dataset stub becomes the generic interface: the program
prints ``VARIABLES: <json>`` (the values the checker needs) and calls ``submit(value)``.
"""
from __future__ import annotations

import json
import re
from typing import Any

from opteval.evalcore.harnesses._baseline import Baseline, feedback, json_object, python_code
from opteval.evalcore.harnesses._common import Meter, tail
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory
from opteval.evalcore.sandbox.types import ExecResult

MAX_REPAIRS = 1  # ORMind max_repair_rounds=1
MAX_COUNTERFACTUAL = 1  # ORMind: one counterfactual revision
NO_CHANGE = "Don't need to modify any constraints!"
_VARIABLES = re.compile(r"^VARIABLES:\s*(\{.*\})\s*$", re.M)


def variables_of(result: ExecResult) -> dict[str, Any]:
    """The ``VARIABLES: {...}`` line a run printed (the last one), else {}."""
    found = _VARIABLES.findall(result.stdout or "")
    try:
        obj = json.loads(found[-1]) if found else {}
    except json.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}


def checker_program(checker: str, variables: dict[str, Any], objective: Any) -> str:
    """The checker function plus a call on the run's values; it prints its verdict as JSON."""
    return (
        "import json\n" + checker.rstrip("\n") + "\n"
        f"_verdict = check(json.loads({json.dumps(json.dumps(variables))}), {objective!r})\n"
        "print(json.dumps(_verdict, default=str))\n"
    )


class ORMind(Baseline):
    name = "ormind"
    prompt_dir = "ormind"

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        q = problem.question
        pool = (await meter.call(self.messages(ctx, "encode", question=q), 0, "semantic encoder", stage="encode")).text
        params = _pretty(pool)
        model = (await meter.call(self.messages(ctx, "formalize", question=q, parameters=params), 0,
                                  "formalization", stage="formalize")).text
        compiled = (await meter.call(self.messages(ctx, "compile", question=q, parameters=params, model=_pretty(model)),
                                     0, "executive compiler", stage="compile")).text
        code = python_code(compiled) or ""
        supervised = (await meter.call(self.messages(ctx, "supervise", question=q, code=code), 0,
                                       "supervisor forward", stage="supervise")).text
        code = python_code(supervised) or code
        turn = 1
        result = await self.execute(ctx, traj, turn, code)
        self.answer(traj, result)
        repairs = 0
        while _failed(result) and repairs < MAX_REPAIRS:
            repairs += 1
            error = feedback(result, ctx.budgets.summary_chars)
            diagnosis = (await meter.call(self.messages(ctx, "diagnose", question=q, code=code, error=error), turn,
                                          "system-2 diagnosis", stage="diagnose")).text
            revised = (await meter.call(self.messages(ctx, "revise", question=q, code=code, diagnosis=diagnosis.strip()),
                                        turn, "supervisor backward", stage="revise")).text
            code = python_code(revised) or code
            turn += 1
            result = await self.execute(ctx, traj, turn, code)
            self.answer(traj, result)
        if _failed(result):
            traj.errors.append(f"program failed after {repairs} repair(s): {result.outcome}")
            return
        for _ in range(MAX_COUNTERFACTUAL):
            reply = (await meter.call(self.messages(ctx, "counterfactual", question=q, code=code), turn,
                                      "counterfactual checker", stage="counterfactual")).text
            checker = python_code(reply)
            if not checker:
                traj.errors.append("counterfactual: the checker reply had no program; no revision")
                return
            check = await self.execute(ctx, traj, turn, checker_program(checker, variables_of(result), result.submission))
            verdict = (check.stdout or "").strip().splitlines()[-1:] or [""]
            if check.outcome != "ok" or NO_CHANGE in verdict[0]:
                return  # a failing checker or "no change" ends the check, as in the public code
            revised = (await meter.call(self.messages(ctx, "revise_cf", question=q, code=code,
                                                      conditions=tail(verdict[0], 2000)), turn,
                                        "supervisor counterfactual revision", stage="revise")).text
            code = python_code(revised) or code
            turn += 1
            result = await self.execute(ctx, traj, turn, code)
            self.answer(traj, result)  # the last run is the answer, even a failing one


def _failed(result: ExecResult) -> bool:
    return result.outcome != "ok" or result.submission is None


def _pretty(text: str) -> str:
    obj = json_object(text)
    return json.dumps(obj, indent=1) if obj is not None else text.strip()


HARNESS = register_harness(ORMind(), group="baselines")
