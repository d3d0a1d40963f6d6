"""The ChatModel protocol every backend implements, and the paper's sampling defaults."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]  # {"role": ..., "content": ...}


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; defaults are the paper's (A.1). seed = base_seed + sample."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    max_tokens: int = 16384
    base_seed: int = 42
    extra_body: dict[str, Any] = field(default_factory=dict)  # vLLM extras, chat_template_kwargs ...

    def seed_for(self, sample: int) -> int:
        return self.base_seed + sample

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Usage:
    """Token usage as the server reported it; None = not reported (missing, not zero)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_prompt_tokens: int | None = None


@dataclass
class Completion:
    text: str
    usage: Usage
    finish_reason: str | None
    latency_s: float
    simulated: bool = False
    # Reasoning-model "thinking" (vLLM reasoning parser: message.reasoning_content /
    # message.reasoning), kept apart from ``text`` so code extraction never sees it.
    reasoning: str | None = None


@dataclass(frozen=True)
class CallMeta:
    """Which harness makes a call and at which stage, sent beside the messages (never in them).

    Why a side channel: the simulated policy must know the protocol step, but any marker in
    the prompt is read by every real model too. Over HTTP it travels as the headers
    ``X-Opteval-Harness`` / ``X-Opteval-Stage`` (real servers ignore unknown headers);
    in process it is this object. Backends that do not need it ignore it.
    """

    harness: str
    stage: str


class ModelError(Exception):
    """The model endpoint failed (after retries). Infrastructure, not the program's fault."""


class EndpointFailure(ModelError):
    """The endpoint did not answer properly on any attempt: no answer (refused connection,
    timeout, a dropped reply), a 408/429/5xx, or a 200 whose body was not a completion.

    Why its own class: such a failure is transient, unlike a refusal of the request (a 4xx
    the client does not retry); the preflight tells the two apart (a different exit code)."""


@runtime_checkable
class ChatModel(Protocol):
    name: str

    async def chat(
        self, messages: list[Message], sampling: Sampling, seed: int, meta: CallMeta | None = None
    ) -> Completion: ...
