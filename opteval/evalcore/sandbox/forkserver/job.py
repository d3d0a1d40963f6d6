"""A job: one conversation with the host, a one-shot run or a session (a series of cells).

Why a class of its own: a request outlives any one child (it may wait for one, be retried
on a fresh one when its child died before reading it, or, in a session, go on through many
cells), and what it accumulates (output up to its cap, the submission, captured models,
notes, the server's own kill reason) is what its answer is made of. The job holds that state
and its transitions, with no I/O; the event loop moves it along.

Lifecycle of a run: queued (no ready child) -> active (request sent; wall deadline set) ->
answered (the child's exit message, its death, or a kill by the server). A session: opened
(a child taken) -> per cell idle -> active -> idle on ``cell_done``, or dead when its
interpreter dies (that cell and every later one are ``killed``).
"""
from __future__ import annotations

import math
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from opteval.evalcore.sandbox.forkserver.outcome import KillReason, Verdict
from opteval.evalcore.sandbox.protocol import ChildMsg, Op
from opteval.evalcore.sandbox.types import Limits

if TYPE_CHECKING:
    from opteval.evalcore.sandbox.forkserver.pool import Slot

MAX_CHAN_MESSAGES = 10_000  # per run or cell; later ones are ignored
MAX_MODELS = 200
MAX_NOTES = 20


class Job:
    """One host conversation: a one-shot run or a session (a series of cells).

    Why: the request and what its program produced must outlive the child that ran it (a
    retry on a fresh child, a session's next cell), and be answered exactly once.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rbuf = bytearray()
        self.kind: Op | None = None  # Op.RUN or Op.OPEN (a session)
        self.slot: Slot | None = None
        self.limits = Limits()
        self.active = False  # a program or cell is executing
        self.dead = False  # session: its interpreter is gone
        self.dead_note = ""
        self.cell = 0
        self.t0 = 0.0
        self.deadline = math.inf
        self.cpu0 = 0.0
        self.pending: deque[dict[str, Any]] = deque()
        self.req: dict[str, Any] | None = None  # the request now executing (to retry it on a fresh child)
        self.started = False  # the child has read that request: from then on a death is the program's
        self.retries = 0
        self.reset_cell()

    @property
    def session(self) -> bool:
        return self.kind == Op.OPEN

    def reset_cell(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.truncated = False
        self.submission: Any = None
        self.models: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.exit_msg: dict[str, Any] | None = None
        self.kill_reason: KillReason | None = None
        self.n_msgs = 0

    # ------------------------------------------------------------ requests

    def queue(self, req: dict[str, Any]) -> None:
        op = req.get("op")
        if op == Op.RUN:
            self.kind = Op.RUN
        elif op == Op.OPEN:
            self.kind = Op.OPEN
        elif op != Op.CELL:
            return
        self.pending.append(req)

    def begin(self, limits: Limits, cpu0: float) -> int:
        """A run or cell starts now; returns the cell number."""
        self.reset_cell()
        self.limits = limits
        self.cpu0 = cpu0
        self.t0 = time.monotonic()
        self.deadline = self.t0 + limits.wall_s
        self.active = True
        self.cell += 1
        return self.cell

    def kill(self, reason: KillReason) -> bool:
        """Record why the server kills this run or cell; False if a reason was already set."""
        if self.kill_reason:
            return False
        self.kill_reason = reason
        return True

    def can_retry(self, max_retries: int) -> bool:
        """Whether the request now executing may go to a fresh child (its own died before reading it).

        Why: a prepared child can be killed while it waits (OOM killer, an operator), and the
        server may hand it a request before that death is reported. No code of the program ran,
        so it is retried (a bounded number of times) rather than reported as the program's
        failure. A session retries only its first cell: later ones depend on the lost globals.
        """
        return (self.active and not self.started and not self.kill_reason and self.retries < max_retries
                and self.req is not None and not (self.session and self.cell > 1))

    def requeue(self) -> None:
        """Put the request back at the head of the queue for a fresh child (see :meth:`can_retry`)."""
        assert self.req is not None
        self.retries += 1
        self.active = False
        self.deadline = math.inf
        self.cell -= 1
        self.pending.appendleft(self.req)
        self.req = None
        self.detach()

    def detach(self) -> None:
        if self.slot is not None:
            self.slot.job = None
        self.slot = None

    # ------------------------------------------------------------ what the child says

    def add_output(self, kind: str, data: bytes) -> bool:
        """Capture stdout ("out") or stderr ("err") up to ``output_bytes`` in all; True when this
        chunk crossed the cap (the caller kills the run)."""
        if not self.active:
            return False
        room = int(self.limits.output_bytes) - len(self.out) - len(self.err)
        buf = self.out if kind == "out" else self.err
        if len(data) <= room:
            buf += data
            return False
        buf += data[:max(room, 0)]
        self.truncated = True
        return self.kill(KillReason.OUTPUT)

    def on_message(self, msg: dict[str, Any]) -> bool:
        """Record a message from the child; True when the run or cell has finished (answer it)."""
        if not self.active:
            return False
        t = msg.get("t")
        if t == ChildMsg.STARTED:
            self.started = True
            return False
        self.n_msgs += 1
        if self.n_msgs > MAX_CHAN_MESSAGES:
            return False
        if t == ChildMsg.SUBMIT:
            self.submission = msg.get("v")
        elif t == ChildMsg.MODEL and isinstance(msg.get("v"), dict):
            if len(self.models) < MAX_MODELS:
                self.models.append(msg["v"])
        elif t in (ChildMsg.NOTE, ChildMsg.LIMIT):
            if len(self.notes) < MAX_NOTES:
                self.notes.append(str(msg.get("v"))[:500])
        elif t == ChildMsg.EXITED and self.kind == Op.RUN and not self.kill_reason:
            self.exit_msg = msg
            return True
        elif t == ChildMsg.CELL_DONE and self.session and not self.kill_reason:
            self.exit_msg = msg
            return True
        return False

    # ------------------------------------------------------------ the answer

    def result(self, verdict: Verdict, cpu_s: float, notes: bool = True) -> dict[str, Any]:
        """The ExecResult dict for the run or cell that just ended (``notes``: append what the child noted)."""
        cap = int(self.limits.output_bytes)
        return {
            "outcome": verdict.outcome,
            "exit_code": verdict.exit_code,
            "stdout": self.out[:cap].decode("utf-8", "replace"),
            "stderr": self.err[:max(0, cap - len(self.out))].decode("utf-8", "replace"),
            "wall_s": round(time.monotonic() - self.t0, 6),
            "cpu_s": round(cpu_s, 6),
            "submission": self.submission,
            "models": self.models,
            "truncated": self.truncated,
            "note": "; ".join([verdict.reason, *self.notes]).strip("; ") if notes else verdict.reason,
        }
