"""A scripted ChatModel for the baseline tests: each reply comes from a per-stage script, and
every call's (harness, stage, messages) is recorded, so a test can assert the call sequence."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from opteval.evalcore.models.base import CallMeta, Completion, Usage

Reply = str | Callable[[list[dict]], str]


class ScriptedModel:
    """Replies per stage from ``script[stage]``: a string (always), or a list consumed in order
    (the last element repeats), each element a string or ``fn(messages) -> str``."""

    name = "scripted"

    def __init__(self, script: dict[str, Reply | list[Reply]]) -> None:
        self.script = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in script.items()}
        self.used: dict[str, int] = {}
        self.calls: list[tuple[str, str, list[dict]]] = []
        self.seeds: list[int] = []

    @property
    def stages(self) -> list[str]:
        return [s for _, s, _ in self.calls]

    async def chat(self, messages, sampling, seed, meta: CallMeta | None = None) -> Completion:
        stage = meta.stage if meta else "act"
        self.calls.append((meta.harness if meta else "", stage, [dict(m) for m in messages]))
        self.seeds.append(seed)
        if stage not in self.script:
            raise AssertionError(f"unscripted stage {stage!r}")
        options = self.script[stage]
        i = self.used.get(stage, 0)
        self.used[stage] = i + 1
        reply = options[min(i, len(options) - 1)]
        text = reply(messages) if callable(reply) else reply
        return Completion(text, Usage(10, 5, None), "stop", 0.0)


def program(value: float | str, extra: str = "") -> str:
    """A reply holding a tiny program that submits ``value`` (after ``extra`` lines)."""
    return f"```python\n{extra}submit({value!r})\n```\n"


def crash(msg: str = "boom") -> str:
    return f"```python\nraise ValueError({msg!r})\n```\n"


def user_of(messages: Iterable[dict]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] != "system")
