"""Chain-of-Experts (Xiao et al., ICLR 2024): conductor, experts over a shared comment pool, reducer,
evaluation by execution, backward reflection.

Public workflow (xzymustbexzy/Chain-of-Experts ``main.py``,
``conductor.py``, ``reducer.py``, ``evaluator.py``, ``experts/*.py``), reflection enabled:
for each of ``MAX_TRIALS=3`` trials, ``MAX_COLLABORATE=3`` times: one Conductor call (stage
``conductor``) names the next expert among the active experts not yet used in this trial (an
unparseable name: a seeded random one, as the public code picks at random), then that expert
makes one forward call (stage = the expert's slug) on the problem plus every comment so far,
and its comment joins the pool. The Reducer (``reducer``) writes the final program from all
comments; it runs. A crash (or no submission) is a failure: the experts of this trial are asked
LIFO (``backward``) whether they caused it; the first that claims it has its comment replaced by
its refined result and the next trial starts. A clean run ends the loop.
At most 3 x (3 x 2 + 1) + 2 x 3 = 27 calls (no backward pass after the last trial; the method
budget is 45, an upper bound that also covers the public Evaluator calls we drop).
Final answer: the run of the last Reducer program.
Adaptations: the generic ``submit()`` interface instead of the dataset's
function stub, so the Evaluator's LLM-written test input is not needed: the sandbox run is the
evaluator; PuLP/SCIP/SciPy instead of Gurobi. Not reproduced: the public code's name collision
(the Programming Example Provider is also named "Programming Expert"); the LP File Generator is
off as in the public code; knowledge retrieval is absent there too.
"""
from __future__ import annotations

import hashlib
import json
import random

from opteval.evalcore.harnesses._baseline import Baseline, feedback, json_object, python_code
from opteval.evalcore.harnesses._common import Meter
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory

MAX_TRIALS = 3  # run_exp.py: max_trials=3
MAX_COLLABORATE = 3  # run_exp.py: max_collaborate_nums=3
EXPERTS = (  # the 7 active experts of the public code, in its order
    "Terminology Interpreter", "Parameter Extractor", "Modeling Expert", "Programming Example Provider",
    "Programming Expert", "Modeling Knowledge Supplement", "Code Reviewer",
)


def slug(expert: str) -> str:
    return expert.lower().replace(" ", "_")


def parse_expert(text: str, remaining: list[str]) -> str | None:
    """The expert the Conductor named: an exact name first, longest first (so "Programming
    Expert" is not read out of "Programming Example Provider"), else None."""
    low = text.lower()
    for name in sorted(remaining, key=len, reverse=True):
        if name.lower() in low:
            return name
    return None


class ChainOfExperts(Baseline):
    name = "coe"
    prompt_dir = "coe"

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        q = problem.question
        comments: list[list[str]] = []  # [expert, comment], in order; backward replaces in place
        for trial in range(1, min(MAX_TRIALS, ctx.budgets.max_turns) + 1):
            used: list[int] = []  # indexes into comments written in this trial
            for k in range(MAX_COLLABORATE):
                remaining = [e for e in EXPERTS if e not in {comments[i][0] for i in used}]
                reply = await meter.call(
                    self.messages(ctx, "conductor", question=q, comments=_pool(comments),
                                  experts="\n".join(f"- {e}" for e in remaining)),
                    trial, "conductor", stage="conductor",
                )
                expert = parse_expert(reply.text, remaining)
                if expert is None:
                    expert = _seeded(ctx.seed, problem.id, trial, k).choice(remaining)
                    traj.errors.append(f"trial {trial}: conductor named no known expert; picked {expert} at random")
                comment = await meter.call(
                    self.messages(ctx, slug(expert), question=q, comments=_pool(comments)),
                    trial, expert, stage=slug(expert),
                )
                comments.append([expert, comment.text.strip()])
                used.append(len(comments) - 1)
            final = await meter.call(self.messages(ctx, "reducer", question=q, comments=_pool(comments)),
                                     trial, "reducer", stage="reducer")
            code = python_code(final.text) or ""
            result = await self.execute(ctx, traj, trial, code) if code else None
            if result is not None:
                self.answer(traj, result)  # the last Reducer program's run is the answer
                if result.outcome == "ok" and result.submission is not None:
                    return
            error = feedback(result, ctx.budgets.summary_chars) if result else "the Solver's reply had no ```python block"
            traj.errors.append(f"trial {trial}: evaluation failed")
            if trial == MAX_TRIALS:
                break
            for i in reversed(used):  # backward reflection, LIFO
                expert, text = comments[i]
                reply = await meter.call(
                    self.messages(ctx, "backward", expert=expert, question=q, comment=text, code=code or "(none)",
                                  feedback=error),
                    trial, f"backward: {expert}", stage="backward",
                )
                verdict = json_object(reply.text)
                if isinstance(verdict, dict) and verdict.get("is_caused_by_you") is True:
                    refined = verdict.get("refined_result")
                    comments[i][1] = refined if isinstance(refined, str) else json.dumps(refined)
                    break


def _pool(comments: list[list[str]]) -> str:
    if not comments:
        return "(none yet)"
    return "\n\n".join(f"### {expert}\n{text}" for expert, text in comments)


def _seeded(seed: int, pid: str, trial: int, k: int) -> random.Random:
    digest = hashlib.sha256(f"coe\x1f{seed}\x1f{pid}\x1f{trial}\x1f{k}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


HARNESS = register_harness(ChainOfExperts(), group="baselines")
__all__ = ["HARNESS", "EXPERTS", "parse_expert", "slug"]
