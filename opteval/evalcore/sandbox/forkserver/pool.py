"""The pool: children forked ahead of demand, refilled in the background, reaped when they die.

Why a pool: forking the warm interpreter into a fresh PID namespace and preparing it (mounts,
uid, descriptors) takes milliseconds, several times the cost of a small program. Children
made before a request arrives take that off the request's path; the zygote forks them on
the other core while the event loop keeps answering.

A :class:`Slot` is one prepared child and the init of its PID namespace. The pool owns the
slots' processes and descriptors; what a child *says* (its output, its messages) and what
its death means for a request belong to the job, so the pool hands those to its
:class:`PoolEvents` listener (the event loop).
"""
from __future__ import annotations

import json
import os
import select
import selectors
import shutil
import signal
import socket
from enum import StrEnum
from typing import Any, Protocol

from opteval.evalcore.sandbox.forkserver.isolation import NsFactory
from opteval.evalcore.sandbox.forkserver.log import DEBUG, log
from opteval.evalcore.sandbox.forkserver.zygote import Zygote
from opteval.evalcore.sandbox.protocol import ChildMsg, ZygoteMsg

MAX_FAILURES = 50  # children that failed to prepare in a row before waiting requests are refused


class SlotState(StrEnum):
    """Where a prepared child is in its life: only a ``ready`` one may be given a request."""

    PREP = "prep"  # forked, preparing
    READY = "ready"  # said ready: waiting for a request
    BUSY = "busy"  # given to a job
    DYING = "dying"  # died before any request (no longer part of the pool)
    DEAD = "dead"  # its process and init are gone, descriptors closed


def _exited(pidfd: int) -> bool:
    """Whether the process behind ``pidfd`` has exited (a pidfd polls readable then).

    Why: a prepared child killed while it waited (OOM killer, an operator) is reported by the
    zygote a moment later; a request arriving in between must not be given the corpse.
    """
    if pidfd < 0:
        return False
    try:
        return bool(select.select([pidfd], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Slot:
    """One prepared child (and, namespaced, the init of its PID namespace).

    Why both: the child is what runs the program, the init is what kills everything the
    program started (killing it ends the PID namespace); a slot is done only when both are gone.
    """

    def __init__(self) -> None:
        self.p_pid = 0  # the child
        self.p_fd = -1  # its pidfd
        self.z_pid = 0  # the init of its PID namespace (0 without namespaces)
        self.z_fd = -1
        self.req_w = -1  # request pipe (the child's fd 4)
        self.out_r = -1
        self.err_r = -1
        self.chan: socket.socket | None = None  # the child's private channel (its fd 3)
        self.workdir: str | None = None  # host temp dir (fallback mode only)
        self.state = SlotState.PREP
        self.p_status: int | None = None  # wait status, once the zygote reaped the child
        self.p_cpu = 0.0
        self.z_done = True  # the init is gone (or there is none)
        # the forkserver.job.Job this slot runs: held for the event loop, never used here (so this
        # module does not import job, which imports it)
        self.job: Any = None
        self.killed = False


class PoolEvents(Protocol):
    """What the pool tells the event loop."""

    def child_ready(self) -> None:
        """A prepared child is waiting: requests queued for one can go."""

    def child_output(self, slot: Slot, kind: str, data: bytes) -> None:
        """``kind`` "out" or "err": bytes a child wrote."""

    def child_message(self, slot: Slot, msg: dict[str, Any]) -> None:
        """A message on a child's private channel (anything but ``ready``)."""

    def child_exited(self, slot: Slot) -> None:
        """The child was reaped (``slot.p_status`` is set; its namespace is being killed)."""

    def slot_gone(self, slot: Slot) -> None:
        """The child and its init are both gone: the slot can be answered for and closed."""

    def pool_failing(self, reason: str) -> None:
        """Children keep failing to prepare: nothing waiting for one will get one."""


class Pool:
    """Keeps ``size`` children prepared (plus one per request waiting), through the zygote.

    Why: so a request finds a child already forked, namespaced and unprivileged, and pays only
    for its program; the pool also owns every child's death (reaping, killing, closing).
    """

    def __init__(self, sel: selectors.BaseSelector, events: PoolEvents, factory: NsFactory | None, contained: bool,
                 userns: bool, netns_per_run: bool, proc_fd: int, size: int) -> None:
        self.sel = sel
        self.events = events
        self.factory = factory
        self.contained = contained
        self.userns = userns
        self.netns_per_run = netns_per_run
        self.proc_fd = proc_fd  # /proc, to read a child's CPU time
        self.size = max(0, size)  # 0: no child waits; each request forks its own
        self.slots: list[Slot] = []
        self.by_pid: dict[int, Slot] = {}
        self.failures = 0
        self.mk_pending = 0
        self.zygote = self._start_zygote()

    # ------------------------------------------------------------ refill

    def _start_zygote(self) -> Zygote:
        zg = Zygote(self.factory, self.contained, self.netns_per_run, self.userns)
        self.sel.register(zg.sock, selectors.EVENT_READ, self._on_zygote)
        self.mk_pending = 0
        return zg

    def ready_count(self) -> int:
        return self.mk_pending + sum(1 for s in self.slots if s.state in (SlotState.PREP, SlotState.READY))

    def needs_refill(self, waiting: int) -> bool:
        """Whether to ask for another child: fewer than the pool plus one per waiting request
        are ready or on the way.

        Counting the waiting requests is what makes ``size=0`` fork on demand, and lets a burst
        larger than the pool start its forks at once instead of one pool's worth at a time.
        """
        return self.ready_count() < self.size + waiting and self.failures < MAX_FAILURES

    def refill(self, waiting: int) -> None:
        """Ask the zygote for one more prepared child (it arrives as a ``slot`` message).

        A child made ahead of demand warms up before it says ready; one that a waiting request
        will take at once does not (the warm-up would only delay that request, and under a
        steady stream of requests, when the pool runs dry, cost CPU the programs need).
        """
        try:
            self.zygote.request(warm=self.ready_count() >= waiting)
            self.mk_pending += 1
        except OSError as exc:
            self._failed(exc)

    def _on_zygote(self) -> None:
        try:
            msg, fds = self.zygote.recv()
        except (OSError, ValueError):
            msg, fds = None, []
        if msg is None:
            self._zygote_died()
            return
        t = msg.get("t")
        if t == ZygoteMsg.SLOT:
            self.mk_pending -= 1
            self._add(msg, fds)
        elif t == ZygoteMsg.REAPED:
            slot = self.by_pid.pop(int(msg["pid"]), None)
            if slot is not None:
                self._reaped(slot, int(msg["status"]), float(msg.get("cpu") or 0.0))
        elif t == ZygoteMsg.ERROR:
            self.mk_pending -= 1
            self._failed(msg.get("v"))

    def _zygote_died(self) -> None:
        """Its children died with it (parent-death signal): report them, then start a new zygote."""
        log("the zygote died; restarting it")
        try:
            self.sel.unregister(self.zygote.sock)
        except (KeyError, ValueError):
            pass
        self.zygote.close()
        for pid, slot in list(self.by_pid.items()):
            self.by_pid.pop(pid, None)
            self._reaped(slot, signal.SIGKILL, 0.0)
        self.failures += 1
        self.zygote = self._start_zygote()

    def _failed(self, exc: Any) -> None:
        self.failures += 1
        log(f"could not prepare a sandbox child: {exc}")
        if self.failures >= MAX_FAILURES:
            self.events.pool_failing(f"sandbox unavailable: {exc}")

    def _add(self, msg: dict[str, Any], fds: list[int]) -> None:
        slot = Slot()
        slot.req_w, slot.out_r, slot.err_r, chan = fds
        slot.chan = socket.socket(fileno=chan)
        slot.p_pid = int(msg["p"])
        slot.workdir = msg.get("workdir")
        try:
            slot.p_fd = os.pidfd_open(slot.p_pid)
        except OSError:
            slot.p_fd = -1
        if msg.get("z"):
            slot.z_pid = int(msg["z"])
            slot.z_fd = os.pidfd_open(slot.z_pid)
            slot.z_done = False
            self.sel.register(slot.z_fd, selectors.EVENT_READ, lambda: self._on_init_exit(slot))
        for fd in (slot.out_r, slot.err_r):
            os.set_blocking(fd, False)
        slot.chan.setblocking(False)
        self.sel.register(slot.out_r, selectors.EVENT_READ, lambda: self._on_pipe(slot, "out"))
        self.sel.register(slot.err_r, selectors.EVENT_READ, lambda: self._on_pipe(slot, "err"))
        self.sel.register(slot.chan, selectors.EVENT_READ, lambda: self.read_chan(slot))
        self.slots.append(slot)
        self.by_pid[slot.p_pid] = slot

    # ------------------------------------------------------------ taking and killing

    @staticmethod
    def usable(s: Slot) -> bool:
        return s.state == SlotState.READY and s.p_status is None and not s.killed and not _exited(s.p_fd)

    def any_usable(self) -> bool:
        return any(self.usable(s) for s in self.slots)

    def take(self) -> Slot | None:
        for s in self.slots:
            if self.usable(s):
                s.state = SlotState.BUSY
                return s
        return None

    def kill(self, slot: Slot) -> None:
        """Kill the child and its namespace's init (with it, every process of the run)."""
        if slot.killed:
            return
        slot.killed = True
        for pid, fd in ((slot.z_pid, slot.z_fd), (slot.p_pid, slot.p_fd)):
            if pid and fd >= 0:
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                except (ProcessLookupError, OSError):
                    pass
        if not self.contained and slot.p_pid:
            try:
                os.killpg(slot.p_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self, slot: Slot) -> None:
        slot.state = SlotState.DEAD
        self.by_pid.pop(slot.p_pid, None)
        for fd in (slot.p_fd, slot.z_fd, slot.out_r, slot.err_r, slot.req_w):
            if fd >= 0:
                try:
                    self.sel.unregister(fd)
                except (KeyError, ValueError):
                    pass
                os.close(fd)
        slot.p_fd = slot.z_fd = slot.out_r = slot.err_r = slot.req_w = -1
        if slot.chan is not None:
            try:
                self.sel.unregister(slot.chan)
            except (KeyError, ValueError):
                pass
            slot.chan.close()
            slot.chan = None
        if slot.workdir:
            shutil.rmtree(slot.workdir, ignore_errors=True)
        if slot in self.slots:
            self.slots.remove(slot)

    def close_if_gone(self, slot: Slot) -> None:
        if slot.p_status is not None and slot.z_done:
            self.close(slot)

    def cpu_time(self, pid: int) -> float:
        """CPU seconds ``pid`` has used so far (``/proc/<pid>/stat``; 0.0 if it is gone)."""
        try:
            fd = os.open(f"{pid}/stat", os.O_RDONLY, dir_fd=self.proc_fd)
            try:
                data = os.read(fd, 4096).decode()
            finally:
                os.close(fd)
            fields = data[data.rindex(")") + 2:].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    # ------------------------------------------------------------ what children write

    def _on_pipe(self, slot: Slot, kind: str) -> None:
        if slot.state == SlotState.DEAD:
            return
        fd = slot.out_r if kind == "out" else slot.err_r
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return  # already drained by a finish earlier in this batch: not EOF
        except OSError:
            data = b""
        if data:
            self.events.child_output(slot, kind, data)
            return
        self.sel.unregister(fd)
        os.close(fd)
        if kind == "out":
            slot.out_r = -1
        else:
            slot.err_r = -1

    def drain(self, slot: Slot, final: bool, limit: bool = False) -> None:
        """Read what the child has written so far (``limit``: a bounded amount, the writer may live on)."""
        for fd, kind in ((slot.out_r, "out"), (slot.err_r, "err")):
            for _ in range(64 if limit else 1 << 30):  # a live writer could keep a pipe full forever
                if fd < 0:
                    break
                try:
                    data = os.read(fd, 65536)
                except OSError:  # BlockingIOError included: nothing more for now
                    break
                if not data:
                    break
                self.events.child_output(slot, kind, data)
                if slot.killed and not final:
                    break
        self.read_chan(slot)

    def read_chan(self, slot: Slot) -> None:
        while slot.chan is not None and slot.state != SlotState.DEAD:
            try:
                data = slot.chan.recv(65536)
            except OSError:  # BlockingIOError included
                return
            if not data:
                return
            try:
                msg = json.loads(data)
                t = msg.get("t")
            except (ValueError, AttributeError):
                continue
            if t == ChildMsg.READY:
                if DEBUG:
                    log(f"child ready, prepared in {msg.get('prep_ms')} ms")
                if slot.state == SlotState.PREP:
                    slot.state = SlotState.READY
                    self.failures = 0
                    self.events.child_ready()
            else:
                self.events.child_message(slot, msg)

    # ------------------------------------------------------------ deaths

    def _reaped(self, slot: Slot, status: int, cpu: float) -> None:
        if DEBUG:
            log("child reaped")
        slot.p_status = status
        slot.p_cpu = cpu
        if slot.p_fd >= 0:
            os.close(slot.p_fd)
            slot.p_fd = -1
        self.kill(slot)  # the init: the rest of the run's processes go with it
        if slot.state == SlotState.PREP:
            self.failures += 1
            self.drain(slot, final=False)
            if self.failures in (1, 10):
                log(f"a sandbox child failed while preparing (status {status})")
        if slot.state in (SlotState.PREP, SlotState.READY):
            slot.state = SlotState.DYING  # gone before any request: not part of the pool any more
        self.events.child_exited(slot)
        self._maybe_gone(slot)

    def _on_init_exit(self, slot: Slot) -> None:
        if slot.z_fd < 0:
            return
        if DEBUG:
            log("init exited")
        try:
            os.waitpid(slot.z_pid, os.WNOHANG)
        except ChildProcessError:
            pass
        self.sel.unregister(slot.z_fd)
        os.close(slot.z_fd)
        slot.z_fd = -1
        slot.z_done = True
        if slot.p_status is None:
            self.kill(slot)
        self._maybe_gone(slot)

    def _maybe_gone(self, slot: Slot) -> None:
        if slot.p_status is not None and slot.z_done:
            self.events.slot_gone(slot)

    def shutdown(self, death_w: int) -> None:
        """Kill every child; ``death_w`` closed: any init still alive exits on EOF."""
        for slot in list(self.slots):
            self.kill(slot)
        self.zygote.close()  # its children die with it (parent-death signal)
        os.close(death_w)
        for slot in list(self.slots):
            if slot.z_pid:
                try:
                    os.waitpid(slot.z_pid, 0)
                except ChildProcessError:
                    pass
            if slot.workdir:
                shutil.rmtree(slot.workdir, ignore_errors=True)
