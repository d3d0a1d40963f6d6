"""``LocalExecutor``: the async ``Executor`` protocol (harnesses/base.py) over an in-process ForkServer.

Harness tests and single-machine runs use this; on Ray the executor actors wrap the same
``ForkServer``. Blocking sandbox calls run in worker threads (``asyncio.to_thread``), which is
safe because every run has its own conversation with the server.
"""
from __future__ import annotations

import asyncio

from opteval.evalcore.sandbox import host
from opteval.evalcore.sandbox.host import ForkServer, Session, default_server
from opteval.evalcore.sandbox.types import ExecResult, Limits


class LocalSession:
    """Async handle on a :class:`Session` (implements ``harnesses.base.SessionHandle``)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def run_cell(self, code: str, limits: Limits | None = None) -> ExecResult:
        return await asyncio.to_thread(self._session.run_cell, code, limits)

    async def restart(self) -> None:
        await asyncio.to_thread(self._session.restart)

    async def close(self) -> None:
        await asyncio.to_thread(self._session.close)


class LocalExecutor:
    """In-process executor. ``server``: a ForkServer to use (default: the process-wide one)."""

    def __init__(self, server: ForkServer | None = None, limits: Limits | None = None) -> None:
        self._server = server
        self._limits = limits

    @property
    def server(self) -> ForkServer:
        if self._server is None:
            self._server = default_server()
        return self._server

    async def run(self, code: str, limits: Limits | None = None) -> ExecResult:
        return await asyncio.to_thread(self.server.run_program, code, limits or self._limits)

    async def open_session(self) -> LocalSession:
        session = await asyncio.to_thread(self.server.session, self._limits)
        return LocalSession(session)

    async def close(self) -> None:
        """Close the server if this executor owns a private one (never the process-wide default)."""
        if self._server is not None and self._server is not host._DEFAULT:
            await asyncio.to_thread(self._server.close)
