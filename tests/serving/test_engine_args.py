"""engine_kwargs checked on CPU against vLLM 0.32's argument names; batch and concurrency consistent;
generation_config and language-only loading; no accelerator type hard-coded in a model YAML."""
from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import pytest
import yaml

from opteval.cluster.serve import llm_serving as ls
from opteval.cluster.serve import vllm_args
from opteval.sweepcore.config import as_plain, configs_dir, model_config


def _m(name: str) -> dict:
    return copy.deepcopy(as_plain(model_config(name)))


def test_saved_list_is_vllm_029_and_has_the_names_we_use():
    version, names = vllm_args.known_args()
    assert version == "0.32.0"
    assert {"max_model_len", "tensor_parallel_size", "max_num_seqs", "generation_config", "language_model_only",
            "reasoning_parser", "enable_prompt_tokens_details", "enable_prefix_caching"} <= names
    assert "max_num_seq" not in names


def test_engine_kwarg_typo_is_refused_with_a_hint():
    m = _m("Qwen3-4B")
    m["vllm"]["engine_kwargs"]["max_num_seq"] = 8
    with pytest.raises(ls.ModelConfigError, match=r"'Qwen3-4B'.*max_num_seq \(did you mean max_num_seqs\?\)"):
        ls.llm_config_dict(m)


@pytest.mark.parametrize("ongoing,ok", [(48, True), (96, True), (32, False), (97, False)])
def test_max_ongoing_requests_is_checked_against_max_num_seqs(ongoing, ok):
    m = _m("Qwen3-4B")
    m["vllm"]["engine_kwargs"]["max_num_seqs"] = 48  # the batch the bounds are read against
    m["vllm"]["deployment"]["max_ongoing_requests"] = ongoing
    m["vllm"]["deployment"]["autoscaling_config"]["target_ongoing_requests"] = min(ongoing, 36)
    if ok:
        ls.llm_config_dict(m)
    else:
        with pytest.raises(ls.ModelConfigError, match="max_ongoing_requests"):
            ls.llm_config_dict(m)


def test_generation_config_vllm_and_language_only_for_vl_checkpoints():
    c = ls.llm_config_dict(_m("Qwen3.5-9B"))
    assert c["engine_kwargs"]["generation_config"] == "vllm"
    assert c["engine_kwargs"]["language_model_only"] is True
    assert "language_model_only" not in ls.llm_config_dict(_m("Qwen3-8B"))["engine_kwargs"]


def test_every_vllm_yaml_is_sized_and_takes_any_gpu_unless_it_says_why():
    for path in sorted((configs_dir() / "models").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if raw.get("backend") != "vllm":
            continue
        assert "accelerator_type" not in raw["vllm"], f"{path.name}: pins an accelerator type"
        c = ls.llm_config_dict(_m(path.stem))  # runs every check
        assert c["deployment_config"]["max_ongoing_requests"] == c["engine_kwargs"]["max_num_seqs"], path.name


def test_refresh_reads_field_names_from_a_wheel(tmp_path):
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/engine/arg_utils.py", "from typing import ClassVar\n@dataclass\nclass EngineArgs:\n"
                   "    model: str = 'x'\n    hidden: ClassVar[int] = 1\n\nclass AsyncEngineArgs(EngineArgs):\n"
                   "    enable_log_requests: bool = False\n\nclass Other:\n    nope: int = 0\n")
        z.writestr("vllm/entrypoints/launchers/cli_args.py", "class BaseFrontendArgs:\n    host: str = ''\n"
                   "class FrontendArgs(BaseFrontendArgs):\n    port: int = 0\n")
    assert vllm_args.names_from_wheel(wheel) == {"model", "enable_log_requests", "host", "port"}


def test_gpu_extra_pins_ray_and_vllm_exactly():
    import tomllib

    gpu = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extra = gpu["project"]["optional-dependencies"]["gpu"]
    assert "ray[serve]==2.60.0" in extra and "vllm==0.32.0" in extra
    # ray[llm] would pin Ray's own vLLM (0.29.0 for Ray 2.60) and make the extra unresolvable
    assert not any(r.startswith("ray[") and "llm" in r for r in extra)
