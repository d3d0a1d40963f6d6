"""Shared fixtures. Tests never write outside tmp dirs; Ray runs without token auth locally.

The nine public benchmarks are never part of a checkout. Tests that need them use
:func:`shared_benchmarks`, which looks in ``$OPTEVAL_DATA`` and then in CI's copy beside the
checkout (``SIBLING_BENCHMARKS``), and otherwise SKIPS with the command
that fetches them: a fresh clone with nothing beside it passes the suite.
"""
from __future__ import annotations

import asyncio
import os
import platform
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

REPO = Path(__file__).resolve().parents[1]
SIBLING_BENCHMARKS = REPO.parent / "shared" / "benchmarks"
SHARED_BENCHMARKS = SIBLING_BENCHMARKS  # kept for older imports
MARKER_FILE = "nl4opt.jsonl"  # present in any complete normalized data directory
HOW_TO_GET = ("public benchmark files not found ($OPTEVAL_DATA, or CI's copy beside the checkout): "
              "run `opteval data fetch all` (or set OPTEVAL_DATA to a directory holding them) to run this test")


# -- tiers by cost (docs/testing.md) ------------------------------------------------------------
# The README's test command runs the fast tier: no Ray, no Serve, no subprocess. A test that
# needs any of them is in the `integration` tier (.ci/run runs it right after): marked by hand,
# or here by the fixtures that start one. The guard below fails a fast-tier test that starts a
# subprocess (Ray and Serve start theirs too), so the fast tier stays what it claims.
INTEGRATION_FIXTURES = frozenset({
    "ray_cluster",       # tests/cluster: a local Ray with Serve
    "local_executor",    # the sandbox's fork server
    "executor", "run_harness", "run_many",  # tests/harnesses: harnesses over that fork server
    "server",            # tests/sandbox: a fork server per user kind
    "demo", "shared_demo",  # tests/view, tests/exports: a whole demo sweep (tests/demo_sweep.py)
    "tier_ray",          # tests/vllm
})


# every tier .ci/run runs after the fast one may start processes: that is what makes it slow
SLOW_TIERS = ("integration", "faults", "package", "loaded", "multinode", "vllm", "gpu")


# platform.processor() runs `uname -p` once per process (MLflow asks for it): ask now, before
# the guard, so whichever fast test first imports MLflow does not look like it starts a process
platform.processor()

INTEGRATION_LIST = Path(__file__).parent / "integration_tests.txt"


def _listed() -> frozenset[str]:
    """``<file under tests/>::<test function>`` lines of tests/integration_tests.txt."""
    lines = INTEGRATION_LIST.read_text().splitlines()
    return frozenset(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = _listed()
    for item in items:
        where = f"{Path(str(item.path)).relative_to(REPO / 'tests').as_posix()}::{getattr(item, 'originalname', item.name)}"
        if (where in listed or INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ()))
                or item.get_closest_marker("ray")):
            item.add_marker(pytest.mark.integration)


@contextmanager
def _no_subprocess(node: str) -> Iterator[None]:
    original = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen, args: object, *rest: object, **kw: object) -> None:
        pytest.fail(f"{node} starts a subprocess ({args!r:.120}): mark it `integration` (docs/testing.md)")

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]


def _guarded(item: pytest.Item) -> AbstractContextManager[None]:
    """The guard for a fast-tier item. It wraps the whole setup phase, so a module- or session-
    scoped fixture that starts a process is caught too: an autouse function fixture runs after
    those, and a fork server started there once hid it from every later test of the module (the
    order pytest-xdist deals the tests in then decided which test failed)."""
    if any(item.get_closest_marker(tier) for tier in SLOW_TIERS):
        return nullcontext()
    return _no_subprocess(item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        yield


def find_benchmarks() -> Path | None:
    """A normalized data directory holding the public benchmarks, or None."""
    env = os.environ.get("OPTEVAL_DATA")
    for cand in ([Path(env).expanduser()] if env else []) + [SIBLING_BENCHMARKS]:
        if (cand / MARKER_FILE).is_file() and (cand / "variants" / "sirl").is_dir():
            return cand
    return None


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """The normalized public benchmarks (read-only); skips with how to get them when absent."""
    found = find_benchmarks()
    if found is None:
        pytest.skip(HOW_TO_GET)
    return found


@pytest.fixture(scope="session")
def sample():
    """(problems by id, answer key) of the embedded sample benchmark."""
    from opteval.evalcore.problems import load_benchmark

    specs, key = load_benchmark("sample")
    return {s.id: s for s in specs}, key


@pytest.fixture(scope="session")
def local_executor():
    """One real local sandbox (warm fork server) for a test session's in-process harness runs."""
    from opteval.evalcore.sandbox import LocalExecutor

    ex = LocalExecutor()
    yield ex
    close = getattr(ex, "close", None)
    if close is not None:
        res = close()
        if asyncio.iscoroutine(res):
            asyncio.run(res)


@pytest.fixture(scope="session")
def shared_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real demo-shaped sweep for the whole session (tests/demo_sweep.py), its listeners sampled."""
    from tests.demo_sweep import run_demo

    return run_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture
def fake_server():
    """A started fake OpenAI-compatible server (tests/servers/openai_fake.py), stopped after the test."""
    from tests.servers.openai_fake import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def make_response():
    """``chat_response(content, usage, **extra)``: a chat completion body for a scripted step."""
    from tests.servers.openai_fake import chat_response

    return chat_response


@pytest.fixture
def configs_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``configs_with(files)``: a copy of the repository's configs plus ``files`` (relative path ->
    YAML text or data; tests/configs_with.py), made ``$OPTEVAL_CONFIGS`` for this test; ``use=False``
    only returns it (for a subprocess's env). The first is ``tmp_path/configs``, later ones
    ``tmp_path/configs-2``, ..."""
    from tests.configs_with import Files, write_configs

    made: list[Path] = []

    def make(files: Files | None = None, *, use: bool = True) -> Path:
        dest = write_configs(tmp_path / ("configs" if not made else f"configs-{len(made) + 1}"), files)
        made.append(dest)
        if use:
            monkeypatch.setenv("OPTEVAL_CONFIGS", str(dest))
        return dest

    return make
