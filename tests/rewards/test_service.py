"""``python jobs/rewards.py serve``: real local Ray, real Serve over HTTP, real sandbox; the adapters.

One service (a subprocess with its own local Ray) for the module. The ORLM test needs
ORLM's released outputs (third-party data, not in the repo): it skips, saying how to get
them, unless ``$OPTEVAL_ORLM_OUTPUTS`` names the file.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.rewards.serve_proc import rewards_service

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray

COPT = '''import coptpy as cp
from coptpy import COPT
env = cp.Envr()
model = env.createModel("lp")
x = model.addVar(lb=0, name="x")
y = model.addVar(lb=0, name="y")
model.addConstr(x + y <= 4)
model.addConstr(x + 3 * y <= 6)
{extra}
model.setObjective(3 * x + 2 * y, COPT.MAXIMIZE)
model.solve()
'''


def copt(extra: str = "") -> str:
    """An ORLM-style response: prose, one ```python coptpy block (optimum 12)."""
    return f"## Mathematical Model:\nmax 3x+2y\n\n```python\n{COPT.format(extra=extra)}```\nDone."


PULP_BINARY = '''<think>pick items</think><model>max 5a+7b, a+b<=1 binary</model><python>
```python
import pulp
prob = pulp.LpProblem("knap", pulp.LpMaximize)
a = pulp.LpVariable("a", cat="Binary")
b = pulp.LpVariable("b", cat="Binary")
prob += 5 * a + 7 * b
prob += a + b <= 1
prob.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(prob.objective))
```
</python>'''

# Looks everywhere a leaked answer could be (environment, argv, working and temp dirs) and
# submits it if found; the answer below is distinctive, so finding it would grade correct.
SNOOP = '''```python
import os, sys, re
secret = None
blobs = [repr(dict(os.environ)), " ".join(sys.argv)]
for root in {os.getcwd(), "/tmp", os.path.expanduser("~")}:
    for dirpath, _, files in os.walk(root):
        for f in files[:200]:
            try:
                blobs.append(open(os.path.join(dirpath, f), errors="ignore").read(100000))
            except Exception:
                pass
        break
for b in blobs:
    m = re.search(r"987654\\.321", b)
    if m:
        secret = float(m.group(0))
submit(secret if secret is not None else 0)
```'''


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """URL of a running ``jobs/rewards.py serve`` (its own local Ray, stopped at the end)."""
    log = tmp_path_factory.mktemp("rewards") / "serve.log"
    with rewards_service(log, "--min-executors", "1", "--max-executors", "2", "--num-cpus", "2",
                         "--wall-s", "5") as (url, _):
        yield url


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, json=body, timeout=300)


def test_get_lists_schemes_and_profiles(service):
    got = httpx.get(service, timeout=30).json()
    assert got["schemes"] == ["correct", "orr1", "orr1-released", "sirl", "sirl-released", "sirl-stage1"]
    assert "orlm" in got["extraction"] and "orlm" in got["grading"]


def test_correct_scheme_over_a_handful_of_orlm_responses(service):
    items: list[dict[str, Any]] = [
        {"id": "opt", "completion": copt(), "answer": 12},
        {"id": "infeasible", "completion": copt("model.addConstr(x + y >= 5)"), "answer": "No Best Solution"},
        {"id": "syntax", "completion": "```python\nimport coptpy as cp\nm = cp.Envr().createModel(\n```", "answer": 7},
        {"id": "prose", "completion": "The optimum is 12.", "answer": 12},
        {"id": "wrong", "completion": copt(), "answer": 100},
    ]
    r = post(service, {"scheme": "correct", "extraction": "orlm", "grading": "orlm", "items": items})
    assert r.status_code == 200, r.text
    rewards = r.json()["rewards"]
    assert [x["id"] for x in rewards] == [it["id"] for it in items]
    assert [x["reward"] for x in rewards] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert [x["correct"] for x in rewards] == [True, True, False, False, False]
    assert rewards[0]["parts"] == {"correct": 1.0}
    assert r.json()["errors"] == 0 and all(x["error"] is None for x in rewards)


def test_sirl_bonus_comes_from_the_captured_model_and_orr1_votes_per_id(service):
    r = post(service, {"scheme": "sirl", "extraction": "submit", "grading": "sirl",
                       "items": [{"id": "k", "completion": PULP_BINARY, "answer": 7}]})
    assert r.status_code == 200, r.text
    assert r.json()["rewards"][0]["parts"] == {"format": 0.5, "execution": 1.0, "accuracy": 2.0, "bonus": 1.0}
    items = [{"id": "g", "completion": copt(), "answer": None}] * 2 + [
        {"id": "g", "completion": copt("model.addConstr(x <= 1)"), "answer": None},  # optimum 3+2*5/3
        {"id": "h", "completion": copt("model.addConstr(x <= 1)"), "answer": None}]
    r = post(service, {"scheme": "orr1", "extraction": "orlm", "grading": "orlm", "items": items})
    assert r.status_code == 200, r.text
    assert [x["parts"]["voting"] for x in r.json()["rewards"]] == [1.0, 1.0, 0.0, 1.0]
    assert all(x["parts"]["code"] == 1.0 and x["correct"] is None for x in r.json()["rewards"])


def test_answers_never_reach_the_sandbox(service):
    r = post(service, {"scheme": "correct", "extraction": "submit", "grading": "optagentbench",
                       "items": [{"id": "snoop", "completion": SNOOP, "answer": 987654.321}]})
    assert r.status_code == 200, r.text
    assert r.json()["rewards"][0]["correct"] is False


def test_bad_requests_name_the_key(service):
    r = post(service, {"scheme": "correct", "items": [{"id": "a", "completion": "x", "answer": 1},
                                                      {"id": "b", "completion": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "items[1].answer"
    r = post(service, {"scheme": "correct", "grading": "exact", "items": [{"id": "a", "completion": "x", "answer": 1}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "grading"
    assert "optagentbench" in r.json()["error"]["message"]
    r = post(service, {"scheme": "correct", "items": [], "extra": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "extra"
    r = post(service, {"scheme": "correct", "items": [{"id": [1], "completion": "x", "answer": 1}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "items[0].id"  # not the string "[1]"
    assert "string or a number" in r.json()["error"]["message"]


def test_hostile_bodies_are_400_with_their_cause(service):
    deep = httpx.post(service, content=b"[" * 100_000 + b"]" * 100_000, timeout=120)
    assert deep.status_code == 400 and "nested too deeply" in deep.json()["error"]["message"], deep.text
    digits = b'{"items": [{"id": "a", "completion": "x", "answer": ' + b"7" * 5000 + b"}]}"
    big = httpx.post(service, content=digits, timeout=120)
    assert big.status_code == 400, big.text
    assert "too many digits" in big.json()["error"]["message"] and "not JSON" not in big.json()["error"]["message"]
    junk = httpx.post(service, content=b"{not json", timeout=120)
    assert junk.status_code == 400 and "not JSON" in junk.json()["error"]["message"]


def test_trl_and_verl_adapters_talk_to_the_service(service):
    from opteval.evalcore.reward_adapters import RewardServiceError, compute_score, trl_reward_func

    reward = trl_reward_func(service, scheme="correct", extraction="orlm", grading="orlm")
    assert reward.__name__ == "opteval_correct"
    prompts = ["p1", "p1", [{"role": "user", "content": "p2"}]]
    completions = [copt(), "no code", [{"role": "assistant", "content": copt()}]]
    assert reward(prompts=prompts, completions=completions, answer=[12, 12, 12.0], completion_ids=[[1]] * 3) == \
        [1.0, 0.0, 1.0]
    assert compute_score("nl4opt", copt(), "12", extra_info={"index": 3}, url=service, scheme="correct",
                         extraction="orlm", grading="orlm") == 1.0
    assert compute_score("nl4opt", copt(), "13", url=service, scheme="sirl-stage1", extraction="orlm",
                         grading="sirl") == 1.0  # execution only: 12 is not within 0.01 of 13
    with pytest.raises(RewardServiceError, match="HTTP 400: unknown reward scheme 'nope'"):
        compute_score("x", "y", "1", url=service, scheme="nope")


LOOP = "## Mathematical Model:\nspin\n\n```python\nwhile True:\n    pass\n```\n"
ORLM: dict[str, Any] = {"scheme": "correct", "extraction": "orlm", "grading": "orlm"}


def test_a_deadline_cuts_the_looping_program_and_returns_the_rest(service):
    """deadline_s=2 with one program that loops forever (the service's own wall limit is 60 s):
    the answer comes in about 2 s, that item a timeout_budget error, the others scored; the
    service stays healthy."""
    items = [{"id": "loop", "completion": LOOP, "answer": 12}] + [
        {"id": f"ok{i}", "completion": copt(), "answer": 12} for i in range(5)] + [
        {"id": "wrong", "completion": copt(), "answer": 100}]
    start = time.monotonic()
    r = post(service, {**ORLM, "deadline_s": 2, "items": items})
    took = time.monotonic() - start
    assert r.status_code == 200, r.text
    assert took < 4.5, f"{took:.1f} s for a 2 s deadline"  # 2 s + HTTP and scoring on 2 busy cores
    rows = r.json()["rewards"]
    assert rows[0]["reward"] is None and rows[0]["correct"] is None and rows[0]["error"]["kind"] == "timeout_budget"
    assert "deadline" in rows[0]["error"]["message"]
    assert [x["reward"] for x in rows[1:]] == [1.0] * 5 + [0.0] and all(x["error"] is None for x in rows[1:])
    assert r.json()["errors"] == 1
    again = post(service, {**ORLM, "items": items[1:3]})  # healthy: the next request is scored in full
    assert again.status_code == 200 and [x["reward"] for x in again.json()["rewards"]] == [1.0, 1.0]
    for bad in (0, -1, "soon", 1e9, True):
        r = post(service, {**ORLM, "deadline_s": bad, "items": items[1:2]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "deadline_s", (bad, r.text)


def test_a_program_killed_by_its_own_limit_keeps_a_normal_low_reward(service):
    """Not an error: without a deadline the looping program meets the service's own wall limit
    (--wall-s 5 here), which is the program's doing, like one that exits non-zero: both score 0
    with ``error`` null."""
    crash = "```python\nraise SystemExit(3)\n```"
    r = post(service, {**ORLM, "items": [{"id": "loop", "completion": LOOP, "answer": 1},
                                         {"id": "crash", "completion": crash, "answer": 1}]})
    assert r.status_code == 200 and r.json()["errors"] == 0, r.text
    assert [(x["reward"], x["correct"], x["error"]) for x in r.json()["rewards"]] == [(0.0, False, None)] * 2


def test_verl_sync_async_and_batch_adapters(service):
    from opteval.evalcore.reward_adapters import compute_score, compute_score_async, compute_score_batch

    kw = {"url": service, **ORLM}
    assert compute_score("nl4opt", copt(), 12, extra_info={"index": 0}, **kw) == 1.0
    got = asyncio.run(_gather(*(compute_score_async("nl4opt", c, 12, extra_info={"index": i}, **kw)
                                for i, c in enumerate([copt(), "prose only", copt("model.addConstr(x <= 1)")]))))
    assert got == [1.0, 0.0, 0.0]
    n = 10  # 4 HTTP calls of 3, the last of 1
    scores = compute_score_batch(data_sources=["nl4opt"] * n, solution_strs=[copt()] * (n - 1) + ["no code"],
                                 ground_truths=[12] * n, extra_infos=[{"index": i // 2} for i in range(n)],
                                 batch_size=3, **kw)
    assert scores == [1.0] * (n - 1) + [0.0]


async def _gather(*coros: Any) -> list[Any]:
    return list(await asyncio.gather(*coros))


def test_trl_async_adapter_and_no_reward_as_none(service):
    from opteval.evalcore.reward_adapters import trl_async_reward_func, trl_reward_func

    reward = trl_async_reward_func(service, answer_key="solution", **ORLM)
    assert asyncio.iscoroutinefunction(reward) and reward.__name__ == "opteval_correct"
    prompts = ["p1", "p1", [{"role": "user", "content": "p2"}]]
    completions = [copt(), "no code", [{"role": "assistant", "content": copt()}]]
    assert asyncio.run(reward(prompts=prompts, completions=completions, solution=[12, 12, 12])) == [1.0, 0.0, 1.0]
    # the service could not compute the looping one's reward (deadline): None, which TRL leaves out; never 0.0
    timed = trl_reward_func(service, deadline_s=1, **ORLM)
    assert timed(prompts=["p", "p"], completions=[LOOP, copt()], answer=[12, 12]) == [None, 1.0]
    assert asyncio.run(trl_async_reward_func(service, deadline_s=1, **ORLM)(
        prompts=["p"], completions=[LOOP], answer=[12])) == [None]


def test_verl_raises_naming_the_item_it_could_not_score(service):
    from opteval.evalcore.reward_adapters import RewardUnavailableError, compute_score, compute_score_batch

    with pytest.raises(RewardUnavailableError, match=r"id '7': timeout_budget") as caught:
        compute_score("nl4opt", LOOP, 12, extra_info={"index": 7}, url=service, deadline_s=1, **ORLM)
    assert caught.value.errors[0][:2] == ("id '7'", "timeout_budget")
    with pytest.raises(RewardUnavailableError, match=r"solution_strs\[1\] \(id '1'\): timeout_budget"):
        compute_score_batch(["d", "d"], [copt(), LOOP], [12, 12], [{"index": 0}, {"index": 1}], url=service,
                            deadline_s=1, **ORLM)


def test_openrlhf_route_and_file_mode(service, monkeypatch):
    from opteval.evalcore.reward_adapters import RewardUnavailableError, reward_func

    prompts = ["Q: maximize 3x+2y\nA: ", "Q: maximize 3x+2y\nA: ", "Q: other\nA: "]
    responses = [copt(), "no code here", copt()]
    body = {"query": [p + c for p, c in zip(prompts, responses)], "prompts": prompts, "labels": ["12", "12", "100"]}
    url = service + "/openrlhf?scheme=correct&extraction=orlm&grading=orlm"
    r = httpx.post(url, json=body, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json() == {"rewards": [1.0, 0.0, 0.0], "scores": [1.0, 0.0, 0.0],
                        "extra_logs": {"correct": [1.0, 0.0, 0.0]}}
    orr1 = httpx.post(service + "/openrlhf?scheme=orr1&extraction=orlm&grading=orlm",
                      json={"query": body["query"], "prompts": prompts}, timeout=300)
    assert orr1.status_code == 200 and len(orr1.json()["rewards"]) == 3, orr1.text
    looping = httpx.post(url + "&deadline_s=1", json={"query": ["Q" + LOOP], "prompts": ["Q"], "labels": ["1"]},
                         timeout=300)
    assert looping.status_code == 503 and "query[0] timeout_budget" in looping.json()["error"]["message"]
    bad = httpx.post(service + "/openrlhf?schema=x", json=body, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "schema"
    bad = httpx.post(url, json={"query": ["a"], "prompts": ["a", "b"]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompts"

    for name, value in (("OPTEVAL_REWARDS_URL", service), ("OPTEVAL_REWARDS_SCHEME", "correct"),
                        ("OPTEVAL_REWARDS_EXTRACTION", "orlm"), ("OPTEVAL_REWARDS_GRADING", "orlm")):
        monkeypatch.setenv(name, value)
    got = reward_func(body["query"], prompts, body["labels"])
    assert [float(x) for x in got["rewards"]] == [1.0, 0.0, 0.0]
    assert [float(x) for x in got["extra_logs"]["correct"]] == [1.0, 0.0, 0.0]
    monkeypatch.setenv("OPTEVAL_REWARDS_DEADLINE_S", "1")
    with pytest.raises(RewardUnavailableError, match=r"queries\[0\]: timeout_budget"):
        reward_func(["Q" + LOOP], ["Q"], ["1"])


def test_orlm_published_nl4opt_outputs_count_210_correct(service):
    path = os.environ.get("OPTEVAL_ORLM_OUTPUTS")
    from opteval.jobs.rewards import ORLM_OUTPUTS_HOWTO, orlm_executed_items

    if not path:
        pytest.skip(ORLM_OUTPUTS_HOWTO)
    items = orlm_executed_items(Path(path))
    assert len(items) == 245
    body = {"scheme": "correct", "extraction": "orlm", "grading": "orlm",
            "items": [{"id": it.id, "completion": it.completion, "answer": it.answer} for it in items]}
    r = httpx.post(service, content=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=600)
    assert r.status_code == 200, r.text[:500]
    assert sum(1 for x in r.json()["rewards"] if x["correct"]) == 210
