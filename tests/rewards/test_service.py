"""``python jobs/rewards.py serve``: real local Ray, real Serve over HTTP, real sandbox; the adapters.

One service (a subprocess with its own local Ray) for the module. The ORLM test needs
ORLM's released outputs (third-party data, not in the repo): it skips, saying how to get
them, unless ``$OPTEVAL_ORLM_OUTPUTS`` names the file.
"""
from __future__ import annotations

import json
import os
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
    with rewards_service(log, "--min-executors", "1", "--max-executors", "2", "--num-cpus", "2") as (url, _):
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
    from evalcore.reward_adapters import RewardServiceError, compute_score, trl_reward_func

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


def test_orlm_published_nl4opt_outputs_count_210_correct(service):
    path = os.environ.get("OPTEVAL_ORLM_OUTPUTS")
    from jobs.rewards import ORLM_OUTPUTS_HOWTO, orlm_executed_items

    if not path:
        pytest.skip(ORLM_OUTPUTS_HOWTO)
    items = orlm_executed_items(Path(path))
    assert len(items) == 245
    body = {"scheme": "correct", "extraction": "orlm", "grading": "orlm",
            "items": [{"id": it.id, "completion": it.completion, "answer": it.answer} for it in items]}
    r = httpx.post(service, content=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=600)
    assert r.status_code == 200, r.text[:500]
    assert sum(1 for x in r.json()["rewards"] if x["correct"]) == 210
