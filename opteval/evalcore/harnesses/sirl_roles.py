"""SIRL's protocol with one of ten expert roles per sample, for instance-enhanced self-consistency
(ISC) over roles instead of over seeds of one prompt. A labelled option, not SIRL's released code.

SIRL's paper (Chen et al., arXiv 2505.11792, Section 3.1) has ten LLM roles answer each problem
and selects among their answers with ISC (objective, sense, binary and integer counts of each
role's model; ``opteval.evalcore.selection.isc_select``, the report's ``isc@n`` column). The role prompts
and the ISC code are not in the released repository: Cardinal-Operations/SIRL holds SIRL's
Gurobi/COPT prompts (``rule_prompt_utils.py``), evaluation and training code, and no role list
(every commit up to 8e85194, searched for role/persona/self-consistency). So the ten roles here
(``prompts/sirl_roles/roles.md``, one per line) are ours: OR personas across the benchmarks'
domains. Sample ``s`` of a problem takes role ``s mod 10``, as one line before SIRL's own system
prompt (``prompts/sirl/``, unchanged); extraction, the variable-type variant and limits are
SIRL's (``opteval.evalcore.harnesses.sirl``). With 10 samples per problem each role answers once, and
``isc@n`` of this method is ISC over the ten roles; ``sirl``'s is ISC over ten seeds.
"""
from __future__ import annotations

from opteval.evalcore.harnesses._common import load_prompt, render
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.harnesses.sirl import SIRL
from opteval.evalcore.models.base import Message
from opteval.evalcore.problems import ProblemSpec


def roles() -> list[str]:
    """The ten role lines, in order (sample s takes roles()[s % 10])."""
    return [line.strip() for line in load_prompt("sirl_roles", "roles").splitlines() if line.strip()]


class SIRLRoles(SIRL):
    name = "sirl_roles"
    prompt_dir = "sirl_roles"

    def _messages(self, problem: ProblemSpec, ctx: HarnessContext) -> list[Message]:
        all_roles = roles()
        role = all_roles[ctx.sample % len(all_roles)]
        return [
            {"role": "system", "content": render(load_prompt(self.prompt_dir, "system"), role=role).strip()},
            {"role": "user", "content": render(load_prompt(self.prompt_dir, "user"), question=problem.question).strip()},
        ]


HARNESS = register_harness(SIRLRoles())
