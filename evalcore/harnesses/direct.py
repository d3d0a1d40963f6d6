"""Direct Generation: one model call writes a complete program; it runs once; no revision.

Paper section 3.1, the single-step special case. The program is extracted and its submission
read with the context's extraction profile (``evalcore.extraction``: ``submit``, ``orlm`` or
``stdout``), so published direct-generation setups can be reproduced. The system prompt is
``prompts/direct/system_<profile>.md`` when such a file exists, else ``prompts/direct/system.md``.
``ModelError`` propagates (the scheduler retries infrastructure failures).
"""
from __future__ import annotations

import time

from evalcore.harnesses._common import (
    PROMPTS_DIR,
    BudgetSpent,
    Meter,
    exec_record,
    load_prompt,
    new_trajectory,
    render,
    system_prompt,
)
from evalcore.harnesses.base import HarnessContext
from evalcore.models.base import Completion, Message
from evalcore.problems import ProblemSpec
from evalcore.records import STATUS_SUBMITTED, Submission, Trajectory
from evalcore.sandbox.types import ExecResult


class Direct:
    name = "direct"
    prompt_dir = "direct"

    async def run(self, problem: ProblemSpec, ctx: HarnessContext) -> Trajectory:
        from evalcore.extraction import extract_code, extract_submission  # the other side of the seam

        traj = new_trajectory(problem, ctx, self.name)
        meter = Meter(ctx, traj, self.name)
        t0 = time.perf_counter()
        try:
            completion = await self._generate(problem, ctx, meter)
            code = extract_code(completion.text, ctx.extraction)
            if code is None:
                traj.errors.append(f"no program found in the completion (extraction {ctx.extraction!r})")
                return traj
            result = await ctx.executor.run(code, ctx.budgets.exec_limits)
            raw = extract_submission(result, ctx.extraction)
            traj.execs.append(exec_record(0, result, raw))
            if raw is not None:
                traj.submission = Submission(raw, ctx.extraction)
                traj.status = STATUS_SUBMITTED
                await self._after_submission(completion.text, raw, result, ctx, traj)
            elif result.outcome != "ok":
                traj.errors.append(f"program {result.outcome}: {(result.stderr or result.note)[-300:]}")
        except BudgetSpent as spent:
            traj.errors.append(f"budget spent: {spent}")
        finally:
            traj.wall_s = time.perf_counter() - t0
        return traj

    # -- hooks (the protocol harnesses override) ---------------------------------------------
    async def _generate(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> Completion:
        """The model calls that produce the program's completion (one here)."""
        return await meter.call(self._messages(problem, ctx), 0, "generate")

    def _messages(self, problem: ProblemSpec, ctx: HarnessContext) -> list[Message]:
        return [
            {"role": "system", "content": self._system(ctx)},
            {"role": "user", "content": render(load_prompt(self.prompt_dir, "user"), question=problem.question)},
        ]

    async def _after_submission(self, text: str, raw: object, result: ExecResult, ctx: HarnessContext,
                                traj: Trajectory) -> None:
        """Work done after a submission (SIRL's variable-type variant); nothing here."""

    def _system(self, ctx: HarnessContext) -> str:
        if (PROMPTS_DIR / self.prompt_dir / f"system_{ctx.extraction}.md").is_file():
            return system_prompt(self.prompt_dir, f"system_{ctx.extraction}", ctx)
        return system_prompt(self.prompt_dir, "system", ctx)


HARNESS = Direct()
