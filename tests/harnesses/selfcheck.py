"""A self-check harness, defined outside opteval.evalcore to prove the extension points (test-only).

Direct Generation, then one more model call after a submission: the model is shown the problem,
its program and the submitted value and asked to confirm it. The call goes through the
trajectory's own meter (the template hands the hook the problem and that meter), so it is
recorded with the other calls and the token budget keeps counting. Its verdict is kept as a
note in ``errors`` when the model disagrees; the submission itself is not changed.

Added exactly as docs/extending.md says: this module, its prompts (``selfcheck_prompts/``) and
one method YAML (``selfcheck.yaml``: ``harness: tests.harnesses.selfcheck:selfcheck``).
"""
from __future__ import annotations

from pathlib import Path

from opteval.evalcore.harnesses._common import Meter, load_prompt, render, system_prompt
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.direct import Direct
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.sandbox.types import ExecResult

CHECK_STAGE = "check"


class SelfCheck(Direct):
    name = "selfcheck"
    prompt_dir = "selfcheck"

    async def _after_submission(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, text: str,
                                raw: object, result: ExecResult) -> None:
        ask = render(load_prompt(self.prompt_dir, "check"), question=problem.question, program=text.strip(),
                     value=raw)
        system = {"role": "system", "content": system_prompt(self.prompt_dir, "system", ctx)}
        reply = await meter.call([system, {"role": "user", "content": ask}], 0, "self_check", stage=CHECK_STAGE)
        if not reply.text.strip().upper().startswith("CONFIRMED"):
            meter.traj.errors.append(f"self-check disagrees: {reply.text.strip()[:200]}")


HARNESS = register_harness(SelfCheck(), prompts=Path(__file__).parent / "selfcheck_prompts")
