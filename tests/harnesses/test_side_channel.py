"""The harness/stage side channel: headers over HTTP, ``meta`` in process, never in a prompt."""
from __future__ import annotations

import asyncio
import json
import re

import pytest

from opteval.evalcore.harnesses._common import PROMPTS_DIR, fenced_blocks, load_prompt, render
from opteval.evalcore.models import CallMeta, OpenAIChatModel, Sampling
from opteval.evalcore.models.openai_backend import HARNESS_HEADER, STAGE_HEADER
from opteval.evalcore.registry import UnknownNameError
from opteval.evalcore.sim.policy import STAGE_HANDLERS, SimulatedModel, register_stage, stage_handler
from tests.servers.openai_fake import FakeOpenAIServer, chat_response

# Any bracketed tag a test tool could leave in a prompt: [harness:x], [step:x], [stage:x], [sim:...]
MARKER = re.compile(r"\[(harness|step|stage|sim|test)\s*:[^\]]*\]", re.I)


def test_no_prompt_file_carries_a_marker():
    files = sorted(PROMPTS_DIR.rglob("*.md"))
    assert len(files) >= 7  # the walk found the prompt tree
    offenders = [str(p.relative_to(PROMPTS_DIR)) for p in files if MARKER.search(p.read_text())]
    assert offenders == []


def test_openai_backend_sends_meta_as_headers_and_nothing_in_the_body():
    with FakeOpenAIServer() as fake_server:
        fake_server.script = [(200, chat_response("ok", {"prompt_tokens": 3, "completion_tokens": 1}), 0)]
        model = OpenAIChatModel(name="m", base_url=fake_server.base_url, model_id="served",
                                api_key_env="OPTEVAL_TEST_NO_KEY")
        msgs = [{"role": "user", "content": "Solve it."}]
        asyncio.run(model.chat(msgs, Sampling(), 42, CallMeta("optistate", "formulate")))
        asyncio.run(model.chat(msgs, Sampling(), 42))  # no meta: no headers
    first, second = fake_server.headers
    assert first[HARNESS_HEADER.lower()] == "optistate" and first[STAGE_HEADER.lower()] == "formulate"
    assert HARNESS_HEADER.lower() not in second and STAGE_HEADER.lower() not in second
    body = json.dumps(fake_server.requests[0])
    assert "optistate" not in body and "formulate" not in body
    assert fake_server.requests[0]["messages"] == msgs


def _formulate_messages(question: str) -> list[dict]:
    return [
        {"role": "system", "content": load_prompt("optistate", "system")},
        {"role": "user", "content": render(load_prompt("optistate", "formulate"), question=question)},
    ]


def test_simulated_policy_dispatches_on_meta_not_on_the_prompt(sample):
    problems, _ = sample
    spec = next(iter(problems.values()))
    msgs = _formulate_messages(spec.question)
    model = SimulatedModel(policy="always_correct")
    as_formulate = model.respond(msgs, 1, CallMeta("optistate", "formulate"))
    assert fenced_blocks(as_formulate, "formulation") and not fenced_blocks(as_formulate, "python")
    # the same messages without meta are answered like direct: a program
    text = model.respond(msgs, 1, None)
    assert fenced_blocks(text, "python") and not fenced_blocks(text, "formulation")
    # a harness the simulator has no stages for is an error naming the pair, never "like direct"
    with pytest.raises(UnknownNameError, match="'no_such_harness/act'.*optistate/formulate"):
        model.respond(msgs, 1, CallMeta("no_such_harness", "act"))
    with pytest.raises(UnknownNameError, match="'optistate/nope'"):
        model.respond(msgs, 1, CallMeta("optistate", "nope"))


def test_register_stage_lets_a_harness_module_add_its_handlers(sample):
    problems, _ = sample
    spec = next(iter(problems.values()))
    seen = []

    def handler(model, call):
        seen.append((call.conv.harness, call.conv.stage, call.problem.id, call.seed))
        return "Purpose: test\n\n```python\nsubmit(1)\n```\n"

    register_stage("my_family", "route", handler)
    try:
        assert stage_handler("my_family", "route") is handler
        text = SimulatedModel().respond(_formulate_messages(spec.question), 5, CallMeta("my_family", "route"))
        assert "submit(1)" in text and seen == [("my_family", "route", spec.id, 5)]
    finally:
        STAGE_HANDLERS.pop(("my_family", "route"), None)


@pytest.mark.parametrize("method", ["direct", "opticycle", "optistate"])
def test_every_call_records_its_stage_and_the_model_sees_the_meta(sample, run_harness, method):
    problems, _ = sample

    class Spy(SimulatedModel):
        metas: list = []

        async def chat(self, messages, sampling, seed, meta=None):
            type(self).metas.append(meta)
            return await super().chat(messages, sampling, seed, meta)

    Spy.metas = []
    t = run_harness(method, problems["sample-0001"], Spy(policy="always_correct"))
    assert t.status == "submitted"
    assert [m.harness for m in Spy.metas] == [method] * len(t.calls)
    assert [m.stage for m in Spy.metas] == [c.stage for c in t.calls] == [e["stage"] for e in t.transcript]
    expected_first = "formulate" if method == "optistate" else "act"
    assert t.calls[0].stage == expected_first and all(c.stage == "act" for c in t.calls[1:])
    for entry in t.transcript:
        assert not any(MARKER.search(m["content"]) for m in entry["messages"])


def test_serve_app_reads_the_headers_into_a_call_meta():
    from starlette.datastructures import Headers

    from opteval.cluster.serve.serving import call_meta

    meta = call_meta(Headers({"x-opteval-harness": "optistate", "x-opteval-stage": "formulate"}))
    assert meta == CallMeta("optistate", "formulate")
    assert call_meta(Headers({"x-opteval-harness": "direct"})) == CallMeta("direct", "act")
    assert call_meta(Headers({})) is None


def test_simulated_serve_app_answers_by_the_headers(sample):
    """The Serve app's handler (its class, without Serve): the stage header decides the reply."""
    from opteval.cluster.serve.serving import SimulatedOpenAI

    problems, _ = sample
    spec = problems["sample-0001"]
    # serve.deployment returns a Deployment, whose class is func_or_class; Ray's annotation says the class
    app = SimulatedOpenAI.func_or_class(  # type: ignore[attr-defined]
        {"name": "sim", "simulated": {"policy": "always_correct"}})
    body = json.dumps({"model": "sim", "seed": 42, "messages": _formulate_messages(spec.question)}).encode()

    def reply(meta):
        resp = asyncio.run(app.chat(body, meta))
        return json.loads(resp.body)["choices"][0]["message"]["content"]

    assert fenced_blocks(reply(CallMeta("optistate", "formulate")), "formulation")
    assert fenced_blocks(reply(None), "python")
