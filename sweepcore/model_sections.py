"""The ``vllm`` section of a model config, in a leaf module: ``sweepcore.config`` types model YAMLs
with it and ``cluster.serve.llm_serving`` reads its fields, and config imports the backends, which
import llm_serving when they build an app. Ray-free; ``sweepcore.config`` re-exports it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class VllmSection:
    source: str | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    deployment: dict[str, Any] = field(default_factory=dict)
    accelerator_type: str | None = None
    gpus_per_replica: int = 1
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tokenizer_source: str | None = None
    language_only: bool = False  # a vision-language checkpoint served as a language model
    runtime_env: dict[str, Any] = field(default_factory=dict)
    placement_group_config: dict[str, Any] = field(default_factory=dict)
