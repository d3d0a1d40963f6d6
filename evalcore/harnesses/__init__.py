"""Harnesses: the control loops around a frozen model (one module per method).

Every public module of this package is imported here, and each registers its ``HARNESS``
(``registry.register_harness``): ``HARNESSES`` (the study's own and the post-trained models'
protocols), ``BASELINES`` (the six adapted baselines of Table 1) and ``SEARCH`` (SemOPT) are
filled by those registrations; ``get_harness(name)`` looks one up (``<module>:<name>`` imports a
harness defined outside this package) and names the known ones when it fails. See
docs/extending.md for how to add a harness.
"""
from __future__ import annotations

import importlib
import pkgutil

from evalcore.harnesses.base import Budgets, Executor, Harness, HarnessContext, SessionHandle
from evalcore.harnesses.registry import BASELINES, HARNESSES, SEARCH, get_harness, register_harness

# modules of this package that are not harnesses
_SUPPORT = frozenset({"base", "registry", "template", "version"})
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name not in _SUPPORT:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["HARNESSES", "BASELINES", "SEARCH", "get_harness", "register_harness", "Budgets", "Executor", "Harness",
           "HarnessContext", "SessionHandle"]
