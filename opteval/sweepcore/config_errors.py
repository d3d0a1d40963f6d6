"""``ConfigError`` and the did-you-mean hint, in a leaf module: the backend registry raises
them while ``opteval.sweepcore.config`` (which imports the registry) re-exports them, so neither imports
the other's importer. Ray-free."""
from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A bad configuration; the message starts with the key path (and names the file)."""


def hint(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    tail = f"; did you mean {close[0]!r}?" if close else ""
    return f" (known: {', '.join(known) or 'none'}){tail}"
