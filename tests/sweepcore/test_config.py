"""Config loading: defaults, positional file, dotlist; errors name the key path."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from opteval.sweepcore import config as C
from opteval.sweepcore.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def test_documented_yaml_equals_the_dataclass_defaults():
    """configs/sweep.yaml documents every key with its default; the dataclasses are the defaults."""
    documented = yaml.safe_load((REPO / "configs" / "sweep.yaml").read_text())
    defaults = C.as_plain(C.SweepConfig())
    assert defaults["budgets"].pop("exec_limits") == defaults["limits"]  # one place: the limits section
    assert documented == defaults
    cfg = load_config([])
    assert cfg.sweep.name == "demo" and cfg.samples.default == 2
    assert cfg.budgets.exec_limits == cfg.limits


def test_loaded_config_is_frozen_and_typed():
    import dataclasses

    from opteval.evalcore.harnesses.base import Budgets
    from opteval.evalcore.models.base import Sampling
    from opteval.evalcore.sandbox.types import Limits

    cfg = load_config(["limits.wall_s=7", "budgets.max_calls=5", "sampling.top_k=-1"])
    assert isinstance(cfg, C.SweepConfig)
    assert type(cfg.sampling) is Sampling and type(cfg.budgets) is Budgets and type(cfg.limits) is Limits
    assert cfg.limits.wall_s == 7.0 and cfg.budgets.exec_limits.wall_s == 7.0 and cfg.budgets.max_calls == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sweep.name = "other"  # type: ignore[misc]
    assert isinstance(cfg.methods, tuple)


def test_exec_limits_are_set_in_limits_only():
    with pytest.raises(ConfigError, match=r"^budgets\.exec_limits: .*limits"):
        load_config(["budgets.exec_limits.wall_s=5"])


def test_added_keys_take_effect_and_enter_the_fingerprint():
    base = load_config([])
    out = load_config(["budgets.max_output_tokens=1024", "sampling.extra_body={x: 1}"])
    # the command line wins over the method's YAML (which states 16384): the precedence rule
    assert C.effective_budgets(out, "direct").max_output_tokens == 1024
    assert C.effective_sampling(out, "sim-small").extra_body == {"x": 1}
    assert C.sweep_fingerprint(out) != C.sweep_fingerprint(base)
    assert C.item_fingerprint(out, "sim-small", "direct", "sample") != \
        C.item_fingerprint(base, "sim-small", "direct", "sample")


def test_dotlist_and_positional_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("samples: {default: 5}\nmodels: [sim-fast]\nsampling: {temperature: 0.2}\n")
    cfg = load_config([str(f), "samples.default=4", "methods=[direct,opticycle]", "sweep.name=try1"])
    assert cfg.samples.default == 4  # dotlist wins over the file
    assert list(cfg.models) == ["sim-fast"] and cfg.sampling.temperature == 0.2
    assert list(cfg.methods) == ["direct", "opticycle"] and cfg.sweep.name == "try1"


@pytest.mark.parametrize("arg, path", [
    ("samples.defualt=4", "samples.defualt"),
    ("models=[sim-small,foo]", "models[1]"),
    ("samples.default=-1", "samples.default"),
    ("samples.default=abc", "samples.default"),
    ("grading.profile=nope", "grading.profile"),
    ("cluster.retries=-2", "cluster.retries"),
    ("sampling.top_p=1.5", "sampling.top_p"),
    ("benchmarks=[nl4op]", "benchmarks[0]"),
    ("samples.per_benchmark.nl4op=3", "samples.per_benchmark.nl4op"),
    ("sweep.name=a/b", "sweep.name"),
    ("plan_only=maybe", "plan_only"),
])
def test_bad_values_name_the_key_path(arg, path):
    with pytest.raises(ConfigError) as err:
        load_config([arg])
    assert str(err.value).startswith(path + ":"), str(err.value)


def test_unknown_key_suggests_and_unknown_model_says_file():
    with pytest.raises(ConfigError, match="did you mean 'default'"):
        load_config(["samples.defualt=4"])
    with pytest.raises(ConfigError, match=r"models\[1\]: no configs/models/foo.yaml"):
        load_config(["models=[sim-small,foo]"])


def test_bad_key_in_positional_file_names_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("budgets: {max_turnz: 3}\n")
    with pytest.raises(ConfigError) as err:
        load_config([str(f)])
    assert "budgets.max_turnz" in str(err.value) and str(f) in str(err.value)


def test_model_yaml_unknown_key_names_file(configs_with):
    configs = configs_with({"models/sim-bad.yaml": "name: sim-bad\nbackend: simulated\nsimulated: {p_correct: 0.5}\n"
                                                   "famly: x\n"})
    bad = configs / "models" / "sim-bad.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(["models=[sim-bad]"])
    assert "famly" in str(err.value) and "sim-bad.yaml" in str(err.value)
    bad.write_text("name: sim-bad\nbackend: simulated\nsimulated: {p_corect: 0.5}\n")
    with pytest.raises(ConfigError, match=r"simulated.p_corect .*sim-bad.yaml"):
        C.model_config("sim-bad")


def test_samples_resolution_order():
    cfg = load_config(["benchmarks=[sample,nl4opt,complexor]", "samples.default=3",
                       "samples.per_benchmark={complexor: 2}"])
    assert C.samples_for(cfg, "sample") == 3  # default
    assert C.samples_for(cfg, "nl4opt") == 8  # configs/benchmarks/nl4opt.yaml
    assert C.samples_for(cfg, "complexor") == 2  # per_benchmark wins


def test_paper_allocation_totals_17852():
    counts = {"nl4opt": 230, "mamo_easy": 652, "mamo_complex": 211, "nlp4lp": 242, "complexor": 18,
              "industryor": 100, "optibench": 605, "optmath": 166, "icml_competition": 410}
    assert sum(n * (C.benchmark_config(b).samples or 0) for b, n in counts.items()) == 17852


def test_fingerprint_ignores_operational_keys():
    a = load_config([])
    b = load_config(["sweep.output_dir=/elsewhere", "cluster.workers=9", "progress.interval_s=1",
                     "tracking.enabled=false", "serving.http_port=9000", "plan_only=true"])
    c = load_config(["sampling.temperature=0.7"])
    assert C.sweep_fingerprint(a) == C.sweep_fingerprint(b)
    assert C.sweep_fingerprint(a) != C.sweep_fingerprint(c)
    r = C.resolved(a)
    assert r["model_configs"]["sim-small"]["backend"] == "simulated"
    assert set(r["method_configs"]) == {"direct", "opticycle", "optistate"}


def test_backend_config_builds_a_simulated_model():
    from opteval.evalcore.models import make_model

    bc = C.backend_config("sim-fast")
    assert bc["backend"] == "simulated" and bc["ttft_s"] == 0.0 and "p_correct" in bc["skill"]
    assert make_model(bc).name == "sim-fast"


def test_effective_sampling_and_budgets_apply_overrides(configs_with):
    configs_with({"methods/tight.yaml": "name: tight\nharness: direct\nextraction: submit\nbudgets: {max_calls: 3}\n",
                  "models/sim-hot.yaml": "name: sim-hot\nbackend: simulated\nsampling: {temperature: 1.0}\n"})
    cfg = load_config(["models=[sim-hot]", "methods=[tight]"])
    assert C.effective_sampling(cfg, "sim-hot").temperature == 1.0
    assert C.effective_sampling(cfg, "sim-hot").top_p == 0.95
    assert C.effective_budgets(cfg, "tight").max_calls == 3
    assert C.effective_budgets(cfg, "tight").max_turns == 12
    # a method that does not state max_output_tokens gets the sweep's
    assert C.effective_budgets(cfg, "tight").max_output_tokens == cfg.budgets.max_output_tokens


def test_precedence_command_line_over_model_yaml_over_sweep_yaml(tmp_path):
    """command line > model/method YAML > sweep YAML > defaults; each overridden value is said once."""
    model = tmp_path / "sim-512.yaml"  # a model YAML given by its path
    model.write_text("name: sim-512\nbackend: simulated\nsampling: {max_tokens: 512, temperature: 0.9}\n")
    sweep_yaml = tmp_path / "s.yaml"
    sweep_yaml.write_text("sampling: {max_tokens: 256, temperature: 0.1, top_p: 0.5}\n")
    from_yaml = load_config([str(sweep_yaml), f"models=[{model}]"])
    s = C.effective_sampling(from_yaml, "sim-512")
    assert (s.max_tokens, s.temperature, s.top_p) == (512, 0.9, 0.5)  # model YAML > sweep YAML > defaults
    cli = load_config([str(sweep_yaml), f"models=[{model}]", "sampling.max_tokens=128"])
    assert cli.command_line == ("sampling.max_tokens",)
    s = C.effective_sampling(cli, "sim-512")
    assert (s.max_tokens, s.temperature) == (128, 0.9)  # the command line wins over the model YAML
    lines = C.overridden(cli)
    assert any("model 'sim-512'" in ln and "sampling.max_tokens=128 (command line) over its YAML's 512" in ln
               and "sampling.temperature=0.9 (its YAML) over the sweep's 0.1" in ln for ln in lines), lines
    assert C.item_fingerprint(cli, "sim-512", "direct", "sample") != \
        C.item_fingerprint(from_yaml, "sim-512", "direct", "sample")
    with pytest.raises(ConfigError, match=r"^command_line: "):
        load_config(["command_line=[sampling.top_k]"])


def test_method_budgets_from_the_command_line():
    cfg = load_config(["method_budgets.opticycle.max_calls=2", "method_budgets.direct.max_total_tokens=9"])
    assert C.effective_budgets(cfg, "opticycle").max_calls == 2
    assert C.effective_budgets(cfg, "optistate").max_calls == C.effective_budgets(load_config([]), "optistate").max_calls
    assert C.effective_budgets(cfg, "direct").max_total_tokens == 9
    assert any("method 'opticycle'" in ln and "budgets.max_calls=2 (command line)" in ln for ln in C.overridden(cfg))
    assert C.item_fingerprint(cfg, "sim-small", "opticycle", "sample") != \
        C.item_fingerprint(load_config([]), "sim-small", "opticycle", "sample")
    for arg, path in [("method_budgets.nope.max_calls=2", "method_budgets.nope"),
                      ("method_budgets.opticycle.max_cals=2", "method_budgets.opticycle.max_cals"),
                      ("method_budgets.opticycle.max_calls=0", "method_budgets.opticycle.max_calls")]:
        with pytest.raises(ConfigError, match="^" + path.replace(".", r"\.") + ": "):
            load_config([arg])
