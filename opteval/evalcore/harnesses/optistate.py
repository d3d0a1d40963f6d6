"""OptiState: OptiCycle plus an explicit, revisable formulation kept in the workspace.

Paper section 3.3. The formulation is a JSON object with the required fields
``FORMULATION_FIELDS`` (sets, parameters, variables, objective, constraints), written in a
fenced ```formulation block. JSON (not YAML) because it parses the same everywhere and needs
no extra dependency. Flow:

1. one formulation call (turn 0, purpose ``formulate``, ``prompts/optistate/formulate.md``);
2. OptiCycle turns (``prompts/optistate/user.md``) in which a reply may replace the formulation
   (the last ```formulation block wins) and runs one code cell; the current formulation and
   its check result are shown in every prompt;
3. a submission is accepted only when the current formulation parses and has every required
   field (variables, objective and constraints non-empty). Otherwise it is refused: the refusal
   is feedback in the summary (outcome ``refused``), it used up its turn and call, it is noted in
   ``Trajectory.errors``, and the submission is not final.

The formulation lives in the harness's workspace state (shown to the model every turn), not in
the interpreter, so a crashed cell can never lose it.
"""
from __future__ import annotations

import json
from typing import Any

from opteval.evalcore.harnesses._common import Meter, fenced_blocks, load_prompt, render, system_prompt
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.opticycle import CycleState, OptiCycle
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec

FORMULATION_FIELDS = ("sets", "parameters", "variables", "objective", "constraints")
NON_EMPTY_FIELDS = ("variables", "objective", "constraints")


def check_formulation(text: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """(parsed formulation or None, problems). No problems means a submission may be accepted."""
    if text is None or not text.strip():
        return None, ["no formulation has been written yet"]
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return None, [f"the formulation is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"]
    if not isinstance(obj, dict):
        return None, [f"the formulation must be a JSON object, got {type(obj).__name__}"]
    problems = []
    missing = [f for f in FORMULATION_FIELDS if f not in obj]
    if missing:
        problems.append(f"missing required field(s): {', '.join(missing)}")
    empty = [f for f in NON_EMPTY_FIELDS if f in obj and not obj[f]]
    if empty:
        problems.append(f"empty required field(s): {', '.join(empty)}")
    return obj, problems


class OptiState(OptiCycle):
    name = "optistate"
    prompt_dir = "optistate"

    async def _prepare(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, state: CycleState) -> None:
        state.extra["formulation"] = None
        messages = [
            {"role": "system", "content": system_prompt(self.prompt_dir, "system", ctx)},
            {"role": "user", "content": render(load_prompt(self.prompt_dir, "formulate"), question=problem.question)},
        ]
        completion = await meter.call(messages, 0, "formulate", stage="formulate")
        self._on_reply(completion.text, state)

    def _on_reply(self, text: str, state: CycleState) -> str:
        blocks = fenced_blocks(text, "formulation")
        if not blocks:
            return ""
        state.extra["formulation"] = blocks[-1].strip()
        _, problems = check_formulation(state.extra["formulation"])
        return "Formulation updated." + (f" Check: {'; '.join(problems)}." if problems else " Check: complete.")

    def _refusal(self, state: CycleState) -> str | None:
        _, problems = check_formulation(state.extra.get("formulation"))
        if not problems:
            return None
        return (
            "the current formulation " + "; ".join(problems)
            + ". Send the complete formulation in a ```formulation block (JSON) and submit again."
        )

    def _user_values(self, state: CycleState) -> dict[str, Any]:
        text = state.extra.get("formulation")
        _, problems = check_formulation(text)
        status = "complete" if not problems else "INCOMPLETE: " + "; ".join(problems)
        return {"formulation": text or "{}", "formulation_status": status}


HARNESS = register_harness(OptiState())
