"""Fixtures for the semopt tests: the real local sandbox and the embedded sample benchmark."""
from __future__ import annotations

import asyncio

import pytest

from evalcore.problems import load_benchmark


@pytest.fixture(scope="session")
def sample():
    """(problems by id, answer key) of the embedded sample benchmark."""
    specs, key = load_benchmark("sample")
    return {s.id: s for s in specs}, key


@pytest.fixture(scope="session")
def local_executor():
    from evalcore.sandbox import LocalExecutor

    ex = LocalExecutor()
    yield ex
    close = getattr(ex, "close", None)
    if close is not None:
        res = close()
        if asyncio.iscoroutine(res):
            asyncio.run(res)
