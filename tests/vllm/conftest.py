"""The vllm tier (``bash .ci/vllm``): one local Ray and one Serve for the whole tier.

Runs in the side environment ``.ci/vllm`` makes (vLLM's CPU build beside ray[serve]); the
README's test command deselects the ``vllm`` marker. Under ``OPTEVAL_VLLM_TIER=1`` (the script
sets it) a skipped test of this tier is reported as FAILED: a tier that silently skipped its real
engine would pass while proving nothing.
"""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TIER_ENV = "OPTEVAL_VLLM_TIER"
REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-cpu"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get(TIER_ENV) == "1" and rep.skipped and item.get_closest_marker("vllm") is not None:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"skipped in the vllm tier, which counts as a failure here: {reason}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(pred: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.fixture(scope="session")
def engine_importable() -> None:
    """ray.serve.llm with vLLM behind it; else skip (a failure in the tier) saying what to run."""
    try:
        import ray.serve.llm  # noqa: F401  (vLLM's protocol models come with it)
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"vLLM is not importable here ({exc}): run `bash .ci/vllm`, which makes its environment")


@pytest.fixture(scope="session")
def smollm2(engine_importable: None) -> Path:
    """The SmolLM2 directory, built once per machine (``opteval models build smollm2``)."""
    from opteval.evalcore.models import builds

    return builds.build("smollm2")


@pytest.fixture(scope="session")
def tier_ray(engine_importable: None) -> Iterator[tuple[str, int]]:
    """(gcs address, Serve's HTTP port) of the tier's local Ray: 6 logical CPUs on this 2-core
    machine (two apps' replica bundles and ingresses, and executors; the engine and the sandbox share
    the cores), Serve on a free port."""
    import ray

    from opteval.cluster.runtime import connect
    from opteval.cluster.serve.serving import ensure_serve

    os.environ["RAY_AUTH_MODE"] = "disabled"
    connect(None, num_cpus=6)
    port = free_port()
    ensure_serve(port)
    yield ray.get_runtime_context().gcs_address, port
    try:
        from ray import serve

        serve.shutdown()
    finally:
        ray.shutdown()


def serve_apps() -> list[str]:
    from ray import serve

    return sorted(serve.status().applications)


def engine_processes() -> list[str]:
    """Processes of a vLLM engine or an LLMServer replica on this machine (pid: command line)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if "EngineCore" in cmd or "LLMServer" in cmd:
            out.append(f"{proc.name}: {cmd[:120]}")
    return out
