"""AutoFormulation / Autoformulator (Astorga et al., ICML 2025): MCTS over formulation components.

Public workflow (jumpynitro/AutoFormulator ``MCTS_used.py``,
``utils_diff.py``, ``run_NL4OPT.py``): a tree of depth 5 -- parameters, decision variables,
objective, equality constraints, inequality constraints. Expanding a node samples
``N_SAMPLES=8`` candidates for the next component (``N_USED_GPT``), removes duplicates (parameters:
the most common; variables: one LLM grouping call; objective: sympy; constraints: z3 in the public
code -- here z3 when installed, else sympy), asks one LLM ranking call for a prior ``r0`` and keeps
the top ``N_TOP=3`` children. ``many_rollouts`` runs MCTS with
UCT = 0.5 r0 + 0.5 Q/N + 1 sqrt(log N_parent / N); a terminal's reward comes from pairwise LLM
comparisons against up to 3 baseline terminals, in both orders; the first 3 solved terminals get
reward 0.5 and become the baselines. 16 rollouts (the code saves results at 4/8/16).
These are the defaults; the method config's ``params`` (``candidates``, ``top``, ``baselines``) and
``budgets.max_turns`` (rollouts) scale the search down, as ``configs/methods/autoformulation.yaml``
does to match the harness paper's token accounting (docs/calibration.md).
Final answer: the solved terminal ranked first by its pairwise-comparison reward (baselines 0.5),
its run's submission.
Adaptations: lazy expansion along each rollout instead of the dense DFS;
PuLP components instead of gurobipy; candidates are separate calls (our ChatModel returns one
completion per request; the prompt numbers the candidate, "Candidate k of 8", since every call of
a trajectory carries the same seed); one ranking and one comparison completion per request
instead of ``n=5``; only complete formulations are executed (the public code also executes
partial models to drop crashing children). The call budget (method YAML) ends the search early;
the best terminal found so far is then the answer.
"""
from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from opteval.evalcore.harnesses._baseline import (
    PULP_FOOTER,
    Baseline,
    json_object,
    params_from,
    python_code,
    run_succeeded,
    to_sympy,
)
from opteval.evalcore.harnesses._common import BudgetSpent, Meter
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import Trajectory
from opteval.evalcore.sandbox.types import ExecResult

LEVELS = ("parameters", "variables", "objective", "equalities", "inequalities")
N_SAMPLES = 8  # MCTS_used.py: N_USED_GPT = 8
N_TOP = 3  # MCTS_used.py: N_TOP = 3
N_ROLLOUTS = 16  # results saved at 4/8/16 rollouts
N_BASELINES = 3  # the first 3 solved terminals
C_PRIOR, C_VALUE, C_EXPLORE = 0.5, 0.5, 1.0  # UCT weights of the public code
HEADER = 'import math\nimport pulp\nmodel = pulp.LpProblem("autoformulation", pulp.LpMinimize)\n'


@dataclass
class Node:
    components: tuple[str, ...]  # one code component per level done
    prior: float = 1.0
    n: int = 0
    q: float = 0.0
    children: list[Node] | None = None  # None: not expanded yet
    result: ExecResult | None = None
    reward: float | None = None

    @property
    def terminal(self) -> bool:
        return len(self.components) == len(LEVELS)

    def program(self) -> str:
        return HEADER + "\n".join(c.rstrip("\n") for c in self.components) + "\n" + PULP_FOOTER


# -- deduplication --------------------------------------------------------------------------------

# the candidate line of prompts/autoformulation/_expand_head.md and the blocks _listing writes
# (read back by the simulated policy)
CANDIDATE_LINE = re.compile(r"^## Candidate (\d+) of (\d+)", re.M)
CANDIDATE_BLOCK = re.compile(r"^### Candidate (\d+)\n```python\n(.*?)```", re.S | re.M)
_CMP = re.compile(r"(<=|>=|==)")


def _sympy_key(expr: str) -> str | None:
    """A canonical string of an arithmetic expression (sympy; subscripts ``x[i]`` read as names),
    or None when it is not plain arithmetic."""
    import sympy

    e = to_sympy(_flat(expr))
    return None if e is None else sympy.srepr(sympy.expand(e))


def _flat(expr: str) -> str:
    """``x[1, 2]`` -> ``x_1_2`` so indexed variables are plain names for sympy."""
    return re.sub(r"\[\s*([\w\s,]+?)\s*\]", lambda m: "_" + "_".join(p.strip() for p in m.group(1).split(",")), expr)


def _constraint_key(line: str) -> str:
    """``a <= b`` and ``b >= a`` (and equal rearrangements) get one key; z3 when installed decides
    equivalence of linear forms the same way after sympy normalization."""
    body = re.sub(r"^\s*model\s*\+=\s*", "", line).split(",")[0] if "model +=" in line else line
    parts = _CMP.split(body)
    if len(parts) == 3:
        lhs, op, rhs = (p.strip() for p in parts)
        if op == ">=":
            lhs, rhs, op = rhs, lhs, "<="
        key = _sympy_key(f"({lhs}) - ({rhs})")
        if key is not None:
            return f"{op}:{key}"
    return " ".join(line.split())


def component_key(level: str, code: str) -> str:
    """The deduplication key of a candidate component."""
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if level == "objective":
        m = re.search(r"setObjective\((.*)\)\s*$", code, re.S)
        sense = "max" if "LpMaximize" in code else "min"
        expr = m.group(1).strip() if m else code
        return f"{sense}:{_sympy_key(expr) or ' '.join(expr.split())}"
    if level in ("equalities", "inequalities") and all("for " not in ln for ln in lines):
        return "|".join(sorted(_z3_or_sympy_keys(lines)))
    return "\n".join(" ".join(ln.split()) for ln in lines)


def _z3_or_sympy_keys(lines: list[str]) -> list[str]:
    return [_constraint_key(ln) for ln in lines]


HAVE_Z3 = importlib.util.find_spec("z3") is not None  # optional: pip install z3-solver


def _sympy_constraints(code: str) -> list[tuple[str, Any]] | None:
    """[(op, lhs - rhs as a sympy expression)] of a loop-free constraint component, else None."""
    import sympy

    out = []
    for line in code.splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        body = re.sub(r"^\s*model\s*\+=\s*", "", line).split(",")[0]
        parts = _CMP.split(body)
        if len(parts) != 3 or "for " in line:
            return None
        lhs, op, rhs = (p.strip() for p in parts)
        expr = to_sympy(_flat(f"({lhs}) - ({rhs})"))
        if expr is None:
            return None
        out.append((op, sympy.expand(expr)))
    return out


def z3_equivalent(a: str, b: str) -> bool:
    """Whether z3 proves two loop-free constraint components equivalent (the public code's z3
    check). False when z3 is not installed or a component is not plain linear arithmetic."""
    if not HAVE_Z3:
        return False
    import z3

    ca, cb = _sympy_constraints(a), _sympy_constraints(b)
    if ca is None or cb is None:
        return False
    names = sorted({str(s) for _, e in ca + cb for s in e.free_symbols})
    env = {n: z3.Real(n) for n in names}

    def conj(cons: list[tuple[str, Any]]) -> Any:
        terms = []
        for op, e in cons:
            ze = eval(str(e), {"__builtins__": {}}, env)
            terms.append(ze == 0 if op == "==" else ze <= 0 if op == "<=" else ze >= 0)
        return z3.And(*terms) if terms else z3.BoolVal(True)

    solver = z3.Solver()
    solver.add(z3.Not(conj(ca) == conj(cb)))
    return solver.check() == z3.unsat


def dedup(level: str, candidates: list[str]) -> list[str]:
    """Distinct candidates in first-seen order; parameters keep only the most common one;
    constraint components that z3 (when installed) proves equivalent count as one."""
    keyed = [(component_key(level, c), c) for c in candidates if c.strip()]
    if not keyed:
        return []
    if level == "parameters":
        key = Counter(k for k, _ in keyed).most_common(1)[0][0]
        return [next(c for k, c in keyed if k == key)]
    seen: dict[str, str] = {}
    for k, c in keyed:
        seen.setdefault(k, c)
    out = list(seen.values())
    if HAVE_Z3 and level in ("equalities", "inequalities"):
        kept: list[str] = []
        for c in out:
            if not any(z3_equivalent(c, k) for k in kept):
                kept.append(c)
        out = kept
    return out


@dataclass(frozen=True)
class SearchParams:
    """The search's width: ``candidates`` sampled per expansion (the public code's N_USED_GPT),
    ``top`` children kept after ranking (N_TOP), ``baselines`` solved terminals that become the
    comparison baselines (reward 0.5). Rollouts are ``budgets.max_turns`` (at most N_ROLLOUTS)."""

    candidates: int = N_SAMPLES
    top: int = N_TOP
    baselines: int = N_BASELINES

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> SearchParams:
        """Validated parameters; an unknown key or a bad value is an error naming ``params.<key>``."""
        out = params_from(cls, cfg)
        for name in (f.name for f in fields(cls)):
            v = getattr(out, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"params.{name} must be an integer >= 1, got {v!r}")
        return out


class AutoFormulation(Baseline):
    name = "autoformulation"
    prompt_dir = "autoformulation"

    @staticmethod
    def check_params(params: Mapping[str, Any] | None) -> None:
        """Raise ValueError naming the bad ``params.<key>`` (the config loader calls this)."""
        SearchParams.from_config(params)

    async def _run(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory) -> None:
        sp = SearchParams.from_config(ctx.params)
        root = Node(())
        baselines: list[Node] = []
        terminals: list[Node] = []
        try:
            for rollout in range(1, min(N_ROLLOUTS, ctx.budgets.max_turns) + 1):
                path = [root]
                node = root
                while not node.terminal:
                    if node.children is None:
                        node.children = await self._expand(problem, ctx, meter, node, sp)
                    if not node.children:
                        break
                    node = _select(node)
                    path.append(node)
                reward = 0.0
                if node.terminal:
                    reward = await self._evaluate(problem, ctx, meter, traj, node, rollout, baselines, terminals, sp)
                for n in path:
                    n.n += 1
                    n.q += reward
        except BudgetSpent as spent:
            traj.errors.append(f"budget spent: {spent} (search stopped; best terminal so far is the answer)")
        solved = [(t, t.result) for t in terminals if t.result is not None and run_succeeded(t.result)]
        if not solved:
            traj.errors.append("no complete formulation ran successfully")
            return
        _, result = max(solved, key=lambda tr: (tr[0].q / tr[0].n if tr[0].n else 0.0, -terminals.index(tr[0])))
        self.answer(traj, result)

    async def _expand(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, node: Node,
                      sp: SearchParams) -> list[Node]:
        level = LEVELS[len(node.components)]
        partial = "\n".join(node.components) or "# (nothing yet)"
        candidates = []
        for k in range(1, sp.candidates + 1):
            reply = await meter.call(self.messages(ctx, level, question=problem.question, partial=partial, k=k,
                                                   n=sp.candidates),
                                     len(node.components), f"expand {level} {k}/{sp.candidates}", stage=level)
            code = python_code(reply.text)
            if code is not None:
                candidates.append(code)
        distinct = dedup(level, candidates)
        if level == "variables" and len(distinct) > 1:
            distinct = await self._group(problem, ctx, meter, distinct)
        priors = [1.0] * len(distinct)
        if len(distinct) > 1:
            reply = await meter.call(self.messages(ctx, "rank", question=problem.question, partial=partial, level=level,
                                                   candidates=_listing(distinct)), len(node.components), f"rank {level}",
                                     stage="rank")
            scores = json_object(reply.text)
            if isinstance(scores, list) and len(scores) == len(distinct) and all(isinstance(s, (int, float)) for s in scores):
                total = sum(max(0.0, float(s)) for s in scores) or 1.0
                priors = [max(0.0, float(s)) / total for s in scores]
        order = sorted(range(len(distinct)), key=lambda i: -priors[i])[:sp.top]
        return [Node(node.components + (distinct[i],), prior=priors[i]) for i in order]

    async def _group(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, distinct: list[str]) -> list[str]:
        reply = await meter.call(self.messages(ctx, "group", question=problem.question, candidates=_listing(distinct)),
                                 1, "group variables", stage="group")
        groups = json_object(reply.text)
        if not isinstance(groups, list):
            return distinct
        keep = []
        for g in groups:
            if isinstance(g, list) and g and isinstance(g[0], int) and 1 <= g[0] <= len(distinct):
                keep.append(distinct[g[0] - 1])
        return list(dict.fromkeys(keep)) or distinct

    async def _evaluate(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter, traj: Trajectory, node: Node,
                        rollout: int, baselines: list[Node], terminals: list[Node], sp: SearchParams) -> float:
        if node.reward is not None:
            return node.reward
        node.result = await self.execute(ctx, traj, rollout, node.program())
        terminals.append(node)
        if not run_succeeded(node.result):
            node.reward = 0.0
        elif len(baselines) < sp.baselines:
            baselines.append(node)
            node.reward = 0.5
        else:
            wins = 0.0
            for base in baselines:
                for first, second, mine in ((node, base, "A"), (base, node, "B")):
                    reply = await meter.call(
                        self.messages(ctx, "compare", question=problem.question, a="\n".join(first.components),
                                      b="\n".join(second.components)),
                        rollout, "pairwise comparison", stage="compare",
                    )
                    wins += 1.0 if _verdict(reply.text) == mine else 0.0
            node.reward = wins / (2 * len(baselines))
        return node.reward


def _select(node: Node) -> Node:
    """UCT of the public code; an unvisited child first (highest prior)."""
    assert node.children
    unvisited = [c for c in node.children if c.n == 0]
    if unvisited:
        return max(unvisited, key=lambda c: c.prior)
    log_n = math.log(max(node.n, 1))
    return max(node.children, key=lambda c: C_PRIOR * c.prior + C_VALUE * c.q / c.n + C_EXPLORE * math.sqrt(log_n / c.n))


def _verdict(text: str) -> str | None:
    lines = [ln.strip().strip("*\"'.") for ln in text.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if last in ("A", "B"):
        return last
    m = re.findall(r"\b(A|B)\b", text)
    return m[-1] if m else None


def _listing(candidates: list[str]) -> str:
    return "\n\n".join(f"### Candidate {i}\n```python\n{c.rstrip()}\n```" for i, c in enumerate(candidates, start=1))


HARNESS = register_harness(AutoFormulation(), group="baselines")
__all__ = ["HARNESS", "dedup", "component_key", "z3_equivalent", "LEVELS", "Node"]
