"""SIRL's protocol (Cardinal-Operations/SIRL ``rule_prompt_utils.py``, ``utils.py``,
``check_result.py``) as a method.

System + user prompt as SIRL's Gurobi template (``prompts/sirl/``), each stripped; the completion
is read with the ``sirl`` extraction profile and the program runs once (SIRL: 100 s,
``configs/methods/sirl.yaml``). Variable-type forgiveness: when the run submitted a number or
``infeasible``, the completion with integer<->continuous flipped
(``extraction.sirl_flip_variable_types``) is run too and its submission kept as
``Submission.alternate``; grading accepts it when the first submission is wrong
(``opteval.evalcore.grading.grade_submission``, as SIRL's ``check_result`` does after a mismatch or an
infeasible result). The harness never sees the answer: it runs the variant whenever SIRL's
grader might.
"""
from __future__ import annotations

from opteval.evalcore.extraction import extract_code, extract_submission, sirl_flip_variable_types
from opteval.evalcore.harnesses._common import Meter, exec_record, load_prompt, render
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.direct import Direct
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.models.base import Message
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.sandbox.types import ExecResult


class SIRL(Direct):
    name = "sirl"
    prompt_dir = "sirl"

    def _messages(self, problem: ProblemSpec, ctx: HarnessContext) -> list[Message]:
        return [
            {"role": "system", "content": load_prompt(self.prompt_dir, "system").strip()},
            {"role": "user", "content": render(load_prompt(self.prompt_dir, "user"), question=problem.question).strip()},
        ]

    async def _after_submission(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, text: str,
                                raw: object, result: ExecResult) -> None:
        traj = meter.traj
        flipped = sirl_flip_variable_types(text)
        code = extract_code(flipped, ctx.extraction) if flipped else None
        if code is None:
            return
        variant = await ctx.executor.run(code, ctx.budgets.exec_limits)
        alternate = extract_submission(variant, ctx.extraction)
        traj.execs.append(exec_record(0, variant, alternate, code=code))
        if traj.submission is not None:
            traj.submission.alternate = alternate


HARNESS = register_harness(SIRL())
