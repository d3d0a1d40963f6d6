"""Harnesses: the control loops around a frozen model (one module per method).

The registry (``registry.py``) knows every built-in harness by name without importing it:
``HARNESSES`` (the study's own and the post-trained models' protocols), ``BASELINES`` (the six
adapted baselines of Table 1) and ``SEARCH`` (SemOPT) are views of it by group;
``get_harness(name)`` imports and returns one (``<module>:<name>`` imports a harness defined
outside this package; an installed package adds its own through the ``opteval`` entry point) and
names the known ones when it fails. See docs/extending.md for how to add a harness.
"""
from __future__ import annotations

from opteval.evalcore.harnesses.base import Budgets, Executor, Harness, HarnessContext, SessionHandle
from opteval.evalcore.harnesses.registry import BASELINES, HARNESSES, SEARCH, get_harness, register_harness

__all__ = ["HARNESSES", "BASELINES", "SEARCH", "get_harness", "register_harness", "Budgets", "Executor", "Harness",
           "HarnessContext", "SessionHandle"]
