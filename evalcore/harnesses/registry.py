"""The harness registry: the one way a harness becomes a method's ``harness:``.

A harness module ends with ``HARNESS = register_harness(MyHarness(), group=...)``. The modules
of this package are registered when it is imported (``evalcore/harnesses/__init__.py``
imports every public module it holds, so adding one is: the module, its prompts, a method
YAML). A harness living elsewhere (a user's package, a test) is named in its method YAML as
``harness: <module>:<name>``: ``get_harness`` imports ``<module>`` (which registers it) on
first use, in the driver and in every worker alike. ``prompts=`` points a harness's
``prompt_dir`` at a folder outside ``prompts/`` (shared fragments still come from
``prompts/_shared``).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TypeVar

from evalcore.harnesses._common import register_prompt_dir
from evalcore.harnesses.base import Harness

GROUPS = ("harnesses", "baselines", "search")
# by group: the study's own harnesses and the post-trained models' protocols; the six adapted
# baselines of Table 1; search-based methods (SemOPT: tens of calls per trajectory)
HARNESSES: dict[str, Harness] = {}
BASELINES: dict[str, Harness] = {}
SEARCH: dict[str, Harness] = {}
_BY_GROUP = dict(zip(GROUPS, (HARNESSES, BASELINES, SEARCH), strict=True))

H = TypeVar("H", bound=Harness)


def register_harness(harness: H, *, group: str = "harnesses", prompts: str | Path | None = None) -> H:
    """Register ``harness`` under its ``name`` (and its prompt folder, if given); returns it.
    A second, different harness under a taken name is an error naming both."""
    if group not in _BY_GROUP:
        raise ValueError(f"harness {harness.name!r}: unknown group {group!r}; known {list(GROUPS)}")
    old = all_harnesses().get(harness.name)
    if old is not None and type(old) is not type(harness):
        raise ValueError(f"harness name {harness.name!r} is taken by {type(old).__qualname__} "
                         f"({type(old).__module__})")
    if prompts is not None:
        register_prompt_dir(str(getattr(harness, "prompt_dir", harness.name)), Path(prompts))
    _BY_GROUP[group][harness.name] = harness
    return harness


def all_harnesses() -> dict[str, Harness]:
    return {**HARNESSES, **BASELINES, **SEARCH}


def get_harness(name: str) -> Harness:
    """The harness ``name``; ``<module>:<name>`` imports ``<module>`` first (it registers itself)."""
    module, _, short = name.rpartition(":")
    if module and short not in all_harnesses():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise KeyError(f"harness {name!r}: cannot import module {module!r} ({exc})") from None
    try:
        return all_harnesses()[short]
    except KeyError:
        raise KeyError(f"unknown harness {name!r}; known: {sorted(all_harnesses())}") from None
