"""Every message between the sandbox's processes: the names (enums) and the host's frame format.

JSON, never pickle: the fork server is ours, but it sits next to untrusted code, and the host
should never unpickle bytes that crossed that boundary. Each channel has its own enum, so a
name says which conversation it belongs to (the README's map lists them all):

- control socket, host <-> server: :class:`Ctl`
- per-job stream socket, host <-> server (4-byte length + JSON frames): :class:`Op` requests,
  an ExecResult dict or :class:`Reply` answers
- server <-> zygote: :class:`ZygoteReq` requests, :class:`ZygoteMsg` answers
- server <-> namespace factory: :class:`FactoryMsg`
- server -> child (request pipe, same frames): :class:`Op` (``run`` or ``cell``)
- child -> server (fd 3, one JSON object per datagram): :class:`ChildMsg`

StrEnum members are ``str``: ``json.dumps`` writes their value, and a decoded ``"exit"``
compares equal to ``ChildMsg.EXITED``.
"""
from __future__ import annotations

import json
import socket
import struct
from dataclasses import fields
from enum import Enum, StrEnum
from typing import Any

from opteval.evalcore.sandbox.types import ExecResult, Limits

_HDR = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024


class Ctl(StrEnum):
    """Control socket (SOCK_SEQPACKET, ``--ctl-fd``)."""

    READY = "ready"  # server -> host once: {"t", "contained", "note", "modules", "pid", "userns"}
    JOB = "job"  # host -> server: one stream socket per run or session (SCM_RIGHTS)


class Op(StrEnum):
    """A request (``{"op": ...}``): host -> server on a job's socket, and server -> child."""

    RUN = "run"  # {"op", "code", "limits"}: one program in a fresh child -> ExecResult dict
    OPEN = "open"  # open a session -> Reply.OPENED
    CELL = "cell"  # {"op", "code", "limits"} (to the child also "cell": its number) -> ExecResult dict


class Reply(StrEnum):
    """Server -> host answers that are not an ExecResult (``{"t": ...}``)."""

    OPENED = "opened"  # {"t", "contained", "note"}


class ZygoteMsg(StrEnum):
    """Zygote -> server (``{"t": ...}``; SOCK_SEQPACKET)."""

    SLOT = "slot"  # a prepared child: {"t", "p", "z", "workdir"} + fds (req_w, out_r, err_r, chan)
    REAPED = "reaped"  # a child the zygote forked was reaped: {"t", "pid", "status", "cpu"}
    ERROR = "error"  # a child could not be prepared: {"t", "v"}


class ZygoteReq(bytes, Enum):
    """Server -> zygote (raw SOCK_SEQPACKET datagrams): prepare one more child."""

    MAKE = b"mk"  # ahead of demand: the child also warms up before it says ready (child._warm_up)
    MAKE_COLD = b"mkc"  # for a request already waiting: ready as soon as it is prepared


class FactoryMsg(bytes, Enum):
    """Server <-> namespace factory (raw SOCK_SEQPACKET datagrams)."""

    JOIN = b"join"  # + fds (net, mnt): enter the server's namespaces
    OK = b"ok"  # joined
    MAKE = b"mk"  # -> "!i" pid of a new PID namespace's init (<= 0: failed)


class ChildMsg(StrEnum):
    """Child -> server on the private channel (fd 3): ``{"t": ...}``."""

    READY = "ready"  # prepared, waiting for a request: {"t", "prep_ms"}
    STARTED = "start"  # read a request: from here a death is the program's, not a lost child's
    SUBMIT = "submit"  # submit(value): {"t", "v"}
    MODEL = "model"  # a captured solver model: {"t", "v"}
    NOTE = "note"  # something the result's note should say (a rejected submission): {"t", "v"}
    LIMIT = "limit"  # a limit that did not apply as asked: {"t", "v"}
    EXITED = "exit"  # the one-shot program finished: {"t", "code", "exc", "cpu"}
    CELL_DONE = "cell_done"  # a session cell finished: {"t", "code", "exc", "cpu"}


class ChannelClosed(EOFError):
    """The other side went away mid-conversation."""


def pack(obj: Any) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return _HDR.pack(len(data)) + data


def send_frame(sock: socket.socket, obj: Any) -> None:
    sock.sendall(pack(obj))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ChannelClosed(f"channel closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> Any:
    (n,) = _HDR.unpack(recv_exact(sock, _HDR.size))
    if n > MAX_FRAME:
        raise ChannelClosed(f"frame of {n} bytes exceeds {MAX_FRAME}")
    return json.loads(recv_exact(sock, n))


def split_frames(buf: bytearray) -> list[Any]:
    """Pop every complete frame off the front of ``buf`` (used by the event loop)."""
    out = []
    while len(buf) >= _HDR.size:
        (n,) = _HDR.unpack_from(buf)
        if n > MAX_FRAME:
            raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
        if len(buf) < _HDR.size + n:
            break
        out.append(json.loads(bytes(buf[_HDR.size:_HDR.size + n])))
        del buf[:_HDR.size + n]
    return out


_LIMIT_FIELDS = tuple(f.name for f in fields(Limits))
_RESULT_FIELDS = frozenset(f.name for f in fields(ExecResult))


def limits_to_dict(limits: Limits) -> dict[str, Any]:
    return {name: getattr(limits, name) for name in _LIMIT_FIELDS}  # flat: no deep copy as asdict makes


def limits_from_dict(d: dict[str, Any]) -> Limits:
    return Limits(**{k: v for k, v in d.items() if k in _LIMIT_FIELDS})


def result_from_dict(d: dict[str, Any]) -> ExecResult:
    return ExecResult(**{k: v for k, v in d.items() if k in _RESULT_FIELDS})
