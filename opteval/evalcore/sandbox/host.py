"""Host side of the sandbox: ``ForkServer``, ``Session``, ``run_program``.

The host talks to one fork-server process (``opteval.evalcore.sandbox.forkserver``) over a control
socket. Every run or session gets its own stream socket, whose far end is passed to the
server with SCM_RIGHTS; so concurrent callers (threads, ``asyncio.to_thread``) never share a
conversation, and closing that socket is how a caller cancels a run or closes a session.

Nothing the program does makes these calls raise: a lost child, a lost server (restarted
transparently) or a protocol failure comes back as an ``ExecResult`` with outcome ``killed``.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opteval.evalcore.sandbox.protocol import (
    ChannelClosed,
    Ctl,
    Op,
    limits_to_dict,
    pack,
    recv_frame,
    result_from_dict,
    send_frame,
)
from opteval.evalcore.sandbox.types import KILLED, ExecResult, Limits

log = logging.getLogger("opteval.evalcore.sandbox")

ENV_NAMESPACES = "OPTEVAL_SANDBOX_NAMESPACES"  # "0": force the uncontained fallback (for tests)
ENV_ALLOW_UNCONTAINED = "OPTEVAL_SANDBOX_ALLOW_UNCONTAINED"  # "1": start even when nothing can contain
HOST_GRACE_S = 30.0  # how long past the wall limit the host waits before declaring the run lost
START_TIMEOUT_S = 120.0
PRESEND_MAX = 64 * 1024  # requests up to this size are written before the server has the socket
_PKG_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding the package `opteval`


class SandboxUnavailable(RuntimeError):
    """Namespaces were wanted but neither root nor a user namespace can contain programs here,
    and uncontained runs were not explicitly allowed."""


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def _namespaces_mode(namespaces: bool | None) -> str:
    if namespaces is not None:
        return "1" if namespaces else "0"
    v = os.environ.get(ENV_NAMESPACES, "").strip().lower()
    if v in ("0", "false", "no", "off"):
        return "0"
    return "auto"


class ForkServer:
    """A warm fork server owned by this process (one per executor actor).

    ``namespaces``: None = use them when permitted (``OPTEVAL_SANDBOX_NAMESPACES=0`` forces the
    fallback), False = never (process-group killing only), True = same as None but say so.
    ``pool_size``: children kept forked ahead of demand, already in their namespaces and
    waiting for code, refilled in the background as runs and sessions take them (each one
    costs a fork of the warm interpreter, ~100 MB shared copy-on-write); 0 forks a child only
    when a request arrives (the request then waits for the fork: ``bench/bench_sandbox.py``).
    ``netns_per_run``: give every run its own network namespace (default: runs share the server's, which has no network at all).
    ``launcher``: a command prefix for the server process (tests and the benchmark use
    ``asuser.unprivileged_launcher()`` to start it as an unprivileged user with no capabilities).
    ``allow_uncontained``: when namespaces were wanted but neither the root path nor a user
    namespace can contain programs, start anyway (every result says ``contained=False``);
    by default such a server refuses to start (``start()`` raises ``SandboxUnavailable``, and
    ``run_program`` returns ``killed`` with that reason). None: ``OPTEVAL_SANDBOX_ALLOW_UNCONTAINED``.
    ``namespaces=False`` is itself an explicit choice of the uncontained fallback.
    """

    def __init__(self, namespaces: bool | None = None, pool_size: int = 2, netns_per_run: bool = False,
                 launcher: Sequence[str] | None = None, allow_uncontained: bool | None = None,
                 modules: Sequence[str] | None = None) -> None:
        # ``modules``: what the server imports before forking (opteval.evalcore.solvers.preimport_modules);
        # None = every known solver module that is installed
        self._modules = None if modules is None else tuple(modules)
        self._mode = _namespaces_mode(namespaces)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 0:
            raise ValueError(f"pool_size must be an int >= 0, got {pool_size!r}")
        self._pool = pool_size
        self._netns_per_run = netns_per_run
        self._launcher = list(launcher or [])
        if allow_uncontained is None:
            allow_uncontained = _truthy(os.environ.get(ENV_ALLOW_UNCONTAINED))
        self._allow_uncontained = allow_uncontained
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._owner_pid = 0
        self._gen = 0
        self._closed = False
        self.contained = False
        self.userns = False  # contained through a user namespace (the executor is not root)
        self.note = ""
        self.modules: list[str] = []

    # ------------------------------------------------------------ lifecycle

    def start(self) -> ForkServer:
        with self._lock:
            self._ensure()
        return self

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._owner_pid == os.getpid()

    def _ensure(self) -> None:
        if self._closed:
            raise RuntimeError("ForkServer is closed")
        if not self._alive():
            self._spawn()

    def _spawn(self) -> None:
        self._teardown()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": "/",
            "PYTHONPATH": _PKG_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        for name in ("OPTEVAL_SANDBOX_DEBUG", "OPTEVAL_CAPTURE_FORMULATION"):  # the latter: capture.install()
            if os.environ.get(name):
                env[name] = os.environ[name]
        cmd = [*self._launcher, sys.executable, "-m", "opteval.evalcore.sandbox.forkserver", "--ctl-fd", str(b.fileno()),
               "--namespaces", self._mode, "--pool", str(self._pool)]
        if self._netns_per_run:
            cmd.append("--netns-per-run")
        if self._modules is not None:
            cmd += ["--modules", ",".join(self._modules)]
        try:
            proc = subprocess.Popen(cmd, pass_fds=[b.fileno()], env=env, cwd=_PKG_ROOT, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            b.close()
        a.settimeout(START_TIMEOUT_S)
        try:
            raw = a.recv(65536)
            info = json.loads(raw) if raw else None
        except (OSError, ValueError) as exc:
            info = None
            err: Exception | None = exc
        else:
            err = None
        if not info or info.get("t") != Ctl.READY:
            proc.kill()
            proc.wait()
            a.close()
            raise RuntimeError(f"fork server failed to start (exit {proc.returncode}): {err or 'no ready message'}")
        if not info.get("contained") and self._mode == "auto" and not self._allow_uncontained:
            proc.kill()
            proc.wait()
            a.close()
            raise SandboxUnavailable(
                f"the sandbox cannot contain programs here: {info.get('note')}. Refusing to run them "
                "uncontained; set limits.allow_uncontained: true (ForkServer(allow_uncontained=True), "
                f"{ENV_ALLOW_UNCONTAINED}=1) to run them anyway, and every result says contained=false")
        a.settimeout(None)
        self._proc, self._ctl, self._owner_pid = proc, a, os.getpid()
        self._gen += 1
        self.contained = bool(info.get("contained"))
        self.note = str(info.get("note") or "")
        self.modules = list(info.get("modules") or [])
        self.userns = bool(info.get("userns"))
        if not self.contained:
            log.warning("SANDBOX NOT CONTAINED: %s", self.note)

    def _teardown(self) -> None:
        if self._ctl is not None:
            try:
                self._ctl.close()
            except OSError:
                pass
            self._ctl = None
        proc, self._proc = self._proc, None
        if proc is not None and self._owner_pid == os.getpid():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """Stop the server; every run and session it holds is killed."""
        with self._lock:
            self._closed = True
            self._teardown()

    def __enter__(self) -> ForkServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # ------------------------------------------------------------ conversations

    def _open_job(self, first: Any) -> tuple[socket.socket, int]:
        """A new conversation with the server, its first request ``first`` already sent.

        A small request is written before the socket is handed over, so the server finds it
        waiting and starts it at once (one wake-up less on the request's path); a large one
        after (written before, it could fill the socket buffer with nobody reading yet).
        """
        data = pack(first)
        with self._lock:
            for attempt in (0, 1):
                self._ensure()
                a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    assert self._ctl is not None
                    early = len(data) <= PRESEND_MAX
                    if early:
                        a.sendall(data)
                    socket.send_fds(self._ctl, [Ctl.JOB.encode()], [b.fileno()])
                    if not early:
                        a.sendall(data)
                    return a, self._gen
                except OSError:
                    a.close()
                    if attempt:
                        raise
                    self._spawn()  # the server died between runs: restart it, nothing was lost
                finally:
                    b.close()
        raise AssertionError("unreachable")

    def _dead_soon(self, grace_s: float = 0.5) -> bool:
        """Whether the server is gone. A channel closes a moment before the killed server
        can be reaped, so a lost channel waits briefly before blaming something else."""
        deadline = time.monotonic() + grace_s
        while self._alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _lost(self, gen: int, exc: BaseException, t0: float) -> ExecResult:
        died = self._dead_soon()
        with self._lock:
            died = died or not self._alive()
            if died and gen == self._gen and not self._closed:
                try:
                    self._spawn()
                except Exception as spawn_exc:
                    exc = spawn_exc
        why = "fork server died (restarted)" if died else f"sandbox lost: {type(exc).__name__}: {exc}"
        return ExecResult(outcome=KILLED, wall_s=time.monotonic() - t0, contained=self.contained, note=why)

    def run_program(self, code: str, limits: Limits | None = None) -> ExecResult:
        """Run ``code`` as a fresh program in a fresh sandbox; never raises for what the program does."""
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        limits = limits or Limits()
        t0 = time.monotonic()
        try:
            sock, gen = self._open_job({"op": Op.RUN, "code": code, "limits": limits_to_dict(limits)})
        except Exception as exc:
            return ExecResult(outcome=KILLED, contained=self.contained, note=f"fork server unavailable: {exc}")
        try:
            with sock:
                sock.settimeout(limits.wall_s + HOST_GRACE_S)
                return result_from_dict(recv_frame(sock))
        except (ChannelClosed, OSError, ValueError, TypeError) as exc:
            return self._lost(gen, exc, t0)

    def session(self, limits: Limits | None = None) -> Session:
        """A persistent interpreter on this server (see :class:`Session`)."""
        return Session(limits=limits, server=self)


class Session:
    """A persistent interpreter in its own sandbox: globals survive between cells.

    Each cell has its own limits (``limits`` argument, else the session default). A cell that
    raises is outcome ``error`` and the session lives on; a cell that ends the interpreter
    (segfault, ``os._exit``, killed on a limit) returns ``killed``, and so does every later cell
    until :meth:`restart`. :meth:`close` kills everything the session started.
    """

    def __init__(self, limits: Limits | None = None, server: ForkServer | None = None) -> None:
        self._server = server if server is not None else default_server()
        self._limits = limits or Limits()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._gen = 0
        self._dead_note = ""
        self._closed = False
        self.contained = False
        self._open()

    def _open(self) -> None:
        try:
            sock, self._gen = self._server._open_job({"op": Op.OPEN})
            sock.settimeout(START_TIMEOUT_S)
            info = recv_frame(sock)
            self.contained = bool(info.get("contained"))
            self._sock = sock
            self._dead_note = ""
        except Exception as exc:
            self._sock = None
            self._dead_note = f"session could not start: {type(exc).__name__}: {exc}"

    @property
    def alive(self) -> bool:
        return self._sock is not None

    def run_cell(self, code: str, limits: Limits | None = None) -> ExecResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        limits = limits or self._limits
        with self._lock:
            if self._closed:
                return ExecResult(outcome=KILLED, contained=self.contained, note="session is closed")
            if self._sock is None:
                return ExecResult(outcome=KILLED, contained=self.contained, note=self._dead_note)
            t0 = time.monotonic()
            try:
                send_frame(self._sock, {"op": Op.CELL, "code": code, "limits": limits_to_dict(limits)})
                self._sock.settimeout(limits.wall_s + HOST_GRACE_S)
                res = result_from_dict(recv_frame(self._sock))
            except (ChannelClosed, OSError, ValueError, TypeError) as exc:
                self._drop(f"session lost: {exc}")
                res = self._server._lost(self._gen, exc, t0)
                return res
            if res.outcome == KILLED:
                self._drop(f"session ended earlier ({res.note}); call restart()")
            return res

    def _drop(self, note: str) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._dead_note = note

    def restart(self) -> None:
        """Kill the current interpreter (if any) and start a fresh one: globals are gone."""
        with self._lock:
            self._drop("restarting")
            self._closed = False
            self._open()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop("session is closed")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._sock is not None:
                self._sock.close()
        except Exception:
            pass


_DEFAULT: ForkServer | None = None
_DEFAULT_LOCK = threading.Lock()


def default_server() -> ForkServer:
    """The process-wide server behind ``run_program`` and ``Session()``, started on first use."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed:
            _DEFAULT = ForkServer()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def run_program(code: str, limits: Limits | None = None) -> ExecResult:
    """Run one untrusted program in the default sandbox (see DESIGN.md: never raises for the program)."""
    return default_server().run_program(code, limits)
