"""CAFA (Deng et al., NeurIPS'24 MATH-AI): one call for model lines, clean-up, sympy, wrap, run.

Public workflow (repo BlueAsuka/CAFA, paper Appendix B):
1. one model call (stage ``generate``) writes code lines only (``addVar / setObjective /
   addConstr``) as a JSON ``code`` field (the paper forces it with a Pydantic parser);
2. ``clean_code``: drop code fences, comments and imports, split glued statements, rewrite a
   strict ``<`` / ``>`` inside a constraint to ``<=`` / ``>=`` (the paper's version: equality
   lines are kept, unlike the 2026 port);
3. ``simplify_code``: sympy turns constraints/objectives with a division into linear ones
   (ratio constraints multiplied out by their denominator, assumed positive as in CAFA);
4. wrap in a prefix (model creation) and suffix (optimize, read the objective) and run once.
There is no feedback loop. The answer is the program's objective; an exception means no answer
(the paper records ``inf``).
Adaptation: PySCIPOpt instead of gurobipy (``addVar / addCons / setObjective(expr,
"maximize")`` map line for line), so the exemplars, prefix and suffix are written for SCIP.
"""
from __future__ import annotations

import re

from opteval.evalcore.harnesses._baseline import Baseline, json_object, to_sympy
from opteval.evalcore.harnesses._common import Meter
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory

PREFIX = 'import math\nfrom pyscipopt import Model, quicksum\nm = Model("cafa")\nm.hideOutput()\n'
SUFFIX = """m.optimize()
_status = m.getStatus()
if _status == "inforunbd":
    from pyscipopt import SCIP_PARAMSETTING
    m.freeTransform()
    m.setPresolve(SCIP_PARAMSETTING.OFF)
    m.optimize()
    _status = m.getStatus()
if _status == "optimal":
    submit(m.getObjVal())
elif _status in ("infeasible", "unbounded"):
    submit(_status)
else:
    raise RuntimeError(f"SCIP status {_status}")
"""

_GLUED = re.compile(r"\)\s*(?=m\.(addVar|addVars|addCons|addConstr|setObjective)\()")
_STRICT = re.compile(r"(?<![<>=!])([<>])(?!=)")


def code_of(text: str) -> str:
    """The ``code`` field of the reply; a reply that is not that JSON is taken as code itself."""
    obj = json_object(text)
    if isinstance(obj, dict) and isinstance(obj.get("code"), str):
        return obj["code"]
    return text


def clean_code(code: str) -> str:
    """CAFA's regex clean-up (paper version): fences, comments, imports out; glued statements
    split; strict comparisons inside a constraint made non-strict."""
    out: list[str] = []
    for line in _GLUED.sub(")\n", code).splitlines():
        if line.strip().startswith("```"):
            continue
        line = re.sub(r"\s+#.*$", "", line) if not line.lstrip().startswith("#") else ""
        if not line.strip() or re.match(r"\s*(import|from)\s+\w", line):
            continue
        if re.search(r"\.(addCons|addConstr)\(", line):
            line = _STRICT.sub(lambda m: m.group(1) + "=", line)
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


def _linearize(expr: str) -> str | None:
    """``a/b <= c`` -> ``a - c*b <= 0`` (sympy, denominator assumed positive as in CAFA); an
    objective is expanded. None keeps the line (anything but plain arithmetic over names)."""
    import sympy

    m = re.match(r"^(.*?)(<=|>=|==)(.*)$", expr)
    sides = [to_sympy(s) for s in ((m.group(1), m.group(3)) if m else (expr,))]
    if any(s is None for s in sides):
        return None
    if m is None:  # an objective: expand (divisions by constants become coefficients)
        return str(sympy.expand(sides[0]))
    num, den = sympy.fraction(sympy.together(sides[0] - sides[1]))
    if not den.free_symbols:
        num = sympy.expand(num / den)
    return f"{sympy.expand(num)} {m.group(2)} 0"


def simplify_code(code: str) -> str:
    """CAFA's sympy step on the constraint / objective lines that contain a division."""
    out = []
    for line in code.splitlines():
        m = re.match(r"^(\s*)m\.(addCons|addConstr)\((.*)\)\s*$", line)
        o = re.match(r"^(\s*)m\.setObjective\((.*?)(,\s*[\"'](?:maximize|minimize)[\"'])\)\s*$", line)
        if m and "/" in m.group(3):
            new = _linearize(m.group(3))
            line = f"{m.group(1)}m.addCons({new})" if new else line
        elif o and "/" in o.group(2):
            new = _linearize(o.group(2))
            line = f"{o.group(1)}m.setObjective({new}{o.group(3)})" if new else line
        out.append(line)
    return "\n".join(out) + "\n"


def wrap(code: str) -> str:
    return PREFIX + code + SUFFIX


class Cafa(Baseline):
    name = "cafa"
    prompt_dir = "cafa"

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        messages = self.messages(ctx, "user", question=problem.question)
        completion = await meter.call(messages, 0, "generate", stage="generate")
        program = wrap(simplify_code(clean_code(code_of(completion.text))))
        result = await self.execute(ctx, traj, 0, program)
        if result.outcome == "ok":  # an exception is no answer (the paper records inf)
            self.answer(traj, result)
        else:
            traj.errors.append(f"program {result.outcome}: {(result.stderr or result.note)[-300:]}")


HARNESS = register_harness(Cafa(), group="baselines")
__all__ = ["HARNESS", "clean_code", "simplify_code", "wrap", "code_of"]
