"""The fork-server process: warm imports, a private root, a pool of prepared children, one event loop.

Run as ``python -m evalcore.sandbox._server --ctl-fd N`` by :class:`evalcore.sandbox.ForkServer`.

Process tree (namespaced mode; without root the same tree sits inside a user namespace and a
PID namespace of its own, under a small shim that stays outside, see
``_root.enter_user_namespace``)::

    fork server (this: single-threaded event loop; own mount, network and IPC namespaces,
    │             pivoted into a read-only root holding only the Python installation, /usr,
    │             a few /etc files and /dev/{null,zero,full,random,urandom})
    ├── ns factory (small: forked before the heavy imports; keeps a stock of fresh PID
    │   │           namespaces, each with a tiny init that only reaps orphans)
    │   └── init (pid 1 of one run's PID namespace)
    └── zygote (a fork of the warm server that forks prepared children *into* those
        │       namespaces with setns, so each child is a copy-on-write warm interpreter)
        └── child (pid 2 of its namespace: private /proc, /tmp, /dev/shm and /sandbox
                   on tmpfs, a throwaway uid (without root: a nested user namespace),
                   scrubbed environment; runs one program or one session's cells)

Killing a run's init kills every process the program started (children, setsid
grandchildren, PuLP's CBC); a child that finishes normally kills its namespace itself
(``kill(-1)``) before reporting, so the server can answer before the kernel's teardown.

Why this shape: forking the warm interpreter costs ~3 ms on an idle 2-core VM (10+ ms under
load) and blocks the forking process, so the zygote does it off the event loop, ahead of
demand; PID namespaces come from a small process where a fork is cheap. Mount and network
namespaces that never change (the read-only root, no network at all) are made once per
server; each child adds its own mount namespace for its private tmpfs mounts.

Without namespaces (``OPTEVAL_SANDBOX_NAMESPACES=0``, or no root and no user namespaces with
uncontained runs explicitly allowed; otherwise the host refuses to start) each child is a
process-group leader in a host temp directory, runs are killed by process group, and every
result says ``contained=False`` with a note.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import select
import selectors
import shutil
import signal
import socket
import tempfile
import time
import traceback
from collections import deque
from typing import Any

from evalcore.sandbox import _ns
from evalcore.sandbox._log import DEBUG, log
from evalcore.sandbox._proto import limits_from_dict, limits_to_dict, pack, split_frames
from evalcore.sandbox._root import HEAVY_MODULES, NsFactory, build_root, enter_user_namespace
from evalcore.sandbox._zygote import Zygote
from evalcore.sandbox.types import ERROR, KILLED, MEMORY, OK, OUTPUT_LIMIT, TIMEOUT, Limits

MAX_CHAN_MESSAGES = 10_000
CPU_WATCH_S = 0.25  # how often a running session cell's CPU time is checked


# ====================================================================== slots and jobs


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
    """One prepared child (and, namespaced, the init of its PID namespace)."""

    def __init__(self) -> None:
        self.p_pid = 0
        self.p_fd = -1
        self.z_pid = 0
        self.z_fd = -1
        self.req_w = -1
        self.out_r = -1
        self.err_r = -1
        self.chan: socket.socket | None = None
        self.workdir: str | None = None  # host temp dir (fallback mode only)
        self.state = "prep"  # prep -> ready -> busy -> dead (prep/ready -> dying -> dead: died unused)
        self.p_status: int | None = None
        self.p_cpu = 0.0
        self.z_done = True
        self.job: Job | None = None
        self.killed = False


class Job:
    """One host conversation: a one-shot run or a session (a series of cells)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rbuf = bytearray()
        self.kind = ""  # "run" | "session"
        self.slot: Slot | None = None
        self.limits = Limits()
        self.active = False  # a program or cell is executing
        self.dead = False  # session: its interpreter is gone
        self.dead_note = ""
        self.cell = 0
        self.t0 = 0.0
        self.deadline = math.inf
        self.cpu0 = 0.0
        self.kill_reason = ""
        self.pending: deque[dict[str, Any]] = deque()
        self.req: dict[str, Any] | None = None  # the request now executing (to retry it, see on_p_exit)
        self.started = False  # the child has read that request ("start"): from then on it is the program's
        self.retries = 0
        self.reset_cell()

    def reset_cell(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.truncated = False
        self.submission: Any = None
        self.models: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.exit_msg: dict[str, Any] | None = None
        self.kill_reason = ""
        self.n_msgs = 0


class Server:
    def __init__(self, ctl: socket.socket, factory: NsFactory | None, contained: bool, note: str,
                 proc_fd: int, death_w: int, pool_size: int, netns_per_run: bool, userns: bool = False) -> None:
        self.ctl = ctl
        self.factory = factory
        self.contained = contained
        self.userns = userns
        self.note = note
        self.proc_fd = proc_fd
        self.death_w = death_w
        self.pool_size = max(0, pool_size)  # 0: no child waits; each request forks its own
        self.netns_per_run = netns_per_run
        self.sel = selectors.DefaultSelector()
        self.sel.register(ctl, selectors.EVENT_READ, ("ctl", None))
        self.slots: list[Slot] = []
        self.waiting: deque[Job] = deque()
        self.jobs: set[Job] = set()
        self.failures = 0
        self.mk_pending = 0
        self.by_pid: dict[int, Slot] = {}
        self.zygote = self.start_zygote()

    def start_zygote(self) -> Zygote:
        zg = Zygote(self.factory, self.contained, self.netns_per_run, self.userns)
        self.sel.register(zg.sock, selectors.EVENT_READ, ("zygote", None))
        self.mk_pending = 0
        return zg

    # ------------------------------------------------------------ slots

    def ready_count(self) -> int:
        return self.mk_pending + sum(1 for s in self.slots if s.state in ("prep", "ready"))

    def wanted(self) -> int:
        """Children to have ready or on the way: the pool, plus one per request waiting for one.

        Counting the waiting requests is what makes ``pool_size=0`` fork on demand, and lets a
        burst larger than the pool start its forks at once instead of one pool's worth at a time.
        """
        return self.pool_size + len(self.waiting)

    def refill(self) -> None:
        """Ask the zygote for one more prepared child (it arrives as a "slot" message)."""
        self.zygote.request()
        self.mk_pending += 1

    def on_zygote(self) -> None:
        try:
            msg, fds = self.zygote.recv()
        except (OSError, ValueError):
            msg, fds = None, []
        if msg is None:
            self.zygote_died()
            return
        t = msg.get("t")
        if t == "slot":
            self.mk_pending -= 1
            self.add_slot(msg, fds)
        elif t == "exit":
            slot = self.by_pid.pop(int(msg["pid"]), None)
            if slot is not None:
                self.on_p_exit(slot, int(msg["status"]), float(msg.get("cpu") or 0.0))
        elif t == "error":
            self.mk_pending -= 1
            self.slot_failed(msg.get("v"))

    def zygote_died(self) -> None:
        """Its children died with it (parent-death signal): report them, then start a new zygote."""
        log("the zygote died; restarting it")
        try:
            self.sel.unregister(self.zygote.sock)
        except (KeyError, ValueError):
            pass
        self.zygote.close()
        for pid, slot in list(self.by_pid.items()):
            self.by_pid.pop(pid, None)
            self.on_p_exit(slot, signal.SIGKILL, 0.0)
        self.failures += 1
        self.zygote = self.start_zygote()

    def slot_failed(self, exc: Any) -> None:
        self.failures += 1
        log(f"could not prepare a sandbox child: {exc}")
        if self.failures >= 50:
            for job in list(self.waiting):
                self.reply(job, {"outcome": KILLED, "note": f"sandbox unavailable: {exc}"})
                self.drop_job(job)

    def add_slot(self, msg: dict[str, Any], fds: list[int]) -> None:
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
            self.sel.register(slot.z_fd, selectors.EVENT_READ, ("z_exit", slot))
        for fd in (slot.out_r, slot.err_r):
            os.set_blocking(fd, False)
        slot.chan.setblocking(False)
        self.sel.register(slot.out_r, selectors.EVENT_READ, ("out", slot))
        self.sel.register(slot.err_r, selectors.EVENT_READ, ("err", slot))
        self.sel.register(slot.chan, selectors.EVENT_READ, ("chan", slot))
        self.slots.append(slot)
        self.by_pid[slot.p_pid] = slot

    @staticmethod
    def usable(s: Slot) -> bool:
        return s.state == "ready" and s.p_status is None and not s.killed and not _exited(s.p_fd)

    def take_slot(self) -> Slot | None:
        for s in self.slots:
            if self.usable(s):
                s.state = "busy"
                return s
        return None

    def kill_slot(self, slot: Slot) -> None:
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

    def close_slot(self, slot: Slot) -> None:
        slot.state = "dead"
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

    def cpu_time(self, pid: int) -> float:
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

    # ------------------------------------------------------------ dispatch

    def send_req(self, slot: Slot, req: dict[str, Any]) -> bool:
        data = pack(req)
        deadline = time.monotonic() + 5.0
        view = memoryview(data)
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

    def start_exec(self, job: Job, op: str, code: str, limits: Limits) -> None:
        slot = job.slot
        assert slot is not None
        job.reset_cell()
        job.limits = limits
        job.cpu0 = self.cpu_time(slot.p_pid) if job.kind == "session" else 0.0
        job.t0 = time.monotonic()
        job.deadline = job.t0 + limits.wall_s
        job.active = True
        job.cell += 1
        if DEBUG:
            log(f"dispatch {op} t={job.t0:.4f}")
        req = {"op": op, "code": code, "cell": job.cell, "limits": limits_to_dict(limits)}
        if not self.send_req(slot, req):
            if job.retries >= self.max_retries():  # else: the child died waiting; on_p_exit retries on a fresh one
                job.kill_reason = job.kill_reason or "lost"
            self.kill_slot(slot)

    def attach(self, job: Job) -> bool:
        """Give ``job`` a prepared child, or queue it until one is ready."""
        slot = self.take_slot()
        if slot is None:
            if job not in self.waiting:
                self.waiting.append(job)
            return False
        slot.job = job
        job.slot = slot
        return True

    def handle_request(self, job: Job, req: dict[str, Any]) -> None:
        op = req.get("op")
        if op == "run":
            job.kind = "run"
            job.pending.append(req)
        elif op == "open":
            job.kind = "session"
            job.pending.append(req)
        elif op == "cell":
            job.pending.append(req)
        self.pump(job)

    def pump(self, job: Job) -> None:
        """Start the job's next queued request if it can start now."""
        while job.pending and not job.active:
            req = job.pending[0]
            op = req.get("op")
            if job.kind == "session" and job.dead:
                job.pending.popleft()
                if op == "cell":
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
            if op == "run":
                self.start_exec(job, "run", req.get("code", ""), limits)
            elif op == "open":
                self.reply(job, {"t": "opened", "contained": self.contained, "note": self.note})
            elif op == "cell":
                self.start_exec(job, "cell", req.get("code", ""), limits)

    # ------------------------------------------------------------ results

    def reply(self, job: Job, obj: dict[str, Any]) -> None:
        if "outcome" in obj:
            obj.setdefault("contained", self.contained)
            if not self.contained:
                obj["note"] = "; ".join(x for x in (obj.get("note", ""), self.note) if x)
        try:
            job.sock.settimeout(30)
            job.sock.sendall(pack(obj))
            job.sock.setblocking(False)
        except OSError:
            self.drop_job(job)

    def drain(self, slot: Slot, final: bool, limit: bool = False) -> None:
        for fd, kind in ((slot.out_r, "out"), (slot.err_r, "err")):
            for _ in range(64 if limit else 1 << 30):  # a live writer could keep a pipe full forever
                if fd < 0:
                    break
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                if not data:
                    break
                self.on_output(slot, kind, data)
                if slot.killed and not final:
                    break
        self.read_chan(slot)

    def on_output(self, slot: Slot, kind: str, data: bytes) -> None:
        job = slot.job
        if job is None or not job.active:
            return
        cap = int(job.limits.output_bytes)
        room = cap - len(job.out) - len(job.err)
        buf = job.out if kind == "out" else job.err
        if len(data) > room:
            buf += data[:max(room, 0)]
            job.truncated = True
            if not job.kill_reason:
                job.kill_reason = "output"
                self.kill_slot(slot)
        else:
            buf += data

    def read_chan(self, slot: Slot) -> None:
        while slot.chan is not None:
            try:
                data = slot.chan.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not data:
                return
            self.on_message(slot, data)

    def on_message(self, slot: Slot, data: bytes) -> None:
        job = slot.job
        try:
            msg = json.loads(data)
            t = msg.get("t")
        except (ValueError, AttributeError):
            return
        if t == "ready":
            if DEBUG:
                log(f"child ready, prepared in {msg.get('prep_ms')} ms")
            if slot.state == "prep":
                slot.state = "ready"
                self.failures = 0
                self.serve_waiting()
            return
        if job is None or not job.active:
            return
        if t == "start":
            job.started = True
            return
        job.n_msgs += 1
        if job.n_msgs > MAX_CHAN_MESSAGES:
            return
        if t == "submit":
            job.submission = msg.get("v")
        elif t == "model" and isinstance(msg.get("v"), dict):
            if len(job.models) < 200:
                job.models.append(msg["v"])
        elif t == "note":
            if len(job.notes) < 20:
                job.notes.append(str(msg.get("v"))[:500])
        elif t == "exit" and job.kind == "run" and not job.kill_reason:
            job.exit_msg = msg
            # the child has killed every other process of its PID namespace and now waits for
            # us: answer first, then kill it and its init (the kernel's teardown is slow)
            if DEBUG:
                log(f"exit msg t={time.monotonic():.4f}")
            self.finish_run(job, fast=True)
            if DEBUG:
                log(f"replied t={time.monotonic():.4f}")
        elif t == "cell_done" and job.kind == "session" and not job.kill_reason:
            job.exit_msg = msg
            self.finish_cell(job)

    def base_result(self, job: Job) -> dict[str, Any]:
        cap = int(job.limits.output_bytes)
        return {
            "stdout": job.out[:cap].decode("utf-8", "replace"),
            "stderr": job.err[:max(0, cap - len(job.out))].decode("utf-8", "replace"),
            "wall_s": round(time.monotonic() - job.t0, 6),
            "submission": job.submission,
            "models": job.models,
            "truncated": job.truncated,
        }

    def classify(self, job: Job, status: int | None, cpu: float) -> tuple[str, int | None, str]:
        lim = job.limits
        msg = job.exit_msg or {}
        if job.kill_reason == "timeout":
            return TIMEOUT, None, f"wall time limit of {lim.wall_s:g}s exceeded; killed"
        if job.kill_reason == "cpu":
            return TIMEOUT, None, f"CPU time limit of {lim.cpu_s:g}s exceeded; killed"
        if job.kill_reason == "output":
            return OUTPUT_LIMIT, None, f"output exceeded {int(lim.output_bytes)} bytes; truncated and killed"
        if job.kill_reason in ("lost", "cancel"):
            return KILLED, None, "the sandbox could not deliver the program"
        if status is not None and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= lim.cpu_s):
                return TIMEOUT, -sig, f"CPU time limit of {lim.cpu_s:g}s exceeded ({name})"
            if sig == signal.SIGXFSZ:
                return ERROR, -sig, f"file size limit of {lim.file_mb:g} MB exceeded ({name})"
            return ERROR, -sig, f"killed by signal {name}"
        code = msg.get("code") if msg else None
        if code is None and status is not None and os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
        if msg.get("exc") == "MemoryError":
            return MEMORY, code, f"MemoryError under the address-space limit of {lim.memory_mb} MB"
        if code == 0:
            return OK, 0, ""
        return ERROR, code, ("raised " + msg["exc"]) if msg.get("exc") else f"exited with status {code}"

    def finish_run(self, job: Job, fast: bool = False) -> None:
        slot = job.slot
        assert slot is not None
        self.drain(slot, final=not fast, limit=fast)
        if fast:
            cpu = float((job.exit_msg or {}).get("cpu") or 0.0)
        else:
            cpu = max(0.0, slot.p_cpu - job.cpu0)
        outcome, code, note = self.classify(job, slot.p_status, cpu)
        res = self.base_result(job)
        res.update(outcome=outcome, exit_code=code, cpu_s=round(cpu, 6),
                   note="; ".join([note, *job.notes]).strip("; "))
        job.active = False
        self.reply(job, res)
        self.drop_job(job)

    def finish_cell(self, job: Job) -> None:
        slot = job.slot
        assert slot is not None
        self.drain(slot, final=False)
        msg = job.exit_msg or {}
        outcome, code, note = self.classify(job, None, 0.0)
        res = self.base_result(job)
        res.update(outcome=outcome, exit_code=code, cpu_s=round(float(msg.get("cpu") or 0.0), 6),
                   note="; ".join([note, *job.notes]).strip("; "))
        job.active = False
        self.reply(job, res)
        self.pump(job)

    def max_retries(self) -> int:
        return self.pool_size + 2

    def retry(self, job: Job, slot: Slot) -> bool:
        """Give the request to a fresh child when this one died before reading it.

        Why: a prepared child can be killed while it waits (OOM killer, an operator), and the
        server may hand it a request before that death is reported. No code of the program
        ran, so it is retried (at most once per pooled child, plus two) rather than reported
        as the program's failure.
        A session retries only its first cell: later ones depend on the lost globals.
        """
        if job.kind == "session" and job.cell == 0 and not job.active and job.retries < self.max_retries():
            job.retries += 1  # opened, no cell yet: the next cell simply takes a fresh child
            slot.job = None
            job.slot = None
            return True
        if (not job.active or job.started or job.kill_reason or job.retries >= self.max_retries() or job.req is None
                or (job.kind == "session" and job.cell > 1)):
            return False
        if DEBUG:
            log("a prepared child died before its request; retrying on a fresh one")
        job.retries += 1
        job.active = False
        job.deadline = math.inf
        job.cell -= 1
        job.pending.appendleft(job.req)
        job.req = None
        slot.job = None
        job.slot = None
        self.pump(job)
        return True

    def session_died(self, job: Job) -> None:
        """The session's interpreter is gone: its running cell (if any) and later cells are ``killed``."""
        slot = job.slot
        assert slot is not None
        job.dead = True
        if job.active:
            self.drain(slot, final=True)
            cpu = max(0.0, slot.p_cpu - job.cpu0)
            _, code, why = self.classify(job, slot.p_status, cpu)
            res = self.base_result(job)
            note = f"session ended: {why}" if why else "session ended"
            res.update(outcome=KILLED, exit_code=code, cpu_s=round(cpu, 6), note=note)
            job.dead_note = f"session ended earlier ({why or 'interpreter exited'}); restart it"
            job.active = False
            self.reply(job, res)
        else:
            job.dead_note = "session ended between cells (interpreter exited); restart it"
        self.pump(job)

    def drop_job(self, job: Job) -> None:
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
        if slot is not None and slot.state != "dead":
            self.kill_slot(slot)
            slot.job = None
            self.maybe_close(slot)

    def maybe_close(self, slot: Slot) -> None:
        if slot.p_status is not None and slot.z_done:
            self.close_slot(slot)

    def serve_waiting(self) -> None:
        for _ in range(len(self.waiting)):  # bounded: a job that finds no usable child queues again
            if not self.waiting or not any(self.usable(s) for s in self.slots):
                return
            self.pump(self.waiting.popleft())

    # ------------------------------------------------------------ events

    def on_p_exit(self, slot: Slot, status: int, cpu: float) -> None:
        if DEBUG:
            log(f"p_exit t={time.monotonic():.4f}")
        slot.p_status = status
        slot.p_cpu = cpu
        if slot.p_fd >= 0:
            os.close(slot.p_fd)
            slot.p_fd = -1
        self.kill_slot(slot)  # the init: the rest of the run's processes go with it
        job = slot.job
        if job is not None and self.retry(job, slot):
            job = None
        if job is not None:
            job.deadline = math.inf  # finished (or killed): no late timeout
        if slot.state == "prep":
            self.failures += 1
            self.drain(slot, final=False)
            if self.failures in (1, 10):
                log(f"a sandbox child failed while preparing (status {status})")
        if slot.state in ("prep", "ready"):
            slot.state = "dying"  # gone before any request: not part of the pool any more
        if job is not None and job.kind == "session" and not job.dead:
            self.session_died(job)
        self.try_finish(slot)

    def on_z_exit(self, slot: Slot) -> None:
        if DEBUG:
            log(f"z_exit t={time.monotonic():.4f}")
        try:
            os.waitpid(slot.z_pid, os.WNOHANG)
        except ChildProcessError:
            pass
        self.sel.unregister(slot.z_fd)
        os.close(slot.z_fd)
        slot.z_fd = -1
        slot.z_done = True
        if slot.p_status is None:
            self.kill_slot(slot)
        self.try_finish(slot)

    def try_finish(self, slot: Slot) -> None:
        if slot.p_status is None or not slot.z_done:
            return
        job = slot.job
        if job is not None and job.kind == "run" and job.active:
            self.finish_run(job)  # closes the slot through drop_job
        if slot.state != "dead":
            self.drain(slot, final=True)
            self.close_slot(slot)
        if job is not None and job.kind == "session":
            job.slot = slot  # keep the dead slot reference for notes; no fds left
        self.serve_waiting()

    def on_ctl(self) -> bool:
        try:
            msg, fds, _, _ = socket.recv_fds(self.ctl, 64, 4)
        except (BlockingIOError, InterruptedError):
            return True
        if not msg:
            return False
        for fd in fds:
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            job = Job(sock)
            self.jobs.add(job)
            self.sel.register(sock, selectors.EVENT_READ, ("job", job))
        return True

    def on_job(self, job: Job) -> None:
        try:
            data = job.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            job.kill_reason = job.kill_reason or "cancel"
            self.drop_job(job)
            return
        job.rbuf += data
        try:
            reqs = split_frames(job.rbuf)
        except ValueError:
            self.drop_job(job)
            return
        for req in reqs:
            if isinstance(req, dict):
                self.handle_request(job, req)

    def check_deadlines(self) -> float:
        """Enforce wall limits (and, for session cells, CPU from outside); return the next wake-up."""
        now = time.monotonic()
        nearest = math.inf
        for job in list(self.jobs):
            if not job.active or job.slot is None or job.kill_reason:
                continue
            if now >= job.deadline:
                job.kill_reason = "timeout"
                self.kill_slot(job.slot)
                continue
            nearest = min(nearest, job.deadline)
            if job.kind == "session":
                if self.cpu_time(job.slot.p_pid) - job.cpu0 > job.limits.cpu_s + 1:
                    job.kill_reason = "cpu"
                    self.kill_slot(job.slot)
                    continue
                nearest = min(nearest, now + CPU_WATCH_S)
        return nearest

    def loop(self) -> None:
        while True:
            nearest = self.check_deadlines()
            timeout = None if nearest == math.inf else max(0.0, nearest - time.monotonic())
            needs_refill = self.ready_count() < self.wanted() and self.failures < 50
            events = self.sel.select(0 if needs_refill else timeout)
            if not events and needs_refill:
                try:
                    self.refill()
                except OSError as exc:
                    self.slot_failed(exc)
                continue
            for key, _ in events:
                kind, obj = key.data
                if kind == "ctl":
                    if not self.on_ctl():
                        return
                elif kind == "zygote":
                    self.on_zygote()
                elif kind == "job":
                    if obj in self.jobs:
                        self.on_job(obj)
                elif kind in ("out", "err"):
                    if obj.state != "dead":
                        fd = obj.out_r if kind == "out" else obj.err_r
                        try:
                            data = os.read(fd, 65536)
                        except (BlockingIOError, InterruptedError):
                            continue  # already drained by a finish earlier in this batch: not EOF
                        except OSError:
                            data = b""
                        if data:
                            self.on_output(obj, kind, data)
                        else:
                            self.sel.unregister(fd)
                            os.close(fd)
                            if kind == "out":
                                obj.out_r = -1
                            else:
                                obj.err_r = -1
                elif kind == "chan":
                    if obj.state != "dead":
                        self.read_chan(obj)
                elif kind == "z_exit":
                    if obj.z_fd >= 0:
                        self.on_z_exit(obj)

    def shutdown(self) -> None:
        for slot in list(self.slots):
            self.kill_slot(slot)
        self.zygote.close()  # its children die with it (parent-death signal)
        os.close(self.death_w)  # any init still alive exits on EOF
        for slot in list(self.slots):
            if slot.z_pid:
                try:
                    os.waitpid(slot.z_pid, 0)
                except ChildProcessError:
                    pass
            if slot.workdir:
                shutil.rmtree(slot.workdir, ignore_errors=True)


# ====================================================================== main


def _warm_imports(modules: tuple[str, ...] = HEAVY_MODULES) -> list[str]:
    for k, v in (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
                 ("MPLBACKEND", "Agg")):
        os.environ.setdefault(k, v)
    loaded = []
    for name in modules:
        try:
            __import__(name)
            loaded.append(name)
        except Exception:
            pass
    import atexit  # noqa: F401
    import fcntl  # noqa: F401
    import inspect  # noqa: F401 - used by the hooks inside the sandbox
    import linecache  # noqa: F401
    import numbers  # noqa: F401
    import threading  # noqa: F401

    from evalcore.sandbox import _child, _hooks  # noqa: F401

    _warm_solvers(loaded)
    _hooks.install()
    tempfile.gettempdir()
    return loaded


def _warm_solvers(loaded: list[str]) -> None:
    """Solve one tiny model with PuLP/CBC and with SCIP in the server itself.

    Their first solve in a process pulls in lazily imported modules and builds caches; doing
    it once here means no forked child pays for it (measured: the child's first PuLP solve
    drops by several ms). HiGHS is not warmed: it would start a thread pool in the server,
    and the server must stay single-threaded to fork and unshare safely.
    """
    try:
        if "pulp" not in loaded:
            raise ImportError("pulp not pre-imported")
        import pulp

        prob = pulp.LpProblem("warm", pulp.LpMaximize)
        x = pulp.LpVariable("x", 0, 1, cat="Integer")
        prob += x
        prob.solve(pulp.PULP_CBC_CMD(msg=0))
    except Exception:
        pass
    try:
        if "pyscipopt" not in loaded:
            raise ImportError("pyscipopt not pre-imported")
        import pyscipopt

        m = pyscipopt.Model()
        m.hideOutput()
        y = m.addVar(vtype="I", lb=0, ub=1)
        m.setObjective(y, "maximize")
        m.optimize()
        m.freeProb()
    except Exception:
        pass


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl-fd", type=int, required=True)
    ap.add_argument("--namespaces", choices=("auto", "0", "1"), default="auto")
    ap.add_argument("--pool", type=int, default=2)
    ap.add_argument("--netns-per-run", action="store_true")
    ap.add_argument("--modules", default=None, help="comma-separated modules to pre-import (default: HEAVY_MODULES)")
    args = ap.parse_args(argv)
    want_ns = args.namespaces != "0"
    userns = False
    note = ""
    own_pidns = False
    if want_ns and not _ns.privileged():
        try:
            enter_user_namespace()  # from here on we are pid 1 of our own PID namespace
            userns = own_pidns = True
        except OSError as exc:
            note = f"user namespace unavailable ({exc})"
            want_ns = False
    elif want_ns and not _ns.owns_pid_namespace():
        try:  # root of a user namespace living in an ancestor's PID namespace
            enter_user_namespace(new_user=False)
            own_pidns = True
        except OSError as exc:
            note = f"PID namespace unavailable ({exc})"
            want_ns = False
    ctl = socket.socket(fileno=args.ctl_fd)
    _ns.set_name("opteval-forksrv")
    try:
        _ns.prctl(_ns.PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        pass
    death_r, death_w = os.pipe()
    os.set_inheritable(death_r, False)
    factory = None
    if want_ns:
        try:
            factory = NsFactory(death_r)
        except OSError as exc:
            note = f"namespace factory failed: {exc}"
    loaded = _warm_imports(tuple(m for m in args.modules.split(",") if m) if args.modules is not None else HEAVY_MODULES)
    contained = False
    proc_fd = -1
    if factory is not None:
        try:
            net_fd, mnt_fd, proc_fd = build_root(own_pidns)
            factory.join(net_fd, mnt_fd)
            os.close(net_fd)
            os.close(mnt_fd)
            probe = factory.make()  # can we make a PID namespace at all?
            os.kill(probe, signal.SIGKILL)
            contained = True
        except OSError as exc:
            note = f"Linux namespaces unavailable ({exc})"
            if proc_fd >= 0:
                # half-way through the pivot: we cannot fall back safely in this process
                log(f"FATAL: namespace setup failed after pivot: {exc}")
                os._exit(3)
    if not contained:
        if args.namespaces == "0":
            note = "namespaces disabled (OPTEVAL_SANDBOX_NAMESPACES=0)"
        note = (f"NOT CONTAINED: {note or 'namespaces unavailable'}; process-group kill only, "
                "setsid descendants may survive, host files and network are reachable")
        log("WARNING " + note)
        if factory is not None:
            os.kill(factory.pid, signal.SIGKILL)
            os.waitpid(factory.pid, 0)
            factory = None
        proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    import gc

    gc.collect()
    gc.freeze()  # keep the warm heap shared copy-on-write with every child
    ctl.send(json.dumps({"t": "ready", "contained": contained, "note": note, "modules": loaded,
                         "pid": os.getpid(), "userns": userns and contained}).encode())
    # userns even when not contained: uid 0 in there is not the host's root (no throwaway uids)
    server = Server(ctl, factory, contained, note, proc_fd, death_w, args.pool, args.netns_per_run, userns)
    try:
        server.loop()
    except BaseException:
        log("fork server crashed:\n" + traceback.format_exc())
    finally:
        server.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
