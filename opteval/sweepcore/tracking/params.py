"""The parameters an MLflow run records: the sweep's resolved settings per model x method, the
plan's shape, the code's version and git revision."""
from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opteval.evalcore.harnesses.base import Budgets
from opteval.evalcore.models.base import Sampling
from opteval.sweepcore.backends import BACKEND_KEY
from opteval.sweepcore.config import as_plain, overlay
from opteval.sweepcore.ledger.manifest import _version as _ledger_version

MAX_PARAM_CHARS = 6000  # MAX_PARAM_VAL_LENGTH


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_params(resolved: Mapping[str, Any], model: str, method: str, fingerprint: str) -> dict[str, str]:
    """Params of a child run, from the resolved sweep config (as stored in the manifest): the
    model's effective sampling and the method's effective budgets (``opteval.sweepcore.config.overlay``)."""
    mcfg = resolved.get("model_configs", {}).get(model, {})
    method_cfg = resolved.get("method_configs", {}).get(method, {})
    sampling = as_plain(overlay(Sampling(**resolved.get("sampling", {})), mcfg.get("sampling") or {}))
    extra = sampling.pop("extra_body")
    budgets = as_plain(overlay(Budgets(**resolved.get("budgets", {})), method_cfg.get("budgets") or {}))
    budgets.pop("exec_limits")  # logged as limits.*
    params: dict[str, Any] = {
        "model": model, "method": method, "backend": mcfg.get(BACKEND_KEY), "family": mcfg.get("family"),
        "size_b": mcfg.get("size_b"), "harness": method_cfg.get("harness"),
        "grading_profile": resolved.get("grading", {}).get("profile"),
        "benchmarks": ",".join(resolved.get("benchmarks", [])),
        "config_fingerprint": fingerprint, "opteval_version": _version(),
        "git_revision": git_revision() or "unknown",
    }
    params.update(plan_params(resolved))
    params.update({f"sampling.{k}": v for k, v in sampling.items()})
    if extra:
        params["sampling.extra_body"] = extra
    params.update({f"budgets.{k}": v for k, v in budgets.items()})
    params.update({f"limits.{k}": v for k, v in resolved.get("limits", {}).items()})
    return {k: str(v)[:MAX_PARAM_CHARS] for k, v in params.items()}


def samples_per_benchmark(resolved: Mapping[str, Any]) -> dict[str, int]:
    """Samples per problem for each benchmark, as the plan uses them (opteval.sweepcore.config.samples_for):
    ``samples.per_benchmark``, else the benchmark yaml's ``samples``, else ``samples.default``."""
    samples = resolved["samples"]  # a resolved config states every key: no default here
    per, bcfg = samples["per_benchmark"], resolved["benchmark_configs"]
    return {b: int(per.get(b) or bcfg[b]["samples"] or samples["default"]) for b in resolved["benchmarks"]}


def plan_params(resolved: Mapping[str, Any]) -> dict[str, str]:
    """What shapes the plan: benchmarks, samples per problem for each, the problem limit."""
    out = {f"samples.{b}": str(n) for b, n in samples_per_benchmark(resolved).items()}
    out["limit_problems"] = str(resolved.get("limit_problems"))
    out["benchmarks"] = ",".join(resolved.get("benchmarks", []))
    return out


def _version() -> str:
    return _ledger_version()
