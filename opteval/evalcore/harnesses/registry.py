"""The harness registry: the one way a harness becomes a method's ``harness:``.

A harness module ends with ``HARNESS = register_harness(MyHarness(), group=...)``. The built-in
ones are lazy entries (``BUILTIN``: name -> module and group), so listing the harnesses imports
none and a worker imports only the ones it runs. A harness living elsewhere is named in its
method YAML as ``harness: <module>:<name>`` (``get_harness`` imports ``<module>``, which registers
it, on first use, in the driver and in every worker alike), or registered by an installed
package's ``opteval`` entry point (:mod:`opteval.evalcore.registry`). ``prompts=`` points a harness's
``prompt_dir`` at a folder outside ``prompts/`` (shared fragments still come from
``prompts/_shared``).
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from opteval.evalcore.harnesses._common import register_prompt_dir
from opteval.evalcore.harnesses.base import Harness
from opteval.evalcore.registry import Registry, RegistryError, UnknownNameError

GROUPS = ("harnesses", "baselines", "search")
# by group: the study's own harnesses and the post-trained models' protocols; the six adapted
# baselines of Table 1; search-based methods (SemOPT: tens of calls per trajectory)
BUILTIN: dict[str, str] = {
    **dict.fromkeys(("direct", "opticycle", "optistate", "orlm", "sirl", "sirl_roles", "llmopt"), "harnesses"),
    **dict.fromkeys(("cafa", "reflexion", "coe", "optimus", "autoformulation", "ormind"), "baselines"),
    "semopt": "search",
}

REGISTRY: Registry[Harness] = Registry("harness")
_GROUP_OF: dict[str, str] = dict(BUILTIN)
for _name in BUILTIN:
    REGISTRY.add_lazy(_name, f"opteval.evalcore.harnesses.{_name}:HARNESS")

H = TypeVar("H", bound=Harness)


class GroupView(Mapping[str, Harness]):
    """The harnesses of one group (``HARNESSES``, ``BASELINES``, ``SEARCH``), resolved on access."""

    def __init__(self, group: str) -> None:
        self.group = group

    def _names(self) -> list[str]:
        return [n for n in REGISTRY.names() if _GROUP_OF.get(n, "harnesses") == self.group]

    def __getitem__(self, name: str) -> Harness:
        if name not in self._names():
            raise UnknownNameError(f"{self.group} harness", name, self._names())
        return REGISTRY[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


HARNESSES, BASELINES, SEARCH = (GroupView(g) for g in GROUPS)


def register_harness(harness: H, *, group: str = "harnesses", prompts: str | Path | None = None) -> H:
    """Register ``harness`` under its ``name`` (and its prompt folder, if given); returns it.
    A second, different harness under a taken name is an error naming both."""
    if group not in GROUPS:
        raise RegistryError(f"harness {harness.name!r}: unknown group {group!r}; known {list(GROUPS)}")
    old = REGISTRY.existing(harness.name)
    if old is not None and type(old) is not type(harness):
        raise RegistryError(f"harness name {harness.name!r} is taken by {type(old).__qualname__} "
                            f"({type(old).__module__})")
    if prompts is not None:
        register_prompt_dir(str(getattr(harness, "prompt_dir", harness.name)), Path(prompts))
    _GROUP_OF[harness.name] = group
    REGISTRY.add(harness.name, harness, replace=True)
    return harness


def all_harnesses() -> dict[str, Harness]:
    """Every harness, each resolved (imports the built-in modules)."""
    return {name: REGISTRY[name] for name in REGISTRY.names()}


def group_of(name: str) -> str:
    return _GROUP_OF.get(name, "harnesses")


def get_harness(name: str) -> Harness:
    """The harness ``name``; ``<module>:<name>`` imports ``<module>`` first (it registers itself)."""
    module, _, short = name.rpartition(":")
    if module and short not in REGISTRY:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownNameError("harness", f"{name} (cannot import module {module!r}: {exc})",
                                   REGISTRY.names()) from None
    return REGISTRY[short]
