"""One registry shape for every extension point: harnesses, grading and extraction profiles,
reward schemes, benchmarks, backends and the simulated policy's stages.

Why one shape: nine registries in five shapes meant five error classes, names snapshotted at
import (a profile registered later was unknown to the report) and nothing from outside the
checkout. Here an entry is either an object or a lazy ``"module:object"`` string resolved on first
use (so listing names imports nothing), an unknown name is one :class:`UnknownNameError` with a
did-you-mean, and installed packages add entries through the entry-point group ``opteval``
(inspect_ai's habit): each entry point names a module (imported) or a callable (called) that
registers through the public API (:mod:`opteval.evalcore.harness`). Plugins load once per process, the
first time a registry is listed or misses a name.

A :class:`Registry` is a read-only ``Mapping``: ``name in reg`` and ``sorted(reg)`` never import a
lazy entry; ``reg[name]`` resolves it.
"""
from __future__ import annotations

import difflib
import importlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

ENTRY_POINT_GROUP = "opteval"

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A name no registry entry has; the message names the kind, suggests the closest names and
    lists the known ones. A ``KeyError`` and a ``ValueError`` both, so callers written against the
    older per-registry errors keep working."""

    def __init__(self, kind: str, name: object, known: list[str]) -> None:
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        self.kind, self.name, self.known = kind, name, known
        self.message = f"unknown {kind} {name!r}{hint}; known: {', '.join(known) or '(none)'}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would print the message quoted
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across Ray processes (a replica's error)
        return (type(self), (self.kind, self.name, self.known))


class RegistryError(ValueError):
    """A registration that cannot be honoured: a taken name, a lazy entry that does not import,
    a plugin that fails to load. The message names the entry and its source."""


_plugins_lock = threading.RLock()  # a plugin registering through a registry re-enters load_plugins
_plugins_loaded = False


def load_plugins() -> None:
    """Import every ``opteval`` entry point once (they register through the public API)."""
    global _plugins_loaded
    with _plugins_lock:
        if _plugins_loaded:
            return
        _plugins_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = ep.load()
            except Exception as exc:
                raise RegistryError(f"opteval plugin {ep.name!r} ({ep.value}) failed to load: "
                                    f"{type(exc).__name__}: {exc}") from exc
            if callable(loaded) and not isinstance(loaded, type):
                loaded()


def resolve(target: str) -> Any:
    """The object a ``"module:object"`` (or ``"module:obj.attr"``) string names."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise RegistryError(f"{target!r}: expected 'module:object'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


_MADE: dict[tuple[str, str], Registry[Any]] = {}


def _registry_made_in(module: str, kind: str) -> Registry[Any]:
    """The registry of ``kind`` that ``module`` makes (importing it makes it)."""
    importlib.import_module(module)
    return _MADE[(module, kind)]


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one kind (``kind`` words every message: "harness", "grading profile")."""

    def __init__(self, kind: str, *, check: Callable[[str, T], None] | None = None) -> None:
        self.kind = kind
        self._objects: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._check = check
        self._lock = threading.RLock()
        self._resolving: set[str] = set()
        # the module that made it: a pickled registry (Ray ships a Serve deployment's globals by
        # value) comes back as that module's own registry of this kind, not a copy
        self._home = sys._getframe(1).f_globals.get("__name__", "__main__")
        _MADE.setdefault((self._home, kind), self)

    def __reduce__(self) -> tuple[Any, ...]:
        if self._home == "__main__" or _MADE.get((self._home, self.kind)) is not self:
            raise TypeError(f"{self.kind} registry made in {self._home} cannot be pickled by name")
        return (_registry_made_in, (self._home, self.kind))

    # -- registration -------------------------------------------------------------------------
    def add(self, name: str, obj: T, *, replace: bool = False) -> T:
        """Register ``obj`` under ``name``; the same object again is a no-op, another one under a
        taken name an error unless ``replace``."""
        with self._lock:
            old = self._objects.get(name)
            if old is not None and old is not obj and not replace:
                raise RegistryError(f"{self.kind} {name!r} is already registered")
            if self._check is not None:
                self._check(name, obj)
            self._lazy.pop(name, None)
            self._objects[name] = obj
            return obj

    def add_lazy(self, name: str, target: str) -> None:
        """Register ``name`` as ``"module:object"``, imported on first use. A name already
        resolved keeps its object."""
        if ":" not in target:
            raise RegistryError(f"{self.kind} {name!r}: lazy entry {target!r} is not 'module:object'")
        with self._lock:
            if name not in self._objects:
                self._lazy[name] = target

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@reg.decorator("name")`` registers what it decorates and returns it unchanged."""
        def wrap(obj: T) -> T:
            return self.add(name, obj)
        return wrap

    # -- lookup -------------------------------------------------------------------------------
    def _has(self, name: str) -> bool:
        return name in self._objects or name in self._lazy

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if self._has(name):
            return True
        load_plugins()
        return self._has(name)

    def __getitem__(self, name: str) -> T:
        if not isinstance(name, str):
            raise UnknownNameError(self.kind, name, self.names())
        obj = self._objects.get(name)
        if obj is not None:
            return obj
        if name not in self._lazy:
            load_plugins()
        with self._lock:
            if name in self._objects:
                return self._objects[name]
            target = self._lazy.get(name)
            if target is None:
                raise UnknownNameError(self.kind, name, self.names())
            self._resolving.add(name)
            try:
                resolved = resolve(target)
            except (ImportError, AttributeError) as exc:
                raise RegistryError(f"{self.kind} {name!r}: cannot load {target!r} "
                                    f"({type(exc).__name__}: {exc})") from None
            finally:
                self._resolving.discard(name)
            # importing the target may itself have registered the object under ``name``
            return self.add(name, self._objects.get(name, resolved), replace=True)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except UnknownNameError:
            return default

    def existing(self, name: str) -> T | None:
        """What ``name`` holds now (a lazy entry resolved), or None; None too while ``name``'s own
        lazy entry is being imported (its module registering itself is not a clash)."""
        with self._lock:
            if name in self._resolving or name not in self:
                return None
            target = self._lazy.get(name)
            if target is not None and target.partition(":")[0] in sys.modules:
                return None  # its module is being imported: the registration under way is its own
            return self[name]

    def names(self) -> list[str]:
        """Every registered name, sorted (plugins included; nothing lazy is imported)."""
        load_plugins()
        return sorted({*self._objects, *self._lazy})

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def loaded(self) -> dict[str, T]:
        """The entries already resolved (for tests and diagnostics: imports nothing)."""
        return dict(self._objects)

    def remove(self, name: str) -> None:
        """Drop ``name`` (tests that register a throwaway entry clean up with it)."""
        with self._lock:
            self._objects.pop(name, None)
            self._lazy.pop(name, None)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._objects)} loaded, {len(self._lazy)} lazy)"


# -- method and benchmark YAMLs from outside configs/ ----------------------------------------------
# A method or benchmark is a YAML file (configs/<kind>/<name>.yaml in the checkout or the wheel).
# One given by path on the command line (``methods=[path.yaml]``) or by a plugin
# (:func:`register_config_file`) is registered here by name; the config reader looks here first.
CONFIG_FILES: dict[str, Registry[Path]] = {
    "methods": Registry("method file"),
    "benchmarks": Registry("benchmark file"),
}


def register_config_file(kind: str, path: str | Path, name: str | None = None) -> str:
    """Register a method or benchmark YAML under ``name`` (default: the file's stem); returns the
    name. The same file again is a no-op; another file under a taken name is an error."""
    if kind not in CONFIG_FILES:
        raise RegistryError(f"config file kind {kind!r}: expected one of {sorted(CONFIG_FILES)}")
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise RegistryError(f"{kind}: no such file {str(file)!r}")
    key = name or file.stem
    reg = CONFIG_FILES[kind]
    old = reg.loaded().get(key)
    if old is not None and old != file:
        raise RegistryError(f"{reg.kind} {key!r} is already registered as {str(old)!r}")
    reg.add(key, file, replace=True)
    return key
