"""Per-stage decoding: a method config sets request fields (thinking off, ...) for named stages."""
from __future__ import annotations

import asyncio

import pytest

from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
from opteval.evalcore.harnesses._common import stage_sampling
from opteval.evalcore.models import CallMeta, OpenAIChatModel, Sampling
from opteval.evalcore.sim.policy import SimulatedModel
from tests.servers.openai_fake import FakeOpenAIServer, chat_response

NO_THINK = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}


def test_stage_overrides_merge_into_the_base_sampling():
    base = Sampling(extra_body={"chat_template_kwargs": {"foo": 1}, "min_p": 0.0})
    s = stage_sampling(base, {"temperature": 0.0, **NO_THINK})
    assert s.temperature == 0.0 and s.top_p == base.top_p
    assert s.extra_body == {"chat_template_kwargs": {"foo": 1, "enable_thinking": False}, "min_p": 0.0}
    assert base.extra_body == {"chat_template_kwargs": {"foo": 1}, "min_p": 0.0}  # not mutated
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['seed'\]"):
        stage_sampling(base, {"seed": 1})


def test_optistate_formulate_stage_is_sent_without_thinking_over_http(sample, local_executor):
    """Seen from the server: the formulate request carries enable_thinking=false, act requests do not."""
    problems, _ = sample
    spec = problems["sample-0001"]
    policy = SimulatedModel(policy="always_correct")
    with FakeOpenAIServer() as server:
        # the scripted server answers the formulation then a submitting cell
        form = policy.respond([{"role": "user", "content": f"<problem>\n{spec.question}\n</problem>"}], 42,
                              CallMeta("optistate", "formulate"))
        usage = {"prompt_tokens": 10, "completion_tokens": 5}
        server.script = [(200, chat_response(form, usage), 0),
                         (200, chat_response("Purpose: s\n\n```python\nsubmit(1)\n```\n", usage), 0)]
        model = OpenAIChatModel(name="m", base_url=server.base_url, model_id="m", api_key_env="OPTEVAL_TEST_NO_KEY",
                                extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        ctx = HarnessContext(model=model, executor=local_executor, sampling=Sampling(), sample=0, budgets=Budgets(),
                             method="optistate", stages={"formulate": NO_THINK})
        traj = asyncio.run(get_harness("optistate").run(spec, ctx))
    assert traj.status == "submitted"
    formulate, act = server.requests
    assert formulate["chat_template_kwargs"] == {"enable_thinking": False}
    assert act["chat_template_kwargs"] == {"enable_thinking": True}  # the model's own setting stays
    assert [c.stage for c in traj.calls] == ["formulate", "act"]
    assert [h["x-opteval-stage"] for h in server.headers] == ["formulate", "act"]


def test_method_config_stages_are_validated(configs_with):
    from opteval.sweepcore import config as cconf

    configs_with({"methods/bad.yaml":
                  "name: bad\nharness: optistate\nextraction: submit\nstages:\n  formulate:\n    temprature: 0\n"})
    with pytest.raises(cconf.ConfigError, match=r"stages\.formulate\.temprature .*bad\.yaml.*unknown request field"):
        cconf.method_config("bad")
