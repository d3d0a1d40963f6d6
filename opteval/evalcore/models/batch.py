"""OpenAI-style batch JSONL, what ``vllm run-batch``, LiteLLM and hosted batch APIs read and write.

Input rows: ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {...}}``.
Output rows: ``{"custom_id", "response": {"status_code", "body": <chat.completion>}, "error"}``.

``custom_id`` is an opteval trajectory key (``model/method/benchmark/problem_id/sample/digest``:
the problem id and sample are read from it; ``#<n>`` appended names its n-th model call,
``opteval export batch-input`` writes them so) or a bare problem id (sample counted per id, as a
replay file's rows are). An output row is read as a replay row (:mod:`opteval.evalcore.models.replay`),
so ``opteval regrade`` and the replay backend take batch-output files as they are; a failed
request (an ``error``, or a non-200 status) becomes an empty completion with finish reason
``error``: it stays counted, as a missing answer does."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

CHAT_URL = "/v1/chat/completions"
_KEY = re.compile(r"^(?P<head>.+)/(?P<problem>[^/]+)/(?P<sample>\d+)/(?P<digest>[0-9a-f]{12})$")


def is_batch_output(row: Any) -> bool:
    """A batch-output row: it has ``custom_id`` and a ``response`` or ``error`` key."""
    return isinstance(row, dict) and "custom_id" in row and ("response" in row or "error" in row)


def parse_custom_id(custom_id: str) -> tuple[str, int | None]:
    """(problem id, sample) from a trajectory key; (the id itself, None) otherwise."""
    found = _KEY.match(custom_id)
    if found:
        return found["problem"], int(found["sample"])
    return custom_id, None


def replay_row(where: str, row: Mapping[str, Any], error: type[Exception]) -> dict[str, Any]:
    """The replay row (``id, sample?, completion, usage, finish_reason``) of one output row;
    a malformed one raises ``error`` naming ``where``."""
    custom_id = row.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise error(f"{where}: batch output row: 'custom_id' must be a non-empty string")
    call = 0
    numbered = re.match(r"^(?P<key>.+)#(?P<call>\d+)$", custom_id)
    if numbered and _KEY.match(numbered["key"]):
        custom_id, call = numbered["key"], int(numbered["call"])
    problem_id, sample = parse_custom_id(custom_id)
    out: dict[str, Any] = {"id": problem_id, "call": call, "completion": "", "finish_reason": "error"}
    if sample is not None:
        out["sample"] = sample
    response = row.get("response")
    if row.get("error") or not isinstance(response, dict) or response.get("status_code", 200) != 200:
        return out
    body = response.get("body")
    if not isinstance(body, dict):
        raise error(f"{where}: batch output row {custom_id!r}: response.body must be an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise error(f"{where}: batch output row {custom_id!r}: response.body.choices[0] is missing")
    message = choices[0].get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, str):
        raise error(f"{where}: batch output row {custom_id!r}: message content must be a string")
    out.update(completion=content or "", finish_reason=choices[0].get("finish_reason"), usage=body.get("usage"))
    return out


def request_row(custom_id: str, model: str, messages: list[dict[str, Any]], body: Mapping[str, Any]) -> dict[str, Any]:
    """One batch-input line for a chat completion (``body``: sampling fields such as temperature)."""
    return {"custom_id": custom_id, "method": "POST", "url": CHAT_URL,
            "body": {"model": model, "messages": messages, **body}}


def response_row(custom_id: str, completion: str, usage: Mapping[str, Any] | None = None,
                 finish_reason: str | None = "stop", model: str = "") -> dict[str, Any]:
    """One batch-output line, as an engine writes it (tests and converters)."""
    body = {"object": "chat.completion", "model": model, "usage": dict(usage or {}),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": completion},
                         "finish_reason": finish_reason}]}
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": custom_id, "body": body}, "error": None}
