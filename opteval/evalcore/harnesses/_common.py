"""Shared bookkeeping for the harnesses: prompts from files, metered model calls, records.

Why one place: every harness must record calls, executions and the transcript the same way
(the ledger and the token tables read them), and must enforce the same budgets.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from opteval.evalcore.harnesses.base import HarnessContext
from opteval.evalcore.models.base import CallMeta, Completion, Message, Sampling
from opteval.evalcore.problems import ProblemSpec
from opteval.evalcore.records import CallRecord, ExecRecord, Trajectory
from opteval.evalcore.sandbox.types import ExecResult

PROMPTS_DIR = Path(__file__).parent / "prompts"
TAIL_CHARS = 2000  # stdout/stderr kept per ExecRecord
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_PURPOSE = re.compile(r"^\s*\**Purpose\**\s*:\s*\**\s*(.+?)\s*$", re.M | re.I)
_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


# Prompt formats other tools read (the simulated policy; tests/harnesses/test_prompt_formats.py
# renders the prompts and checks each still matches): the problem block of
# prompts/_shared/problem.md and the progress line of prompts/_shared/progress.md.
PROBLEM_TAG = re.compile(r"<problem>\s*(.*?)\s*</problem>", re.S)
TURN_LINE = re.compile(r"^Turn (\d+) of (\d+)", re.M)
_INCLUDE = re.compile(r"^[ \t]*\{\{>\s*([\w/.-]+)\s*\}\}[ \t]*$", re.M)


# prompt folders that live outside PROMPTS_DIR, by prompt_dir name (registry.register_harness's
# ``prompts=``: a harness defined outside this package)
_EXTRA_PROMPT_DIRS: dict[str, Path] = {}


def register_prompt_dir(name: str, path: Path) -> None:
    """``prompts/<name>/...`` references read ``path/...`` instead."""
    if not path.is_dir():
        raise FileNotFoundError(f"harness prompt folder not found: {path}")
    _EXTRA_PROMPT_DIRS[name] = path.resolve()


def prompt_folder(name: str) -> Path:
    """Where the prompts of ``prompt_dir`` ``name`` live."""
    return _EXTRA_PROMPT_DIRS.get(name) or PROMPTS_DIR / name


def _prompt_path(ref: str) -> Path:
    head, _, rest = ref.partition("/")
    root = _EXTRA_PROMPT_DIRS.get(head)
    if root is not None and rest:
        path = (root / f"{rest}.md").resolve()
        if root not in path.parents:
            raise ValueError(f"prompt reference {ref!r} leaves {root}")
        return path
    path = (PROMPTS_DIR / f"{ref}.md").resolve()
    if PROMPTS_DIR.resolve() not in path.parents:
        raise ValueError(f"prompt reference {ref!r} leaves {PROMPTS_DIR}")
    return path


def _expand(ref: str, stack: tuple[str, ...]) -> tuple[str, tuple[Path, ...]]:
    """(text with every ``{{> other}}`` line replaced by that fragment, files read)."""
    if ref in stack:
        raise ValueError(f"prompt include cycle: {' -> '.join(stack + (ref,))}")
    path = _prompt_path(ref)
    if not path.is_file():
        where = f" (included from {stack[-1]})" if stack else ""
        raise FileNotFoundError(f"harness prompt not found: {path}{where}")
    files: list[Path] = [path]

    def sub(m: re.Match) -> str:
        text, used = _expand(m.group(1), stack + (ref,))
        files.extend(used)
        return text.rstrip("\n")

    return _INCLUDE.sub(sub, path.read_text()), tuple(dict.fromkeys(files))


@cache
def load_prompt(method: str, name: str) -> str:
    """The text of ``prompts/<method>/<name>.md`` with its fragments included: a line
    ``{{> _shared/checklist}}`` is replaced by ``prompts/_shared/checklist.md`` (recursively),
    so methods share instructions word for word. A missing file names its path."""
    return _expand(f"{method}/{name}", ())[0]


def prompt_files(prompt_dir: str) -> list[Path]:
    """Every file the prompts of ``prompts/<prompt_dir>/`` read, fragments included, sorted
    (what the sweep fingerprint hashes)."""
    out: set[Path] = set()
    for path in sorted(prompt_folder(prompt_dir).glob("*.md")):
        out.update(_expand(f"{prompt_dir}/{path.stem}", ())[1])
    return sorted(out)


def render(template: str, **values: Any) -> str:
    """Fill ``{{name}}`` placeholders. Values are inserted verbatim (never re-scanned), and a
    placeholder without a value is an error naming it."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(values))
    if missing:
        raise KeyError(f"prompt placeholders without a value: {missing}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def system_prompt(prompt_dir: str, name: str, ctx: HarnessContext) -> str:
    """A system prompt rendered with the sweep's solver set (``{{solvers}}``)."""
    from opteval.evalcore.solvers import prompt_list

    return render(load_prompt(prompt_dir, name), solvers=prompt_list(ctx.solvers))


def stated_purpose(text: str) -> str:
    """The ``Purpose:`` line of a reply; else its first prose line; bounded to 200 chars."""
    m = _PURPOSE.search(text)
    if m:
        return m.group(1)[:200]
    outside = _FENCE.sub("", text)
    for line in outside.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no purpose stated)"


def fenced_blocks(text: str, lang: str) -> list[str]:
    """Bodies of fenced blocks tagged ``lang`` (case-insensitive), in order."""
    return [body for tag, body in _FENCE.findall(text) if tag.lower() == lang.lower()]


def tail(text: str, limit: int) -> str:
    """The last ``limit`` characters (exceptions and results are at the end), marked if cut."""
    if len(text) <= limit:
        return text
    return "[... truncated ...]\n" + text[-limit:]


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class BudgetSpent(Exception):
    """Raised by ``Meter.call`` when no model call may be made; ends the trajectory."""


STAGE_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "extra_body")


def merge_body(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top; nested mappings (``chat_template_kwargs``) merge key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_body(out[key], value)
        else:
            out[key] = value
    return out


def stage_sampling(base: Sampling, overrides: Mapping[str, Any] | None) -> Sampling:
    """``base`` with one stage's overrides (``temperature, top_p, top_k, max_tokens, extra_body``);
    ``extra_body`` merges into the base's. Unknown keys are an error naming them."""
    if not overrides:
        return base
    unknown = sorted(set(overrides) - set(STAGE_SAMPLING_KEYS))
    if unknown:
        raise ValueError(f"stage sampling: unknown key(s) {unknown}; allowed {list(STAGE_SAMPLING_KEYS)}")
    plain = {k: v for k, v in overrides.items() if k != "extra_body"}
    extra = merge_body(base.extra_body or {}, overrides.get("extra_body") or {})
    return replace(base, **plain, extra_body=extra)


class Meter:
    """Makes model calls for one trajectory and records each (CallRecord + transcript entry).

    Every call carries ``CallMeta(harness, stage)`` beside the messages (the side channel the
    simulated policy reads; never part of the prompt) and is sent with the context's sampling,
    that stage's overrides (``ctx.stages[stage]``, e.g. thinking off for a JSON stage) and the
    call's own ``sampling_overrides`` on top; ``max_tokens`` never exceeds
    ``budgets.max_output_tokens``.
    Tokens count against ``max_total_tokens`` as reported; when a server reports none, the
    chars/4 estimate is used for the budget only (the record keeps None).
    ``ModelError`` (and any other exception from the model) propagates: infrastructure
    failures belong to the scheduler, which retries the trajectory.
    """

    def __init__(self, ctx: HarnessContext, traj: Trajectory, harness: str) -> None:
        self.ctx = ctx
        self.traj = traj
        self.harness = harness
        self.tokens_used = 0
        self.sampling = self._capped(ctx.sampling)

    def _capped(self, sampling: Sampling) -> Sampling:
        return replace(sampling, max_tokens=min(sampling.max_tokens, self.ctx.budgets.max_output_tokens))

    def sampling_for(self, stage: str, sampling_overrides: Mapping[str, Any] | None = None) -> Sampling:
        """What a call at ``stage`` is sent with (public so tests can show it)."""
        stages = self.ctx.stages or {}
        sampling = stage_sampling(self.ctx.sampling, stages.get(stage))
        return self._capped(stage_sampling(sampling, sampling_overrides))

    @property
    def calls(self) -> int:
        return len(self.traj.calls)

    def exhausted(self) -> str | None:
        """Which budget is spent (``calls`` / ``tokens``), or None."""
        b = self.ctx.budgets
        if self.calls >= b.max_calls:
            return "calls"
        if self.tokens_used >= b.max_total_tokens:
            return "tokens"
        return None

    async def call(
        self, messages: list[Message], turn: int, purpose: str, stage: str = "act",
        sampling_overrides: Mapping[str, Any] | None = None, seed: int | None = None,
    ) -> Completion:
        """One metered call; ``seed`` replaces the trajectory's seed for this call only (a protocol
        that resamples the same prompt, e.g. LLMOPT's self-correction, needs a new draw)."""
        spent = self.exhausted()
        if spent:
            raise BudgetSpent(spent)
        sampling = self.sampling_for(stage, sampling_overrides)
        meta = CallMeta(harness=self.harness, stage=stage)
        if self.ctx.prompt_contract is not None:  # the model's own conventions (roles, system prompt)
            messages = self.ctx.prompt_contract.apply(messages)
        t0 = time.perf_counter()
        completion = await self.ctx.model.chat(messages, sampling, self.ctx.seed if seed is None else seed, meta)
        latency = completion.latency_s if completion.latency_s else time.perf_counter() - t0
        u = completion.usage
        self.traj.calls.append(
            CallRecord(turn, purpose, u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens, latency,
                       completion.finish_reason, stage)
        )
        self.traj.transcript.append(
            {
                "call": len(self.traj.calls) - 1,
                "turn": turn,
                "purpose": purpose,
                "stage": stage,
                "messages": [dict(m) for m in messages],
                "completion": completion.text,
                "finish_reason": completion.finish_reason,
            }
        )
        self.traj.simulated = self.traj.simulated or bool(completion.simulated)
        pt = u.prompt_tokens if u.prompt_tokens is not None else sum(estimate_tokens(m.get("content", "")) for m in messages)
        ct = u.completion_tokens if u.completion_tokens is not None else estimate_tokens(completion.text)
        self.tokens_used += pt + ct
        return completion


def new_trajectory(problem: ProblemSpec, ctx: HarnessContext, method: str) -> Trajectory:
    return Trajectory(
        model=ctx.model_name or getattr(ctx.model, "name", ""),
        method=ctx.method or method,
        benchmark=problem.benchmark,
        problem_id=problem.id,
        sample=ctx.sample,
        seed=ctx.seed,
        budgets=ctx.budgets.to_dict(),
    )


CODE_CHARS = 20_000  # a program kept for the viewer; longer ones keep their head and say so


def exec_record(turn: int, result: ExecResult, submission: Any = None, code: str = "") -> ExecRecord:
    if len(code) > CODE_CHARS:
        code = code[:CODE_CHARS] + f"\n# ... [{len(code) - CODE_CHARS} more characters not kept]"
    return ExecRecord(
        turn=turn,
        outcome=result.outcome,
        wall_s=result.wall_s,
        cpu_s=result.cpu_s,
        exit_code=result.exit_code,
        submission=submission if submission is not None else result.submission,
        models=list(result.models or []),
        stdout_tail=tail(result.stdout or "", TAIL_CHARS),
        stderr_tail=tail(result.stderr or "", TAIL_CHARS),
        contained=result.contained,
        code=code,
    )


def observation(result: ExecResult) -> str:
    """What the model is shown of one execution: output, then the error/exception."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip())
    if result.stderr:
        parts.append(result.stderr.rstrip())
    if result.outcome != "ok" and result.note:
        parts.append(f"[sandbox: {result.note}]")
    return "\n".join(parts) if parts else "(no output)"
