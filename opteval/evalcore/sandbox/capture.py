"""Model capture: wrap the solve entry points of PuLP, PySCIPOpt, highspy, scipy.optimize,
gurobipy, coptpy and Pyomo (``OptSolver.solve``: SolverFactory's solvers).

Installed once in the fork server, so every sandboxed program inherits them. After each solve
the wrapper sends the model's structure to the fork server over the private channel:
``{"library", "sense", "n_vars", "n_continuous", "n_binary", "n_integer", "n_constraints",
"status", "status_raw", "objective"}``. These are the features SIRL's instance-enhanced
self-consistency votes on. Each record also carries ``capture`` (``ok``, ``unsupported``,
``capped``, ``error`` or ``off``), ``capture_reason`` and, when ``ok``, ``form``: the whole
formulation and decision vector (``capture_forms.py``), which ``opteval.evalcore.formulation``
fingerprints and checks. A hook never changes what the solve returns and never raises:
a capture failure is reported as ``{"library", "error"}`` instead.

SciPy's ``linprog``/``milp`` always minimize: a maximization is written by negating ``c``
and submitting ``-res.fun``, so the solver's sense says nothing about the problem's. Their
records carry ``sense: None`` and ``solver_sense: "min"``; the problem's sense is decided
later from the submission (``opteval.evalcore.selection.resolve_sense``).
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import inspect
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from opteval.evalcore.sandbox import capture_forms, child
from opteval.evalcore.sandbox.protocol import ChildMsg

MAX_MODELS = 200
_count = 0
# The formulation and decision vector of each solve (capture_forms.py); the fork server reads
# OPTEVAL_CAPTURE_FORMULATION=0 at install() to switch it off (bench/bench_sandbox.py's baseline).
FORMULATION = True


def _norm_status(raw: Any) -> str:
    s = str(raw).strip().lower()
    if s in ("optimal", "optimal solution found", "1") or s.startswith("optimal"):
        return "optimal"
    if "infeasible or unbounded" in s or s == "inforunbd":
        return "other"
    if "infeasible" in s:
        return "infeasible"
    if "unbounded" in s:
        return "unbounded"
    return "other"


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _with_form(rec: dict[str, Any], form: Callable[[], dict[str, Any]] | None) -> dict[str, Any]:
    """Add the formulation (``capture: ok``) or why there is none (``unsupported``, ``capped``,
    ``error``, ``off``) to a record; never raises."""
    if form is None or not FORMULATION:
        return {**rec, "capture": "off" if FORMULATION is False else "unsupported",
                "capture_reason": "capture switched off" if FORMULATION is False else "no formulation reader"}
    try:
        f = form()
    except capture_forms.Unsupported as exc:
        return {**rec, "capture": "unsupported", "capture_reason": str(exc)[:300]}
    except capture_forms.Capped as exc:
        return {**rec, "capture": "capped", "capture_reason": str(exc)}
    except Exception as exc:
        return {**rec, "capture": "error", "capture_reason": f"{type(exc).__name__}: {exc}"[:300]}
    out = {**rec, "capture": "ok", "capture_reason": None, "form": f}
    if len(json.dumps(out)) > capture_forms.MAX_FORM_BYTES:
        return {**rec, "capture": "capped", "capture_reason": f"record over {capture_forms.MAX_FORM_BYTES} bytes"}
    return out


def _emit(library: str, build: Callable[[], dict[str, Any]],
          form: Callable[[], dict[str, Any]] | None = None) -> None:
    global _count
    if child._chan is None or _count >= MAX_MODELS:
        return
    _count += 1
    try:
        rec = _with_form({"library": library, **build()}, form)
    except Exception as exc:
        rec = {"library": library, "error": f"{type(exc).__name__}: {exc}"[:300]}
    child.emit({"t": ChildMsg.MODEL, "v": rec})


def _record(library: str, sense: str | None, cont: int, binary: int, integer: int, ncons: int,
            status_raw: Any, objective: Any) -> dict[str, Any]:
    status = _norm_status(status_raw)
    return {
        "sense": sense,
        "n_vars": cont + binary + integer,
        "n_continuous": cont,
        "n_binary": binary,
        "n_integer": integer,
        "n_constraints": ncons,
        "status": status,
        "status_raw": str(status_raw),
        "objective": _num(objective) if status == "optimal" else None,
    }


# ---------------------------------------------------------------- PuLP


def _count_vars(columns: Iterable[tuple[bool, Any, Any]]) -> tuple[int, int, int]:
    """(continuous, binary, integer) from (is_integer, lower, upper) per column: an integer
    column bounded within [0, 1] is binary (None bounds mean unbounded)."""
    cont = binary = integer = 0
    for is_int, lo, up in columns:
        if not is_int:
            cont += 1
        elif lo is not None and up is not None and lo >= 0 and up <= 1:
            binary += 1
        else:
            integer += 1
    return cont, binary, integer


def _pulp_features(prob: Any) -> dict[str, Any]:
    # deferred: runs after a PuLP solve; capture imports no solver at load
    import pulp

    cont, binary, integer = _count_vars((v.cat in (pulp.LpInteger, pulp.LpBinary), v.lowBound, v.upBound)
                                        for v in prob.variables())
    raw = pulp.LpStatus.get(prob.status, prob.status)
    obj = pulp.value(prob.objective) if prob.objective is not None else None
    return _record("pulp", "max" if prob.sense == pulp.LpMaximize else "min", cont, binary, integer,
                   len(prob.constraints), raw, obj)


def _hook_pulp() -> None:
    # deferred: install() skips this hook where PuLP is not installed
    import pulp

    orig = pulp.LpProblem.solve
    if getattr(orig, "_opteval_hook", False):
        return

    @functools.wraps(orig)
    def solve(self: Any, *args: Any, **kwargs: Any) -> Any:
        status = orig(self, *args, **kwargs)
        _emit("pulp", lambda: _pulp_features(self), lambda: capture_forms.pulp_form(self))
        return status

    solve._opteval_hook = True  # type: ignore[attr-defined]
    pulp.LpProblem.solve = solve


# ---------------------------------------------------------------- PySCIPOpt


def _scip_features(m: Any) -> dict[str, Any]:
    cont = binary = integer = 0
    for v in m.getVars():
        t = v.vtype()
        if t == "BINARY":
            binary += 1
        elif t in ("INTEGER", "IMPLINT"):
            integer += 1
        else:
            cont += 1
    try:
        ncons = m.getNConss(transformed=False)
    except TypeError:
        ncons = m.getNConss()
    status = m.getStatus()
    obj = m.getObjVal() if status == "optimal" else None
    sense = "max" if str(m.getObjectiveSense()).startswith("max") else "min"
    return _record("pyscipopt", sense, cont, binary, integer, ncons, status, obj)


def _hook_pyscipopt() -> None:
    # deferred: install() skips this hook where PySCIPOpt is not installed
    import pyscipopt
    import pyscipopt.scip as scip

    base = scip.Model
    if getattr(base, "_opteval_hook", False):
        return

    class Model(base):  # type: ignore[misc, valid-type]
        """pyscipopt.Model with model capture (the extension type itself cannot be patched)."""

        _opteval_hook = True

        def optimize(self) -> None:
            base.optimize(self)
            _emit("pyscipopt", lambda: _scip_features(self), lambda: capture_forms.scip_form(self))

        if hasattr(base, "optimizeNogil"):
            def optimizeNogil(self) -> None:
                base.optimizeNogil(self)
                _emit("pyscipopt", lambda: _scip_features(self), lambda: capture_forms.scip_form(self))

    Model.__name__ = Model.__qualname__ = "Model"
    Model.__module__ = "pyscipopt.scip"
    pyscipopt.Model = Model  # type: ignore[misc]  # replacing the extension class is the point
    scip.Model = Model  # type: ignore[misc]


# ---------------------------------------------------------------- highspy


def _highs_features(h: Any) -> dict[str, Any]:
    # deferred: runs after a HiGHS solve; capture imports no solver at load
    import highspy

    lp = h.getLp()
    n = int(lp.num_col_)
    integ = list(lp.integrality_) if len(lp.integrality_) else []
    lo, up = list(lp.col_lower_), list(lp.col_upper_)
    kinteger = highspy.HighsVarType.kInteger
    cont, binary, integer = _count_vars((bool(integ) and integ[j] == kinteger, lo[j], up[j]) for j in range(n))
    raw = h.modelStatusToString(h.getModelStatus())
    sense = "max" if lp.sense_ == highspy.ObjSense.kMaximize else "min"
    return _record("highspy", sense, cont, binary, integer, int(lp.num_row_), raw,
                   h.getInfo().objective_function_value)


def _hook_highspy() -> None:
    # deferred: install() skips this hook where highspy is not installed
    from highspy import _core

    cls = _core._Highs
    orig = cls.run
    if getattr(orig, "_opteval_hook", False):
        return

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        r = orig(self, *args, **kwargs)
        _emit("highspy", lambda: _highs_features(self), lambda: capture_forms.highs_form(self))
        return r

    run._opteval_hook = True  # type: ignore[attr-defined]
    cls.run = run  # type: ignore[method-assign]  # the capture hook


# ---------------------------------------------------------------- scipy.optimize


def _rows(a: Any) -> int:
    if a is None:
        return 0
    shape = getattr(a, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 1 else (1 if shape[0] else 0)
    return len(a)


def _bounds_arrays(bounds: Any, n: int) -> tuple[list[float], list[float]]:
    # deferred: runs inside a SciPy solve; no third party at capture's load
    import numpy as np

    if bounds is None:
        return [0.0] * n, [math.inf] * n
    if hasattr(bounds, "lb"):
        lb = np.broadcast_to(np.asarray(bounds.lb, dtype=float), (n,))
        ub = np.broadcast_to(np.asarray(bounds.ub, dtype=float), (n,))
        return [float(x) for x in lb], [float(x) for x in ub]
    b = list(bounds)
    if len(b) == 2 and not isinstance(b[0], (list, tuple)):
        b = [b] * n
    lo = [(-math.inf if x[0] is None else float(x[0])) for x in b]
    up = [(math.inf if x[1] is None else float(x[1])) for x in b]
    return lo, up


def _split_vars(integrality: Any, lo: list[float], up: list[float], n: int) -> tuple[int, int, int]:
    # deferred: runs inside a SciPy solve; no third party at capture's load
    import numpy as np

    if integrality is None:
        return n, 0, 0
    integ = np.broadcast_to(np.asarray(integrality), (n,))
    return _count_vars((bool(integ[j]), lo[j], up[j]) for j in range(n))


def _scipy_status(res: Any) -> str:
    status = getattr(res, "status", None)
    names = {0: "optimal", 2: "infeasible", 3: "unbounded"}
    return names[status] if status in names else str(getattr(res, "message", "other"))


def _linprog_features(bound: inspect.BoundArguments, res: Any) -> dict[str, Any]:
    # deferred: runs after a linprog solve; no third party at capture's load
    import numpy as np

    a = bound.arguments
    n = int(np.asarray(a["c"]).size)
    lo, up = _bounds_arrays(a.get("bounds", (0, None)), n)
    cont, binary, integer = _split_vars(a.get("integrality"), lo, up, n)
    ncons = _rows(a.get("A_ub")) + _rows(a.get("A_eq"))
    return {**_record("scipy.linprog", None, cont, binary, integer, ncons, _scipy_status(res), getattr(res, "fun", None)),
            "solver_sense": "min"}


def _milp_features(bound: inspect.BoundArguments, res: Any) -> dict[str, Any]:
    # deferred: runs after a milp solve; no third party at capture's load
    import numpy as np

    a = bound.arguments
    n = int(np.asarray(a["c"]).size)
    lo, up = _bounds_arrays(a.get("bounds"), n)
    cont, binary, integer = _split_vars(a.get("integrality"), lo, up, n)
    cons = a.get("constraints")
    if cons is None:
        ncons = 0
    elif hasattr(cons, "A") or (isinstance(cons, tuple) and len(cons) == 3 and not hasattr(cons[0], "A")):
        ncons = _rows(cons.A if hasattr(cons, "A") else np.atleast_2d(cons[0]))
    else:
        ncons = sum(_rows(c.A if hasattr(c, "A") else np.atleast_2d(c[0])) for c in cons)
    return {**_record("scipy.milp", None, cont, binary, integer, ncons, _scipy_status(res), getattr(res, "fun", None)),
            "solver_sense": "min"}


def _wrap_scipy(name: str, lib: str, features: Callable[[inspect.BoundArguments, Any], dict[str, Any]],
                form: Callable[[dict[str, Any], list[float], list[float], Any], dict[str, Any]],
                default_bounds: Any) -> None:
    # deferred: install() skips the SciPy hooks where SciPy is absent
    import numpy as np
    import scipy.optimize as so

    orig = getattr(so, name, None)
    if orig is None or getattr(orig, "_opteval_hook", False):
        return
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        res = orig(*args, **kwargs)
        bound: list[inspect.BoundArguments] = []

        def arguments() -> inspect.BoundArguments:
            if not bound:
                b = sig.bind(*args, **kwargs)
                b.apply_defaults()
                bound.append(b)
            return bound[0]

        def build_form() -> dict[str, Any]:
            a = arguments().arguments
            n = int(np.asarray(a["c"]).size)
            bounds = a.get("bounds")
            lo, up = _bounds_arrays(default_bounds if bounds is None else bounds, n)
            return form(a, lo, up, res)

        _emit(lib, lambda: features(arguments(), res), build_form)
        return res

    wrapper._opteval_hook = True  # type: ignore[attr-defined]
    setattr(so, name, wrapper)


# ---------------------------------------------------------------- gurobipy and coptpy

_GRB_STATUS = {2: "optimal", 3: "infeasible", 5: "unbounded"}
_COPT_STATUS = {1: "optimal", 2: "infeasible", 3: "unbounded"}


def _gurobi_features(m: Any) -> dict[str, Any]:
    # VType: C continuous, B binary, I integer, S semi-continuous, N semi-integer
    cont, binary, integer = _count_vars((v.VType in ("B", "I", "N"), v.LB, v.UB) for v in m.getVars())
    ncons = int(m.NumConstrs) + int(m.NumQConstrs) + int(m.NumSOS) + int(m.NumGenConstrs)
    code = int(m.Status)
    status = _GRB_STATUS.get(code, f"gurobi status {code}")
    return _record("gurobipy", "max" if int(m.ModelSense) == -1 else "min", cont, binary, integer, ncons,
                   status, m.ObjVal if status == "optimal" else None)


def _copt_features(m: Any) -> dict[str, Any]:
    cont, binary, integer = _count_vars((v.getType() in ("B", "I"), v.LB, v.UB) for v in m.getVars())
    ncons = sum(int(m.getAttr(a)) for a in ("Rows", "QConstrs", "SOSs", "Indicators"))
    code = int(m.status)
    status = _COPT_STATUS.get(code, f"copt status {code}")
    return _record("coptpy", "max" if int(m.ObjSense) == -1 else "min", cont, binary, integer, ncons,
                   status, m.objval if status == "optimal" else None)


def _wrap_method(cls: Any, name: str, library: str, features: Callable[[Any], dict[str, Any]],
                 form: Callable[[Any], dict[str, Any]]) -> None:
    orig = getattr(cls, name, None)
    if orig is None or getattr(orig, "_opteval_hook", False):
        return

    @functools.wraps(orig)
    def solve(self: Any, *args: Any, **kwargs: Any) -> Any:
        r = orig(self, *args, **kwargs)
        _emit(library, lambda: features(self), lambda: form(self))
        return r

    solve._opteval_hook = True  # type: ignore[attr-defined]
    setattr(cls, name, solve)


def _hook_gurobipy() -> None:
    # deferred: optional extra opteval[solvers]; install() skips it
    import gurobipy

    _wrap_method(gurobipy.Model, "optimize", "gurobipy", _gurobi_features, capture_forms.gurobi_form)


def _hook_coptpy() -> None:
    # deferred: optional extra opteval[solvers]; install() skips it
    import coptpy

    for name in ("solve", "solveLP"):
        _wrap_method(coptpy.Model, name, "coptpy", _copt_features, capture_forms.copt_form)


# ---------------------------------------------------------------- Pyomo


def _pyomo_features(model: Any, results: Any) -> dict[str, Any]:
    # deferred: after a Pyomo solve only; Pyomo is hooked on first import
    from pyomo.core import Objective, Var, maximize, value

    cont = binary = integer = 0
    for v in model.component_data_objects(Var, descend_into=True):
        if v.is_binary():
            binary += 1
        elif v.is_integer():
            integer += 1
        else:
            cont += 1
    objs = list(model.component_data_objects(Objective, active=True, descend_into=True))
    sense = ("max" if objs[0].sense == maximize else "min") if objs else None
    ncons = sum(1 for _ in model.component_data_objects(_pyomo_constraint(), active=True, descend_into=True))
    raw = results.solver.termination_condition
    obj = value(objs[0], exception=False) if objs else None
    if obj is None and objs:  # load_solutions=False: the incumbent's value is in the results
        bound = results.problem.upper_bound if sense == "min" else results.problem.lower_bound
        obj = bound
    return _record("pyomo", sense, cont, binary, integer, ncons, raw, obj)


def _pyomo_constraint() -> Any:
    # deferred: after a Pyomo solve only; Pyomo is hooked on first import
    from pyomo.core import Constraint

    return Constraint


_PYOMO_SOLVERS = "pyomo.opt.base.solvers"


class _PyomoImportHook(importlib.abc.MetaPathFinder):
    """Patch Pyomo when a program imports it: importing Pyomo in the fork server just to hook it
    would cost every server 0.26 s at start when no program uses it (pre-imported, it is hooked
    at install)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _PYOMO_SOLVERS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            orig_exec(module)
            _patch_pyomo(module.OptSolver)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # run the patch after the module
        return spec


def _hook_pyomo() -> None:
    mod = sys.modules.get(_PYOMO_SOLVERS)
    if mod is not None:
        _patch_pyomo(mod.OptSolver)
    elif not any(isinstance(f, _PyomoImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _PyomoImportHook())


def _patch_pyomo(OptSolver: Any) -> None:
    orig = OptSolver.solve
    if getattr(orig, "_opteval_hook", False):
        return

    @functools.wraps(orig)
    def solve(self: Any, *args: Any, **kwargs: Any) -> Any:
        results = orig(self, *args, **kwargs)
        if args:
            model = args[0]
            _emit("pyomo", lambda: _pyomo_features(model, results),
                  lambda: capture_forms.pyomo_form(model, results))
        return results

    solve._opteval_hook = True  # type: ignore[attr-defined]
    OptSolver.solve = solve


def install() -> list[str]:
    """Install every hook whose library imports; return the names installed."""
    global FORMULATION
    FORMULATION = os.environ.get("OPTEVAL_CAPTURE_FORMULATION", "1") != "0"
    done = []
    for name, fn in (
        ("pulp", _hook_pulp),
        ("pyscipopt", _hook_pyscipopt),
        ("highspy", _hook_highspy),
        ("scipy.linprog", lambda: _wrap_scipy("linprog", "scipy.linprog", _linprog_features,
                                              capture_forms.linprog_form, (0, None))),
        ("scipy.milp", lambda: _wrap_scipy("milp", "scipy.milp", _milp_features, capture_forms.milp_form, (0, math.inf))),
        ("gurobipy", _hook_gurobipy),
        ("coptpy", _hook_coptpy),
        ("pyomo", _hook_pyomo),
    ):
        try:
            fn()
            done.append(name)
        except Exception:
            pass
    return done
