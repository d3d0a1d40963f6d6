"""SemOPT: a gated, critic-guided hierarchical search (the SemOPT paper, sections 2.3 and 4, G.1).

1. **Gate** (4.1). Sample C_init (stage ``generate``), run it; on an execution error (or no
   objective value: no ``submit``, a status such as ``infeasible`` -- the paper's syntactic
   errors, 2.2) reflect up to K rounds (stage ``reflect``, the error appended to the
   conversation). Score S = I(C) * R(P, C): I = 1 when the code finally returned an objective
   value; R is the critic (stage ``critic``), asked only when I = 1 (G.1). Accept C_init when
   S > tau (unless ``gate: false``, the "w/o Gating" ablation).
2. **Search** (4.2, 4.3) otherwise: MCTS over root -> modeling strategy -> math model -> solver
   code. Each iteration: *selection* from the root by UCT, Q/N + omega * sqrt(ln N(parent) / N),
   unvisited children first, through expanded nodes; *expansion* of the reached node (the root,
   or a node visited before) into H children (stage ``expand``: one call per child, each prompt
   listing the siblings so far so the alternatives differ even under the trajectory's single
   seed); *simulation* from the first unvisited child: one child per lower level down to code
   (stage ``expand``; these states stay in the tree and count toward that node's H), which is
   evaluated exactly like C_init (run, K reflections, S = I * R; a leaf still failing scores 0);
   *backpropagation* of S to the root. An evaluated leaf, and a node whose H children are all
   exhausted, is never selected again; the search stops early when the root is exhausted.
3. **Answer**: the best-scored executed leaf (C_init included; ties keep the earliest). When no
   candidate executed, the first one that submitted anything (e.g. ``infeasible``) is kept.

Algorithm 1 (Appendix A) is not in the text we have; the UCT rule and "expand on the second
visit" are the textbook choices and ours. Parameters come from the method config's ``params``
(``configs/methods/semopt.yaml``, with sources). The critic is pluggable: ``llm`` (a rubric
prompt, ``prompts/semopt/critic.md``, to the generator or to another OpenAI-compatible model;
``Score: <0..1>``) or ``reward_model`` (a Serve deployment, ``cluster/serve/critic_serving.py``,
POST ``{problem, code}`` -> ``{score, raw, tokens}``). Every call -- reward-model calls included --
is a CallRecord and a transcript entry with its stage; each candidate's transcript entry (its
critic call, or its last generation call when it never ran) carries ``"semopt": {candidate,
phase, level path, executed, R, S, exec, critic, first_failed, reflections, gate?}``, which
``opteval.evalcore.reporting.semopt`` reads (``first_failed``/``reflections``: Table 16's repair accounting).
"""
from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from opteval.evalcore.harnesses._common import (
    BudgetSpent,
    Meter,
    exec_record,
    load_prompt,
    observation,
    render,
    system_prompt,
    tail,
)
from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.harnesses.registry import register_harness
from opteval.evalcore.harnesses.template import TrajectoryHarness
from opteval.evalcore.models.base import Message, ModelError
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import STATUS_SUBMITTED, CallRecord, Submission, Trajectory
from opteval.evalcore.sandbox.types import ExecResult

PROMPTS = "semopt"
LEVELS = ("root", "strategy", "model", "code")
CODE = 3
SIBLING_CHARS = 1500  # each listed sibling in an expansion prompt (head kept)
PARENT_CHARS = 6000  # a strategy / math model shown to the level below
# section heads of prompts/semopt/{model,code}.md and the sibling blocks _expand writes
# (read back by the simulated policy)
HEAD_STRATEGY = "## Modeling strategy"
HEAD_MODEL = "## Math model"
ALTERNATIVE_HEAD = "### Alternative {}"  # one sibling listed in an expansion prompt
ALTERNATIVE = re.compile(r"^### Alternative \d+", re.M)
_SCORE = re.compile(r"score\s*[:=]\s*\**\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)", re.I)
CRITIC_KINDS = ("llm", "reward_model")


# -- parameters ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CriticSpec:
    """``kind: llm`` (``model``: None = the generator, else a flat model config for
    ``opteval.evalcore.models.make_model``) or ``kind: reward_model`` (``url`` of the Serve route)."""

    kind: str = "llm"
    model: Mapping[str, Any] | None = None
    url: str = ""
    timeout_s: float = 60.0

    @classmethod
    def from_config(cls, cfg: Any) -> CriticSpec:
        if isinstance(cfg, str):
            cfg = {"kind": cfg}
        cfg = dict(cfg or {})
        _reject_unknown("params.critic", cfg, cls)
        spec = cls(**cfg)
        if spec.kind not in CRITIC_KINDS:
            raise ValueError(f"params.critic.kind: unknown {spec.kind!r}; known {list(CRITIC_KINDS)}")
        if spec.kind == "reward_model" and not spec.url:
            raise ValueError("params.critic.url: the reward_model critic needs the URL of its Serve route")
        return spec


@dataclass(frozen=True)
class SemOptParams:
    iterations: int = 8  # MCTS iterations when the gate opens the search
    expansion: int = 4  # H: children per expanded node
    reflections: int = 3  # K: repair rounds after an execution error
    tau: float = 0.6  # gate threshold on S_init
    omega: float = 1.414  # UCT exploration constant
    gate: bool = True  # False: always search (the "w/o Gating" ablation)
    infeasible_is_error: bool = True  # paper 2.2: a solver verdict of infeasibility is a syntactic error
    critic: CriticSpec = field(default_factory=CriticSpec)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> SemOptParams:
        """Validated parameters; an unknown key or a bad value is an error naming ``params.<key>``."""
        cfg = dict(cfg or {})
        _reject_unknown("params", cfg, cls)
        critic = CriticSpec.from_config(cfg.pop("critic", None))
        out = cls(**cfg, critic=critic)
        for name in ("iterations", "reflections"):
            _check(isinstance(getattr(out, name), int) and getattr(out, name) >= 0, name, "a non-negative integer")
        _check(isinstance(out.expansion, int) and out.expansion >= 1, "expansion", "an integer >= 1")
        _check(isinstance(out.tau, (int, float)) and 0.0 <= out.tau <= 1.0, "tau", "a number in [0, 1]")
        _check(isinstance(out.omega, (int, float)) and out.omega >= 0, "omega", "a number >= 0")
        for name in ("gate", "infeasible_is_error"):
            _check(isinstance(getattr(out, name), bool), name, "true or false")
        return out


def _reject_unknown(where: str, cfg: Mapping[str, Any], cls: type) -> None:
    unknown = sorted(set(cfg) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known {sorted(f.name for f in fields(cls))}")


def _check(ok: bool, name: str, what: str) -> None:
    if not ok:
        raise ValueError(f"params.{name} must be {what}")


# -- the tree ------------------------------------------------------------------------------------


@dataclass
class Node:
    level: int
    text: str = ""  # strategy / math model text, or the code of a leaf
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    expanded: bool = False  # its H children were generated
    visits: int = 0
    value: float = 0.0  # sum of the S backpropagated through it
    evaluated: bool = False  # a code leaf that was run and scored
    index: int = 0  # position among its siblings
    messages: list[Message] | None = None  # the prompt that wrote it (a leaf's context for reflection)
    call: int = -1  # the transcript entry of the call that wrote it

    @property
    def exhausted(self) -> bool:
        if self.level == CODE:
            return self.evaluated
        return self.expanded and all(c.exhausted for c in self.children)

    def path(self) -> list[int]:
        out, node = [], self
        while node.parent is not None:
            out.append(node.index)
            node = node.parent
        return out[::-1]

    def ancestor(self, level: int) -> Node:
        node = self
        while node.level > level:
            if node.parent is None:
                raise ValueError(f"{self.path()} has no ancestor at level {level}")
            node = node.parent
        return node


def uct(child: Node, parent_visits: int, omega: float) -> float:
    """Q/N + omega * sqrt(ln N(parent) / N); an unvisited child comes first."""
    if child.visits == 0:
        return math.inf
    return child.value / child.visits + omega * math.sqrt(math.log(max(parent_visits, 1)) / child.visits)


@dataclass
class Candidate:
    """One evaluated solver code: C_init or a search leaf."""

    index: int
    phase: str  # gate | search
    path: list[int]
    code: str
    executed: bool  # I(C)
    reward: float | None  # R(P, C); None when it never ran (not asked, G.1)
    score: float  # S = I * R
    exec_index: int | None  # its last ExecRecord
    submission: Any = None


# -- critics -------------------------------------------------------------------------------------


class LLMCritic:
    """The rubric prompt to a chat model (the generator, or another configured one)."""

    def __init__(self, spec: CriticSpec, ctx: HarnessContext, meter: Meter, harness: str) -> None:
        self.main = self.meter = meter
        if spec.model:  # another model: its own Meter on the same trajectory (calls and transcript)
            from opteval.evalcore.models import make_model

            self.meter = Meter(replace(ctx, model=make_model(dict(spec.model))), meter.traj, harness)

    async def score(self, problem: ProblemSpec, code: str, turn: int) -> tuple[float, str | None]:
        messages: list[Message] = [
            {"role": "system", "content": load_prompt(PROMPTS, "critic_system")},
            _user(render(load_prompt(PROMPTS, "critic"), question=problem.question, code=code.rstrip("\n"))),
        ]
        self.meter.tokens_used = self.main.tokens_used  # one token budget for the whole trajectory
        completion = await self.meter.call(messages, turn, "critic", stage="critic")
        self.main.tokens_used = self.meter.tokens_used
        return parse_score(completion.text)


def parse_score(text: str) -> tuple[float, str | None]:
    """(score in [0, 1], None) from the last ``Score: x`` line; (0.0, why) when there is none
    or it is out of range (an unreadable verdict never opens the gate)."""
    found = _SCORE.findall(text or "")
    if not found:
        return 0.0, "critic reply has no 'Score: <0..1>' line"
    value = float(found[-1])
    if not 0.0 <= value <= 1.0:
        return 0.0, f"critic score {value} is outside [0, 1]"
    return value, None


class RewardModelCritic:
    """The reward model behind its Serve route: POST {problem, code} -> {score, raw, tokens}.
    Recorded like a model call (stage ``critic``) so budgets and the ledger see it."""

    def __init__(self, spec: CriticSpec, meter: Meter) -> None:
        self.spec, self.meter = spec, meter

    async def score(self, problem: ProblemSpec, code: str, turn: int) -> tuple[float, str | None]:
        import httpx

        spent = self.meter.exhausted()
        if spent:
            raise BudgetSpent(spent)
        payload = {"problem": problem.question, "code": code}
        t0 = time.perf_counter()
        try:
            async with httpx.AsyncClient(timeout=self.spec.timeout_s) as client:
                resp = await client.post(self.spec.url, json=payload)
                resp.raise_for_status()
                body = resp.json()
            value = float(body["score"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"reward model at {self.spec.url}: {type(exc).__name__}: {exc}") from exc
        latency = time.perf_counter() - t0
        traj = self.meter.traj
        tokens = body.get("tokens")
        traj.calls.append(CallRecord(turn, "critic", tokens, 0 if tokens is not None else None, None, latency,
                                     "stop", "critic"))
        traj.transcript.append({"call": len(traj.calls) - 1, "turn": turn, "purpose": "critic", "stage": "critic",
                                "messages": [{"role": "user", "content": json.dumps(payload)}],
                                "completion": json.dumps(body), "finish_reason": "stop"})
        self.meter.tokens_used += int(tokens or 0)
        if not 0.0 <= value <= 1.0:
            return 0.0, f"reward model score {value} is outside [0, 1]"
        return value, None


# -- the harness ---------------------------------------------------------------------------------


@dataclass
class _Run:
    """One trajectory's state."""

    problem: ProblemSpec
    ctx: HarnessContext
    traj: Trajectory
    meter: Meter
    params: SemOptParams
    critic: Any
    candidates: list[Candidate] = field(default_factory=list)


class SemOPT(TrajectoryHarness):
    name = "semopt"
    prompt_dir = PROMPTS

    @staticmethod
    def check_params(params: Mapping[str, Any] | None) -> None:
        """Raise ValueError naming the bad ``params.<key>`` (the config loader calls this)."""
        SemOptParams.from_config(params)

    async def trajectory(self, problem: ProblemSpec, ctx: HarnessContext, meter: Meter) -> None:
        params = SemOptParams.from_config(ctx.params)
        critic = (RewardModelCritic(params.critic, meter) if params.critic.kind == "reward_model"
                  else LLMCritic(params.critic, ctx, meter, self.name))
        run = _Run(problem, ctx, meter.traj, meter, params, critic)
        try:
            first = await self._initial(run)
            accepted = params.gate and first.score > params.tau
            self._annotate_gate(run, first, accepted)
            if not accepted:
                await self._search(run)
        finally:
            self._answer(run)

    # -- gate ------------------------------------------------------------------------------------
    async def _initial(self, run: _Run) -> Candidate:
        messages = [self._system(run), _user(render(load_prompt(PROMPTS, "generate"), question=run.problem.question,
                                                    solvers=_solvers(run.ctx)))]
        completion = await run.meter.call(messages, 0, "generate", stage="generate")
        return await self._evaluate(run, messages, completion.text, "gate", [], 0, len(run.traj.transcript) - 1)

    def _annotate_gate(self, run: _Run, first: Candidate, accepted: bool) -> None:
        for entry in reversed(run.traj.transcript):
            info = entry.get("semopt")
            if info and info.get("candidate") == first.index:
                info["gate"] = "accept" if accepted else ("search" if run.params.gate else "off")
                info["tau"] = run.params.tau
                return

    # -- evaluation: run, reflect up to K times, score --------------------------------------------
    async def _evaluate(self, run: _Run, messages: list[Message], reply: str, phase: str, path: list[int],
                        turn: int, origin: int) -> Candidate:
        """Run, reflect, score one solver code; ``origin`` is the transcript entry of the call
        that wrote it (annotated when the evaluation itself made no call)."""
        from opteval.evalcore.extraction import extract_code

        calls_before = len(run.traj.transcript)

        conversation = list(messages)
        code = extract_code(reply, "submit")
        result = None
        exec_index = None
        executed = False
        first_failed = False  # the first attempt gave no objective value: the node "triggered repair" (G.1)
        reflections = 0
        for round_ in range(run.params.reflections + 1):
            if code is not None:
                self._check_turns(run)
                result = await run.ctx.executor.run(code, run.ctx.budgets.exec_limits)
                run.traj.execs.append(exec_record(turn, result, code=code))
                exec_index = len(run.traj.execs) - 1
                problem_text = self._failure(run, result)
                if problem_text is None:
                    executed = True
                    break
            else:
                problem_text = "Your reply had no ```python block, so nothing ran."
            first_failed = first_failed or round_ == 0
            if round_ == run.params.reflections:
                break
            conversation += [{"role": "assistant", "content": reply},
                             _user(render(load_prompt(PROMPTS, "reflect"), observation=problem_text))]
            completion = await run.meter.call(conversation, turn, "reflect", stage="reflect")
            reflections += 1
            reply = completion.text
            code = extract_code(reply, "submit") or None
        reward, why = (None, None)
        if executed:
            reward, why = await run.critic.score(run.problem, code, turn)
            if why:
                run.traj.errors.append(f"turn {turn}: {why}")
        score = float(reward) if executed and reward is not None else 0.0
        cand = Candidate(len(run.candidates), phase, path, code or "", executed, reward, score, exec_index,
                         result.submission if result is not None else None)
        run.candidates.append(cand)
        entry = len(run.traj.transcript) - 1 if len(run.traj.transcript) > calls_before else origin
        run.traj.transcript[entry]["semopt"] = {
            "candidate": cand.index, "phase": phase, "path": path, "executed": executed,
            "R": reward, "S": score, "exec": exec_index, "critic": run.params.critic.kind,
            "first_failed": first_failed, "reflections": reflections,
        }
        return cand

    def _failure(self, run: _Run, result: ExecResult) -> str | None:
        """Why this run gave no objective value (the reflection feedback), or None when it did."""
        from opteval.evalcore.grading import parse_submission

        shown = tail(observation(result), run.ctx.budgets.summary_chars)
        if result.outcome != "ok":
            return shown
        if result.submission is None:
            return shown + "\n[The program finished without calling submit(...), so no objective value was returned.]"
        parsed = parse_submission(result.submission)
        if isinstance(parsed, float):
            return None
        if parsed is not None and not run.params.infeasible_is_error:
            return None
        return shown + f"\n[The program submitted {result.submission!r}, not an objective value.]"

    def _check_turns(self, run: _Run) -> None:
        if len(run.traj.execs) >= run.ctx.budgets.max_turns:
            raise BudgetSpent(f"turns ({run.ctx.budgets.max_turns} executions)")

    # -- search ----------------------------------------------------------------------------------
    async def _search(self, run: _Run) -> None:
        root = Node(0)
        for it in range(1, run.params.iterations + 1):
            if root.exhausted:
                break
            node = await self._descend(run, root, it)
            if node is None:
                continue
            while node.level < CODE:  # rollout: one child per level, kept in the tree
                node = await self._child(run, node, it, purpose="rollout")
            cand = await self._evaluate_leaf(run, node, it)
            node.evaluated = True
            self._backpropagate(node, cand.score)

    async def _descend(self, run: _Run, root: Node, turn: int) -> Node | None:
        """Selection, then expansion of the reached node when it is the root or was visited
        before; returns where the simulation starts (None: the subtree turned out exhausted)."""
        node = root
        while True:
            node = self._select(node, run.params.omega)
            if node.level == CODE or node.expanded or not (node is root or node.visits > 0):
                return node
            await self._expand(run, node, turn)
            fresh = [c for c in node.children if c.visits == 0 and not c.exhausted]
            if fresh:
                return fresh[0]
            if node.exhausted:
                return None

    def _select(self, root: Node, omega: float) -> Node:
        node = root
        while node.level < CODE and node.expanded:
            live = [c for c in node.children if not c.exhausted]
            node = max(live, key=lambda c: uct(c, node.visits, omega))  # max keeps the first of ties
        return node

    async def _expand(self, run: _Run, node: Node, turn: int) -> None:
        while len(node.children) < run.params.expansion:
            await self._child(run, node, turn, purpose="expand")
        node.expanded = True

    async def _child(self, run: _Run, node: Node, turn: int, purpose: str) -> Node:
        level = node.level + 1
        messages = [self._system(run), _user(self._expansion_prompt(run, node, level))]
        completion = await run.meter.call(messages, turn, f"{purpose} {LEVELS[level]}", stage="expand")
        text = completion.text.strip()
        child = Node(level, text, node, index=len(node.children), messages=messages,
                     call=len(run.traj.transcript) - 1)
        node.children.append(child)
        return child

    def _expansion_prompt(self, run: _Run, node: Node, level: int) -> str:
        siblings = "\n\n".join(ALTERNATIVE_HEAD.format(i + 1) + f"\n{_head(_body(c), SIBLING_CHARS)}"
                               for i, c in enumerate(node.children)) or "(none yet)"
        values: dict[str, Any] = {"question": run.problem.question, "siblings": siblings}
        if level >= 2:
            values["strategy"] = _head(node.ancestor(1).text, PARENT_CHARS)
        if level == CODE:
            values["model"] = _head(node.text, PARENT_CHARS)
            values["solvers"] = _solvers(run.ctx)
        return render(load_prompt(PROMPTS, LEVELS[level]), **values)

    async def _evaluate_leaf(self, run: _Run, leaf: Node, turn: int) -> Candidate:
        return await self._evaluate(run, leaf.messages or [], leaf.text, "search", leaf.path(), turn, leaf.call)

    @staticmethod
    def _backpropagate(leaf: Node, score: float) -> None:
        node: Node | None = leaf
        while node is not None:
            node.visits += 1
            node.value += score
            node = node.parent

    # -- answer ----------------------------------------------------------------------------------
    def _answer(self, run: _Run) -> None:
        best = pick_answer(run.candidates)
        if best is not None and best.submission is not None:
            run.traj.submission = Submission(best.submission, "submit")
            run.traj.status = STATUS_SUBMITTED

    def _system(self, run: _Run) -> Message:
        return {"role": "system", "content": system_prompt(PROMPTS, "system", run.ctx)}


def pick_answer(candidates: list[Candidate]) -> Candidate | None:
    """The best-scored executed candidate (earliest of ties); else the first that submitted anything."""
    executed = [c for c in candidates if c.executed]
    if executed:
        return max(executed, key=lambda c: (c.score, -c.index))
    return next((c for c in candidates if c.submission is not None), None)


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def _solvers(ctx: HarnessContext) -> str:
    from opteval.evalcore.solvers import prompt_list

    return prompt_list(ctx.solvers)


def _head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... truncated ...]"


def _body(node: Node) -> str:
    """What a sibling shows: a program's code, or the node's text."""
    if node.level == CODE:
        from opteval.evalcore.extraction import extract_code

        return extract_code(node.text, "submit") or node.text
    return node.text


HARNESS = register_harness(SemOPT(), group="search")
