"""ORLM's protocol (Cardinal-Operations/ORLM ``eval/generate.py`` + ``eval/execute.py``) as a method.

One user message, no system prompt: ORLM's ``TEMPLATE_q2mc_en`` with the question (stripped)
in place of ``{Question}``, the whole prompt stripped (``prompts/orlm/user.md``). The completion
is read with the ``orlm`` extraction profile (first ```` ```python ```` block + coptpy footer) and
the program runs once; ORLM's executor allows 300 s (``configs/methods/orlm.yaml``).
ORLM sent the prompt as raw text to ``LLM.generate``; over a chat endpoint it is the only user
message, so the server's chat template wraps it.
"""
from __future__ import annotations

from opteval.evalcore.harnesses._common import load_prompt, render
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.direct import Direct
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.models.base import Message
from opteval.evalcore.problems import ProblemSpec


class ORLM(Direct):
    name = "orlm"
    prompt_dir = "orlm"

    def _messages(self, problem: ProblemSpec, ctx: HarnessContext) -> list[Message]:
        prompt = render(load_prompt(self.prompt_dir, "user"), question=problem.question.strip()).strip()
        return [{"role": "user", "content": prompt}]


HARNESS = register_harness(ORLM())
