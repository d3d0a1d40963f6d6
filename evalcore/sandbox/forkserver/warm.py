"""Warm the fork server before its first fork: import the solvers, run one tiny solve with each.

Why: every child is a copy-on-write fork of the server, so whatever the server has imported,
initialised or cached, no child pays for again.
"""
from __future__ import annotations

import os
import tempfile

from evalcore.sandbox.forkserver.isolation import HEAVY_MODULES


def warm_imports(modules: tuple[str, ...] = HEAVY_MODULES) -> list[str]:
    """Import ``modules`` (those installed), the child's own modules and the capture hooks;
    return the modules that imported."""
    for k, v in (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
                 ("MPLBACKEND", "Agg")):
        os.environ.setdefault(k, v)
    loaded = []
    for name in modules:
        try:
            __import__(name)
            loaded.append(name)
        except Exception:  # not installed, or broken: the program gets the ImportError itself
            pass
    import atexit  # noqa: F401
    import fcntl  # noqa: F401
    import inspect  # noqa: F401 - used by the hooks inside the sandbox
    import linecache  # noqa: F401
    import numbers  # noqa: F401
    import threading  # noqa: F401

    from evalcore.sandbox import capture, child  # noqa: F401

    warm_solvers(loaded)
    capture.install()
    tempfile.gettempdir()
    return loaded


def warm_solvers(loaded: list[str]) -> None:
    """Solve one tiny model with PuLP/CBC and with SCIP in the server itself.

    Their first solve in a process pulls in lazily imported modules and builds caches; doing
    it once here means no forked child pays for it (measured: the child's first PuLP solve
    drops by several ms; each prepared child also runs one PuLP solve of its own before it
    says ready, ``child._warm_up``). HiGHS is not warmed: it would start a thread pool in the
    server, which must stay single-threaded to fork and unshare safely (and in a child, whose
    threads count against its process limit).
    """
    if "pulp" in loaded:
        try:
            import pulp

            prob = pulp.LpProblem("warm", pulp.LpMaximize)
            x = pulp.LpVariable("x", 0, 1, cat="Integer")
            prob += x
            prob.solve(pulp.PULP_CBC_CMD(msg=0))
        except Exception:  # a broken solver install: programs will see the error themselves
            pass
    if "pyscipopt" in loaded:
        try:
            import pyscipopt

            m = pyscipopt.Model()
            m.hideOutput()
            y = m.addVar(vtype="I", lb=0, ub=1)
            m.setObjective(y, "maximize")
            m.optimize()
            m.freeProb()
        except Exception:
            pass
