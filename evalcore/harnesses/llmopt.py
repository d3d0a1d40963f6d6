"""LLMOPT's inference protocol as a method: the five-element formulation, then code.

LLMOPT (Jiang et al., 2025) defines a problem by five elements -- sets, parameters, variables,
objective, constraints -- before writing solver code. Here: call 1 (stage ``formulate``,
``prompts/llmopt/formulate.md``) writes the five elements; call 2 (stage ``act``,
``prompts/llmopt/code.md``) gets them back and writes one program, which runs once and calls
``submit``. The prompts are ours (LLMOPT's own inference prompts were not available to us);
LLMOPT's self-correction loop is not part of this protocol.
"""
from __future__ import annotations

from evalcore.harnesses._common import Meter, load_prompt, render, system_prompt
from evalcore.harnesses.base import HarnessContext
from evalcore.harnesses.direct import Direct
from evalcore.harnesses.registry import register_harness
from evalcore.models.base import Completion
from evalcore.problems import ProblemSpec
from evalcore.solvers import prompt_list


class LLMOPT(Direct):
    name = "llmopt"
    prompt_dir = "llmopt"

    async def _generate(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> Completion:
        system = {"role": "system", "content": system_prompt(self.prompt_dir, "system", ctx)}
        first = [system, {"role": "user", "content": render(load_prompt(self.prompt_dir, "formulate"),
                                                            question=problem.question)}]
        formulation = await meter.call(first, 0, "formulate", stage="formulate")
        code = render(load_prompt(self.prompt_dir, "code"), question=problem.question,
                      formulation=formulation.text.strip(), solvers=prompt_list(ctx.solvers))
        return await meter.call([system, {"role": "user", "content": code}], 0, "generate", stage="act")


HARNESS = register_harness(LLMOPT())
