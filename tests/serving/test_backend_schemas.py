"""Every key a backend's section accepts takes effect, and the code reads no key outside it.

For each backend the test walks its schema's fields, changes one at a time, and shows the
change where it acts: the worker's chat client (openai, replay, simulated), the built
``LLMConfig``, the replica's placement or the endpoint (vllm). A field added to a schema without
an entry here fails the walk, so an accepted key can never silently do nothing."""
from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from opteval.cluster.serve import llm_serving as ls
from opteval.cluster.serve.deployers import DEPLOYERS
from opteval.evalcore.models import make_model
from opteval.evalcore.models.clients import ReplaySection
from opteval.evalcore.models.openai_backend import OpenAIChatModel, OpenAISection
from opteval.evalcore.sim.policy import SimulatedModel
from opteval.sweepcore.backends import BACKENDS, STANDIN, backend_of
from opteval.sweepcore.backends.sim_config import SIM_MODEL_KEYS, sim_keys
from opteval.sweepcore.config import (
    ModelConfig,
    ModelSamplingOverrides,
    ServingSection,
    VllmSection,
    as_plain,
    flat_backend_config,
    model_config,
)
from opteval.sweepcore.placement import placement

ROOT = Path(__file__).resolve().parents[2]


def model(**over: Any) -> dict[str, Any]:
    """A model config as load_config types it (the schema's defaults filled in)."""
    data: dict[str, Any] = {"name": "x", **over}
    return as_plain(OmegaConf.merge(OmegaConf.structured(ModelConfig), data))


def changed_each(schema: set[str], alt: dict[str, Any], observe: Any, base: dict[str, Any], section: str) -> None:
    assert set(alt) == schema, f"walk every field of {section}: missing {sorted(schema - set(alt))}"
    before = observe(model(backend=section, **{section: base}))
    for key, value in alt.items():
        after = observe(model(backend=section, **{section: {**base, key: value}}))
        assert after != before, f"{section}.{key}={value!r} changed nothing observable"


# -- openai: every key reaches the worker's client, on the sweep path and through make_model ---------

OPENAI_BASE = {"base_url": "http://127.0.0.1:1/v1", "model_id": "m"}
OPENAI_ALT = {"base_url": "http://127.0.0.1:2/v1", "model_id": "other", "api_key_env": "OTHER_KEY_ENV",
              "timeout_s": 7.0, "max_retries": 1, "backoff_s": 0.25}


def _client_settings(c: Any) -> tuple:
    return (c.url, c.model_id, c.api_key_env, c.timeout_s, c.max_retries, c.backoff_s, c.extra_body)


def test_every_openai_key_reaches_the_sweeps_client():
    def observe(m: dict[str, Any]) -> tuple:
        ep = DEPLOYERS["openai"].deploy([m], cfg=None)["x"]  # what the driver hands the worker
        return _client_settings(ep.client(pool_shards=8))  # what the worker calls with

    changed_each({f.name for f in fields(OpenAISection)}, OPENAI_ALT, observe, OPENAI_BASE, "openai")


def test_every_openai_key_reaches_make_models_client():
    def observe(m: dict[str, Any]) -> tuple:
        return _client_settings(make_model(flat_backend_config(m)))

    changed_each({f.name for f in fields(OpenAISection)}, OPENAI_ALT, observe, OPENAI_BASE, "openai")
    # the model's sampling.extra_body (e.g. {top_k: null} for an API that rejects top_k) is sent too
    c = make_model(flat_backend_config(model(backend="openai", openai=OPENAI_BASE,
                                             sampling={"extra_body": {"top_k": None}})))
    assert isinstance(c, OpenAIChatModel) and c.extra_body == {"top_k": None}


# -- replay: the recording read -------------------------------------------------------------------


def test_every_replay_key_takes_effect(tmp_path):
    for n in ("a", "b"):
        (tmp_path / f"{n}.jsonl").write_text(json.dumps({"id": "p1", "completion": f"answer {n}"}) + "\n")

    def observe(m: dict[str, Any]) -> str:
        ep = DEPLOYERS["replay"].deploy([m], cfg=None)["x"]
        return ep.client().get("p1").completion  # type: ignore[attr-defined]

    changed_each({f.name for f in fields(ReplaySection)}, {"path": str(tmp_path / "b.jsonl")}, observe,
                 {"path": str(tmp_path / "a.jsonl")}, "replay")


# -- simulated: every SimSkill field and model setting reaches SimulatedModel ------------------------


def test_every_simulated_key_takes_effect():
    alt: dict[str, Any] = {k: 0.33 for k in sim_keys() if k.startswith("p_")}
    alt.update({"mutation_ops": ["flip_sense"], "ttft_s": 0.5, "tokens_per_s": 99.0, "policy": "always_correct",
                "report_usage": False})

    def observe(m: dict[str, Any]) -> tuple:
        sim = make_model(flat_backend_config(m))
        assert isinstance(sim, SimulatedModel)
        return (sim.skill, *(getattr(sim, k) for k in SIM_MODEL_KEYS))

    changed_each(sim_keys(), alt, observe, {}, "simulated")


# -- vllm: the LLMConfig, the placement and the endpoint ---------------------------------------------


def test_every_vllm_key_takes_effect():
    base = as_plain(model_config("Qwen3-0.6B"))
    vc = base["vllm"]

    def observe(m: dict[str, Any]) -> Any:
        m = {**base, "vllm": m["vllm"]}
        try:
            return (ls.llm_config_dict(m), placement(m, ServingSection()),
                    ls.stage_endpoints([m], base_url="http://h:1/v1")["Qwen3-0.6B"].extra_body)
        except ls.ModelConfigError as exc:  # a checked key's effect is the refusal
            return str(exc)

    dep = vc["deployment"]
    alt = {"source": "org/other", "tokenizer_source": "org/tok",
           "engine_kwargs": {**vc["engine_kwargs"], "max_model_len": 8192},
           "deployment": {**dep, "autoscaling_config": {**dep["autoscaling_config"], "max_replicas": 2}},
           "accelerator_type": "A100", "gpus_per_replica": 2, "chat_template_kwargs": {"enable_thinking": False},
           "language_only": True, "runtime_env": {"env_vars": {"A": "1"}},
           "placement_group_config": {"bundles": [{"GPU": 1, "CPU": 3}], "strategy": "PACK"}}
    changed_each({f.name for f in fields(VllmSection)}, alt, observe, vc, "vllm")


def test_the_standin_serves_the_vllm_placement_with_simulated_answers():
    m = as_plain(model_config("Qwen3-0.6B"))
    real, standin = backend_of(m, ServingSection()), backend_of(m, ServingSection(standin=True))
    assert real is BACKENDS["vllm"] and standin is STANDIN
    assert standin.on_gpus and standin.gpus(m) == real.gpus(m) == 1
    assert DEPLOYERS[standin.name].apps([m]) == DEPLOYERS[real.name].apps([m])
    assert standin.simulated and not real.simulated
    assert not any(b.on_gpus for n, b in BACKENDS.items() if n != "vllm")  # GPUs: vllm only


# -- no key read outside the schema ---------------------------------------------------------------

FILES = ["sweepcore/backends/*.py", "sweepcore/placement.py", "cluster/serve/deployers.py", "cluster/serve/llm_serving.py",
         "cluster/serve/serving.py", "cluster/serve/sim_serving.py",
         "sweepcore/endpoint.py", "cluster/serve/serve_apps.py", "evalcore/models/clients.py", "jobs/serve.py"]
SECTIONS = {"openai": OpenAISection, "vllm": VllmSection, "replay": ReplaySection,
            "sampling": ModelSamplingOverrides}


def _sources() -> str:
    return "\n".join(p.read_text() for pat in FILES for p in sorted(ROOT.glob(pat)))


def test_the_code_reads_no_model_key_outside_the_schema():
    src = _sources()
    top = set(re.findall(r"\b(?:model|model_cfg|m|mc|node)\.get\(\"(\w+)\"", src))
    top |= set(re.findall(r"\b(?:model|model_cfg|m|mc|node)\[\"(\w+)\"\]", src))
    assert {"name", "openai", "vllm", "simulated"} <= top, "the pattern found too little: the test would pass vacuously"
    assert top <= {f.name for f in fields(ModelConfig)}, sorted(top - {f.name for f in fields(ModelConfig)})
    reads: set[tuple[str, str]] = set()
    for var, section in (("oc", "openai"), ("vc", "vllm")):
        reads |= {(section, k) for k in re.findall(rf"\b{var}\.get\(\"(\w+)\"", src)}
        reads |= {(section, k) for k in re.findall(rf"\b{var}\[\"(\w+)\"\]", src)}
    reads |= set(re.findall(r"get\(\"(\w+)\"\) or \{\}\)\.get\(\"(\w+)\"", src))  # dict(m.get("s") or {}).get("k")
    reads |= set(re.findall(r"\[\"(\w+)\"\]\.get\(\"(\w+)\"", src))  # m["vllm"].get("k")
    reads = {(s, k) for s, k in reads if s in SECTIONS}
    assert {s for s, _ in reads} == set(SECTIONS), reads
    bad = sorted((s, k) for s, k in reads if k not in {f.name for f in fields(SECTIONS[s])})
    assert not bad, bad


def test_no_backend_branch_outside_the_registry():
    pattern = re.compile(r"backend *(==|!=|in )|\.get\(.backend.\)|\.backend\)? *(==|!=)")
    tops = ("opteval",)
    hits = [f"{p.relative_to(ROOT)}:{i}" for top in tops for p in (ROOT / top).rglob("*.py")
            if "backends" not in p.parts for i, line in enumerate(p.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert not hits, hits


@pytest.mark.parametrize("name", ["openai", "replay", "simulated", "vllm"])
def test_each_backend_owns_its_section(name):
    b = BACKENDS[name]
    assert b.name == name and b.section == name
    assert name in {f.name for f in fields(ModelConfig)}


def test_every_backend_has_one_deployer_under_its_name():
    assert set(DEPLOYERS) == set(BACKENDS) | {STANDIN.name}
    assert all(d.backend == name for name, d in DEPLOYERS.items())
    assert DEPLOYERS["standin"].standin and not DEPLOYERS["vllm"].standin  # type: ignore[attr-defined]
