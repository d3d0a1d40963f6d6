"""The formulation behind one solve, read from each library's model object (called by the hooks
in ``capture.py``, inside the sandbox, after the solve returned).

Why a plain dict: it crosses the sandbox's private channel as JSON and is fingerprinted and
checked on the host (``opteval.evalcore.formulation``) without any solver library. The shape::

    {"sense": "min"|"max", "vars": [[name, "C"|"I", lb|None, ub|None], ...],
     "rows": [[[j, ...], [a_j, ...], "<="|">="|"==", rhs], ...],
     "obj": [[j, ...], [c_j, ...]], "const": c0, "x": [x_j, ...] | None}

A ranged row ``lo <= a.x <= hi`` becomes two rows (one ``==`` when ``lo == hi``); an infinite
bound (|v| >= 1e20, each library's own infinity included) is None. What is not a linear or
integer-linear model raises :class:`Unsupported` with the reason; a model over the size cap
raises :class:`Capped`: both are recorded, never a failure of the program.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# Size cap per model: variables + constraint nonzeros. A record must also fit one datagram of the
# sandbox's channel (the fork server reads 64 KiB at a time): MAX_FORM_BYTES, checked in capture.py.
MAX_FORM_ENTRIES = 4000
MAX_FORM_BYTES = 60_000
MAX_NAME = 40
INF = 1e20


class Unsupported(Exception):
    """The model is not linear/integer-linear, or the library hides part of it."""


class Capped(Exception):
    """The model is larger than the capture's size cap."""


def _bound(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if (math.isnan(f) or abs(f) >= INF) else f


def _val(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class FormBuilder:
    """Accumulates one model's variables, rows and objective in the shape above."""

    def __init__(self, sense: str) -> None:
        self.sense = sense
        self.vars: list[list[Any]] = []
        self.rows: list[list[Any]] = []
        self.obj: tuple[list[int], list[float]] = ([], [])
        self.const = 0.0
        self.x: list[float | None] | None = None
        self._entries = 0

    def _grow(self, n: int) -> None:
        self._entries += n
        if self._entries > MAX_FORM_ENTRIES:
            raise Capped(f"more than {MAX_FORM_ENTRIES} variables + nonzeros")

    def var(self, name: Any, is_int: bool, lb: Any, ub: Any) -> int:
        self._grow(1)
        self.vars.append([str(name)[:MAX_NAME], "I" if is_int else "C", _bound(lb), _bound(ub)])
        return len(self.vars) - 1

    def row(self, pairs: Iterable[tuple[int, Any]], lo: Any, hi: Any) -> None:
        idx: list[int] = []
        coef: list[float] = []
        for j, a in pairs:
            a = float(a)
            if a != 0.0:
                idx.append(int(j))
                coef.append(a)
        self._grow(len(idx))
        lo, hi = _bound(lo), _bound(hi)
        if lo is not None and hi is not None and lo == hi:
            self.rows.append([idx, coef, "==", lo])
            return
        if hi is not None:
            self.rows.append([idx, coef, "<=", hi])
        if lo is not None:
            self.rows.append([list(idx), list(coef), ">=", lo])

    def objective(self, pairs: Iterable[tuple[int, Any]], constant: Any = 0.0) -> None:
        idx, coef = [], []
        for j, c in pairs:
            c = float(c)
            if c != 0.0:
                idx.append(int(j))
                coef.append(c)
        self.obj = (idx, coef)
        self.const = float(constant or 0.0)

    def values(self, xs: Iterable[Any] | None) -> None:
        self.x = None if xs is None else [_val(v) for v in xs]

    def done(self) -> dict[str, Any]:
        return {"sense": self.sense, "vars": self.vars, "rows": self.rows,
                "obj": [self.obj[0], self.obj[1]], "const": self.const, "x": self.x}


# ---------------------------------------------------------------- PuLP


def pulp_form(prob: Any) -> dict[str, Any]:
    # deferred: called after a PuLP solve; this module imports no solver
    import pulp

    b = FormBuilder("max" if prob.sense == pulp.LpMaximize else "min")
    vs = prob.variables()
    index = {v.name: b.var(v.name, v.cat in (pulp.LpInteger, pulp.LpBinary), v.lowBound, v.upBound) for v in vs}
    for c in prob.constraints.values():
        rhs = -float(c.constant or 0.0)
        pairs = [(index[v.name], a) for v, a in c.items()]
        lo, hi = {pulp.LpConstraintLE: (None, rhs), pulp.LpConstraintGE: (rhs, None)}.get(c.sense, (rhs, rhs))
        b.row(pairs, lo, hi)
    if prob.objective is not None:
        b.objective(((index[v.name], a) for v, a in prob.objective.items()), prob.objective.constant)
    b.values([v.varValue for v in vs] if any(v.varValue is not None for v in vs) else None)
    return b.done()


# ---------------------------------------------------------------- PySCIPOpt


def scip_form(m: Any) -> dict[str, Any]:
    sense = "max" if str(m.getObjectiveSense()).startswith("max") else "min"
    b = FormBuilder(sense)
    vs = m.getVars()
    index = {v.name: b.var(v.name, v.vtype() in ("BINARY", "INTEGER", "IMPLINT"), v.getLbOriginal(),
                           v.getUbOriginal()) for v in vs}
    for cons in m.getConss(transformed=False):
        if cons.getConshdlrName() != "linear":
            raise Unsupported(f"constraint {cons.name} is {cons.getConshdlrName()}, not linear")
        vals = m.getValsLinear(cons)
        b.row(((index[n], a) for n, a in vals.items()), m.getLhs(cons), m.getRhs(cons))
    obj = m.getObjective()
    pairs, const = [], float(m.getObjoffset())
    for term, c in obj.terms.items():
        names = [v.name for v in term.vartuple]
        if len(names) > 1:
            raise Unsupported("quadratic objective")
        if names:
            pairs.append((index[names[0]], c))
        else:
            const += float(c)
    b.objective(pairs, const)
    sol = m.getBestSol() if m.getNSols() > 0 else None
    b.values([m.getSolVal(sol, v) for v in vs] if sol is not None else None)
    return b.done()


# ---------------------------------------------------------------- highspy


def highs_form(h: Any) -> dict[str, Any]:
    # deferred: called after a HiGHS solve; this module imports no solver
    import highspy

    lp = h.getLp()
    if h.getModel().hessian_.dim_ > 0:
        raise Unsupported("quadratic objective (Hessian)")
    n, m = int(lp.num_col_), int(lp.num_row_)
    b = FormBuilder("max" if lp.sense_ == highspy.ObjSense.kMaximize else "min")
    names = list(lp.col_names_) or [f"c{j}" for j in range(n)]
    integ = list(lp.integrality_)
    kint = highspy.HighsVarType.kInteger
    lo, up = list(lp.col_lower_), list(lp.col_upper_)
    for j in range(n):
        b.var(names[j], bool(integ) and integ[j] == kint, lo[j], up[j])
    a = lp.a_matrix_
    start, index, value = list(a.start_), list(a.index_), list(a.value_)
    rows: list[list[tuple[int, float]]] = [[] for _ in range(m)]
    if a.format_ == highspy.MatrixFormat.kRowwise:
        for i in range(m):
            rows[i] = [(index[k], value[k]) for k in range(start[i], start[i + 1])]
    else:
        for j in range(n):
            for k in range(start[j], start[j + 1]):
                rows[index[k]].append((j, value[k]))
    rlo, rup = list(lp.row_lower_), list(lp.row_upper_)
    for i in range(m):
        b.row(rows[i], rlo[i], rup[i])
    b.objective(enumerate(lp.col_cost_), lp.offset_)
    sol = h.getSolution()
    b.values(list(sol.col_value) if sol.value_valid else None)
    return b.done()


# ---------------------------------------------------------------- scipy.optimize


def _matrix_rows(a: Any) -> list[list[tuple[int, float]]]:
    # deferred: called after a SciPy solve; this module imports no solver
    import numpy as np
    import scipy.sparse as sp

    mat = sp.csr_array(a if sp.issparse(a) else np.atleast_2d(np.asarray(a, dtype=float)))
    return [list(zip(mat.indices[mat.indptr[i]:mat.indptr[i + 1]].tolist(),
                     mat.data[mat.indptr[i]:mat.indptr[i + 1]].tolist(), strict=True))
            for i in range(mat.shape[0])]


def _scipy_vars(b: FormBuilder, n: int, integrality: Any, lo: list[float], up: list[float]) -> None:
    # deferred: called after a SciPy solve; this module imports no solver
    import numpy as np

    integ = np.zeros(n) if integrality is None else np.broadcast_to(np.asarray(integrality), (n,))
    if np.any(integ > 1):
        raise Unsupported("semi-continuous or semi-integer variables")
    for j in range(n):
        b.var(f"x{j}", bool(integ[j]), lo[j], up[j])


def linprog_form(a: dict[str, Any], lo: list[float], up: list[float], res: Any) -> dict[str, Any]:
    # deferred: called after a linprog solve; no solver at import
    import numpy as np

    c = np.asarray(a["c"], dtype=float).ravel()
    b = FormBuilder("min")
    _scipy_vars(b, c.size, a.get("integrality"), lo, up)
    for key, rhs_key, eq in (("A_ub", "b_ub", False), ("A_eq", "b_eq", True)):
        if a.get(key) is None:
            continue
        rows = _matrix_rows(a[key])
        rhs = np.broadcast_to(np.asarray(a[rhs_key], dtype=float).ravel(), (len(rows),))
        for i, pairs in enumerate(rows):
            b.row(pairs, rhs[i] if eq else None, rhs[i])
    b.objective(enumerate(c.tolist()))
    b.values(getattr(res, "x", None))
    return b.done()


def _milp_constraints(cons: Any) -> list[tuple[Any, Any, Any]]:
    if cons is None:
        return []
    if hasattr(cons, "A") or (isinstance(cons, tuple) and len(cons) == 3 and not hasattr(cons[0], "A")):
        cons = [cons]
    return [(c.A, c.lb, c.ub) if hasattr(c, "A") else (c[0], c[1], c[2]) for c in cons]


def milp_form(a: dict[str, Any], lo: list[float], up: list[float], res: Any) -> dict[str, Any]:
    # deferred: called after a milp solve; no solver at import
    import numpy as np

    c = np.asarray(a["c"], dtype=float).ravel()
    b = FormBuilder("min")
    _scipy_vars(b, c.size, a.get("integrality"), lo, up)
    for mat, clo, cup in _milp_constraints(a.get("constraints")):
        rows = _matrix_rows(mat)
        lows = np.broadcast_to(np.asarray(clo, dtype=float).ravel(), (len(rows),))
        ups = np.broadcast_to(np.asarray(cup, dtype=float).ravel(), (len(rows),))
        for i, pairs in enumerate(rows):
            b.row(pairs, lows[i], ups[i])
    b.objective(enumerate(c.tolist()))
    b.values(getattr(res, "x", None))
    return b.done()


# ---------------------------------------------------------------- gurobipy and coptpy


def gurobi_form(m: Any) -> dict[str, Any]:
    if int(m.NumQConstrs) or int(m.NumSOS) or int(m.NumGenConstrs) or int(m.IsQP) or int(m.IsQCP):
        raise Unsupported("quadratic, SOS or general constraints")
    b = FormBuilder("max" if int(m.ModelSense) == -1 else "min")
    vs = m.getVars()
    if any(v.VType in ("S", "N") for v in vs):
        raise Unsupported("semi-continuous or semi-integer variables")
    index = {v.index: b.var(v.VarName, v.VType in ("B", "I"), v.LB, v.UB) for v in vs}
    for c in m.getConstrs():
        row = m.getRow(c)
        pairs = [(index[row.getVar(k).index], row.getCoeff(k)) for k in range(row.size())]
        rhs = float(c.RHS)
        b.row(pairs, *{"<": (None, rhs), ">": (rhs, None)}.get(c.Sense, (rhs, rhs)))
    b.objective(((index[v.index], v.Obj) for v in vs), m.ObjCon)
    b.values([v.X for v in vs] if int(m.SolCount) > 0 else None)
    return b.done()


def copt_form(m: Any) -> dict[str, Any]:
    if int(m.getAttr("QConstrs")) or int(m.getAttr("SOSs")) or int(m.getAttr("Indicators")) \
            or int(m.getAttr("HasQObj")):
        raise Unsupported("quadratic, SOS or indicator constraints")
    b = FormBuilder("max" if int(m.ObjSense) == -1 else "min")
    vs = m.getVars()
    index = {v.getIdx(): b.var(v.getName(), v.getType() in ("B", "I"), v.LB, v.UB) for v in vs}
    for c in m.getConstrs():
        row = m.getRow(c)
        b.row(((index[row.getVar(k).getIdx()], row.getCoeff(k)) for k in range(row.getSize())), c.LB, c.UB)
    obj = m.getObjective()
    b.objective(((index[obj.getVar(k).getIdx()], obj.getCoeff(k)) for k in range(obj.getSize())),
                obj.getConstant())
    b.values([v.x for v in vs] if int(m.getAttr("HasMipSol")) or int(m.getAttr("HasLpSol")) else None)
    return b.done()


# ---------------------------------------------------------------- Pyomo


def pyomo_form(model: Any, results: Any) -> dict[str, Any]:
    # deferred: after a Pyomo solve only; importing Pyomo costs 0.26 s
    from pyomo.core import Constraint, Objective, maximize, value
    from pyomo.repn import generate_standard_repn

    objs = list(model.component_data_objects(Objective, active=True, descend_into=True))
    if len(objs) != 1:
        raise Unsupported(f"{len(objs)} active objectives")
    b = FormBuilder("max" if objs[0].sense == maximize else "min")
    index: dict[int, int] = {}
    pvars: list[Any] = []

    def col(v: Any) -> int:
        j = index.get(id(v))
        if j is None:
            j = index[id(v)] = b.var(v.name, v.is_integer() or v.is_binary(), v.lb, v.ub)
            pvars.append(v)
        return j

    def linear(expr: Any, what: str) -> tuple[list[tuple[int, Any]], float]:
        repn = generate_standard_repn(expr, compute_values=True, quadratic=False)
        if not repn.is_linear():
            raise Unsupported(f"{what} is not linear")
        return [(col(v), a) for v, a in zip(repn.linear_vars, repn.linear_coefs, strict=True)], \
            float(value(repn.constant))

    pairs, const = linear(objs[0].expr, f"objective {objs[0].name}")
    b.objective(pairs, const)
    for c in model.component_data_objects(Constraint, active=True, descend_into=True):
        pairs, const = linear(c.body, f"constraint {c.name}")
        lo = None if c.lower is None else float(value(c.lower)) - const
        hi = None if c.upper is None else float(value(c.upper)) - const
        b.row(pairs, lo, hi)
    xs = [v.value for v in pvars]
    if all(x is None for x in xs):
        xs = _pyomo_result_values(model, results, pvars)
    b.values(xs if any(x is not None for x in xs) else None)
    return b.done()


def _pyomo_result_values(model: Any, results: Any, pvars: list[Any]) -> list[Any]:
    """A solve with ``load_solutions=False`` left the values in the results: read them through
    the solver's symbol map (what ``model.solutions.load_from`` would load)."""
    try:
        smap = model.solutions.symbol_map[results._smap_id]
        sol = results.solution(0)
    except Exception:
        return [None] * len(pvars)
    by_id = {}
    for symbol, info in sol.variable.items():
        obj = smap.bySymbol.get(symbol)
        if obj is not None:
            by_id[id(obj)] = info.get("Value")
    return [by_id.get(id(v), 0.0 if by_id else None) for v in pvars]
