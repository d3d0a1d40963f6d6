"""Code that runs inside a sandboxed child: preparation, the ``submit`` builtin, program and cell execution.

A child is forked from the warm fork server (so numpy, scipy, pulp, pyscipopt, highspy are
already imported), prepares itself while still root (private mounts, scrubbed environment,
stdio on pipes, everything else closed, then a throwaway uid, or without root a nested user
namespace of its own), announces ``ready`` and waits for work. It sets each request's
resource limits itself when the request arrives (reporting any that did not apply), so the
same prepared child serves a one-shot program or a session's cells.

The only way out besides stdout/stderr is the private channel (fd 3, a SOCK_SEQPACKET
socket): ``submit`` and the model-capture hooks write JSON messages there, so text the
program prints can never be mistaken for a submission.
"""
from __future__ import annotations

import builtins
import io
import json
import linecache
import math
import numbers
import os
import resource
import signal
import socket
import struct
import sys
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any, NoReturn

from opteval.evalcore.sandbox import linux
from opteval.evalcore.sandbox.protocol import ChildMsg, Op

CHAN_FD = 3
REQ_FD = 4
SUBMIT_MAX_REPR = 4096
WORKDIR = "/sandbox"
USERNS_UID = 1000  # what a run in its own user namespace sees as its uid and gid

_chan: socket.socket | None = None
_session_globals: dict[str, Any] | None = None


@dataclass
class ChildConfig:
    """What the fork server decided for this child before forking it."""

    namespaces: bool
    uid: int | None  # None: keep the current uid (not root)
    workdir: str
    tmpdir: str
    tmpfs_mb: int
    netns: bool  # a network namespace of its own (else the server's, which has no network)
    userns: bool = False  # the server runs in a user namespace: give this run a nested one
    stdin_path: str = "/dev/null"
    warm_up: bool = True  # made ahead of demand: warm up before saying ready (see _warm_up)


def emit(msg: dict[str, Any]) -> None:
    """Send one message to the fork server; never raises into the program."""
    if _chan is None:
        return
    try:
        _chan.send(json.dumps(msg).encode())
    except Exception:
        pass


# ---------------------------------------------------------------- submit


def _normalize_submission(value: Any) -> Any:
    if isinstance(value, bool):
        raise TypeError("submit() takes a number or a status string, not a bool")
    if isinstance(value, str):
        if len(repr(value)) > SUBMIT_MAX_REPR:
            raise ValueError(f"submit(): value too large (repr over {SUBMIT_MAX_REPR} chars)")
        return value
    if isinstance(value, int):
        if len(repr(value)) > SUBMIT_MAX_REPR:
            raise ValueError(f"submit(): value too large (repr over {SUBMIT_MAX_REPR} chars)")
        return value if abs(value) < 2**53 else float(value)
    if isinstance(value, numbers.Real) or hasattr(type(value), "__float__"):
        try:
            if hasattr(value, "item") and getattr(value, "size", 1) == 1:
                value = value.item()  # numpy scalar / 0-d array
            if isinstance(value, bool):
                raise TypeError("submit() takes a number or a status string, not a bool")
            if isinstance(value, int):
                return value if abs(value) < 2**53 else float(value)
            return float(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"submit(): cannot convert {type(value).__name__} to a number: {exc}") from None
    raise TypeError(f"submit() takes a number or a status string, not {type(value).__name__}")


def submit(value: Any) -> None:
    """Record the program's answer (a number, or a status such as "infeasible"). The last call wins."""
    try:
        v = _normalize_submission(value)
    except (TypeError, ValueError) as exc:
        emit({"t": ChildMsg.NOTE, "v": str(exc)})
        try:
            print(f"[sandbox] {exc}; submission ignored", file=sys.stderr)
        except Exception:
            pass
        return
    if isinstance(v, float) and not math.isfinite(v):
        v = repr(v)  # JSON has no nan/inf; grading treats the string like the float (never correct)
    emit({"t": ChildMsg.SUBMIT, "v": v})


# ---------------------------------------------------------------- preparation (root)


def _mounts(cfg: ChildConfig) -> None:
    flags = linux.CLONE_NEWNS | (linux.CLONE_NEWNET if cfg.netns else 0)
    linux.unshare(flags)
    nosd = linux.MS_NOSUID | linux.MS_NODEV
    # deferred: read at call time: build_root sets TMP_PYTHON_DIRS later
    from opteval.evalcore.sandbox.forkserver.isolation import TMP_PYTHON_DIRS

    keep = [(d, os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for d in TMP_PYTHON_DIRS]
    linux.mount("proc", "/proc", "proc", nosd | linux.MS_NOEXEC)
    linux.mount("tmpfs", "/tmp", "tmpfs", nosd, f"mode=1777,size={cfg.tmpfs_mb}m")
    for d, fd in keep:  # a Python installation under /tmp stays visible over the private /tmp
        os.makedirs(d, exist_ok=True)
        linux.mount(f"/proc/self/fd/{fd}", d, None, linux.MS_BIND | linux.MS_REC)
        linux.mount(None, d, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_NOSUID | linux.MS_RDONLY | linux.mount_flags(d))
        os.close(fd)
    linux.mount("tmpfs", "/dev/shm", "tmpfs", nosd, f"mode=1777,size={cfg.tmpfs_mb}m")
    owner = f",uid={cfg.uid},gid={cfg.uid}" if cfg.uid is not None else ""
    linux.mount("tmpfs", cfg.workdir, "tmpfs", nosd, f"mode=0700,size={cfg.tmpfs_mb}m{owner}")


def _install_fds(fds: dict[int, int]) -> None:
    """Put ``fds[target] = source`` in place and close every other descriptor."""
    # deferred, no saving: the fork server has fcntl loaded (warm.py)
    import fcntl

    high = {t: fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 256) for t, src in fds.items()}
    for target, src in high.items():
        os.dup2(src, target, inheritable=target <= 2)
    os.closerange(max(fds) + 1, 1 << 20)


def _scrub_env(cfg: ChildConfig) -> None:
    base = os.path.join(sys.prefix, "bin")
    env = {
        "PATH": f"{base}:/usr/local/bin:/usr/bin:/bin",
        "HOME": cfg.workdir,
        "LANG": "C.UTF-8",
        "TMPDIR": cfg.tmpdir,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(cfg.tmpdir, ".mpl"),
    }
    os.environ.clear()
    os.environ.update(env)
    # deferred, no saving: the fork server has tempfile loaded (warm.py)
    import tempfile

    tempfile.tempdir = cfg.tmpdir


def _own_user_namespace() -> None:
    """Leave the server's user namespace for a nested one of this run's own, as uid 1000.

    Why: in a user namespace only the executor's uid exists, so runs cannot get throwaway
    uids. A nested user namespace per run does what the throwaway uid does as root:
    RLIMIT_NPROC is counted per (user namespace, uid), so it counts this run's processes
    only; and the run holds no capability over the server's namespaces (its init, the
    server's mount and network namespaces), so it can neither ptrace nor remount them.
    Creating further user namespaces inside is switched off (``max_user_namespaces``).
    """
    linux.unshare(linux.CLONE_NEWUSER)
    linux.write_id_maps(USERNS_UID, 0, USERNS_UID, 0)
    try:
        with open("/proc/sys/user/max_user_namespaces", "w") as fh:
            fh.write("0")
    except OSError:
        pass
    os.setresgid(USERNS_UID, USERNS_UID, USERNS_UID)
    os.setresuid(USERNS_UID, USERNS_UID, USERNS_UID)  # a non-root uid: every capability is dropped


def _drop_privileges(cfg: ChildConfig) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cfg.userns:
        _own_user_namespace()
    elif cfg.uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(cfg.uid, cfg.uid, cfg.uid)
        os.setresuid(cfg.uid, cfg.uid, cfg.uid)
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    # after the uid change: a credential change clears the parent-death signal
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)


WARM_PROGRAM = """\
import pulp
prob = pulp.LpProblem("warm", pulp.LpMaximize)
x = pulp.LpVariable("x", 0)
prob += x
prob += x <= 1
prob.solve(pulp.PULP_CBC_CMD(msg=0))
"""


WARM_UP_TIMEOUT_S = 10.0


def _warm_up_timeout(signum: int, frame: Any) -> None:
    raise TimeoutError("warm-up took too long")


def _warm_up(cfg: ChildConfig) -> None:
    """Run the request path once, with a tiny PuLP solve, before saying ``ready``.

    Why: a child is a copy-on-write fork of the warm server, and the first time it touches a
    page of that heap (a reference count, a cache) the kernel copies the page; PuLP's solve
    also spawns CBC, whose first start in a fresh process costs more than later ones. Doing it
    here, before the child joins the pool, takes that work off the request's path. It costs
    about 7 ms of CPU, so a child forked for a request already waiting skips it (the server
    says so when it asks for the child): when the pool runs dry, the warm-ups stop. Nothing of
    it reaches the server or the program: the channel is detached (no model capture), output
    goes to /dev/null, and its files are PuLP's temporary files, which it deletes. A warm-up
    that hangs (a broken solver install) is cut off, and whatever it started is killed.
    """
    global _chan
    chan, _chan = _chan, None
    saved = (os.dup(1), os.dup(2))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    signal.signal(signal.SIGALRM, _warm_up_timeout)
    signal.setitimer(signal.ITIMER_REAL, WARM_UP_TIMEOUT_S)
    try:
        json.loads(json.dumps({"op": Op.RUN, "code": "", "limits": {}}))
        code = WARM_PROGRAM if "pulp" in sys.modules else "pass\n"
        _, exc = _execute(code, "<warm-up>", {"__name__": "__warm__"})
        if exc == "TimeoutError" and cfg.namespaces:
            os.kill(-1, signal.SIGKILL)  # only this run's PID namespace: a CBC left running
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
        _chan = chan


def child_main(cfg: ChildConfig, out_w: int, err_w: int, chan: socket.socket, req_r: int) -> NoReturn:
    """Entry point of a freshly forked child; never returns."""
    global _chan
    t_start = time.perf_counter()
    try:
        linux.set_name("opteval-run")
        if cfg.namespaces:
            _mounts(cfg)
        else:
            os.setsid()  # its own process group: the fallback kills the group
        os.chdir(cfg.workdir)
        devnull = os.open(cfg.stdin_path, os.O_RDONLY)
        _install_fds({0: devnull, 1: out_w, 2: err_w, CHAN_FD: chan.fileno(), REQ_FD: req_r})
        _chan = socket.socket(fileno=CHAN_FD)
        _scrub_env(cfg)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        _drop_privileges(cfg)
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(line_buffering=True)
        sys.stdin = open(0, closefd=False)
        sys.path[0] = cfg.workdir
        sys.argv = [os.path.join(cfg.workdir, "main.py")]
        builtins.submit = submit  # type: ignore[attr-defined]
        if cfg.warm_up:
            _warm_up(cfg)  # made ahead of demand: no request waits for this child yet
        emit({"t": ChildMsg.READY, "prep_ms": round((time.perf_counter() - t_start) * 1e3, 2)})
        _serve(cfg)
    except BaseException:
        try:
            os.write(2, traceback.format_exc().encode())
        finally:
            os._exit(70)
    os._exit(0)


# ---------------------------------------------------------------- execution


def _read_request() -> dict[str, Any] | None:
    def exact(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = os.read(REQ_FD, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    hdr = exact(4)
    if hdr is None:
        return None
    body = exact(struct.unpack("!I", hdr)[0])
    return None if body is None else json.loads(body)


def _print_exception(exc: BaseException) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # hide our own frames: the program sees only its own
    try:
        traceback.print_exception(type(exc), exc, tb)
    except BaseException:
        try:
            os.write(2, f"{type(exc).__name__}\n".encode())
        except OSError:
            pass


def _execute(code: str, filename: str, g: dict[str, Any]) -> tuple[int, str | None]:
    """Run ``code``; return (exit code, exception class name or None)."""
    try:
        exec(compile(code, filename, "exec"), g)
        return 0, None
    except SystemExit as exc:
        if exc.code is None:
            return 0, None
        if isinstance(exc.code, int):
            return exc.code, None
        try:
            print(exc.code, file=sys.stderr)
        except Exception:
            pass
        return 1, None
    except BaseException as exc:
        name = "MemoryError" if isinstance(exc, MemoryError) else type(exc).__name__
        _print_exception(exc)
        return 1, name


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _cpu() -> float:
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _count_own_tasks() -> int:
    uid, n = os.getuid(), 0
    try:
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    n += os.stat(f"/proc/{name}").st_uid == uid
                except OSError:
                    pass
    except OSError:
        pass
    return n


_LIMIT_NAMES = {
    resource.RLIMIT_CPU: ("RLIMIT_CPU", "cpu_s", "s", 1),
    resource.RLIMIT_AS: ("RLIMIT_AS", "memory_mb", "MB", 1024 * 1024),
    resource.RLIMIT_FSIZE: ("RLIMIT_FSIZE", "file_mb", "MB", 1024 * 1024),
    resource.RLIMIT_NPROC: ("RLIMIT_NPROC", "max_procs", "processes", 1),
}


def _fmt_limit(res: int, value: int) -> str:
    _, _, unit, scale = _LIMIT_NAMES[res]
    return "unlimited" if value == resource.RLIM_INFINITY else f"{value / scale:g} {unit}"


def _apply_limits(cfg: ChildConfig, lim: dict[str, Any], hard: bool) -> list[str]:
    """Lower this process's rlimits for the coming run (one-shot) or cell (session); return one
    line for each limit that did not apply as asked.

    The child sets them itself: lowering is always allowed, whereas ``prlimit`` on another
    uid needs CAP_SYS_RESOURCE, which containers often drop. A one-shot run lowers the hard
    limits too (irreversible, as it should be); a session must be able to widen them again
    for the next cell, so cells set soft limits, and the server's wall clock and CPU
    watchdog enforce from outside. A limit above the hard limit the sandbox inherited is held
    at that hard limit (stricter than asked); a limit the kernel refuses is not applied. Both
    are reported, never silently ignored.
    """
    mb = 1024 * 1024
    cpu = math.ceil(_cpu() + float(lim.get("cpu_s", 60)))
    nproc = int(lim.get("max_procs", 64))
    if cfg.uid is None and not cfg.userns:  # RLIMIT_NPROC counts every process of our (shared) uid
        nproc += _count_own_tasks()
    wanted = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_AS: (int(lim.get("memory_mb", 4096)) * mb,) * 2,
        resource.RLIMIT_FSIZE: (int(float(lim.get("file_mb", 64)) * mb),) * 2,
        resource.RLIMIT_NPROC: (nproc, nproc),
    }
    problems = []
    for res, (soft, want_hard) in wanted.items():
        name, key, _, _ = _LIMIT_NAMES[res]
        try:
            cur_soft, cur_hard = resource.getrlimit(res)
            new_hard = cur_hard
            if hard and (cur_hard == resource.RLIM_INFINITY or want_hard < cur_hard):
                new_hard = want_hard
            if new_hard != resource.RLIM_INFINITY and soft > new_hard:
                problems.append(f"{key}: {name} held at the inherited hard limit of {_fmt_limit(res, new_hard)} "
                                f"(asked {_fmt_limit(res, soft)})")
                soft = new_hard
            resource.setrlimit(res, (soft, new_hard))
        except (ValueError, OSError, OverflowError) as exc:
            problems.append(f"{key}: {name} not applied ({type(exc).__name__}: {exc})")
    return problems


def _serve(cfg: ChildConfig) -> None:
    global _session_globals
    while True:
        req = _read_request()
        if req is None:
            return
        emit({"t": ChildMsg.STARTED})  # from here a death is the program's (before it, the server retries)
        code = req.get("code", "")
        for problem in _apply_limits(cfg, req.get("limits") or {}, hard=req.get("op") == Op.RUN):
            emit({"t": ChildMsg.LIMIT, "v": problem})
        cpu0 = _cpu()
        if req.get("op") == Op.RUN:
            path = os.path.join(cfg.workdir, "main.py")
            try:
                with open(path, "w") as fh:
                    fh.write(code)
            except OSError:
                linecache.cache[path] = (len(code), None, code.splitlines(True), path)
            mod = types.ModuleType("__main__")
            mod.__file__ = path
            sys.modules["__main__"] = mod
            status, exc = _execute(code, path, mod.__dict__)
            try:
                # deferred: inside the try, after the program: a failure is swallowed
                import threading

                threading._shutdown()  # type: ignore[attr-defined]  # like `python main.py`: join threads
                # deferred: as above: the program's atexit hooks, errors swallowed
                import atexit

                atexit._run_exitfuncs()
            except BaseException:
                pass
            _flush()
            if cfg.namespaces:
                # every other process of the run (children, setsid grandchildren, CBC) is in
                # this PID namespace: kill them now, so the server can answer before teardown
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
            emit({"t": ChildMsg.EXITED, "code": status, "exc": exc, "cpu": _cpu() - cpu0})
            try:  # leave the CPU to the server's answer; it kills us right after
                os.read(REQ_FD, 1)
            except OSError:
                pass
            os._exit(status & 0xFF if status >= 0 else 1)
        elif req.get("op") == Op.CELL:
            if _session_globals is None:
                mod = types.ModuleType("__main__")
                sys.modules["__main__"] = mod
                _session_globals = mod.__dict__
            name = f"<cell {req.get('cell', 0)}>"
            linecache.cache[name] = (len(code), None, code.splitlines(True), name)
            status, exc = _execute(code, name, _session_globals)
            _flush()
            emit({"t": ChildMsg.CELL_DONE, "code": status, "exc": exc, "cpu": _cpu() - cpu0})
