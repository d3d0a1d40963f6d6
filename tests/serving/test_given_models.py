"""Models given outside configs/models/: a YAML anywhere (relative to the cwd) or a mapping inline
in ``models=[...]``. Validated by the same checks as a model file (errors name ``models[i].key``),
named in the plan by their ``name``, and fingerprinted by their whole config."""
from __future__ import annotations

import pytest

from opteval.sweepcore.config import ConfigError, item_fingerprint, load_config, model_config, resolved

URL = "http://127.0.0.1:9/v1"


def inline(**openai: object) -> str:
    body = ", ".join(f"{k}: {v}" for k, v in {"base_url": URL, "model_id": "m", **openai}.items())
    return f"models=[{{name: mine, backend: openai, openai: {{{body}}}}}]"


def test_an_inline_model_is_named_validated_and_recorded():
    cfg = load_config([inline(backoff_s=0.5)])
    assert list(cfg.models) == ["mine"]
    mc = model_config("mine")
    assert (mc.backend, mc.openai.base_url, mc.openai.model_id, mc.openai.backoff_s) == ("openai", URL, "m", 0.5)
    assert resolved(cfg)["model_configs"]["mine"]["openai"]["backoff_s"] == 0.5  # the manifest holds it all


@pytest.mark.parametrize("arg, message", [
    ("models=[{name: mine, backend: openai, openai: {model_id: m}}]",
     r"^models\[0\]\.openai\.base_url: .* \[command line\]$"),
    ("models=[{name: mine, backend: openai, openai: {base_urll: x, model_id: m}}]",
     r"^models\[0\]\.openai\.base_urll: unknown key.*did you mean 'base_url'"),
    ("models=[{name: mine, backend: opneai}]", r"^models\[0\]\.backend: unknown backend 'opneai'.*'openai'"),
    ("models=[{backend: openai}]", r"^models\[0\]\.name: a model given inline needs a name"),
    ("models=[sim-small, {name: sim-fast}]", r"^models\[1\]\.name: 'sim-fast' is also configs/models/sim-fast"),
    ("models=[{name: mine, backend: simulated, simulated: {p_corect: 0.5}}]",
     r"^models\[0\]\.simulated\.p_corect: unknown key"),
    ("models=[{name: mine, simulated: {p_correct: 0.5}}]",
     r"^models\[0\]\.backend: missing: .*\['openai', 'replay', 'simulated', 'vllm'\]"),
    ("models=[{name: mine, backend: simulated, openai: {model_id: m}}]",
     r"^models\[0\]\.openai: set, but backend is 'simulated'"),
    ("models=[{name: 'bad name'}]", r"^models\[0\]\.name: 'bad name' is not a valid model name"),
    ("models=[nowhere/mine.yaml]", r"^models\[0\]: no such model file 'nowhere/mine.yaml'"),
    ('models=[{name: mine, backend: openai, openai: {base_url: "not a url", model_id: m}}]',
     r"^models\[0\]\.openai\.base_url: must be an http\(s\) URL .*'not a url'"),
])
def test_a_bad_inline_model_names_its_key(arg, message):
    with pytest.raises(ConfigError, match=message):
        load_config([arg])


def test_a_model_file_anywhere_relative_to_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.yaml").write_text(
        f"backend: openai\nfamily: mine\nopenai: {{base_url: '{URL}', model_id: served-id}}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(["models=[sub/mine.yaml, sim-small]"])
    assert list(cfg.models) == ["mine", "sim-small"]  # the file's stem names it when it has no name
    assert model_config("mine").openai.model_id == "served-id" and model_config("mine").family == "mine"
    (tmp_path / "sub" / "mine.yaml").write_text("backend: openai\nopenai: {model_id: x}\n")
    with pytest.raises(ConfigError, match=r"^openai\.base_url \[.*sub/mine\.yaml\]: "):
        load_config(["models=[sub/mine.yaml]"])


def test_a_sweep_yaml_may_give_models_inline(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"models:\n  - sim-small\n  - {{name: mine, backend: openai, openai: {{base_url: '{URL}', "
                     "model_id: m}}\n")
    assert list(load_config([str(sweep)]).models) == ["sim-small", "mine"]


def test_an_inline_models_fingerprint_covers_its_config_as_a_files_does(tmp_path, monkeypatch):
    one = item_fingerprint(load_config([inline()]), "mine", "direct", "sample")
    assert item_fingerprint(load_config([inline()]), "mine", "direct", "sample") == one  # stable
    assert item_fingerprint(load_config([inline(model_id="other")]), "mine", "direct", "sample") != one
    assert item_fingerprint(load_config([inline(timeout_s=5)]), "mine", "direct", "sample") != one
    # the same model as a file anywhere: the same fingerprint (the config is what is hashed)
    (tmp_path / "mine.yaml").write_text(f"name: mine\nbackend: openai\nopenai: {{base_url: '{URL}', model_id: m}}\n")
    monkeypatch.chdir(tmp_path)
    assert item_fingerprint(load_config(["models=[mine.yaml]"]), "mine", "direct", "sample") == one
