"""OpenRLHF's remote reward body on ``POST /rewards/openrlhf``: translated to and from ``/rewards``'s.

OpenRLHF (``--remote_rm_url http://host:8790/rewards/openrlhf?scheme=...``, read from
OpenRLHF/OpenRLHF ``openrlhf/utils/remote_rm_utils.py``: ``remote_rm_fn_ray`` posts
``{"query": [...], "prompts": [...], "labels": [...]}`` and its ``request_api_wrapper`` reads
the JSON answer, retrying a non-2xx answer 5 times before it raises) sends each query as
prompt + response. The response is the query with its prompt removed; completions of one
prompt form a group (``orr1`` votes within it); ``labels`` are the answers. Scheme, extraction,
grading and ``deadline_s`` come from the URL's query string, since the body is OpenRLHF's.

The answer: ``{"rewards": [...], "scores": [...], "extra_logs": {"correct": [...]}}``
(``scores``, for OpenRLHF's dynamic filtering in [0, 1]: 1/0 correct where an answer was
given, else the reward). OpenRLHF's rewards are a tensor and cannot carry "no reward", so a
request with any item that errored (executor lost twice, deadline) answers HTTP 503 naming
the items; OpenRLHF then retries the request and finally raises, which is better than training
on a 0 that the program never earned. Ray-free: pure translation.
"""
from __future__ import annotations

import hashlib
from typing import Any

SUBROUTE = "/openrlhf"
QUERY_KEYS = ("scheme", "extraction", "grading", "deadline_s")
MAX_NAMED = 10  # ids named in a 503's message


class OpenRLHFBodyError(ValueError):
    """A body that is not OpenRLHF's shape; ``param`` names the key."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def group_id(prompt: str) -> str:
    """Completions of one prompt share this id (OpenRLHF sends no ids)."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:16]


def as_rewards_body(body: Any, query: dict[str, str]) -> dict[str, Any]:
    """The ``/rewards`` body for OpenRLHF's ``{"query", "prompts", "labels"}`` and the URL's options."""
    if not isinstance(body, dict):
        raise OpenRLHFBodyError("request body must be a JSON object with query, prompts and labels")
    unknown = sorted(set(query) - set(QUERY_KEYS))
    if unknown:
        raise OpenRLHFBodyError(f"unknown URL parameter(s) {unknown}; expected {', '.join(QUERY_KEYS)}", unknown[0])
    queries = body.get("query")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise OpenRLHFBodyError("query must be a list of strings (prompt + response)", "query")
    prompts = body.get("prompts")
    if prompts is None:
        prompts = [""] * len(queries)
    labels = body.get("labels")
    if labels is None:
        labels = [None] * len(queries)
    for key, values in (("prompts", prompts), ("labels", labels)):
        if not isinstance(values, list) or len(values) != len(queries):
            raise OpenRLHFBodyError(f"{key} must be a list as long as query ({len(queries)})", key)
    if not all(isinstance(p, str) for p in prompts):
        raise OpenRLHFBodyError("prompts must be strings", "prompts")
    items = [{"id": group_id(p), "completion": q[len(p):] if q.startswith(p) else q,
              "answer": None if label in ("", None) else label}
             for q, p, label in zip(queries, prompts, labels)]
    out: dict[str, Any] = {key: query[key] for key in QUERY_KEYS if key in query}
    out["items"] = items
    return out


def response(rows: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for OpenRLHF from ``/rewards``'s rows."""
    failed = [(i, r) for i, r in enumerate(rows) if r["error"] is not None]
    if failed:
        named = ", ".join(f"query[{i}] {r['error']['kind']}" for i, r in failed[:MAX_NAMED])
        more = f" and {len(failed) - MAX_NAMED} more" if len(failed) > MAX_NAMED else ""
        return 503, {"error": {"message": f"{len(failed)} of {len(rows)} rewards could not be computed: "
                                          f"{named}{more}; first: {failed[0][1]['error']['message']}",
                               "param": None},
                     "errors": len(failed)}
    rewards = [float(r["reward"]) for r in rows]
    scores = [float(bool(r["correct"])) if r["correct"] is not None else rw for r, rw in zip(rows, rewards)]
    correct = [float(bool(r["correct"])) for r in rows]
    return 200, {"rewards": rewards, "scores": scores, "extra_logs": {"correct": correct}}
