"""Reflexion (Shinn et al. 2023) in its optimization-modeling form: generate, run, reflect, retry.

Public workflow: OptiMUS's ``Reflexion.py`` generates a
complete program, runs it, and on an error regenerates from the previous code plus every error
so far, at most ``max_iter=3`` times; the first success stops. Adaptation:
the sandbox run is the evaluator (an exception, no submission or a status instead of a number is
a failure), and Reflexion's explicit verbal self-reflection is kept as its own call whose text is
stored in memory and shown to every later trial. So: ``generate`` (trial 1), then per failed
trial ``reflect`` + ``regenerate``: at most 3 trials and 1 + 2x2 = 5 calls.

Final answer: the submission of the run that succeeded (the loop stops there). When no trial
succeeds, the last status answer (``infeasible`` / ``unbounded``) a run submitted stands (ours:
the public code would have none, which would make infeasible problems unanswerable); otherwise
no answer.
"""
from __future__ import annotations

import re

from opteval.evalcore.harnesses._baseline import Baseline, feedback, numeric, python_code, run_succeeded
from opteval.evalcore.harnesses._common import Meter
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory

# the trial line heading prompts/reflexion/user.md and retry.md (read back by the simulated policy)
TRIAL_LINE = re.compile(r"^## Trial (\d+) of (\d+)", re.M)
MAX_TRIALS = 3  # OptiMUS Reflexion.py: max_iter=3


class Reflexion(Baseline):
    name = "reflexion"
    prompt_dir = "reflexion"

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        max_trials = min(MAX_TRIALS, ctx.budgets.max_turns)
        errors: list[str] = []
        reflections: list[str] = []
        code = ""
        status_answer = None
        for trial in range(1, max_trials + 1):
            if trial == 1:
                messages = self.messages(ctx, "user", trial=trial, max_trials=max_trials, question=problem.question)
                completion = await meter.call(messages, trial, "generate", stage="generate")
            else:
                messages = self.messages(
                    ctx, "retry", trial=trial, max_trials=max_trials, question=problem.question, code=code,
                    errors=_numbered(errors), reflections=_numbered(reflections),
                )
                completion = await meter.call(messages, trial, "regenerate", stage="regenerate")
            code = python_code(completion.text) or ""
            if not code:
                errors.append("Your reply had no ```python block, so nothing ran.")
            else:
                result = await self.execute(ctx, traj, trial, code)
                if run_succeeded(result):
                    self.answer(traj, result)
                    return
                if result.outcome == "ok" and result.submission is not None and not numeric(result.submission):
                    status_answer = result
                errors.append(feedback(result, ctx.budgets.summary_chars))
            if trial == max_trials:
                break
            reflect = [
                {"role": "system", "content": self.prompt("reflect_system")},
                {"role": "user", "content": self.prompt("reflect", question=problem.question, trial=trial,
                                                        code=code or "(no program)", feedback=errors[-1])},
            ]
            reflections.append((await meter.call(reflect, trial, "reflect", stage="reflect")).text.strip())
        traj.errors.append(f"no trial succeeded in {max_trials} trials")
        if status_answer is not None:
            self.answer(traj, status_answer)


def _numbered(items: list[str]) -> str:
    return "\n\n".join(f"{i}. {t}" for i, t in enumerate(items, start=1)) or "(none)"


HARNESS = register_harness(Reflexion(), group="baselines")
