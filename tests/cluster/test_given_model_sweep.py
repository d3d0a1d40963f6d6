"""A model given inline on the command line, or as a YAML anywhere, runs a real sweep (local Ray,
real workers and executors) against a local OpenAI-compatible server that records every request;
a resume with the same inline model finds everything done, a changed one is refused."""
from __future__ import annotations

import pytest

from opteval.cluster.driver import run_sweep
from opteval.cluster.driver.prepare import prepare
from opteval.sweepcore.config import load_config
from opteval.sweepcore.ledger import ConfigChangedError, Ledger
from tests.servers.openai_fake import FakeOpenAIServer

pytestmark = pytest.mark.ray


def _model(base_url: str, model_id: str = "served-id") -> str:
    return (f"{{name: mine, backend: openai, family: mine, openai: {{base_url: '{base_url}', model_id: {model_id}, "
            f"api_key_env: OPTEVAL_TEST_NO_KEY, backoff_s: 0.01}}}}")


def _args(h, tmp_path, port: int, name: str, models: str) -> list[str]:
    return h.sweep_args(tmp_path, name, port, "tracking.enabled=false", models=models, methods="[direct]",
                        limit=2, samples=1)


def _check_rows(h, tmp_path, name: str, records: list) -> None:
    preflight = [r for r in records if r["meta"] is None]  # the sweep's request shape, once before dispatch
    assert len(preflight) == 1 and preflight[0]["body"]["model"] == "served-id"
    records = [r for r in records if r["meta"] is not None]
    df = h.ledger_frame(tmp_path, name)
    assert len(df) == 2 and set(df["model"]) == {"mine"} and set(df["method"]) == {"direct"}
    assert (df["status"] != "error").all(), df[["key", "error"]].to_string()
    assert df["key"].str.contains("mine").all()  # the given name is the ledger's model name
    assert len(records) == 2 and {r["body"]["model"] for r in records} == {"served-id"}
    assert int(df["completion_tokens"].sum()) == sum(r["usage"]["completion_tokens"] for r in records)


def test_an_inline_model_runs_and_resumes(ray_cluster, h, tmp_path):
    _, port = ray_cluster
    with FakeOpenAIServer(simulated=True) as server:
        assert run_sweep(load_config(_args(h, tmp_path, port, "inline", f"[{_model(server.base_url)}]"))) == 0
        first = list(server.records)
        _check_rows(h, tmp_path, "inline", first)
        man = Ledger.open_existing(str(tmp_path), "inline").manifest()
        assert man is not None and man["config"]["model_configs"]["mine"]["openai"] == {
            "base_url": server.base_url, "model_id": "served-id", "api_key_env": "OPTEVAL_TEST_NO_KEY",
            "timeout_s": 600.0, "max_retries": 4, "backoff_s": 0.01}
        # the same inline model again: a resume (same keys), nothing left to run
        again = prepare(load_config(_args(h, tmp_path, port, "inline", f"[{_model(server.base_url)}]")),
                        read_only=True)
        assert len(again.plan) == 2 and not again.pending
        changed = load_config(_args(h, tmp_path, port, "inline", f"[{_model(server.base_url, 'other-id')}]"))
        with pytest.raises(ConfigChangedError, match=r"model_configs\.mine\.openai\.model_id"):
            prepare(changed, read_only=True)


def test_a_model_yaml_outside_the_configs_runs(ray_cluster, h, tmp_path, monkeypatch):
    _, port = ray_cluster
    with FakeOpenAIServer(simulated=True) as server:
        (tmp_path / "models").mkdir()
        (tmp_path / "models" / "mine.yaml").write_text(
            f"backend: openai\nopenai: {{base_url: '{server.base_url}', model_id: served-id, "
            "api_key_env: OPTEVAL_TEST_NO_KEY}\n")
        monkeypatch.chdir(tmp_path)
        assert run_sweep(load_config(_args(h, tmp_path, port, "file", "[models/mine.yaml]"))) == 0
        _check_rows(h, tmp_path, "file", list(server.records))
