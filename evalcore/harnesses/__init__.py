"""Harnesses: the control loops around a frozen model (one module per method).

``HARNESSES`` maps a method's harness name to its module's ``HARNESS`` object;
``get_harness(name)`` looks one up and names the known ones when it fails.
See README.md for how to add a harness.
"""
from __future__ import annotations

from evalcore.harnesses import autoformulation, cafa, coe, optimus, ormind, reflexion  # the six baselines
from evalcore.harnesses.base import Budgets, Executor, Harness, HarnessContext, SessionHandle
from evalcore.harnesses.direct import HARNESS as DIRECT
from evalcore.harnesses.llmopt import HARNESS as LLMOPT
from evalcore.harnesses.opticycle import HARNESS as OPTICYCLE
from evalcore.harnesses.optistate import HARNESS as OPTISTATE
from evalcore.harnesses.orlm import HARNESS as ORLM
from evalcore.harnesses.semopt import HARNESS as SEMOPT
from evalcore.harnesses.sirl import HARNESS as SIRL

# the study's own harnesses and the post-trained models' protocols
HARNESSES: dict[str, Harness] = {h.name: h for h in (DIRECT, OPTICYCLE, OPTISTATE, ORLM, SIRL, LLMOPT)}
# the six adapted baselines of Table 1, looked up by get_harness like the above
BASELINES: dict[str, Harness] = {m.HARNESS.name: m.HARNESS for m in (cafa, reflexion, coe, optimus, autoformulation, ormind)}
# search-based methods (SemOPT): tens of calls per trajectory, tested on their own
SEARCH: dict[str, Harness] = {SEMOPT.name: SEMOPT}


def get_harness(name: str) -> Harness:
    try:
        return {**HARNESSES, **BASELINES, **SEARCH}[name]
    except KeyError:
        raise KeyError(f"unknown harness {name!r}; known: {sorted({**HARNESSES, **BASELINES, **SEARCH})}") from None


__all__ = ["HARNESSES", "BASELINES", "SEARCH", "get_harness", "Budgets", "Executor", "Harness", "HarnessContext", "SessionHandle"]
