"""A model's prompt contract: how the harness's messages are adapted to what a model expects.

Why: some models are documented to want no system prompt (DeepSeek-R1 distills: "avoid adding
a system prompt; all instructions should be contained within the user prompt") or their own
system prompt (Magistral's reasoning prompt); sending every model the same message roles would
confound the comparison. ``Meter`` applies the contract before each call and records the
messages as sent. Request fields (GPT-OSS's ``reasoning_effort``) are ``sampling.extra_body``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opteval.evalcore.models.base import Message

SYSTEM_MODES = ("keep", "into_user")


@dataclass(frozen=True)
class PromptContract:
    system: str = "keep"  # keep | into_user (system text prepended to the first user message)
    system_prefix: str = ""  # the model's own system prompt, put before the harness's

    def __post_init__(self) -> None:
        if self.system not in SYSTEM_MODES:
            raise ValueError(f"prompt.system must be one of {list(SYSTEM_MODES)}, got {self.system!r}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> PromptContract:
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - {"system", "system_prefix"})
        if unknown:
            raise ValueError(f"prompt: unknown key(s) {unknown}; allowed ['system', 'system_prefix']")
        return cls(system=str(cfg.get("system") or "keep"), system_prefix=str(cfg.get("system_prefix") or ""))

    def apply(self, messages: list[Message]) -> list[Message]:
        out = [dict(m) for m in messages]
        if self.system_prefix:
            sys_idx = next((i for i, m in enumerate(out) if m.get("role") == "system"), None)
            prefix = self.system_prefix.rstrip("\n")
            if sys_idx is None:
                out.insert(0, {"role": "system", "content": prefix})
            else:
                out[sys_idx]["content"] = prefix + "\n\n" + str(out[sys_idx]["content"])
        if self.system == "into_user":
            system = "\n\n".join(str(m["content"]) for m in out if m.get("role") == "system")
            out = [m for m in out if m.get("role") != "system"]
            if system:
                first = next((i for i, m in enumerate(out) if m.get("role") == "user"), None)
                if first is None:
                    out.insert(0, {"role": "user", "content": system})
                else:
                    out[first]["content"] = system + "\n\n" + str(out[first]["content"])
        return out
