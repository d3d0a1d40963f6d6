"""One stderr logger for the fork-server side (the host side uses ``logging``)."""
from __future__ import annotations

import os

DEBUG = os.environ.get("OPTEVAL_SANDBOX_DEBUG") == "1"


def log(msg: str) -> None:
    """Write straight to fd 2: safe in forked children and after the pivot, no logging locks."""
    try:
        os.write(2, f"[opteval-sandbox] {msg}\n".encode())
    except OSError:
        pass
