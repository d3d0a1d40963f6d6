"""The simulated policy's SemOPT stages (``opteval.evalcore.harnesses.semopt``): generate, reflect,
expand (strategy / math model / code) and critic. A test tool, never a model's accuracy.

It reads the prompt formats that module exports (``HEAD_STRATEGY``, ``HEAD_MODEL``,
``ALTERNATIVE``). How it plays, from the messages it is sent (the harness's prompts, as a real model reads them)
and the (harness, stage) side channel:

* ``generate``: exactly what it writes for Direct Generation (the per-trajectory plan: the
  reference program, a mutant, or a program with an injected syntax/runtime error).
* ``expand``: the level is the prompt's sections (``## Modeling strategy`` / ``## Math model``
  present or not). A strategy is *faithful* with probability p_correct / (p_correct + p_mutant)
  (else it plans a simplification); a math model under a faithful strategy is faithful with
  ``P_MODEL_OK``, under a simplified one with ``P_MODEL_OK_FLAWED``; an unfaithful model names
  the mutation operator it embodies. Code implements its model: the reference program, or that
  operator's mutant; with the skill's error weights it carries an injected error instead.
  Every draw is seeded by (seed, problem, level, the prompt's parent text, sibling count), so
  siblings differ and the same prompt gives the same reply.
* ``reflect``: repairs with probability ``p_repair`` into the program it meant to write.
* ``critic``: compares the program under review with the reference: faithful ones score about
  ``CRITIC_MEAN_OK``, others about ``CRITIC_MEAN_BAD``, plus seeded Gaussian noise (sd
  ``CRITIC_SD``), clipped to [0, 1] -- correlated with correctness, not equal to it.
"""
from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from opteval.evalcore.harnesses.semopt import ALTERNATIVE, HEAD_MODEL, HEAD_STRATEGY
from opteval.evalcore.mutation import SIM_MUTATION_OPS, apply_operator, mutate
from opteval.evalcore.sim.policy import (
    SimulatedModel,
    StageCall,
    content_text,
    defined_names,
    formulation_for,
    inject_runtime_error,
    inject_syntax_error,
    register_stage,
    split_program,
)

P_MODEL_OK = 0.8  # a faithful strategy's math model is faithful
P_MODEL_OK_FLAWED = 0.15  # a simplified strategy still yields a faithful model
CRITIC_MEAN_OK, CRITIC_MEAN_BAD, CRITIC_SD = 0.78, 0.36, 0.15

FENCE = re.compile(r"```python[^\n]*\n(.*?)```", re.S)

FAITHFUL_STRATEGY = "Model every stated restriction exactly as given, with the stated numbers and variable domains."
SIMPLE_STRATEGY = "Keep the model small: capture the main trade-off and treat secondary restrictions loosely."
# what an unfaithful math model says it simplified, per operator (the code stage reads it back)
SIMPLIFICATIONS = {
    "flip_sense": "the objective is taken in the opposite sense",
    "relax_integrality": "integer quantities are treated as continuous",
    "change_comparator": "one restriction is read in the opposite direction",
    "drop_constraint": "one restriction is left out as non-binding",
    "perturb_coefficient": "one objective coefficient is rounded differently",
    "perturb_rhs": "one capacity figure is read differently",
}
FAITHFUL_MODEL = "every stated restriction is included as given"


def _rng(*parts: Any) -> random.Random:
    blob = "\x1f".join(str(p) for p in parts).encode()
    return random.Random(int.from_bytes(hashlib.sha256(blob).digest()[:8], "big"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _user_text(call: StageCall) -> str:
    return "\n".join(content_text(m) for m in call.messages if m.get("role") == "user")


def _first_user(call: StageCall) -> str:
    return next((content_text(m) for m in call.messages if m.get("role") == "user"), "")


def _section(text: str, head: str) -> str:
    """The body of ``head`` up to the next ``## `` heading."""
    i = text.find(head + "\n")
    if i < 0:
        return ""
    body = text[i + len(head) + 1:]
    j = body.find("\n## ")
    return body[:j] if j >= 0 else body


def _p_faithful(model: SimulatedModel) -> float:
    s = model.skill
    return s.p_correct / (s.p_correct + s.p_mutant) if s.p_correct + s.p_mutant > 0 else 0.0


def _reply(lead: str, body: str) -> str:
    return f"{lead}\n\n{body.rstrip()}\n"


def _code_reply(code: str, lead: str = "Here is the complete program.") -> str:
    return f"{lead}\n\n```python\n{code.rstrip()}\n```\n"


# -- expand ---------------------------------------------------------------------------------------


def _strategy(model: SimulatedModel, call: StageCall, text: str) -> str:
    k = len(ALTERNATIVE.findall(text))
    r = _rng("semopt-strategy", call.seed, call.problem.id, k)
    faithful = r.random() < _p_faithful(model)
    form = formulation_for(call.problem.reference)
    kind = "MILP" if any(v.get("domain") == "integer" for v in form["variables"]) else "LP"
    names = ", ".join(v["name"] for v in form["variables"][:6])
    body = (f"## Strategy\n- Model type: {kind}, {form['objective']['sense']} the stated objective.\n"
            f"- Decision variables: {names}.\n- Constraints: {len(form['constraints'])} groups of restrictions.\n"
            f"- Approach (alternative {k + 1}): {FAITHFUL_STRATEGY if faithful else SIMPLE_STRATEGY}")
    return _reply("A modeling strategy for this problem.", body)


def _math_model(model: SimulatedModel, call: StageCall, text: str) -> str:
    strategy = _section(text, HEAD_STRATEGY)
    k = len(ALTERNATIVE.findall(text))
    r = _rng("semopt-model", call.seed, call.problem.id, _digest(strategy), k)
    p_ok = P_MODEL_OK if FAITHFUL_STRATEGY in strategy else P_MODEL_OK_FLAWED
    form = formulation_for(call.problem.reference)
    if r.random() < p_ok:
        note = FAITHFUL_MODEL
    else:
        note = "simplified: " + SIMPLIFICATIONS[r.choice(sorted(model.skill.mutation_ops))]
    lines = [f"## Math model (alternative {k + 1})",
             f"- Variables: {', '.join(v['name'] + ' (' + v['domain'] + ')' for v in form['variables'])}",
             f"- Objective: {form['objective']['sense']}",
             *[f"- Constraint: {c}" for c in form["constraints"]],
             f"- Modeling note: {note}"]
    return _reply("The mathematical model.", "\n".join(lines))


def intended_code(model: SimulatedModel, call: StageCall, code_prompt: str) -> str:
    """The program a code prompt's math model stands for: the reference, or its operator's mutant."""
    note = _section(code_prompt, HEAD_MODEL)
    op = next((o for o, phrase in SIMPLIFICATIONS.items() if phrase in note), None)
    ref = call.problem.reference
    if op is None:
        return ref
    seed = ("semopt-mutant", call.seed, call.problem.id, op)
    return apply_operator(ref, op, _rng(*seed)) or mutate(ref, _rng(*seed), SIM_MUTATION_OPS)[0]


def _faulty(model: SimulatedModel, program: str, r: random.Random) -> str:
    s = model.skill
    weights = {"ok": s.p_correct + s.p_mutant, "syntax": s.p_syntax_error, "runtime": s.p_runtime_error}
    kind = r.choices(list(weights), weights=list(weights.values()))[0]
    if kind == "ok":
        return program
    cut = split_program(program)
    head, tail = cut if cut else ("", program)
    if kind == "syntax":
        return head + inject_syntax_error(tail)
    return head + inject_runtime_error(tail, defined_names(head), r)[0]


def _code(model: SimulatedModel, call: StageCall, text: str) -> str:
    k = len(ALTERNATIVE.findall(text))
    program = intended_code(model, call, text)
    r = _rng("semopt-code", call.seed, call.problem.id, _digest(_section(text, HEAD_MODEL)), k)
    return _code_reply(_faulty(model, program, r))


def _expand(model: SimulatedModel, call: StageCall) -> str:
    text = _user_text(call)
    if HEAD_MODEL + "\n" in text:
        return _code(model, call, text)
    if HEAD_STRATEGY + "\n" in text:
        return _math_model(model, call, text)
    return _strategy(model, call, text)


# -- reflect ----------------------------------------------------------------------------------------


def _reflect(model: SimulatedModel, call: StageCall) -> str:
    first = _first_user(call)
    rounds = sum(1 for m in call.messages if m.get("role") == "assistant")
    r = _rng("semopt-reflect", call.seed, call.problem.id, _digest(first), rounds)
    if HEAD_MODEL + "\n" in first:
        program = intended_code(model, call, first)
    else:  # C_init: the plan's program
        program = model._program(call.problem, call.seed, call.plan.base)
    if r.random() < model.skill.p_repair:
        return _code_reply(program, "Fixed the error; here is the corrected program.")
    last = next((content_text(m) for m in reversed(call.messages) if m.get("role") == "assistant"), "")
    blocks = FENCE.findall(last)
    return _code_reply(blocks[-1] if blocks else program, "Here is the program again.")


# -- critic -----------------------------------------------------------------------------------------


def critic_score(call: StageCall, code: str) -> float:
    """Seeded noisy score: high for the reference program, low for anything else."""
    faithful = code.strip() == call.problem.reference.strip()
    r = _rng("semopt-critic", call.seed, call.problem.id, _digest(code))
    mean = CRITIC_MEAN_OK if faithful else CRITIC_MEAN_BAD
    return min(1.0, max(0.0, r.gauss(mean, CRITIC_SD)))


def _critic(model: SimulatedModel, call: StageCall) -> str:
    blocks = FENCE.findall(_user_text(call))
    score = critic_score(call, blocks[-1]) if blocks else 0.0
    return f"I checked the variables, the objective and each restriction against the statement.\n\nScore: {score:.3f}\n"


register_stage("semopt", "generate", lambda m, c: m._direct(c.problem, c.plan, c.seed))
register_stage("semopt", "reflect", _reflect)
register_stage("semopt", "expand", _expand)
register_stage("semopt", "critic", _critic)
