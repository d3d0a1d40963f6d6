"""Trainer adapters for the reward service (``python jobs/rewards.py serve``): HTTP only.

Neither TRL nor verl is imported: a trainer process needs only this module (standard
library) and the URL of a running service. Each call is one ``POST /rewards``.

TRL (``GRPOTrainer(reward_funcs=[...])``)::

    from evalcore.reward_adapters import trl_reward_func
    reward = trl_reward_func("http://127.0.0.1:8790/rewards", scheme="orr1",
                             extraction="orlm", grading="orlm", answer_key="answer")
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=ds, ...)

TRL calls ``reward(prompts=[...], completions=[...], **columns)`` with every dataset
column as a keyword list (so the dataset needs an ``answer`` column, or name yours with
``answer_key``); completions are strings, or message lists (conversational datasets)
whose last message's ``content`` is scored. Completions of the same prompt form one group
(``orr1`` votes within it). The function returns ``list[float]`` and is named
``opteval_<scheme>`` (TRL logs rewards under the function's ``__name__``).

verl (``custom_reward_function``)::

    custom_reward_function:
      path: /path/to/opteval/evalcore/reward_adapters.py
      name: compute_score
      reward_kwargs: {url: "http://127.0.0.1:8790/rewards", scheme: sirl, extraction: submit, grading: sirl}

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``
per response (reward kwargs are bound in); it returns the reward as a float. The URL and
names may also come from ``$OPTEVAL_REWARDS_URL``, ``$OPTEVAL_REWARDS_SCHEME``,
``$OPTEVAL_REWARDS_EXTRACTION``, ``$OPTEVAL_REWARDS_GRADING``. One response is one group,
so ``orr1``'s voting term is 1 whenever that response produced a number: use the TRL
adapter (or a batch ``POST``) for ``orr1``.
"""
from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

URL_ENV = "OPTEVAL_REWARDS_URL"
DEFAULT_URL = "http://127.0.0.1:8790/rewards"


class RewardServiceError(RuntimeError):
    """The service refused the request or could not be reached; the message says which and why."""


class RewardClient:
    """``POST /rewards`` for one (scheme, extraction, grading)."""

    def __init__(self, url: str | None = None, scheme: str = "correct", extraction: str = "submit",
                 grading: str = "optagentbench", timeout_s: float = 600.0) -> None:
        self.url = url or os.environ.get(URL_ENV) or DEFAULT_URL
        self.scheme, self.extraction, self.grading = scheme, extraction, grading
        self.timeout_s = timeout_s

    def score(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``items``: ``{"id", "completion", "answer"}`` dicts; returns the ``rewards`` list in order."""
        body = json.dumps({"scheme": self.scheme, "extraction": self.extraction, "grading": self.grading,
                           "items": list(items)}).encode()
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                payload = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RewardServiceError(f"{self.url}: HTTP {exc.code}: {_error_message(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RewardServiceError(f"{self.url}: cannot reach the reward service: {exc}") from None
        rewards = payload.get("rewards") if isinstance(payload, dict) else None
        if not isinstance(rewards, list) or len(rewards) != len(items):
            raise RewardServiceError(f"{self.url}: expected {len(items)} rewards, got {payload!r:.200}")
        return rewards


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except Exception:
        return str(exc.reason)


def _text(completion: Any) -> str:
    """A TRL completion: a string, or a message list whose last message holds the text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"completion must be a string or a list of messages, got {type(completion).__name__}")


def _group_id(prompt: Any) -> str:
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:16]


def trl_reward_func(url: str | None = None, scheme: str = "correct", extraction: str = "submit",
                    grading: str = "optagentbench", answer_key: str = "answer",
                    timeout_s: float = 600.0) -> Callable[..., list[float]]:
    """A TRL ``reward_funcs`` entry: ``f(prompts, completions, **kwargs) -> list[float]``."""
    client = RewardClient(url, scheme, extraction, grading, timeout_s)

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        answers = kwargs.get(answer_key)
        if answers is None:
            answers = [None] * len(completions)
        if not (len(prompts) == len(completions) == len(answers)):
            raise ValueError(f"{len(prompts)} prompts, {len(completions)} completions, {len(answers)} {answer_key!r}")
        items = [{"id": _group_id(p), "completion": _text(c), "answer": a}
                 for p, c, a in zip(prompts, completions, answers)]
        return [float(r["reward"]) for r in client.score(items)]

    reward.__name__ = f"opteval_{scheme.replace('-', '_')}"
    return reward


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  url: str | None = None, scheme: str | None = None, extraction: str | None = None,
                  grading: str | None = None, **kwargs: Any) -> float:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``."""
    client = RewardClient(
        url,
        scheme or os.environ.get("OPTEVAL_REWARDS_SCHEME", "correct"),
        extraction or os.environ.get("OPTEVAL_REWARDS_EXTRACTION", "submit"),
        grading or os.environ.get("OPTEVAL_REWARDS_GRADING", "optagentbench"),
    )
    item_id = str(extra_info.get("index", data_source)) if isinstance(extra_info, dict) else str(data_source)
    return float(client.score([{"id": item_id, "completion": solution_str, "answer": ground_truth}])[0]["reward"])
