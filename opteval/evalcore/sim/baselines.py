"""The simulated policy's answers for the six adapted baselines' stages (SIMULATED, never a model).

Why a separate module: ``policy.py`` owns the policy's building blocks (the reference
program, mutants, injected errors, repairs); this module only teaches it the stages of CAFA,
Reflexion, Chain-of-Experts, OptiMUS, AutoFormulation and ORMind (``register_stage``), reusing
those blocks. ``opteval.evalcore.sim`` imports it, so every stage is registered with the package; the
prompt formats it reads are the harness modules' exported constants (``TRIAL_LINE``,
``CANDIDATE_LINE``, ``CANDIDATE_BLOCK``).

What it can do per stage, so a baseline is right or wrong in the ways its stages allow:
* programs: the trajectory's plan (reference / mutant / injected error) as ``_direct`` writes it;
  after failure feedback a repair with ``SimSkill.p_repair``;
* decomposition: PuLP and PySCIPOpt reference programs split statement by statement into data,
  variables, objective and constraints (``parts_of``), translated between the two APIs by AST
  rewriting, so component-wise baselines (CAFA lines, OptiMUS snippets, AutoFormulation
  components) get real pieces; SciPy/HiGHS programs cannot be split, so those baselines fail
  or fall back to a whole-program debug as their public code would;
* judgements (expert routing, blame, rankings, pairwise comparisons, checkers) are right with
  the ``BaselineSkill`` probabilities. A model may carry ``baseline_skill`` (tests set it);
  otherwise ``DEFAULT_BASELINE_SKILL``.
Every draw is seeded by (seed, problem, stage, call material), so replies are deterministic.
"""
from __future__ import annotations

import ast
import json
import math as _math
import re
from dataclasses import dataclass
from typing import Any

from opteval.evalcore.harnesses.autoformulation import CANDIDATE_BLOCK, CANDIDATE_LINE
from opteval.evalcore.harnesses.reflexion import TRIAL_LINE
from opteval.evalcore.sim.policy import (
    SimulatedModel,
    StageCall,
    StageHandler,
    _reply,
    _rng,
    content_text,
    formulation_for,
    generic_program,
    register_stage,
)
from opteval.evalcore.sim.skill import DEFAULT_BASELINE_SKILL, BaselineSkill

PURPOSE = "Answer the requested step."




def bskill(model: SimulatedModel) -> BaselineSkill:
    return model.baseline_skill or DEFAULT_BASELINE_SKILL


def user_text(call: StageCall) -> str:
    return "\n".join(content_text(m) for m in call.messages if m.get("role") != "system")


def rng(call: StageCall, *parts: Any) -> Any:
    return _rng("baseline", call.seed, call.problem.id, call.conv.harness, call.conv.stage, *parts)


_FENCE_PY = re.compile(r"```python[^\n]*\n(.*?)```", re.S)


def code_blocks(text: str) -> list[str]:
    return _FENCE_PY.findall(text)


# -- whole programs ------------------------------------------------------------------------------


def first_program(model: SimulatedModel, call: StageCall) -> str:
    """The trajectory's first attempt (the plan: reference, mutant, injected error, no submit)."""
    reply = model._direct(call.problem, call.plan, call.seed)
    return code_blocks(reply)[-1]


def intended_program(model: SimulatedModel, call: StageCall) -> str:
    """What the model means to write: the plan's base program, without an injected error."""
    return model._program(call.problem, call.seed, call.plan.base)


def repaired_program(model: SimulatedModel, call: StageCall, attempt: int, tag: str = "") -> str:
    """A program written after failure feedback: fixed with ``p_repair``, else the first attempt
    again. A fixed program is the intended one; from the second failure on, the reference."""
    if rng(call, "repair", attempt, tag).random() >= model.skill.p_repair:
        return first_program(model, call)
    return call.problem.reference if attempt >= 2 else intended_program(model, call)


def is_reference(code: str, call: StageCall) -> bool:
    return _norm(code) == _norm(call.problem.reference)


def _norm(code: str) -> str:
    return "\n".join(ln.rstrip() for ln in code.strip().splitlines() if ln.strip() and not ln.lstrip().startswith("#"))


# -- program decomposition (PuLP / PySCIPOpt) ------------------------------------------------------


@dataclass
class Parts:
    """A PuLP or PySCIPOpt program split into its modeling statements (sources)."""

    api: str  # "pulp" | "scip"
    model: str  # the model object's name
    sense: str  # "maximize" | "minimize"
    data: list[str]
    variables: list[str]
    objective: str  # an expression
    constraints: list[str]  # statements, in the program's own API


def _src(lines: list[str], node: ast.stmt) -> str:
    return "".join(lines[node.lineno - 1: node.end_lineno])


def parts_of(src: str) -> Parts | None:
    """Split a PuLP/PySCIPOpt program; None when it is neither or has an unexpected shape."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    api = "pulp" if "import pulp" in src else "scip" if "pyscipopt" in src else None
    if api is None:
        return None
    lines = src.splitlines(keepends=True)
    model = sense = objective = None
    data: list[str] = []
    variables: list[str] = []
    constraints: list[str] = []
    for node in tree.body:
        text = _src(lines, node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if re.search(r"\.(solve|optimize|hideOutput)\(", text):
            if model is None:
                return None
            if "hideOutput" in text:
                continue
            break
        if isinstance(node, ast.Assign) and re.search(r"\b(LpProblem|Model)\(", text):
            model = node.targets[0].id if isinstance(node.targets[0], ast.Name) else None
            sense = "maximize" if "LpMaximize" in text else "minimize"
            continue
        if "LpVariable" in text or ".addVar" in text:
            variables.append(text)
        elif model and isinstance(node, ast.AugAssign) and not _is_constraint(node.value):
            objective = ast.get_source_segment(src, node.value)
        elif model and isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and ".setObjective(" in text:
            objective = ast.get_source_segment(src, node.value.args[0])
            sense = "maximize" if "maximize" in text else "minimize"
        elif model and (f"{model} +=" in text or ".addCons" in text):
            constraints.append(text)
        else:
            data.append(text)
    if model is None or objective is None or not variables:
        return None
    return Parts(api, model, sense or "minimize", data, variables, objective, constraints)


def _is_constraint(value: ast.AST) -> bool:
    if isinstance(value, ast.Tuple) and value.elts:
        value = value.elts[0]
    return isinstance(value, ast.Compare)


_CAT_TO_VTYPE = {"Integer": "I", "Binary": "B", "Continuous": "C"}
_VTYPE_TO_CAT = {"I": "Integer", "INTEGER": "Integer", "B": "Binary", "BINARY": "Binary", "C": "Continuous"}


class _ToScip(ast.NodeTransformer):
    """PuLP statements -> PySCIPOpt lines on ``m``."""

    def __init__(self, model: str) -> None:
        self.model = model

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        self.generic_visit(node)
        if isinstance(node.target, ast.Name) and node.target.id in (self.model, "m"):
            value = node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value
            return ast.Expr(ast.Call(ast.Attribute(ast.Name("m"), "addCons"), [value], []))
        return node

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr == "lpSum":
            return ast.Call(ast.Name("quicksum"), node.args, node.keywords)
        if isinstance(fn, ast.Attribute) and fn.attr == "LpVariable":
            kws: list[ast.keyword] = []
            got = {k.arg: k.value for k in node.keywords}
            kws.append(ast.keyword("lb", got.get("lowBound", ast.Constant(None))))
            if "upBound" in got:
                kws.append(ast.keyword("ub", got["upBound"]))
            cat = got.get("cat")
            if isinstance(cat, ast.Constant) and cat.value in _CAT_TO_VTYPE:
                kws.append(ast.keyword("vtype", ast.Constant(_CAT_TO_VTYPE[cat.value])))
            return ast.Call(ast.Attribute(ast.Name("m"), "addVar"), node.args[:1], kws)
        return node


class _ToPulp(ast.NodeTransformer):
    """PySCIPOpt statements -> PuLP statements on ``model``."""

    def __init__(self, model: str) -> None:
        self.model = model

    def visit_Expr(self, node: ast.Expr) -> Any:
        self.generic_visit(node)
        c = node.value
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "addCons" and c.args:
            return ast.AugAssign(ast.Name("model"), ast.Add(), c.args[0])
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        self.generic_visit(node)
        if isinstance(node.target, ast.Name) and node.target.id == self.model:
            node.target = ast.Name("model")
        return node

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id == "quicksum":
            return ast.Call(ast.Attribute(ast.Name("pulp"), "lpSum"), node.args, node.keywords)
        if isinstance(fn, ast.Attribute) and fn.attr == "addVar":
            got = {k.arg: k.value for k in node.keywords}
            name = node.args[:1] or ([got["name"]] if "name" in got else [ast.Constant("v")])
            kws = [ast.keyword("lowBound", got.get("lb", ast.Constant(0)))]
            if "ub" in got:
                kws.append(ast.keyword("upBound", got["ub"]))
            vt = got.get("vtype")
            if isinstance(vt, ast.Constant) and vt.value in _VTYPE_TO_CAT:
                kws.append(ast.keyword("cat", ast.Constant(_VTYPE_TO_CAT[vt.value])))
            return ast.Call(ast.Attribute(ast.Name("pulp"), "LpVariable"), name, kws)
        return node


def _rewrite(stmt: str, transformer: ast.NodeTransformer) -> str:
    tree = ast.parse(stmt)
    tree = ast.fix_missing_locations(transformer.visit(tree))
    return ast.unparse(tree)


def _rename(stmt: str, old: str, new: str) -> str:
    """``stmt`` with the model variable ``old`` (a whole word) called ``new``."""
    return re.sub(rf"\b{re.escape(old)}\b", new, stmt)


def scip_lines(parts: Parts) -> list[str]:
    """CAFA-style lines (``m.addVar / m.setObjective / m.addCons``) plus the data they use."""
    out = [d.rstrip("\n") for d in parts.data]
    if parts.api == "scip":
        def rename(s: str) -> str:
            return _rename(s, parts.model, "m")
        out += [rename(v) for v in parts.variables] + [rename(c) for c in parts.constraints]
        out.append(f'm.setObjective({rename(parts.objective)}, "{parts.sense}")')
        return out
    t = _ToScip(parts.model)
    out += [_rewrite(v, t) for v in parts.variables] + [_rewrite(c, t) for c in parts.constraints]
    out.append(f'm.setObjective({_rewrite(parts.objective, t)}, "{parts.sense}")')
    return out


def pulp_parts(parts: Parts) -> dict[str, Any]:
    """The program's pieces as PuLP statements on ``model`` (OptiMUS / AutoFormulation snippets)."""
    if parts.api == "pulp":
        def rename(s: str) -> str:
            return _rename(s, parts.model, "model").rstrip("\n")
        return {
            "data": [d.rstrip("\n") for d in parts.data], "variables": [v.rstrip("\n") for v in parts.variables],
            "objective": rename(parts.objective), "constraints": [rename(c) for c in parts.constraints],
            "sense": parts.sense,
        }
    t = _ToPulp(parts.model)
    return {
        "data": [d.rstrip("\n") for d in parts.data], "variables": [_rewrite(v, t) for v in parts.variables],
        "objective": _rename(_rewrite(parts.objective, t), parts.model, "model"),
        "constraints": [_rename(_rewrite(c, t), parts.model, "model") for c in parts.constraints],
        "sense": parts.sense,
    }


def planned_parts(model: SimulatedModel, call: StageCall) -> Parts | None:
    """The decomposition of the program the plan intends (mutant included), else of the reference."""
    return parts_of(intended_program(model, call)) or parts_of(call.problem.reference)


# -- CAFA -----------------------------------------------------------------------------------------


def cafa_generate(model: SimulatedModel, call: StageCall) -> str:
    """One reply of code lines (JSON ``{"code": ...}``, the paper's Pydantic ``code`` field)."""
    parts = parts_of(intended_program(model, call))
    r = rng(call, "format")
    if parts is None or r.random() >= bskill(model).p_follow_format:
        # a whole program instead of lines: the CAFA clean-up strips its imports, so it breaks
        body = first_program(model, call)
    else:
        lines = scip_lines(parts)
        if call.plan.kind == "syntax_error":
            lines[-1] = lines[-1].rstrip(")")
        elif call.plan.kind == "runtime_error":
            lines.insert(len(lines) - 1, "m.addCons(capacity_total >= 0)")
        body = "\n".join(ln.rstrip("\n") for ln in lines)
    return json.dumps({"code": body}, indent=1)


register_stage("cafa", "generate", cafa_generate)


# -- Reflexion ------------------------------------------------------------------------------------



def reflexion_generate(model: SimulatedModel, call: StageCall) -> str:
    trial = int(m.group(1)) if (m := TRIAL_LINE.search(user_text(call))) else 1
    code = first_program(model, call) if trial <= 1 else repaired_program(model, call, trial - 1, "reflexion")
    return _reply("Model the problem and solve it.", code=code)


def reflexion_reflect(model: SimulatedModel, call: StageCall) -> str:
    text = user_text(call)
    err = re.findall(r"(\w+Error|Traceback|submit\(\)|not an optimal)", text)
    what = err[-1] if err else "the failure"
    return (f"Reflection: the program failed with {what}. I must check names and syntax before using them, "
            "make sure every constraint uses defined data, and end with submit() of the optimal objective.")


register_stage("reflexion", "generate", reflexion_generate)
register_stage("reflexion", "regenerate", reflexion_generate)
register_stage("reflexion", "reflect", reflexion_reflect)


# -- ORMind ---------------------------------------------------------------------------------------


def ormind_encode(model: SimulatedModel, call: StageCall) -> str:
    form = formulation_for(call.problem.reference)
    return json.dumps({k: {"Type": v, "Definition": f"the {k} given in the problem"} for k, v in form["parameters"].items()})


def ormind_formalize(model: SimulatedModel, call: StageCall) -> str:
    form = formulation_for(intended_program(model, call))
    return json.dumps({"VARIABLES": form["variables"], "CONSTRAINTS": form["constraints"], "OBJECTIVE": form["objective"]})


def ormind_compile(model: SimulatedModel, call: StageCall) -> str:
    return _reply("Write the solve program.", code=first_program(model, call))


def ormind_supervise(model: SimulatedModel, call: StageCall) -> str:
    """The forward supervisor reformats: the program it was shown, unchanged, plus an attention note."""
    blocks = code_blocks(user_text(call))
    code = blocks[-1] if blocks else first_program(model, call)
    return "Attention: keep the objective sense and every constraint; report via submit().\n\n" + _reply(
        "Reformat the program to the required interface.", code=code)


def ormind_diagnose(model: SimulatedModel, call: StageCall) -> str:
    text = user_text(call)
    err = re.findall(r"(\w+Error[^\n]*)", text)
    return f"Root cause: {err[-1] if err else 'the program did not submit'}. Problematic section: the line raising it."


def ormind_revise(model: SimulatedModel, call: StageCall) -> str:
    """Backward supervisor: after an error, a repair (``p_repair``); after a checker complaint,
    the reference with ``p_revise_fix`` when the shown program was wrong (else unchanged)."""
    text = user_text(call)
    blocks = code_blocks(text)
    shown = blocks[-1] if blocks else first_program(model, call)
    if "Unsatisfied conditions" in text:
        if not is_reference(shown, call) and rng(call, "cf").random() < bskill(model).p_revise_fix:
            code = call.problem.reference
        else:
            code = shown
    else:
        code = repaired_program(model, call, 1, "ormind")
    return _reply("Revise the program.", code=code)


def ormind_checker(model: SimulatedModel, call: StageCall) -> str:
    """A checker function; it lists a violated condition when the program shown is wrong and the
    checker catches it (``p_checker_catch``), or as a false alarm (``p_false_alarm``)."""
    blocks = code_blocks(user_text(call))
    shown = blocks[-1] if blocks else ""
    s = bskill(model)
    r = rng(call, "checker").random()
    complain = r < (s.p_false_alarm if is_reference(shown, call) else s.p_checker_catch)
    body = ('    return ["a stated condition is not satisfied by the returned values"]\n' if complain
            else '    return "Don\'t need to modify any constraints!"\n')
    return _reply("Check the solution against the problem's conditions.",
                  code="def check(variables, objective):\n" + body)


for _stage, _fn in {
    "encode": ormind_encode, "formalize": ormind_formalize, "compile": ormind_compile,
    "supervise": ormind_supervise, "diagnose": ormind_diagnose, "revise": ormind_revise,
    "counterfactual": ormind_checker,
}.items():
    register_stage("ormind", _stage, _fn)


# -- Chain-of-Experts -------------------------------------------------------------------------------

COE_PREFERENCE = (  # what a sensible conductor asks for first
    "Modeling Expert", "Programming Expert", "Code Reviewer", "Parameter Extractor",
    "Terminology Interpreter", "Modeling Knowledge Supplement", "Programming Example Provider",
)
_EXPERT_LINE = re.compile(r"^- (.+)$", re.M)


def _section(text: str, head: str) -> str:
    """The text after a ``## <head>`` heading, up to the next ``## `` heading."""
    m = re.search(rf"^## {re.escape(head)}[^\n]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return m.group(1) if m else ""


def coe_conductor(model: SimulatedModel, call: StageCall) -> str:
    text = user_text(call)
    remaining = _EXPERT_LINE.findall(_section(text, "Experts you can choose from"))
    if not remaining:
        return "Modeling Expert"
    r = rng(call, "route", len(remaining), text.count("### "))
    if r.random() < bskill(model).p_route:
        return next(e for e in COE_PREFERENCE if e in remaining) if any(e in remaining for e in COE_PREFERENCE) else remaining[0]
    return r.choice(remaining)


def _pool_code(call: StageCall) -> str | None:
    blocks = code_blocks(_section(user_text(call), "Comments"))
    return blocks[-1] if blocks else None


def coe_programming(model: SimulatedModel, call: StageCall) -> str:
    return _reply("Write the program.", code=_pool_code(call) or first_program(model, call))


def coe_modeling(model: SimulatedModel, call: StageCall) -> str:
    form = formulation_for(intended_program(model, call))
    return json.dumps({"VARIABLES": form["variables"], "CONSTRAINS": form["constraints"], "OBJECTIVE": form["objective"]})


def coe_text(what: str):
    def handler(model: SimulatedModel, call: StageCall) -> str:
        return f"{what} (simulated comment on the problem's {len(call.problem.question.split())} words)."
    return handler


def coe_reducer(model: SimulatedModel, call: StageCall) -> str:
    return _reply("Write the final program.", code=_pool_code(call) or first_program(model, call))


def coe_backward(model: SimulatedModel, call: StageCall) -> str:
    """The expert that wrote or reviewed the code claims the fault (``p_blame``) and refines it."""
    text = user_text(call)
    head = text.splitlines()[0] if text else ""
    coder = "Programming Expert" in head or "Code Reviewer" in head
    attempt = len(re.findall(r"```python", _section(text, "Your comment"))) + 1
    if coder and rng(call, "blame", head).random() < bskill(model).p_blame:
        fixed = repaired_program(model, call, attempt, "coe")
        refined = "Corrected program:\n```python\n" + fixed.rstrip("\n") + "\n```"
        return json.dumps({"is_caused_by_you": True, "reason": "the program raised the error", "refined_result": refined})
    return json.dumps({"is_caused_by_you": False, "reason": "my comment is not about the failing code", "refined_result": ""})


register_stage("coe", "conductor", coe_conductor)
register_stage("coe", "programming_expert", coe_programming)
register_stage("coe", "code_reviewer", coe_programming)
register_stage("coe", "modeling_expert", coe_modeling)
register_stage("coe", "reducer", coe_reducer)
register_stage("coe", "backward", coe_backward)
for _expert, _what in {
    "terminology_interpreter": "[{\"term\": \"decision variable\", \"explanation\": \"a quantity the planner chooses\"}]",
    "parameter_extractor": "Parameters: the numbers stated in the problem",
    "programming_example_provider": "Example: build the model, add variables, objective, constraints, solve",
    "modeling_knowledge_supplement": "Knowledge: keep units consistent and state non-negativity",
}.items():
    register_stage("coe", _expert, coe_text(_what))


# -- OptiMUS --------------------------------------------------------------------------------------

_SAFE_BUILTINS = {"range": range, "len": len, "sum": sum, "min": min, "max": max, "abs": abs, "round": round,
                  "list": list, "dict": dict, "tuple": tuple, "enumerate": enumerate, "zip": zip, "float": float,
                  "int": int, "sorted": sorted, "set": set}


def reference_data(statements: list[str]) -> dict[str, Any]:
    """The values the data statements of OUR reference program define (trusted source, never a
    model's output), JSON-representable ones only (ranges become lists)."""
    ns: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS, "math": _math}
    for stmt in statements:
        try:
            exec(compile(stmt, "<reference data>", "exec"), ns)
        except Exception:
            continue
    out = {}
    for k, v in ns.items():
        if k.startswith("__") or k == "math":
            continue
        v = list(v) if isinstance(v, range) else v
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[k] = v
    return out


def _shape(v: Any) -> list[int]:
    shape = []
    while isinstance(v, list) and v:
        shape.append(len(v))
        v = v[0]
    return shape


def _dims(gens: list[ast.comprehension]) -> list[str] | None:
    out = []
    for g in gens:
        it = g.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
            out.append(ast.unparse(it.args[0]))
        else:
            out.append(f"len({ast.unparse(it)})")
    return out


def _var_spec(stmt: str) -> tuple[dict[str, Any], list[str]] | None:
    """(OptiMUS variable spec, auxiliary bound constraints as PuLP code) of one variable statement."""
    try:
        node = ast.parse(stmt).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.Assign) or not isinstance(node.targets[0], ast.Name):
        return None
    sym, value = node.targets[0].id, node.value
    gens: list[ast.comprehension] = []
    while isinstance(value, (ast.ListComp, ast.DictComp)):
        gens += value.generators
        value = value.value if isinstance(value, ast.DictComp) else value.elt
        if isinstance(value, ast.ListComp):
            continue
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "LpVariable"):
        return None
    kw = {k.arg: k.value for k in value.keywords}
    cat = kw.get("cat")
    vtype = cat.value.lower() if isinstance(cat, ast.Constant) and isinstance(cat.value, str) else "continuous"
    dims = _dims(gens) or []
    targets = [ast.unparse(g.target) for g in gens]
    ref = sym if not targets else f"{sym}[{targets[0]}]" if len(targets) == 1 else f"{sym}[{', '.join(targets)}]"
    aux = []
    for key, op in (("lowBound", ">="), ("upBound", "<=")):
        b = kw.get(key)
        if b is None or (isinstance(b, ast.Constant) and (b.value is None or (key == "lowBound" and b.value == 0))):
            continue
        if vtype == "binary":
            continue
        line = f"model += {ref} {op} {ast.unparse(b)}"
        for g in reversed(gens):
            line = f"for {ast.unparse(g.target)} in {ast.unparse(g.iter)}:\n" + "\n".join("    " + ln for ln in line.splitlines())
        aux.append(line)
    return {"symbol": sym, "shape": dims, "type": vtype, "definition": f"decision variable {sym}"}, aux


@dataclass
class OptimusPlan:
    params: dict[str, Any]
    variables: list[dict[str, Any]]
    constraints: list[str]  # PuLP snippets, also used as their descriptions
    objective: str
    sense: str


def optimus_plan(model: SimulatedModel, call: StageCall) -> OptimusPlan:
    parts = planned_parts(model, call)
    if parts is None:  # a SciPy/HiGHS program: nothing to split; the snippets will not fit the template
        form = formulation_for(call.problem.reference)
        return OptimusPlan({}, [{"symbol": "x", "shape": [], "type": "continuous"}],
                           [str(c) for c in form["constraints"]], "x", form["objective"]["sense"])
    pp = pulp_parts(parts)
    data = reference_data(pp["data"])
    params = {k: {"shape": _shape(v), "definition": f"given data {k}", "value": v} for k, v in data.items()}
    variables, aux = [], []
    for stmt in pp["variables"]:
        spec = _var_spec(stmt)
        if spec is None:
            variables.append({"symbol": "x", "shape": [], "type": "continuous"})
            continue
        variables.append(spec[0])
        aux += spec[1]
    constraints = list(pp["constraints"]) + aux
    if call.plan.kind in ("syntax_error", "runtime_error") and constraints:
        constraints[0] = model._faulty(constraints[0], "\n".join(pp["data"] + pp["variables"]), call.plan.kind,
                                       call.seed, call.problem.id)
    return OptimusPlan(params, variables, constraints, pp["objective"], pp["sense"])


def _shown(call: StageCall, head: str) -> str:
    """The first paragraph under a ``## <head>`` heading of the prompt."""
    return _section(user_text(call), head).strip().split("\n\n")[0]


def optimus_parameters(model: SimulatedModel, call: StageCall) -> str:
    return json.dumps(optimus_plan(model, call).params)


def optimus_objective(model: SimulatedModel, call: StageCall) -> str:
    plan = optimus_plan(model, call)
    return json.dumps({"description": plan.objective, "sense": plan.sense})


def optimus_constraints(model: SimulatedModel, call: StageCall) -> str:
    return json.dumps(optimus_plan(model, call).constraints)


def optimus_redundancy(model: SimulatedModel, call: StageCall) -> str:
    listed = _shown(call, "Constraints")
    return listed or "[]"


def optimus_confidence(model: SimulatedModel, call: StageCall) -> str:
    score = 5 if rng(call, "conf", _shown(call, "Constraint")).random() < 0.9 else 3
    return f"{score} OUT OF 5: the problem states it."


def optimus_modify(model: SimulatedModel, call: StageCall) -> str:
    return json.dumps({"action": "keep", "constraint": _shown(call, "Constraint")})


def optimus_formulate(model: SimulatedModel, call: StageCall) -> str:
    plan = optimus_plan(model, call)
    return json.dumps({"formulation": _shown(call, "Constraint"), "new_variables": plan.variables,
                       "auxiliary_constraints": []})


def optimus_formulate_objective(model: SimulatedModel, call: StageCall) -> str:
    plan = optimus_plan(model, call)
    return json.dumps({"formulation": plan.objective, "sense": plan.sense, "new_variables": plan.variables})


def optimus_code(model: SimulatedModel, call: StageCall) -> str:
    return "```python\n" + _shown(call, "Constraint") + "\n```\n"


def optimus_code_objective(model: SimulatedModel, call: StageCall) -> str:
    return "```python\nmodel.setObjective(" + _shown(call, "Objective") + ")\n```\n"


def optimus_debug(model: SimulatedModel, call: StageCall) -> str:
    """A whole-program rewrite: fixed (the intended program; the reference from the second debug
    on) with ``p_repair``, else the program shown, unchanged."""
    text = user_text(call)
    shown = code_blocks(text)
    m = re.search(r"^## Debug attempt (\d+)", text, re.M)
    attempt = int(m.group(1)) if m else 1
    if rng(call, "debug", text).random() < model.skill.p_repair:
        code = call.problem.reference if attempt >= 2 else intended_program(model, call)
    else:
        code = shown[-1] if shown else first_program(model, call)
    return _reply("Fix the program.", code=code)


_OPTIMUS_STAGES: dict[str, StageHandler] = {
    "parameters": optimus_parameters, "objective": optimus_objective, "constraints": optimus_constraints,
    "redundancy": optimus_redundancy, "confidence": optimus_confidence, "modify": optimus_modify,
    "formulate": optimus_formulate, "check": lambda m, c: "yes, it matches the constraint.",
    "formulate_objective": optimus_formulate_objective, "code": optimus_code, "code_objective": optimus_code_objective,
    "debug": optimus_debug,
}
for _stage, _handler in _OPTIMUS_STAGES.items():
    register_stage("optimus", _stage, _handler)


# -- AutoFormulation ------------------------------------------------------------------------------

AF_LEVELS = ("parameters", "variables", "objective", "equalities", "inequalities")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")


def af_truth(model: SimulatedModel, call: StageCall) -> dict[str, str]:
    """The component per level of the program the plan intends (PuLP), else of a generic LP."""
    parts = planned_parts(model, call) or parts_of(call.problem.reference)
    if parts is None:
        parts = parts_of(generic_program(call.problem.question))
        if parts is None:
            raise ValueError("the generic program does not split into parts")
    pp = pulp_parts(parts)
    eq = [c for c in pp["constraints"] if "==" in c]
    ineq = [c for c in pp["constraints"] if "==" not in c]
    sense = "LpMaximize" if pp["sense"] == "maximize" else "LpMinimize"
    return {
        "parameters": "\n".join(pp["data"]) or "# none",
        "variables": "\n".join(pp["variables"]),
        "objective": f"model.sense = pulp.{sense}\nmodel.setObjective({pp['objective']})",
        "equalities": "\n".join(eq) or "# none",
        "inequalities": "\n".join(ineq) or "# none",
    }


def af_wrong(level: str, code: str, r: Any) -> str:
    """A plausible wrong component: a changed number, sense, comparator or category, or a dropped line."""
    if level == "objective" and r.random() < 0.5:
        return code.replace("LpMaximize", "LpMINIMIZE").replace("LpMinimize", "LpMaximize").replace("LpMINIMIZE", "LpMinimize")
    if level == "variables" and re.search(r"Integer|Binary", code):
        return re.sub(r"[\"'](Integer|Binary)[\"']", '"Continuous"', code)
    if level in ("equalities", "inequalities"):
        lines = code.splitlines()
        idx = [i for i, ln in enumerate(lines) if re.search(r"<=|>=|==", ln)]
        if idx:
            i = r.choice(idx)
            if r.random() < 0.5 and len(idx) > 1 and not lines[i].startswith(" "):
                del lines[i]
            else:
                lines[i] = re.sub(r"<=|>=|==", lambda m: {"<=": ">=", ">=": "<=", "==": "<="}[m.group(0)], lines[i], count=1)
            return "\n".join(lines)
    nums = list(_NUMBER.finditer(code))
    if nums:
        m = r.choice(nums)
        v = float(m.group(1))
        new = str(int(v) + max(1, round(abs(v) * 0.2))) if "." not in m.group(1) else str(round(v * 1.25, 6))
        return code[: m.start()] + new + code[m.end():]
    return code + "\n# (unchanged)"


def af_expand(level: str):
    def handler(model: SimulatedModel, call: StageCall) -> str:
        truth = af_truth(model, call)[level]
        m = CANDIDATE_LINE.search(user_text(call))
        k = int(m.group(1)) if m else 1
        r = rng(call, "candidate", level, k, _section(user_text(call), "Formulation so far"))
        code = truth if r.random() < bskill(model).p_component else af_wrong(level, truth, r)
        return "```python\n" + code.rstrip("\n") + "\n```\n"
    return handler




def _same(a: str, b: str) -> bool:
    return _norm(a) == _norm(b)


def af_rank(model: SimulatedModel, call: StageCall) -> str:
    text = user_text(call)
    level = next((lv for lv in AF_LEVELS if f"({lv})" in text), "inequalities")
    truth = af_truth(model, call)[level]
    r = rng(call, "rank", text)
    good = r.random() < bskill(model).p_rank
    scores = []
    for _, code in CANDIDATE_BLOCK.findall(text):
        right = _same(code, truth)
        scores.append(round((0.9 if right else 0.3) if good else r.random(), 3))
    return json.dumps(scores)


def af_group(model: SimulatedModel, call: StageCall) -> str:
    groups: dict[str, list[int]] = {}
    for i, code in CANDIDATE_BLOCK.findall(user_text(call)):
        groups.setdefault(_norm(code), []).append(int(i))
    return json.dumps(list(groups.values()))


def af_compare(model: SimulatedModel, call: StageCall) -> str:
    text = user_text(call)
    truth = af_truth(model, call)
    blocks = code_blocks(text)
    a, b = (blocks + ["", ""])[:2]

    def score(code: str) -> int:
        have = _norm(code)
        return sum(1 for c in truth.values() if _norm(c) and _norm(c) in have)

    better = "A" if score(a) >= score(b) else "B"
    if rng(call, "judge", text).random() >= bskill(model).p_judge:
        better = "B" if better == "A" else "A"
    return f"Comparing both formulations with the problem statement.\n{better}\n"


for _level in AF_LEVELS:
    register_stage("autoformulation", _level, af_expand(_level))
register_stage("autoformulation", "rank", af_rank)
register_stage("autoformulation", "group", af_group)
register_stage("autoformulation", "compare", af_compare)
