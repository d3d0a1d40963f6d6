"""Fixtures for the harness tests: the real local sandbox, the sample benchmark, a runner."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
from opteval.evalcore.models.base import Sampling


class CountingExecutor:
    """Wraps the real executor and counts sessions opened and closed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.opened = 0
        self.closed = 0
        self.restarted = 0

    async def run(self, code, limits=None):
        return await self.inner.run(code, limits)

    async def open_session(self):
        handle = await self.inner.open_session()
        self.opened += 1
        outer = self

        class _Handle:
            async def run_cell(self, code, limits=None):
                return await handle.run_cell(code, limits)

            async def restart(self):
                outer.restarted += 1
                await handle.restart()

            async def close(self):
                outer.closed += 1
                await handle.close()

        return _Handle()


@pytest.fixture
def executor(local_executor):
    return CountingExecutor(local_executor)


@pytest.fixture
def run_harness(executor) -> Callable[..., Any]:
    """run_harness(method, problem, model, sample=0, budgets=None, extraction=..., params=None) -> Trajectory (sync)."""

    def _run(method, problem, model, sample=0, budgets=None, extraction="submit", params=None):
        ctx = HarnessContext(
            model=model, executor=executor, sampling=Sampling(), sample=sample,
            budgets=budgets or Budgets(), model_name=model.name, method=method, extraction=extraction,
            params=params or {},
        )
        return asyncio.run(get_harness(method).run(problem, ctx))

    return _run


# harnesses that accept only their protocol's own extraction profile
OWN_EXTRACTION = {"llmopt": "llmopt"}


@pytest.fixture
def run_many(executor) -> Callable[..., Any]:
    """run_many([(method, problem, model, sample), ...], concurrency) -> list[Trajectory]."""

    def _run(items, concurrency=4, budgets=None):
        async def main():
            sem = asyncio.Semaphore(concurrency)

            async def one(method, problem, model, sample):
                async with sem:
                    ctx = HarnessContext(
                        model=model, executor=executor, sampling=Sampling(), sample=sample,
                        budgets=budgets or Budgets(), model_name=model.name, method=method,
                        extraction=OWN_EXTRACTION.get(method, "submit"),
                    )
                    return await get_harness(method).run(problem, ctx)

            return await asyncio.gather(*(one(*it) for it in items))

        return asyncio.run(main())

    return _run
