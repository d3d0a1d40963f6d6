"""Per-model batch sizes from KV-cache memory: ``max_num_seqs`` and ``max_ongoing_requests``.

Why a rule and not a number per YAML: a replica's batch is bounded by the KV cache its GPUs
hold after the weights, and a batch sized above it makes vLLM preempt sequences, one sized
below it leaves the GPU idle. The rule (docs/gpu.md states it too):

    kv_bytes_per_token = 2 (K and V) x attention_layers x kv_heads x head_dim x 2 bytes (bf16)
    kv_budget          = gpus_per_replica x GPU_GB x gpu_memory_utilization
                         - weight_gb - gpus_per_replica x RUNTIME_GB
    max_num_seqs       = kv_budget / (CONTEXT_TOKENS x kv_bytes_per_token + state_mb),
                         rounded down to a multiple of 4, within [4, 256]
    max_ongoing_requests = max_num_seqs  (a replica takes what it can batch; Serve queues the rest)

``CONTEXT_TOKENS`` is what a live sequence of a multi-turn trajectory holds on average
(history and prompt ~4k tokens plus half of the 16,384-token output budget), not
``max_model_len`` (unless that is shorter): vLLM pages the cache, so a batch is sized by what sequences hold, and the
rare long one is preempted, not refused. Hybrid-attention checkpoints (Qwen3.5/3.6: linear
attention in most layers) count only their full-attention layers and add a fixed recurrent
state per sequence (``state_mb``); their architecture numbers are our reading of the model
cards, to be checked against vLLM's "GPU KV cache size" log line on the GPU.

    python -m opteval.sweepcore.batch_size             # derived vs configured, per model YAML
    python -m opteval.sweepcore.batch_size --write     # rewrite the YAMLs' values (comments kept)
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opteval.sweepcore.backends import BACKEND_KEY, backend_of

GPU_GB = 80.0  # the 80 GB class the model YAMLs assume (A100-80G, H100); H200 has 141
RUNTIME_GB = 4.0  # per GPU: CUDA context, activations at max_num_batched_tokens, graphs
CONTEXT_TOKENS = 12_288  # KV tokens one live sequence holds on average (see the module docstring)
BYTES = 2  # bf16 K/V cache
MIN_SEQS, MAX_SEQS, STEP = 4, 256, 4
MODELS_DIR = Path(__file__).resolve().parents[1] / "configs" / "models"


@dataclass(frozen=True)
class Arch:
    """What the rule needs of a checkpoint (from its config.json / model card)."""

    weight_gb: float  # weights as served (bf16 = 2 bytes x parameters; MXFP4 for GPT-OSS)
    attn_layers: int  # layers with a full (or sliding-window counted as full) KV cache
    kv_heads: int
    head_dim: int
    state_mb: float = 0.0  # per-sequence recurrent state of linear-attention layers


# Inputs per served checkpoint. Qwen3/Qwen2.5/Llama/Phi/Mistral: config.json. GPT-OSS-20B:
# 24 layers, half sliding-window (128 tokens, counted as 0) -> 12 full. Qwen3.5/3.6: hybrid,
# one full-attention layer in four (our reading; check on the GPU).
ARCH: dict[str, Arch] = {
    "Qwen3-0.6B": Arch(1.2, 28, 8, 128),
    "Qwen3-1.7B": Arch(3.4, 28, 8, 128),
    "Qwen3-4B": Arch(8.0, 36, 8, 128),
    "Qwen3-8B": Arch(16.4, 36, 8, 128),
    "Qwen3-14B": Arch(29.5, 40, 8, 128),
    "StepORLM-Qwen3-8B": Arch(16.4, 36, 8, 128),
    "Qwen3.5-0.8B": Arch(1.6, 6, 2, 256, 20.0),
    "Qwen3.5-2B": Arch(4.0, 6, 2, 256, 30.0),
    "Qwen3.5-4B": Arch(8.0, 8, 4, 256, 40.0),
    "Qwen3.5-9B": Arch(18.0, 8, 4, 256, 60.0),
    "Qwen3.5-27B": Arch(54.0, 16, 4, 256, 120.0),
    "Qwen3.6-27B": Arch(54.0, 16, 4, 256, 120.0),
    "LLMOPT-Qwen2.5-14B": Arch(29.5, 48, 8, 128),
    "SIRL-Qwen2.5-7B-Gurobi": Arch(15.2, 28, 4, 128),
    "DeepSeek-R1-Distill-Llama-8B": Arch(16.1, 32, 8, 128),
    "ORLM-LLaMA-3-8B": Arch(16.1, 32, 8, 128),
    "Phi-4-reasoning": Arch(29.4, 40, 10, 128),
    "Magistral-Small-2509": Arch(47.2, 40, 8, 128),
    "GPT-OSS-20B": Arch(13.8, 12, 8, 64),
}


@dataclass(frozen=True)
class BatchSize:
    model: str
    max_num_seqs: int
    kv_budget_gb: float
    kv_mb_per_seq: float

    @property
    def max_ongoing_requests(self) -> int:
        return self.max_num_seqs

    @property
    def target_ongoing_requests(self) -> int:
        """Autoscaling target: 3/4 of a full batch (scale out before the batch is full)."""
        return max(1, self.max_num_seqs * 3 // 4)


def _vllm(model_cfg: dict[str, Any]) -> dict[str, Any]:
    return dict(model_cfg.get("vllm") or {})


def derive(model_cfg: dict[str, Any], gpu_gb: float = GPU_GB, context_tokens: int = CONTEXT_TOKENS) -> BatchSize:
    """The rule above for one model config (plain dict); KeyError names a model with no inputs."""
    name = str(model_cfg["name"])
    if name not in ARCH:
        raise KeyError(f"model {name!r}: no architecture inputs in opteval.sweepcore.batch_size.ARCH")
    a = ARCH[name]
    vc = _vllm(model_cfg)
    ek = dict(vc.get("engine_kwargs") or {})
    gpus = int(vc.get("gpus_per_replica") or int(ek.get("tensor_parallel_size", 1)))
    util = float(ek.get("gpu_memory_utilization", 0.9))
    budget = gpus * gpu_gb * util - a.weight_gb - gpus * RUNTIME_GB
    context_tokens = min(context_tokens, int(ek.get("max_model_len") or context_tokens))
    per_token = 2 * a.attn_layers * a.kv_heads * a.head_dim * BYTES
    per_seq_mb = context_tokens * per_token / 1e6 + a.state_mb
    seqs = int(budget * 1e3 / per_seq_mb) if budget > 0 else 0
    seqs = max(MIN_SEQS, min(MAX_SEQS, seqs - seqs % STEP))
    return BatchSize(name, seqs, round(budget, 1), round(per_seq_mb, 1))


def configured(model_cfg: dict[str, Any]) -> tuple[int | None, int | None]:
    """(max_num_seqs, max_ongoing_requests) a model YAML sets."""
    vc = _vllm(model_cfg)
    seqs = dict(vc.get("engine_kwargs") or {}).get("max_num_seqs")
    ongoing = dict(vc.get("deployment") or {}).get("max_ongoing_requests")
    return (None if seqs is None else int(seqs)), (None if ongoing is None else int(ongoing))


def _yaml(path: Path) -> dict[str, Any]:
    # deferred: PyYAML only when the model YAMLs are read
    import yaml

    return dict(yaml.safe_load(path.read_text()) or {})


def vllm_model_files(models_dir: Path = MODELS_DIR) -> list[Path]:
    """The GPU-served vLLM model YAMLs (a CPU engine's, ``gpus_per_replica: 0``, sizes its own
    batch: the GPU memory rule does not apply to it)."""
    return sorted(p for p in models_dir.glob("*.yaml") if BACKEND_KEY in (y := _yaml(p)) and backend_of(y).on_gpus
                  and _vllm(y).get("gpus_per_replica", 1) != 0)


def rewrite(path: Path, bs: BatchSize) -> bool:
    """Put the derived values into one YAML's lines (comments kept); True when it changed."""
    text = path.read_text()
    new = re.sub(r"(max_num_seqs:\s*)\d+", rf"\g<1>{bs.max_num_seqs}", text)
    new = re.sub(r"(max_ongoing_requests:\s*)\d+", rf"\g<1>{bs.max_ongoing_requests}", new)
    new = re.sub(r"(target_ongoing_requests:\s*)\d+", rf"\g<1>{bs.target_ongoing_requests}", new)
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the model YAMLs with the derived values")
    ap.add_argument("--gpu-gb", type=float, default=GPU_GB)
    args = ap.parse_args(argv)
    for path in vllm_model_files():
        cfg = _yaml(path)
        bs = derive(cfg, args.gpu_gb)
        seqs, ongoing = configured(cfg)
        mark = "" if (seqs, ongoing) == (bs.max_num_seqs, bs.max_ongoing_requests) else "  (differs)"
        print(f"{bs.model}: max_num_seqs={bs.max_num_seqs} (configured {seqs}, max_ongoing_requests {ongoing}); "
              f"KV budget {bs.kv_budget_gb:g} GB, {bs.kv_mb_per_seq:g} MB per sequence{mark}")
        if args.write and args.gpu_gb == GPU_GB:
            rewrite(path, bs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
