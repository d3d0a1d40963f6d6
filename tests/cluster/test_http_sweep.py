"""A sweep of the three harnesses seen from a real OpenAI-compatible HTTP endpoint that records
every request: the protocol's sampling fields, no marker in any message,
ledger tokens = what the server reported, per-stage request fields, and a multi-turn trajectory
whose first cell is killed recovers and submits.
"""
from __future__ import annotations

import json
import re

import pytest

from opteval.cluster.driver import run_sweep
from opteval.sweepcore.config import load_config
from opteval.sweepcore.ledger import Ledger
from tests.configs_with import shipped
from tests.servers.openai_fake import FakeOpenAIServer

pytestmark = pytest.mark.ray

MARKER = re.compile(r"\[(harness|step|stage|sim|test)\s*:[^\]]*\]", re.I)
SLOW_CELL = "Purpose: Build the model first.\n\n```python\nstate = 1\nwhile True:\n    pass\n```\n"
FIRST_ACTION = "(none yet: this is your first action)"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def _kill_first_cell(question: str):
    """Script: the first cell of every multi-turn trajectory on ``question`` at seed 42 loops forever."""

    def override(body, meta):
        user = body["messages"][-1]["content"]
        if (meta is not None and meta.harness in ("opticycle", "optistate") and meta.stage == "act"
                and body.get("seed") == 42 and FIRST_ACTION in user and question in user):
            return SLOW_CELL
        return None

    return override


def test_sweep_over_a_recording_openai_endpoint(ray_cluster, h, tmp_path, configs_with):
    from opteval.evalcore.problems import load_benchmark

    _, port = ray_cluster
    specs, _ = load_benchmark("sample")
    first = specs[0]
    with FakeOpenAIServer(override=_kill_first_cell(first.question), simulated=True) as server:
        configs_with({
            "models/rec.yaml": "name: rec\nbackend: openai\nfamily: recorded\nsize_b: null\n"
                               f"openai: {{base_url: '{server.base_url}', model_id: rec-model, "
                               "api_key_env: OPTEVAL_TEST_NO_KEY}\nsampling: {}\n",
            "methods/optistate.yaml": shipped("methods/optistate.yaml")
                                      + "stages: {formulate: {extra_body: " + json.dumps(NO_THINK) + "}}\n"})
        cfg = load_config(h.sweep_args(tmp_path, "http", port, "limits.wall_s=5", "limits.cpu_s=5",
                                       "tracking.enabled=false", models="[rec]", limit=1, samples=2))
        assert run_sweep(cfg) == 0
        # the preflight: the sweep's request shape once, before dispatch, without a harness header
        preflight = [r for r in server.records if r["meta"] is None]
        records = [r for r in server.records if r["meta"] is not None]
    assert len(preflight) == 1 and preflight[0]["body"]["max_tokens"] == 16384

    df = h.ledger_frame(tmp_path, "http")
    assert len(df) == 3 * 1 * 2 and (df["status"] != "error").all(), df[["key", "error"]].to_string()

    # 1. the protocol's sampling fields on every request; seed = 42 + sample
    assert records
    for r in records:
        b = r["body"]
        assert (b["temperature"], b["top_p"], b["top_k"], b["max_tokens"]) == (0.6, 0.95, 20, 16384)
        assert b["seed"] in (42, 43) and b["model"] == "rec-model"
        assert r["meta"] is not None and r["meta"].harness in ("direct", "opticycle", "optistate")
    # 2. no marker in any message; the side channel is in the headers only
    for r in records:
        for m in r["body"]["messages"]:
            assert not MARKER.search(m["content"]), m["content"][:200]
        assert "x-opteval-harness" in r["headers"] and "harness" not in json.dumps(
            {k: v for k, v in r["body"].items() if k != "messages"})
    # per-stage request fields: OptiState's formulate stage without thinking, nothing else
    for r in records:
        formulate = r["meta"].stage == "formulate"
        assert (r["body"].get("chat_template_kwargs") == NO_THINK["chat_template_kwargs"]) == formulate

    # 3. every ledger call is a request the server saw (same messages, seed, harness, stage), with its usage
    seen: dict[tuple, list[dict]] = {}
    for r in records:
        key = (json.dumps(r["body"]["messages"]), r["body"]["seed"], r["meta"].harness, r["meta"].stage)
        seen.setdefault(key, []).append(r["usage"])
    n_calls = 0
    for row in df.itertuples():
        calls, transcript = json.loads(row.calls), json.loads(row.transcript)
        assert len(calls) == len(transcript)
        for call, entry in zip(calls, transcript):
            usage = seen[(json.dumps(entry["messages"]), 42 + row.sample, row.method, call["stage"])]
            assert {"prompt_tokens": call["prompt_tokens"], "completion_tokens": call["completion_tokens"]} in [
                {k: u[k] for k in ("prompt_tokens", "completion_tokens")} for u in usage]
            n_calls += 1
    assert n_calls == len(records)  # nothing sent that the ledger does not hold (no retries here)
    assert int(df["prompt_tokens"].sum()) == sum(r["usage"]["prompt_tokens"] for r in records)
    assert int(df["completion_tokens"].sum()) == sum(r["usage"]["completion_tokens"] for r in records)

    # 4. the multi-turn trajectories whose first cell was killed recovered and submitted
    killed = df[(df["problem_id"] == first.id) & (df["sample"] == 0) & (df["method"] != "direct")]
    assert len(killed) == 2
    for row in killed.itertuples():
        execs = json.loads(row.execs)
        assert execs[0]["outcome"] == "killed" and execs[0]["turn"] == 1
        assert execs[1]["turn"] == 3 and row.status == "submitted", (row.method, execs)
        restarted = [r for r in records if r["meta"].harness == row.method and r["body"]["seed"] == 42
                     and first.question in r["body"]["messages"][-1]["content"]
                     and "): restarted" in r["body"]["messages"][-1]["content"]]
        assert restarted and "ALL state from earlier cells is lost" in restarted[0]["body"]["messages"][-1]["content"]

    # 5. the manifest records what programs ran with
    man = Ledger.open_existing(str(tmp_path), "http").manifest()
    assert man is not None
    env = man["executors"]
    assert env["solvers"] == ["scipy", "pulp", "pyscipopt"]
    assert all(isinstance(env["versions"][s], str) for s in env["solvers"])
    assert {"scipy", "pulp", "pyscipopt"} <= set(env["preimported"])
    assert set(man["config"]["harness_versions"]) == {"direct", "opticycle", "optistate"}
