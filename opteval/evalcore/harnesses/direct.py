"""Direct Generation: one model call writes a complete program; it runs once; no revision.

Paper section 3.1, the single-step special case. The program is extracted and its submission
read with the context's extraction profile (``opteval.evalcore.extraction``: ``submit``, ``orlm`` or
``stdout``), so published direct-generation setups can be reproduced. The system prompt is
``prompts/direct/system_<profile>.md`` when such a file exists, else ``prompts/direct/system.md``.
``ModelError`` propagates (the scheduler retries infrastructure failures).
"""
from __future__ import annotations

from opteval.evalcore.extraction import extract_code, extract_submission
from opteval.evalcore.harnesses._common import (
    Meter,
    exec_record,
    load_prompt,
    prompt_folder,
    render,
    system_prompt,
)
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.harnesses.template import TrajectoryHarness
from opteval.evalcore.models.base import Completion, Message
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED, Submission
from opteval.evalcore.sandbox.types import ExecResult


class Direct(TrajectoryHarness):
    name = "direct"
    prompt_dir = "direct"
    extractions = None  # any opteval.evalcore.extraction profile

    async def trajectory(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> None:
        traj = meter.traj
        completion = await self._generate(problem, ctx, meter)
        code = extract_code(completion.text, ctx.extraction)
        if code is None:
            traj.errors.append(f"no program found in the completion (extraction {ctx.extraction!r})")
            return
        result = await ctx.executor.run(code, ctx.budgets.exec_limits)
        raw = extract_submission(result, ctx.extraction)
        traj.execs.append(exec_record(0, result, raw, code=code))
        if raw is not None:
            traj.submission = Submission(raw, ctx.extraction)
            traj.status = STATUS_SUBMITTED
            await self._after_submission(problem, ctx, meter, completion.text, raw, result)
        elif result.outcome != "ok":
            traj.errors.append(f"program {result.outcome}: {(result.stderr or result.note)[-300:]}")

    # -- hooks (the protocol harnesses override) ---------------------------------------------
    async def _generate(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> Completion:
        """The model calls that produce the program's completion (one here)."""
        return await meter.call(self._messages(problem, ctx), 0, "generate")

    def _messages(self, problem: ProblemSpec, ctx: HarnessContext) -> list[Message]:
        return [
            {"role": "system", "content": self._system(ctx)},
            {"role": "user", "content": render(load_prompt(self.prompt_dir, "user"), question=problem.question)},
        ]

    async def _after_submission(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, text: str,
                                raw: object, result: ExecResult) -> None:
        """Work done after a submission (SIRL's variable-type variant, a self-check call), on the
        trajectory's own ``meter`` (so its calls count against the same budgets); nothing here."""

    def _system(self, ctx: HarnessContext) -> str:
        if (prompt_folder(self.prompt_dir) / f"system_{ctx.extraction}.md").is_file():
            return system_prompt(self.prompt_dir, f"system_{ctx.extraction}", ctx)
        return system_prompt(self.prompt_dir, "system", ctx)


HARNESS = register_harness(Direct())
