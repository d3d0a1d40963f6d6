"""Wire format between the host process and the fork server: length-prefixed JSON frames.

JSON, not pickle: the fork server is ours, but it sits next to untrusted code, and the host
should never unpickle bytes that crossed that boundary.
"""
from __future__ import annotations

import json
import socket
import struct
from dataclasses import asdict, fields
from typing import Any

from evalcore.sandbox.types import ExecResult, Limits

_HDR = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024


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


def limits_to_dict(limits: Limits) -> dict[str, Any]:
    return asdict(limits)


def limits_from_dict(d: dict[str, Any]) -> Limits:
    names = {f.name for f in fields(Limits)}
    return Limits(**{k: v for k, v in d.items() if k in names})


def result_from_dict(d: dict[str, Any]) -> ExecResult:
    names = {f.name for f in fields(ExecResult)}
    return ExecResult(**{k: v for k, v in d.items() if k in names})
