"""The fork server's event loop: takes jobs from the host, gives them children from the pool,
enforces wall and CPU limits, answers.

Why one single-threaded loop: the server forks (through the zygote) and steps in and out of
namespaces; threads would make both unsafe. Everything that waits (the host's sockets, the
children's pipes and channels, pidfds, the zygote) is one selector entry whose data is the
callback to run when it is readable.
"""
from __future__ import annotations

import math
import os
import select
import selectors
import socket
import time
from collections import deque
from typing import Any

from opteval.evalcore.sandbox.forkserver.isolation import NsFactory
from opteval.evalcore.sandbox.forkserver.job import Job
from opteval.evalcore.sandbox.forkserver.log import DEBUG, log
from opteval.evalcore.sandbox.forkserver.outcome import KillReason, Verdict, classify
from opteval.evalcore.sandbox.forkserver.pool import Pool, Slot, SlotState
from opteval.evalcore.sandbox.protocol import ChildMsg, Op, Reply, limits_from_dict, limits_to_dict, pack, split_frames
from opteval.evalcore.sandbox.types import ERROR, KILLED, Limits

CPU_WATCH_S = 0.25  # how often a running session cell's CPU time is checked
REPLY_TIMEOUT_S = 30.0  # a host that does not read its answer this long is dropped
SEND_TIMEOUT_S = 5.0  # a child that does not take its request this long is lost
MAX_LIMIT_WARNINGS = 20
REFILL_DEFER_S = 0.05  # longest a refill waits for the programs running to finish


class EventLoop:
    """Moves jobs along: queue -> a child from the pool -> request sent -> answered.

    It is the pool's listener (:class:`~opteval.evalcore.sandbox.forkserver.pool.PoolEvents`): a
    child's output and messages go to its job, a child's death becomes the job's answer, a
    retry on a fresh child, or the end of a session.
    """

    def __init__(self, ctl: socket.socket, factory: NsFactory | None, contained: bool, note: str,
                 proc_fd: int, death_w: int, pool_size: int, netns_per_run: bool, userns: bool = False) -> None:
        self.ctl = ctl
        self.contained = contained
        self.note = note
        self.death_w = death_w
        self.sel = selectors.DefaultSelector()
        self.sel.register(ctl, selectors.EVENT_READ, self._on_ctl)
        self.waiting: deque[Job] = deque()
        self.jobs: set[Job] = set()
        self.running = True
        self.limit_warnings: set[str] = set()
        self.refill_at = math.inf
        self.pool = Pool(self.sel, self, factory, contained, userns, netns_per_run, proc_fd, pool_size)

    def max_retries(self) -> int:
        return self.pool.size + 2

    # ------------------------------------------------------------ the host

    def _on_ctl(self) -> None:
        try:
            msg, fds, _, _ = socket.recv_fds(self.ctl, 64, 4)
        except (BlockingIOError, InterruptedError):
            return
        if not msg:
            self.running = False
            return
        for fd in fds:
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            job = Job(sock)
            self.jobs.add(job)
            self.sel.register(sock, selectors.EVENT_READ, lambda job=job: self._on_job(job))
            self._on_job(job)  # the host wrote a small first request before passing the socket

    def _on_job(self, job: Job) -> None:
        if job not in self.jobs:
            return
        try:
            data = job.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            job.kill(KillReason.CANCEL)
            self.drop(job)
            return
        job.rbuf += data
        try:
            reqs = split_frames(job.rbuf)
        except ValueError:
            self.drop(job)
            return
        for req in reqs:
            if isinstance(req, dict):
                job.queue(req)
                self.pump(job)

    def reply(self, job: Job, obj: dict[str, Any]) -> None:
        if "outcome" in obj:
            obj.setdefault("contained", self.contained)
            if not self.contained:
                obj["note"] = "; ".join(x for x in (obj.get("note", ""), self.note) if x)
        try:
            job.sock.settimeout(REPLY_TIMEOUT_S)
            job.sock.sendall(pack(obj))
            job.sock.setblocking(False)
        except OSError:
            self.drop(job)

    def drop(self, job: Job) -> None:
        """The conversation is over (answered, cancelled, broken): kill whatever it still holds."""
        if job not in self.jobs:
            return
        self.jobs.discard(job)
        if job in self.waiting:
            self.waiting.remove(job)
        try:
            self.sel.unregister(job.sock)
        except (KeyError, ValueError):
            pass
        job.sock.close()
        slot = job.slot
        if slot is not None and slot.state != SlotState.DEAD:
            self.pool.kill(slot)
            slot.job = None
            self.pool.close_if_gone(slot)

    # ------------------------------------------------------------ dispatch

    def attach(self, job: Job) -> bool:
        """Give ``job`` a prepared child, or queue it until one is ready."""
        slot = self.pool.take()
        if slot is None:
            if job not in self.waiting:
                self.waiting.append(job)
            return False
        slot.job = job
        job.slot = slot
        return True

    def pump(self, job: Job) -> None:
        """Start the job's next queued request if it can start now."""
        while job.pending and not job.active:
            req = job.pending[0]
            op = req.get("op")
            if job.session and job.dead:
                job.pending.popleft()
                if op == Op.CELL:
                    self.reply(job, {"outcome": KILLED, "note": job.dead_note or "session has ended"})
                continue
            if job.slot is None and not self.attach(job):
                return
            job.pending.popleft()
            try:
                limits = limits_from_dict(req.get("limits") or {})
            except (TypeError, ValueError) as exc:
                self.reply(job, {"outcome": ERROR, "note": f"bad limits: {exc}"})
                continue
            job.req, job.started = req, False
            if op == Op.OPEN:
                self.reply(job, {"t": Reply.OPENED, "contained": self.contained, "note": self.note})
            elif op in (Op.RUN, Op.CELL):
                self.start(job, Op(op), req.get("code", ""), limits)

    def start(self, job: Job, op: Op, code: str, limits: Limits) -> None:
        slot = job.slot
        assert slot is not None
        cell = job.begin(limits, self.pool.cpu_time(slot.p_pid) if job.session else 0.0)
        if DEBUG:
            log(f"dispatch {op} t={job.t0:.4f}")
        req = {"op": op, "code": code, "cell": cell, "limits": limits_to_dict(limits)}
        if not self._send(slot, req):
            if job.retries >= self.max_retries():  # else: the child died waiting; child_exited retries
                job.kill(KillReason.LOST)
            self.pool.kill(slot)

    @staticmethod
    def _send(slot: Slot, req: dict[str, Any]) -> bool:
        view = memoryview(pack(req))
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while view:
            try:
                n = os.write(slot.req_w, view)
                view = view[n:]
            except BlockingIOError:
                pass
            except OSError:
                return False
            if view:
                if time.monotonic() > deadline:
                    return False
                select.select([], [slot.req_w], [], 0.05)
        return True

    def serve_waiting(self) -> None:
        for _ in range(len(self.waiting)):  # bounded: a job that finds no usable child queues again
            if not self.waiting or not self.pool.any_usable():
                return
            self.pump(self.waiting.popleft())

    # ------------------------------------------------------------ answers

    def finish_run(self, job: Job, fast: bool = False) -> None:
        """Answer a one-shot run. ``fast``: the child reported its exit and waits to be killed
        (answer first, the kernel's teardown of its namespace is slow); else it is reaped."""
        slot = job.slot
        assert slot is not None
        self.pool.drain(slot, final=not fast, limit=fast)
        msg = job.exit_msg or {}
        cpu = float(msg.get("cpu") or 0.0) if fast else max(0.0, slot.p_cpu - job.cpu0)
        verdict = classify(job.limits, job.kill_reason, slot.p_status, msg.get("code"), msg.get("exc"), cpu)
        job.active = False
        self.reply(job, job.result(verdict, cpu))
        self.drop(job)

    def finish_cell(self, job: Job) -> None:
        slot = job.slot
        assert slot is not None
        self.pool.drain(slot, final=False)
        msg = job.exit_msg or {}
        verdict = classify(job.limits, job.kill_reason, None, msg.get("code"), msg.get("exc"))
        job.active = False
        self.reply(job, job.result(verdict, float(msg.get("cpu") or 0.0)))
        self.pump(job)

    def session_died(self, job: Job) -> None:
        """The session's interpreter is gone: its running cell (if any) and later cells are ``killed``."""
        slot = job.slot
        assert slot is not None
        job.dead = True
        if job.active:
            self.pool.drain(slot, final=True)
            cpu = max(0.0, slot.p_cpu - job.cpu0)
            msg = job.exit_msg or {}
            why = classify(job.limits, job.kill_reason, slot.p_status, msg.get("code"), msg.get("exc"), cpu)
            note = f"session ended: {why.reason}" if why.reason else "session ended"
            job.dead_note = f"session ended earlier ({why.reason or 'interpreter exited'}); restart it"
            job.active = False
            self.reply(job, job.result(Verdict(KILLED, why.exit_code, note), cpu, notes=False))
        else:
            job.dead_note = "session ended between cells (interpreter exited); restart it"
        self.pump(job)

    # ------------------------------------------------------------ PoolEvents

    def child_ready(self) -> None:
        self.serve_waiting()

    def child_output(self, slot: Slot, kind: str, data: bytes) -> None:
        job = slot.job
        if job is not None and job.add_output(kind, data):
            self.pool.kill(slot)

    def child_message(self, slot: Slot, msg: dict[str, Any]) -> None:
        job = slot.job
        if msg.get("t") == ChildMsg.LIMIT:
            self._warn_limit(str(msg.get("v")))
        if job is None or not job.on_message(msg):
            return
        if job.session:
            self.finish_cell(job)
            return
        # the child has killed every other process of its PID namespace and now waits for
        # us: answer first, then kill it and its init (the kernel's teardown is slow)
        if DEBUG:
            log(f"exit msg t={time.monotonic():.4f}")
        self.finish_run(job, fast=True)
        if DEBUG:
            log(f"replied t={time.monotonic():.4f}")

    def _warn_limit(self, text: str) -> None:
        """Log each distinct limit that did not apply (the result's note says it for every run)."""
        if text not in self.limit_warnings and len(self.limit_warnings) < MAX_LIMIT_WARNINGS:
            self.limit_warnings.add(text)
            log(f"a limit did not apply as asked: {text}")

    def child_exited(self, slot: Slot) -> None:
        job = slot.job
        if job is None:
            return
        if job.session and job.cell == 0 and not job.active and job.retries < self.max_retries():
            job.retries += 1  # opened, no cell yet: the next cell simply takes a fresh child
            job.detach()
            return
        if job.can_retry(self.max_retries()):
            if DEBUG:
                log("a prepared child died before its request; retrying on a fresh one")
            job.requeue()
            self.pump(job)
            return
        job.deadline = math.inf  # finished (or killed): no late timeout
        if job.session and not job.dead:
            self.session_died(job)

    def slot_gone(self, slot: Slot) -> None:
        job = slot.job
        if job is not None and job.kind == Op.RUN and job.active:
            self.finish_run(job)  # closes the slot through drop
        if slot.state != SlotState.DEAD:
            self.pool.drain(slot, final=True)
            self.pool.close(slot)
        self.serve_waiting()

    def pool_failing(self, reason: str) -> None:
        for job in list(self.waiting):
            self.reply(job, {"outcome": KILLED, "note": reason})
            self.drop(job)

    # ------------------------------------------------------------ the loop

    def check_deadlines(self) -> float:
        """Enforce wall limits (and, for session cells, CPU from outside); return the next wake-up."""
        now = time.monotonic()
        nearest = math.inf
        for job in list(self.jobs):
            if not job.active or job.slot is None or job.kill_reason:
                continue
            if now >= job.deadline:
                job.kill(KillReason.WALL)
                self.pool.kill(job.slot)
                continue
            nearest = min(nearest, job.deadline)
            if job.session:
                if self.pool.cpu_time(job.slot.p_pid) - job.cpu0 > job.limits.cpu_s + 1:
                    job.kill(KillReason.CPU)
                    self.pool.kill(job.slot)
                    continue
                nearest = min(nearest, now + CPU_WATCH_S)
        return nearest

    def refill_due(self) -> float:
        """When to ask for the next child: 0 now, ``math.inf`` not needed.

        While a program runs and another child is ready for the next request, the fork and
        preparation of a replacement would only compete with that program for the CPU (two
        cores here): it waits until no program runs, or ``REFILL_DEFER_S`` at most.
        """
        if not self.pool.needs_refill(len(self.waiting)):
            self.refill_at = math.inf
            return math.inf
        if self.waiting or not self.pool.any_usable() or not any(job.active for job in self.jobs):
            return 0.0
        if self.refill_at == math.inf:
            self.refill_at = time.monotonic() + REFILL_DEFER_S
        return max(0.0, self.refill_at - time.monotonic())

    def run(self) -> None:
        while self.running:
            nearest = self.check_deadlines()
            due = self.refill_due()
            needs_refill = due == 0.0
            if not needs_refill:
                nearest = min(nearest, time.monotonic() + due)
            timeout = None if nearest == math.inf else max(0.0, nearest - time.monotonic())
            events = self.sel.select(0 if needs_refill else timeout)
            if not events and needs_refill:
                self.refill_at = math.inf
                self.pool.refill(len(self.waiting))
                continue
            for key, _ in events:
                key.data()
                if not self.running:
                    return

    def shutdown(self) -> None:
        self.pool.shutdown(self.death_w)
