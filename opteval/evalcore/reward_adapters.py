"""Trainer adapters for the reward service (``python jobs/rewards.py serve``): HTTP only.

No trainer is imported: a trainer process needs only this file (standard library; torch only
in OpenRLHF's ``reward_func``, which OpenRLHF has) and the URL of a running service. verl and
OpenRLHF load it by path, so it stays one self-contained module. Read against: TRL's
``GRPOTrainer`` (huggingface/trl ``trl/trainer/grpo_trainer.py``, 1.x: reward functions may be
``async``, run concurrently on the trainer's reward event loop, and may return ``None`` for a
sample, which is then left out of that sample's reward), verl (volcengine/verl@3bae404
``experimental/reward_loop/reward_manager/limited.py``: an ``async def compute_score`` is
awaited, a sync one run in an executor; ``workers/reward_manager/batch.py``: a batch
``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)``) and OpenRLHF
(OpenRLHF/OpenRLHF ``openrlhf/utils/remote_rm_utils.py``: ``--remote_rm_url`` a URL, posted
``{"query", "prompts", "labels"}``, or a ``.py`` file whose ``reward_func(queries, prompts,
labels)`` returns ``{"rewards", "scores", "extra_logs"}``).

No reward is never 0.0: when the service could not compute an item's reward (its ``error``:
``executor_lost``, ``timeout_budget``, ``internal``), TRL's functions return ``None`` for it, and
verl's and OpenRLHF's (whose rewards must be numbers) raise :class:`RewardUnavailableError`
naming the item. A program that failed on its own (error, own timeout) has its normal, low reward.

TRL (``GRPOTrainer(reward_funcs=[...])``)::

    from opteval.evalcore.reward_adapters import trl_async_reward_func   # or trl_reward_func (sync)
    reward = trl_async_reward_func("http://127.0.0.1:8790/rewards", scheme="orr1",
                                   extraction="orlm", grading="orlm", answer_key="answer", deadline_s=60)

TRL calls ``reward(prompts=[...], completions=[...], **columns)`` with every dataset column as
a keyword list (the dataset needs an ``answer`` column, or name yours with ``answer_key``);
completions are strings or message lists (the last message's ``content`` is scored).
Completions of one prompt form one group (``orr1`` votes within it). One HTTP call per call;
the function is named ``opteval_<scheme>`` (TRL logs rewards under ``__name__``).

verl (``custom_reward_function``; ``name`` one of ``compute_score``, ``compute_score_async``,
``compute_score_batch`` with ``reward_model.reward_manager: batch``)::

    custom_reward_function:
      path: /path/to/opteval/evalcore/reward_adapters.py
      name: compute_score_async
      reward_kwargs: {url: "http://127.0.0.1:8790/rewards", scheme: sirl, extraction: submit, grading: sirl}

``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` and its ``async``
twin score one response per HTTP call; ``compute_score_batch`` takes the plural keywords and
sends ``batch_size`` responses per call. Responses with the same ``extra_info["index"]`` form a
group. The URL, names and deadline may come from ``$OPTEVAL_REWARDS_URL``,
``$OPTEVAL_REWARDS_SCHEME``, ``$OPTEVAL_REWARDS_EXTRACTION``, ``$OPTEVAL_REWARDS_GRADING``,
``$OPTEVAL_REWARDS_DEADLINE_S``.

OpenRLHF: ``--remote_rm_url "http://127.0.0.1:8790/rewards/openrlhf?scheme=correct&extraction=orlm&grading=orlm"``
(the service's route), or ``--remote_rm_url /path/to/opteval/evalcore/reward_adapters.py`` (file
mode: :func:`reward_func`, configured by the environment variables above), with ``--label_key``
naming the answer column.

``deadline_s`` (every adapter): the service stops the request's programs at that many seconds;
items still running come back as ``timeout_budget`` errors.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

URL_ENV = "OPTEVAL_REWARDS_URL"
DEFAULT_URL = "http://127.0.0.1:8790/rewards"
SCHEME_ENV, EXTRACTION_ENV, GRADING_ENV = "OPTEVAL_REWARDS_SCHEME", "OPTEVAL_REWARDS_EXTRACTION", "OPTEVAL_REWARDS_GRADING"
DEADLINE_ENV = "OPTEVAL_REWARDS_DEADLINE_S"
DEFAULT_BATCH = 512  # responses per HTTP call of compute_score_batch
DEADLINE_SLACK_S = 30.0  # the HTTP timeout beyond a deadline: queueing, scoring, the network
MAX_NAMED = 10  # items named in a RewardUnavailableError's message


class RewardServiceError(RuntimeError):
    """The service refused the request or could not be reached; the message says which and why."""


class RewardUnavailableError(RewardServiceError):
    """The service answered, but could not compute some items' rewards (``errors``: their
    ``(id, kind, message)``). Raised by adapters whose trainer cannot take "no reward"."""

    def __init__(self, message: str, errors: list[tuple[str, str, str]]) -> None:
        super().__init__(message)
        self.errors = errors


class RewardClient:
    """``POST /rewards`` for one (scheme, extraction, grading), with an optional ``deadline_s``."""

    def __init__(self, url: str | None = None, scheme: str = "correct", extraction: str = "submit",
                 grading: str = "optagentbench", timeout_s: float = 600.0, deadline_s: float | None = None) -> None:
        self.url = url or os.environ.get(URL_ENV) or DEFAULT_URL
        self.scheme, self.extraction, self.grading = scheme, extraction, grading
        self.deadline_s = deadline_s
        # with a deadline the service answers by then: wait for that, not for the generic timeout
        self.timeout_s = timeout_s if deadline_s is None else min(timeout_s, deadline_s + DEADLINE_SLACK_S)

    @classmethod
    def from_env(cls, url: str | None = None, scheme: str | None = None, extraction: str | None = None,
                 grading: str | None = None, deadline_s: float | None = None) -> RewardClient:
        """Arguments first, then ``$OPTEVAL_REWARDS_*``, then the defaults (verl, OpenRLHF file mode)."""
        env_deadline = os.environ.get(DEADLINE_ENV)
        return cls(url, scheme or os.environ.get(SCHEME_ENV, "correct"),
                   extraction or os.environ.get(EXTRACTION_ENV, "submit"),
                   grading or os.environ.get(GRADING_ENV, "optagentbench"),
                   deadline_s=deadline_s if deadline_s is not None else
                   (float(env_deadline) if env_deadline else None))

    def score(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``items``: ``{"id", "completion", "answer"}`` dicts; returns the ``rewards`` rows in order
        (each with its ``error``, null or ``{"kind", "message"}``)."""
        payload: dict[str, Any] = {"scheme": self.scheme, "extraction": self.extraction, "grading": self.grading,
                                   "items": list(items)}
        if self.deadline_s is not None:
            payload["deadline_s"] = self.deadline_s
        req = urllib.request.Request(self.url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RewardServiceError(f"{self.url}: HTTP {exc.code}: {_error_message(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RewardServiceError(f"{self.url}: cannot reach the reward service: {exc}") from None
        rewards = answer.get("rewards") if isinstance(answer, dict) else None
        if not isinstance(rewards, list) or len(rewards) != len(items):
            raise RewardServiceError(f"{self.url}: expected {len(items)} rewards, got {answer!r:.200}")
        return rewards

    async def ascore(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`score` without blocking the caller's event loop (a thread waits on the socket)."""
        return await asyncio.to_thread(self.score, items)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except Exception:
        return str(exc.reason)


def reward_or_none(row: dict[str, Any]) -> float | None:
    """The row's reward, None when the service could not compute it (never 0.0 for that)."""
    return None if row.get("error") or row.get("reward") is None else float(row["reward"])


def rewards_or_raise(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> list[float]:
    """Every row's reward, or :class:`RewardUnavailableError` naming each item (``names[i]``) without one."""
    failed = [(names[i], (r.get("error") or {}).get("kind", "internal"), (r.get("error") or {}).get("message", ""))
              for i, r in enumerate(rows) if reward_or_none(r) is None]
    if failed:
        shown = "; ".join(f"{name}: {kind}: {message}" for name, kind, message in failed[:MAX_NAMED])
        more = f"; and {len(failed) - MAX_NAMED} more" if len(failed) > MAX_NAMED else ""
        raise RewardUnavailableError(f"no reward for {len(failed)} of {len(rows)} item(s) (not scored 0): "
                                     f"{shown}{more}", failed)
    return [float(r["reward"]) for r in rows]


def _text(completion: Any) -> str:
    """A TRL completion: a string, or a message list whose last message holds the text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"completion must be a string or a list of messages, got {type(completion).__name__}")


def _group_id(prompt: Any) -> str:
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- TRL -------------------------------------------------------------------------------------


def _trl_items(prompts: list[Any], completions: list[Any], answers: Any, answer_key: str) -> list[dict[str, Any]]:
    if answers is None:
        answers = [None] * len(completions)
    if not (len(prompts) == len(completions) == len(answers)):
        raise ValueError(f"{len(prompts)} prompts, {len(completions)} completions, {len(answers)} {answer_key!r}")
    return [{"id": _group_id(p), "completion": _text(c), "answer": a} for p, c, a in zip(prompts, completions, answers)]


def trl_reward_func(url: str | None = None, scheme: str = "correct", extraction: str = "submit",
                    grading: str = "optagentbench", answer_key: str = "answer",
                    timeout_s: float = 600.0, deadline_s: float | None = None) -> Callable[..., list[float | None]]:
    """A TRL ``reward_funcs`` entry: ``f(prompts, completions, **kwargs) -> list[float | None]``
    (None: the service could not compute that reward; TRL leaves it out)."""
    client = RewardClient(url, scheme, extraction, grading, timeout_s, deadline_s)

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        rows = client.score(_trl_items(prompts, completions, kwargs.get(answer_key), answer_key))
        return [reward_or_none(r) for r in rows]

    reward.__name__ = f"opteval_{scheme.replace('-', '_')}"
    return reward


def trl_async_reward_func(url: str | None = None, scheme: str = "correct", extraction: str = "submit",
                          grading: str = "optagentbench", answer_key: str = "answer", timeout_s: float = 600.0,
                          deadline_s: float | None = None) -> Callable[..., Coroutine[Any, Any, list[float | None]]]:
    """:func:`trl_reward_func` as an ``async def``: TRL awaits it on its reward event loop, beside
    the other reward functions, instead of blocking the training process on the HTTP call."""
    client = RewardClient(url, scheme, extraction, grading, timeout_s, deadline_s)

    async def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        rows = await client.ascore(_trl_items(prompts, completions, kwargs.get(answer_key), answer_key))
        return [reward_or_none(r) for r in rows]

    reward.__name__ = f"opteval_{scheme.replace('-', '_')}"
    return reward


# -- verl ------------------------------------------------------------------------------------


def _verl_id(data_source: Any, extra_info: Any) -> str:
    return str(extra_info.get("index", data_source)) if isinstance(extra_info, dict) else str(data_source)


def _verl_item(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any) -> dict[str, Any]:
    return {"id": _verl_id(data_source, extra_info), "completion": solution_str, "answer": ground_truth}


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  url: str | None = None, scheme: str | None = None, extraction: str | None = None,
                  grading: str | None = None, deadline_s: float | None = None, **kwargs: Any) -> float:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``."""
    client = RewardClient.from_env(url, scheme, extraction, grading, deadline_s)
    item = _verl_item(data_source, solution_str, ground_truth, extra_info)
    return rewards_or_raise(client.score([item]), [f"id {item['id']!r}"])[0]


async def compute_score_async(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                              url: str | None = None, scheme: str | None = None, extraction: str | None = None,
                              grading: str | None = None, deadline_s: float | None = None, **kwargs: Any) -> float:
    """verl's reward loop awaits an ``async def compute_score`` (many in flight at once)."""
    client = RewardClient.from_env(url, scheme, extraction, grading, deadline_s)
    item = _verl_item(data_source, solution_str, ground_truth, extra_info)
    return rewards_or_raise(await client.ascore([item]), [f"id {item['id']!r}"])[0]


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[Any] | None = None, url: str | None = None, scheme: str | None = None,
                        extraction: str | None = None, grading: str | None = None, deadline_s: float | None = None,
                        batch_size: int = DEFAULT_BATCH, **kwargs: Any) -> list[float]:
    """verl's batch reward manager's ``compute_score(data_sources=, solution_strs=, ground_truths=,
    extra_infos=)``: one HTTP call per ``batch_size`` responses (a group must not straddle two
    calls for ``orr1``: keep ``batch_size`` a multiple of the rollouts per prompt)."""
    n = len(solution_strs)
    extras = list(extra_infos) if extra_infos is not None else [None] * n
    if not (len(data_sources) == len(ground_truths) == len(extras) == n):
        raise ValueError(f"{len(data_sources)} data_sources, {n} solution_strs, {len(ground_truths)} ground_truths, "
                         f"{len(extras)} extra_infos")
    client = RewardClient.from_env(url, scheme, extraction, grading, deadline_s)
    items = [_verl_item(d, s, g, e) for d, s, g, e in zip(data_sources, solution_strs, ground_truths, extras)]
    rows: list[dict[str, Any]] = []
    for start in range(0, n, max(1, int(batch_size))):
        rows += client.score(items[start:start + batch_size])
    return rewards_or_raise(rows, [f"solution_strs[{i}] (id {it['id']!r})" for i, it in enumerate(items)])


# -- OpenRLHF --------------------------------------------------------------------------------


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any] | None = None,
                **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's file mode (``--remote_rm_url <this file>``): ``reward_func(queries, prompts, labels)``
    -> ``{"rewards", "scores", "extra_logs"}``, configured by ``$OPTEVAL_REWARDS_*``. A query is
    prompt + response; completions of one prompt form a group."""
    labels = list(labels) if labels is not None else [None] * len(queries)
    if not (len(queries) == len(prompts) == len(labels)):
        raise ValueError(f"{len(queries)} queries, {len(prompts)} prompts, {len(labels)} labels")
    items = [{"id": _group_id(p), "completion": q[len(p):] if q.startswith(p) else q,
              "answer": None if label in ("", None) else label} for q, p, label in zip(queries, prompts, labels)]
    rows = RewardClient.from_env().score(items)
    rewards = rewards_or_raise(rows, [f"queries[{i}]" for i in range(len(rows))])
    correct = [float(bool(r["correct"])) for r in rows]
    scores = [c if r["correct"] is not None else rw for r, c, rw in zip(rows, correct, rewards)]
    try:
        import torch  # OpenRLHF's own dependency, absent from opteval's: tensors only where it is installed
    except ImportError:
        return {"rewards": rewards, "scores": scores, "extra_logs": {"correct": correct}}
    return {"rewards": torch.tensor(rewards), "scores": torch.tensor(scores),
            "extra_logs": {"correct": torch.tensor(correct)}}
