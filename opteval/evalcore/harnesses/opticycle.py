"""OptiCycle: generate a code cell, execute it in a persistent interpreter, observe, revise.

Paper section 3.2. One persistent ``Session`` per trajectory keeps imports, data and solver
objects alive between turns; the model sees a prompt rebuilt each call from the problem,
the modeling instructions with recovery hints (``prompts/opticycle/system.md``) and a
bounded summary of its most recent actions (purpose + output or exception, each truncated
to ``budgets.summary_chars``, the last ``budgets.summary_actions`` of them).

The trajectory ends when a cell submits (and the submission is accepted), or when the turn
(cells executed), call or total-token budget is spent: then it has no submission and
``errors`` names the spent budget. The session is always closed. ``ModelError`` from the model
propagates to the caller (the scheduler retries infrastructure failures); a failing cell is
never an exception, only feedback.

A killed cell (outcome ``killed``: the interpreter itself is gone -- a wall, CPU or memory limit
hit inside the session, a crash, a lost executor) restarts the interpreter: the harness calls
``session.restart()``, the restart costs one turn of ``max_turns`` (it is recorded as its own
action, outcome ``restarted``, whose output tells the model plainly that its state was lost and
why), and the next cell runs in a fresh interpreter. Without a turn left nothing is restarted.

Turn numbering: action turns are 1-based (``CallRecord.turn``/``ExecRecord.turn``); calls
made before the first action (OptiState's formulation) are turn 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from opteval.evalcore.extraction import extract_code
from opteval.evalcore.harnesses._common import (
    Meter,
    exec_record,
    load_prompt,
    observation,
    render,
    stated_purpose,
    system_prompt,
    tail,
)
from opteval.evalcore.harnesses.base import HarnessContext, SessionHandle
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.harnesses.template import TrajectoryHarness
from opteval.evalcore.models.base import Message
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED, Submission, Trajectory
from opteval.evalcore.sandbox.types import KILLED, ExecResult

# the summary block _summary writes per action (read back by the simulated policy)
ACTION_HEAD = re.compile(r"^### Action (\d+) \(turn (\d+)\): ([a-z_]+)\s*\nPurpose: (.*)$", re.M)
RESTARTED = "restarted"  # the outcome of the restart action in the summary
RESTART_PURPOSE = "Restart the interpreter (done by the harness after the cell above was killed)."
NO_CODE_FEEDBACK = "Your reply had no ```python block, so nothing ran. Reply with `Purpose: ...` and one ```python cell."


@dataclass
class Action:
    """One entry of the rolling summary."""

    turn: int
    purpose: str
    outcome: str  # an ExecResult outcome, or "refused" / "no_code"
    output: str
    code: str = ""


@dataclass
class CycleState:
    """What the controller keeps between turns (the interpreter keeps the rest)."""

    actions: list[Action] = field(default_factory=list)
    turn: int = 0  # cells executed so far
    extra: dict[str, Any] = field(default_factory=dict)


def render_summary(actions: list[Action], summary_actions: int, summary_chars: int) -> str:
    """The bounded summary: the last ``summary_actions`` actions, outputs cut to their tail."""
    if not actions:
        return "(none yet: this is your first action)"
    first = max(0, len(actions) - summary_actions)
    blocks = []
    for i, a in enumerate(actions[first:], start=first + 1):
        block = (
            f"### Action {i} (turn {a.turn}): {a.outcome}\nPurpose: {a.purpose}\n"
            f"Output:\n```text\n{tail(a.output, summary_chars)}\n```"
        )
        if i == len(actions) and a.code:
            block += f"\nCode of this action:\n```python\n{tail(a.code, summary_chars)}\n```"
        blocks.append(block)
    return "\n\n".join(blocks)


class OptiCycle(TrajectoryHarness):
    """The OptiCycle harness; OptiState extends it through the ``_hook`` methods."""

    name = "opticycle"
    prompt_dir = "opticycle"

    async def trajectory(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> None:
        traj = meter.traj
        state = CycleState()
        session: SessionHandle = await ctx.executor.open_session()
        try:
            await self._prepare(problem, ctx, meter, state)
            while traj.status != STATUS_SUBMITTED:
                if state.turn >= ctx.budgets.max_turns:
                    traj.errors.append(f"budget spent: turns ({ctx.budgets.max_turns})")
                    break
                messages = self._messages(problem, ctx, meter, state)
                purpose = "generate" if not state.actions else "revise"
                completion = await meter.call(messages, state.turn + 1, purpose)
                text = completion.text
                note = self._on_reply(text, state)
                code = extract_code(text, "submit")
                if code is None:
                    state.actions.append(Action(state.turn + 1, stated_purpose(text), "no_code", _join(note, NO_CODE_FEEDBACK)))
                    continue
                state.turn += 1
                result = await session.run_cell(code, ctx.budgets.exec_limits)
                traj.execs.append(exec_record(state.turn, result, code=code))
                output = _join(note, observation(result))
                outcome = result.outcome
                if result.submission is not None:
                    refusal = self._refusal(state)
                    if refusal is None:
                        traj.submission = Submission(result.submission, "submit")
                        traj.status = STATUS_SUBMITTED
                    else:
                        traj.errors.append(f"turn {state.turn}: submission refused: {refusal}")
                        outcome, output = "refused", _join(output, f"Submission refused: {refusal}")
                state.actions.append(Action(state.turn, stated_purpose(text), outcome, output, code))
                if result.outcome == KILLED and traj.status != STATUS_SUBMITTED and state.turn < ctx.budgets.max_turns:
                    await self._restart(session, result, traj, state)
        finally:
            await session.close()

    async def _restart(self, session: SessionHandle, killed: ExecResult, traj: Trajectory, state: CycleState) -> None:
        """A fresh interpreter after a killed cell; costs one turn; the model is told what was lost."""
        why = killed_reason(killed)
        await session.restart()
        state.turn += 1
        traj.errors.append(f"turn {state.turn}: interpreter restarted after the cell of turn {state.turn - 1} was killed ({why})")
        state.actions.append(Action(state.turn, RESTART_PURPOSE, RESTARTED, restart_notice(why)))

    # -- hooks (OptiState overrides) ---------------------------------------------------------
    async def _prepare(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, state: CycleState) -> None:
        """Calls made before the first action (none for OptiCycle)."""

    def _on_reply(self, text: str, state: CycleState) -> str:
        """Digest the non-code parts of a reply; returns a note for the action's output."""
        return ""

    def _refusal(self, state: CycleState) -> str | None:
        """Why a submission is not accepted now, or None to accept it."""
        return None

    def _user_values(self, state: CycleState) -> dict[str, Any]:
        return {}

    # -- prompt ------------------------------------------------------------------------------
    def _messages(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, state: CycleState) -> list[Message]:
        b = ctx.budgets
        user = render(
            load_prompt(self.prompt_dir, "user"),
            question=problem.question,
            turn=state.turn + 1,
            max_turns=b.max_turns,
            calls_used=meter.calls,
            max_calls=b.max_calls,
            summary_actions=b.summary_actions,
            summary=render_summary(state.actions, b.summary_actions, b.summary_chars),
            **self._user_values(state),
        )
        return [{"role": "system", "content": system_prompt(self.prompt_dir, "system", ctx)}, {"role": "user", "content": user}]


def killed_reason(result: ExecResult) -> str:
    """Why the interpreter went away, in the sandbox's words (``wall time limit of 60s exceeded``)."""
    note = (result.note or "").strip()
    for prefix in ("session ended: ", "session ended"):
        if note.startswith(prefix):
            note = note[len(prefix):].strip()
            break
    return note or "the interpreter exited"


def restart_notice(why: str) -> str:
    return render(load_prompt("_shared", "restart"), why=why).strip()


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


HARNESS = register_harness(OptiCycle())
