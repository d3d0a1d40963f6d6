"""A deterministic, seeded stand-in for an LLM: for tests, load generation and the demo.

Why it exists: the harnesses, the sandbox, the scheduler and the ledger must be exercised
end to end without a GPU. ``SimulatedModel`` answers like a (configurably skilled) model
would, but it is never a model's accuracy: every ``Completion`` it returns says
``simulated=True`` (and the Serve app adds ``system_fingerprint: "opteval-simulated"``).

How it decides, from the messages alone (so it behaves the same in process and behind HTTP):

* the problem: the question between ``<problem>`` and ``</problem>`` in a user message,
  normalised (whitespace collapsed, lower-cased) and hashed, looked up among the embedded
  sample benchmark's questions (fallback: substring search). Unknown problems get a small
  generic PuLP program that runs and submits a (wrong) number.
* the harness and the stage: never from the prompt (real models read it too) but from the
  call's ``CallMeta`` side channel -- the ``meta`` argument in process, the headers
  ``X-Opteval-Harness`` / ``X-Opteval-Stage`` behind HTTP (``cluster/serve/serving.py``). The reply
  is written by the handler registered for (harness, stage) in ``STAGE_HANDLERS``
  (``register_stage``; the stage modules of ``opteval.evalcore.sim`` register theirs); no meta or an unregistered
  pair answers like ``direct``.
* the state of a multi-turn trajectory: the line ``Turn <k> of <n>`` and the summary blocks
  ``### Action <i> (turn <t>): <outcome>`` followed by ``Purpose: <text>`` written by the
  harnesses. The patterns are the harness modules' exported constants (``TURN_LINE``,
  ``PROBLEM_TAG`` in ``opteval.evalcore.harnesses._common``, ``ACTION_HEAD`` in ``opticycle``), and
  tests/harnesses/test_prompt_formats.py renders each prompt and checks they still match.

Every random choice is drawn from a ``random.Random`` seeded by sha256 of
(seed, problem id, turn, purpose), so the same (messages, seed) always give the same text.

What it writes, per trajectory (drawn at turn 0): the reference program, a mutant of it
(``opteval.evalcore.mutation``: source-level operators after Table 9 of SemOPT), or the program with an
injected syntax error or runtime error (NameError / KeyError). After error feedback it
repairs with probability ``p_repair`` per turn. Multi-turn harnesses get the program in two
cells: first the model construction (data, variables, constraints), then the solve and
``submit`` footer, so the second cell only works if the interpreter kept the first's objects.
"""
from __future__ import annotations

import ast
import asyncio
import hashlib
import importlib
import json
import math
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from opteval.evalcore.data import load_sample_rows, reference_program
from opteval.evalcore.harnesses._common import PROBLEM_TAG, TURN_LINE
from opteval.evalcore.harnesses.opticycle import ACTION_HEAD
from opteval.evalcore.models.base import CallMeta, Completion, Message, Sampling, Usage
from opteval.evalcore.mutation import (  # the operators live in opteval.evalcore.mutation (also used by jobs/mutants.py)
    MUTATION_OPS,
    compiles,
    mutate,
)
from opteval.evalcore.mutation import (
    constraint_nodes as _constraint_nodes,
)
from opteval.evalcore.mutation import (
    replace_node as _replace_node,
)
from opteval.evalcore.mutation import (
    source_lines as _lines,
)
from opteval.evalcore.mutation import (
    stmt_span as _stmt_span,
)
from opteval.evalcore.registry import UnknownNameError, load_plugins
from opteval.evalcore.sim.skill import BaselineSkill, SimSkill

# -- what the policy reads from the prompts: formats the harness modules export ------------------
# (PROBLEM_TAG, TURN_LINE: opteval.evalcore.harnesses._common; ACTION_HEAD: opteval.evalcore.harnesses.opticycle)

# Stated purposes; the policy recognises its own earlier actions by these prefixes.
PURPOSE_BUILD = "Build the model: data, variables, objective and constraints."
PURPOSE_SOLVE = "Solve the model and submit the objective."
PURPOSE_REPAIR = "Fix the error reported above and rerun."
PURPOSE_SUBMIT = "Submit the result computed in the previous cell."
PURPOSE_PROGRAM = "Write and run the complete solver program."
PURPOSE_INSPECT = "Inspect the solution."
PURPOSE_FORMULATE = "Record the initial formulation."
PURPOSE_FIX_FORMULATION = "Complete the formulation and resubmit."

POLICIES = ("skill", "always_correct", "always_mutant", "never_submit")
FORMULATION_FIELDS = ("sets", "parameters", "variables", "objective", "constraints")

_SOLVE_CALL = re.compile(r"\.(solve|optimize|run)\(|\b(linprog|milp|minimize|minimize_scalar|quadprog)\(")
_NOT_OK = ("error", "timeout", "memory", "output_limit", "killed", "restarted")


@dataclass(frozen=True)
class SimProblem:
    id: str
    question: str
    reference: str  # program source calling submit(...)


@dataclass(frozen=True)
class Plan:
    """The per-trajectory draw (seed, problem): what the policy intends to answer."""

    kind: str  # correct | mutant | syntax_error | runtime_error | generic
    base: str  # correct | mutant: what a repaired answer is
    no_submit: bool
    bad_formulation: bool


# -- helpers ------------------------------------------------------------------------------------


def normalize_question(text: str) -> str:
    return " ".join(text.split()).lower()


def question_hash(text: str) -> str:
    return hashlib.sha256(normalize_question(text).encode()).hexdigest()


def _rng(*parts: Any) -> random.Random:
    blob = "\x1f".join(str(p) for p in parts).encode()
    return random.Random(int.from_bytes(hashlib.sha256(blob).digest()[:8], "big"))


def content_text(message: Message) -> str:
    """A message's text; OpenAI-style content part lists (over HTTP) are joined."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def count_tokens(text: str) -> int:
    """The fixed token rule: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


@lru_cache(maxsize=1)
def _sample_catalog() -> dict[str, SimProblem]:
    out: dict[str, SimProblem] = {}
    for row in load_sample_rows():
        src = reference_program(row["id"])
        if src:
            out[row["id"]] = SimProblem(row["id"], row["question"], src)
    return out


# -- program surgery ---------------------------------------------------------------------------


def split_program(src: str) -> tuple[str, str] | None:
    """(build cell, solve cell): cut before the first top-level statement that solves.

    None when the program has no such cut (then multi-turn harnesses get one cell).
    """
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    lines = _lines(src)
    for pattern in (_SOLVE_CALL, re.compile(r"\bsubmit\(")):
        for i, node in enumerate(tree.body):
            start, end = _stmt_span(node)
            if pattern.search("".join(lines[start:end])):
                if i == 0:
                    break
                return "".join(lines[:start]), "".join(lines[start:])
    return None


def inject_syntax_error(cell: str) -> str:
    """Drop the colon of the first compound-statement header; fallback: an unclosed paren."""
    lines = _lines(cell)
    for i, line in enumerate(lines):
        code = line.split("#", 1)[0].rstrip()
        if re.match(r"\s*(if|for|while|with|def|elif|else|try|except)\b.*:$", code):
            lines[i] = code[:-1] + "\n"
            out = "".join(lines)
            if not compiles(out):
                return out
    out = 'print("solving the model"\n' + cell
    return out


def inject_runtime_error(cell: str, defined_before: set[str], rng: random.Random) -> tuple[str, str]:
    """(cell, "NameError" | "KeyError"): misspell a name the earlier code defined, or look up a
    result key that does not exist yet."""
    if rng.random() < 0.5:
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            tree = None
        names = [
            n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and n.id in defined_before
        ] if tree else []
        if names:
            first = min(names, key=lambda n: (n.lineno, n.col_offset))
            return _replace_node(cell, first, first.id + "_model"), "NameError"
    return 'results = {}\nprint("objective so far:", results["objective"])\n' + cell, "KeyError"


def defined_names(src: str) -> set[str]:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
    return out


def without_submit(src: str) -> str:
    """The program, printing its result instead of submitting it."""
    return re.sub(r"\bsubmit\(", 'print("result:", ', src)


def submit_statement(src: str) -> str | None:
    """The last top-level statement that calls submit (e.g. the status if/elif footer)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    lines = _lines(src)
    for node in reversed(tree.body):
        start, end = _stmt_span(node)
        seg = "".join(lines[start:end])
        if re.search(r"\bsubmit\(", seg):
            return seg
    return None


def generic_program(question: str) -> str:
    """A plausible small LP for an unknown problem; it runs and submits a (wrong) number."""
    r = _rng("generic", question_hash(question))
    a, b = r.randint(2, 9), r.randint(2, 9)
    c1, c2, cap = r.randint(1, 5), r.randint(1, 5), r.randint(20, 80)
    return (
        "import pulp\n"
        'prob = pulp.LpProblem("model", pulp.LpMaximize)\n'
        'x = pulp.LpVariable("x", lowBound=0)\n'
        'y = pulp.LpVariable("y", lowBound=0)\n'
        f"prob += {a} * x + {b} * y\n"
        f'prob += {c1} * x + {c2} * y <= {cap}, "capacity"\n'
        f'prob += x <= {cap // 2}, "limit_x"\n'
        "prob.solve(pulp.PULP_CBC_CMD(msg=0))\n"
        "submit(round(pulp.value(prob.objective), 6))\n"
    )


def formulation_for(src: str, complete: bool = True) -> dict[str, Any]:
    """A formulation (sets, parameters, variables, objective, constraints) read off a program."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    lines = _lines(src)
    params: dict[str, str] = {}
    sets: list[dict[str, Any]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                val = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            name = node.targets[0].id
            params[name] = type(val).__name__
            if isinstance(val, (list, tuple, dict)) and val:
                sets.append({"name": f"I_{name}", "size": len(val), "indexes": name})
    var_names = re.findall(r"""(?:LpVariable(?:\.dicts)?|addVars?)\(\s*(?:name\s*=\s*)?["']([^"']+)["']""", src)
    var_names += re.findall(r"""addVar\([^)]*name\s*=\s*["']([^"'{]+)""", src)
    domain = "integer" if re.search(r"Integer|Binary|vtype\s*=\s*[\"'][IB]|integrality", src) else "continuous"
    variables = [{"name": v, "domain": domain} for v in dict.fromkeys(var_names)] or [
        {"name": "x", "domain": domain, "note": "decision vector of the solver call"}
    ]
    if re.search(r"LpMaximize|[\"']maximize[\"']|MAXIMIZE|kMaximize|SENSE\s*=\s*-1", src):
        sense = "maximize"
    else:
        sense = "minimize"
    constraints = []
    for node in _constraint_nodes(tree):
        start, end = _stmt_span(node)
        constraints.append(" ".join("".join(lines[start:end]).split())[:200])
    if not constraints:
        constraints = [f"{m} (matrix form)" for m in ("A_ub @ x <= b_ub", "A_eq @ x == b_eq") if m.split()[0] in src]
    if not constraints:
        constraints = ["as implemented in the solver program"]
    form: dict[str, Any] = {
        "sets": sets,
        "parameters": params,
        "variables": variables,
        "objective": {"sense": sense, "expression": "as implemented in the solver program"},
        "constraints": constraints,
    }
    if not complete:
        del form["constraints"]
    return form


# -- conversation parsing -------------------------------------------------------------------------


@dataclass
class Conversation:
    """What the policy reads off one call: its prompt state and the side-channel meta."""

    harness: str
    stage: str
    question: str | None
    turn: int
    actions: list[tuple[int, str, str]] = field(default_factory=list)  # (turn, outcome, purpose)


def parse_conversation(messages: list[Message], meta: CallMeta | None = None) -> Conversation:
    user = "\n".join(content_text(m) for m in messages if m.get("role") != "system")
    pm = PROBLEM_TAG.search(user)
    tm = TURN_LINE.search(user)
    actions = [(int(t), outcome, purpose.strip()) for _, t, outcome, purpose in ACTION_HEAD.findall(user)]
    return Conversation(
        harness=meta.harness if meta else "direct",
        stage=meta.stage if meta else "act",
        question=pm.group(1) if pm else None,
        turn=int(tm.group(1)) if tm else 0,
        actions=actions,
    )


@dataclass(frozen=True)
class StageCall:
    """Everything a stage handler may use to write its reply."""

    problem: SimProblem
    plan: Plan
    seed: int
    conv: Conversation
    messages: tuple[Message, ...] = ()  # the call's messages, for handlers that read what they are asked


# (model, call) -> completion text
StageHandler = Callable[["SimulatedModel", StageCall], str]
STAGE_HANDLERS: dict[tuple[str, str], StageHandler] = {}


# the built-in stage modules by harness, imported the first time one of their stages is asked
# for (nothing is registered when opteval.evalcore.sim is imported; the study's own three harnesses'
# stages are at the end of this module)
STAGE_MODULES: dict[str, str] = {
    **dict.fromkeys(("cafa", "reflexion", "coe", "optimus", "autoformulation", "ormind"), "opteval.evalcore.sim.baselines"),
    "llmopt": "opteval.evalcore.sim.llmopt",
    "semopt": "opteval.evalcore.sim.semopt",
}


def register_stage(harness: str, stage: str, handler: StageHandler) -> None:
    """Teach the policy one (harness, stage): ``handler(model, call) -> text``. The stage
    modules of this package call it when they are first needed (``STAGE_MODULES``); a plugin's
    ``opteval`` entry point calls it for its harness's stages (a harness never does: it does not
    know the simulator). Re-registering a pair replaces its handler."""
    STAGE_HANDLERS[(harness, stage)] = handler


def stage_handler(harness: str, stage: str) -> StageHandler:
    """The handler for (harness, stage), importing its stage module on first use; an unknown pair
    is an error (the simulator never answers a harness it does not know as if it were another)."""
    key = (harness, stage)
    if key not in STAGE_HANDLERS:
        module = STAGE_MODULES.get(harness)
        if module is not None:
            importlib.import_module(module)
        else:
            load_plugins()
    try:
        return STAGE_HANDLERS[key]
    except KeyError:
        raise UnknownNameError("simulated stage (harness/stage)", f"{harness}/{stage}",
                               sorted({f"{h}/{st}" for h, st in STAGE_HANDLERS}
                                      | {f"{h}/*" for h in STAGE_MODULES})) from None


# -- the model ----------------------------------------------------------------------------------


class SimulatedModel:
    """ChatModel implementation of the simulated policy (see the module docstring)."""

    simulated = True

    def __init__(
        self,
        name: str = "simulated",
        skill: SimSkill | None = None,
        policy: str = "skill",
        ttft_s: float = 0.0,
        tokens_per_s: float = 0.0,
        report_usage: bool = True,
        problems: Mapping[str, SimProblem] | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"SimulatedModel policy {policy!r} unknown; expected one of {list(POLICIES)}")
        if ttft_s < 0 or tokens_per_s < 0:
            raise ValueError("SimulatedModel: ttft_s and tokens_per_s must be >= 0")
        self.name = name
        self.skill = skill or SimSkill()
        self.policy = policy
        self.ttft_s = float(ttft_s)
        self.tokens_per_s = float(tokens_per_s)
        self.report_usage = report_usage
        self._problems = problems
        self._by_hash: dict[str, str] | None = None
        # the baselines' stage knobs (skill.DEFAULT_BASELINE_SKILL when None); tests set it
        self.baseline_skill: BaselineSkill | None = None

    # config ------------------------------------------------------------------------------
    CONFIG_KEYS = frozenset({"name", "backend", "policy", "skill", "ttft_s", "tokens_per_s", "report_usage"})

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> SimulatedModel:
        """Build from a model config: ``{name, backend: simulated, policy, skill: {...}, ttft_s,
        tokens_per_s, report_usage}``. Unknown keys are an error naming them."""
        cfg = dict(cfg)
        unknown = sorted(set(cfg) - cls.CONFIG_KEYS)
        if unknown:
            raise ValueError(f"simulated model config: unknown key(s) {unknown}; allowed {sorted(cls.CONFIG_KEYS)}")
        skill_cfg = dict(cfg.get("skill") or {})
        known = {f.name for f in fields(SimSkill)}
        bad = sorted(set(skill_cfg) - known)
        if bad:
            raise ValueError(f"simulated model config: unknown skill key(s) {bad}; allowed {sorted(known)}")
        if "mutation_ops" in skill_cfg:
            skill_cfg["mutation_ops"] = tuple(skill_cfg["mutation_ops"])
        return cls(
            name=str(cfg.get("name") or "simulated"),
            skill=SimSkill(**skill_cfg),
            policy=str(cfg.get("policy", "skill")),
            ttft_s=float(cfg.get("ttft_s", 0.0)),
            tokens_per_s=float(cfg.get("tokens_per_s", 0.0)),
            report_usage=bool(cfg.get("report_usage", True)),
        )

    # problem lookup ------------------------------------------------------------------------
    @property
    def problems(self) -> Mapping[str, SimProblem]:
        if self._problems is None:
            self._problems = _sample_catalog()
        return self._problems

    def identify(self, messages: list[Message]) -> SimProblem | None:
        """The known problem the messages ask about, else None."""
        if self._by_hash is None:
            self._by_hash = {question_hash(p.question): pid for pid, p in self.problems.items()}
        conv = parse_conversation(messages)
        if conv.question is not None:
            pid = self._by_hash.get(question_hash(conv.question))
            return self.problems[pid] if pid else None
        text = normalize_question(" ".join(content_text(m) for m in messages if m.get("role") != "system"))
        for p in self.problems.values():
            if normalize_question(p.question) in text:
                return p
        return None

    # decisions ------------------------------------------------------------------------------
    def plan(self, problem_id: str, seed: int) -> Plan:
        """The per-trajectory intent for (problem, seed); public so tests can measure skill rates."""
        s = self.skill
        if self.policy == "always_correct" or self.policy == "never_submit":
            return Plan("correct", "correct", self.policy == "never_submit", False)
        if self.policy == "always_mutant":
            return Plan("mutant", "mutant", False, False)
        r = _rng("plan", seed, problem_id, 0)
        kinds = s.kind_weights
        kind = r.choices(list(kinds), weights=list(kinds.values()))[0]
        denom = s.p_correct + s.p_mutant
        base = kind if kind in ("correct", "mutant") else (
            "correct" if denom == 0 or r.random() < s.p_correct / denom else "mutant"
        )
        return Plan(kind, base, r.random() < s.p_no_submit, r.random() < s.p_bad_formulation)

    def _program(self, problem: SimProblem, seed: int, which: str) -> str:
        if which == "mutant":
            return mutate(problem.reference, _rng("mutant", seed, problem.id), self.skill.mutation_ops)[0]
        return problem.reference

    def _faulty(self, cell: str, context: str, kind: str, seed: int, pid: str) -> str:
        if kind == "syntax_error":
            return inject_syntax_error(cell)
        return inject_runtime_error(cell, defined_names(context), _rng("fault", seed, pid))[0]

    # ChatModel ----------------------------------------------------------------------------------
    async def chat(
        self, messages: list[Message], sampling: Sampling, seed: int, meta: CallMeta | None = None
    ) -> Completion:
        t0 = time.perf_counter()
        text = self.respond(messages, seed, meta)
        prompt_tokens = sum(count_tokens(content_text(m)) for m in messages)
        completion_tokens = count_tokens(text)
        finish = "stop"
        if completion_tokens > sampling.max_tokens:
            text, completion_tokens, finish = text[: sampling.max_tokens * 4], sampling.max_tokens, "length"
        if self.tokens_per_s > 0 or self.ttft_s > 0:
            gen = completion_tokens / self.tokens_per_s if self.tokens_per_s > 0 else 0.0
            await asyncio.sleep(self.ttft_s + gen)
        usage = Usage(prompt_tokens, completion_tokens, None) if self.report_usage else Usage()
        return Completion(text, usage, finish, time.perf_counter() - t0, simulated=True)

    def respond(self, messages: list[Message], seed: int, meta: CallMeta | None = None) -> str:
        """The completion text for these messages and this (harness, stage) (pure, deterministic)."""
        conv = parse_conversation(messages, meta)
        problem = self.identify(messages)
        if problem is None:
            q = conv.question or " ".join(content_text(m) for m in messages)
            problem = SimProblem("unknown:" + question_hash(q)[:12], q, generic_program(q))
            plan = Plan("generic", "correct", self.policy == "never_submit", False)
        else:
            plan = self.plan(problem.id, seed)
        return stage_handler(conv.harness, conv.stage)(self, StageCall(problem, plan, seed, conv, tuple(messages)))

    def formulation_reply(self, call: StageCall) -> str:
        """OptiState's formulate stage: the formulation read off the reference program."""
        form = formulation_for(call.problem.reference, complete=not call.plan.bad_formulation)
        return _reply(PURPOSE_FORMULATE, formulation=form)

    def _direct(self, problem: SimProblem, plan: Plan, seed: int) -> str:
        base = self._program(problem, seed, plan.base)
        if plan.kind in ("syntax_error", "runtime_error"):
            cut = split_program(base)
            head, tail = cut if cut else ("", base)
            base = head + self._faulty(tail, head, plan.kind, seed, problem.id)
        if plan.no_submit:
            base = without_submit(base)
        return _reply(PURPOSE_PROGRAM, code=base, lead="Here is the complete program.")

    def _act(self, problem: SimProblem, plan: Plan, seed: int, conv: Conversation, with_formulation: bool = False) -> str:
        """One code cell for OptiCycle / OptiState, chosen from the visible action history."""
        r = _rng("turn", seed, problem.id, conv.turn)
        correct = problem.reference
        base = self._program(problem, seed, plan.base)
        form = formulation_for(correct) if with_formulation else None
        last = conv.actions[-1] if conv.actions else None
        # a restarted interpreter lost everything built before the restart
        restarts = [i for i, (_, o, _p) in enumerate(conv.actions) if o == "restarted"]
        live = conv.actions[restarts[-1] + 1:] if restarts else conv.actions
        build_ok = any(p == PURPOSE_BUILD and o == "ok" for _, o, p in live)
        n_errors = sum(1 for _, o, _p in conv.actions if o in _NOT_OK)

        def solve_cell(program: str) -> str:
            # only the solve part when the built objects are this program's; a switched
            # program (a mutant repaired into the reference) is rerun whole
            cut = split_program(program)
            cell = cut[1] if cut and build_ok and program == base else program
            return without_submit(cell) if plan.no_submit or self.policy == "never_submit" else cell

        def build_or_solve(program: str, purpose_solve: str) -> str:
            cut = split_program(program)
            if cut and not build_ok:
                return _reply(PURPOSE_BUILD, code=cut[0])
            return _reply(purpose_solve, code=solve_cell(program))

        if last is None or (last[2] == PURPOSE_BUILD and last[1] != "ok"):
            return build_or_solve(base, PURPOSE_SOLVE)
        _, outcome, purpose = last
        if outcome == "refused":
            return _reply(PURPOSE_FIX_FORMULATION, code=solve_cell(base), formulation=form)
        if outcome in _NOT_OK:
            if r.random() >= self.skill.p_repair:
                return _reply(PURPOSE_REPAIR, code=self._first_attempt(problem, plan, seed, base, build_ok))
            # a repaired program is the intended one, unless that already failed twice
            program = correct if n_errors >= 2 or plan.kind == "mutant" else base
            return build_or_solve(program, PURPOSE_REPAIR)
        # last action ran fine
        if purpose == PURPOSE_BUILD:
            return _reply(PURPOSE_SOLVE, code=self._first_attempt(problem, plan, seed, base, build_ok))
        if self.policy == "never_submit":
            return _reply(PURPOSE_INSPECT, code='print("checking the solution once more")\n' + solve_cell(base))
        stmt = submit_statement(base)
        if purpose in (PURPOSE_SOLVE, PURPOSE_REPAIR, PURPOSE_FIX_FORMULATION) and stmt:
            return _reply(PURPOSE_SUBMIT, code=stmt)
        return _reply(PURPOSE_SOLVE, code=base)

    def _first_attempt(self, problem: SimProblem, plan: Plan, seed: int, base: str, build_ok: bool) -> str:
        cut = split_program(base)
        head, cell = (cut if cut and build_ok else ("", base))
        if plan.kind in ("syntax_error", "runtime_error"):
            cell = self._faulty(cell, head, plan.kind, seed, problem.id)
        return without_submit(cell) if plan.no_submit or self.policy == "never_submit" else cell


register_stage("direct", "act", lambda m, c: m._direct(c.problem, c.plan, c.seed))
# the released models' own one-call protocols answer as `direct` does (a program in one reply)
for _one_call in ("orlm", "sirl", "sirl_roles"):
    register_stage(_one_call, "act", lambda m, c: m._direct(c.problem, c.plan, c.seed))
register_stage("opticycle", "act", lambda m, c: m._act(c.problem, c.plan, c.seed, c.conv))
register_stage("optistate", "formulate", lambda m, c: m.formulation_reply(c))
register_stage("optistate", "act", lambda m, c: m._act(c.problem, c.plan, c.seed, c.conv, with_formulation=True))


def _reply(purpose: str, code: str | None = None, formulation: dict | None = None, lead: str = "") -> str:
    parts = [f"Purpose: {purpose}"]
    if lead:
        parts.append(lead)
    if formulation is not None:
        parts.append("```formulation\n" + json.dumps(formulation, indent=2) + "\n```")
    if code is not None:
        parts.append("```python\n" + code.rstrip("\n") + "\n```")
    return "\n\n".join(parts) + "\n"


__all__ = [
    "SimulatedModel", "SimSkill", "SimProblem", "Plan", "POLICIES", "MUTATION_OPS", "FORMULATION_FIELDS",
    "mutate", "split_program", "register_stage", "stage_handler", "STAGE_HANDLERS", "StageCall", "Conversation",
    "parse_conversation", "formulation_for", "question_hash", "count_tokens", "generic_program",
]
