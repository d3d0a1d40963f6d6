"""Verify the model, not only the number: a canonical fingerprint of a captured formulation, whether
a submitted answer came from a solve (``answer_source``), and a trajectory's model and decision
vector checked against a reference program's (``reference_*``).

The formulation is the dict ``opteval.evalcore.sandbox.capture_forms`` records per solve. Why a
Weisfeiler-Lehman hash: formulation equivalence up to renaming and reordering is graph
isomorphism of the bipartite variable-constraint graph, and colour refinement with coefficient
labels (ORGEval, arXiv 2510.27610; OptiBench-WL) decides it in near-linear time except on
highly regular graphs, where it can call two different models the same (docs/verification.md).
"""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opteval.evalcore.grading import grade

ANSWER_SOURCES = ("solve", "unsolved", "no_submission")
MATCHES = ("same", "different", "unknown")
WL_ROUNDS = 8  # refinement stops earlier once the colour partition is stable
FEAS_TOL = 1e-6  # a row is satisfied within FEAS_TOL * (1 + |rhs|); integrality within 1e-6


def _num(v: float | None) -> str:
    """A coefficient's label: 9 significant digits, so 0.45/0.5 and 0.9 are the same number."""
    if v is None:
        return "inf"
    s = f"{v:.9g}"
    return "0" if s == "-0" else s


def _h(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


@dataclass
class Canonical:
    """A formulation in canonical form: minimise, rows ``<=`` or ``==`` scaled to max |a| = 1,
    singleton rows folded into bounds, unused variables dropped (kept: their original indices)."""

    cols: list[int]  # original variable index per canonical column
    var_labels: list[str]
    rows: list[tuple[list[int], list[float], str, float]]  # canonical column indices
    const: float
    infeasible_bounds: bool = False


def canonical(form: dict[str, Any]) -> Canonical:
    """Normalise what the fingerprint must not see: the objective's sense (max c = min -c), a
    row's positive scale and direction (``a <= b`` = ``-a >= -b``), the sign of an equality,
    bounds written as one-variable rows, binary as integer in [0, 1]."""
    vars_ = form["vars"]
    n = len(vars_)
    sgn = -1.0 if form.get("sense") == "max" else 1.0
    obj = [0.0] * n
    for j, c in zip(*form["obj"], strict=True):
        obj[j] += sgn * float(c)
    lb = [(-math.inf if v[2] is None else float(v[2])) for v in vars_]
    ub = [(math.inf if v[3] is None else float(v[3])) for v in vars_]
    is_int = [v[1] in ("I", "B") for v in vars_]
    rows: list[tuple[list[int], list[float], str, float]] = []
    for idx, coef, sense, rhs in form["rows"]:
        acc: dict[int, float] = {}
        for j, a in zip(idx, coef, strict=True):
            acc[j] = acc.get(j, 0.0) + float(a)
        items = sorted((j, a) for j, a in acc.items() if a != 0.0)
        rhs = float(rhs)
        if sense == ">=":
            items, rhs, sense = [(j, -a) for j, a in items], -rhs, "<="
        if not items:
            continue
        if len(items) == 1:  # a bound written as a row
            j, a = items[0]
            val = rhs / a
            if sense == "==":
                lb[j], ub[j] = max(lb[j], val), min(ub[j], val)
            elif a > 0:
                ub[j] = min(ub[j], val)
            else:
                lb[j] = max(lb[j], val)
            continue
        scale = max(abs(a) for _, a in items)
        items, rhs = [(j, a / scale) for j, a in items], rhs / scale
        if sense == "==" and _flip_equality(items, rhs):
            items, rhs = [(j, -a) for j, a in items], -rhs
        rows.append(([j for j, _ in items], [a for _, a in items], sense, rhs))
    for j in range(n):
        if is_int[j]:
            lb[j] = math.ceil(lb[j] - 1e-9) if math.isfinite(lb[j]) else lb[j]
            ub[j] = math.floor(ub[j] + 1e-9) if math.isfinite(ub[j]) else ub[j]
    used = {j for r in rows for j in r[0]} | {j for j in range(n) if obj[j] != 0.0}
    cols = sorted(used)
    pos = {j: k for k, j in enumerate(cols)}
    labels = [_h("v", is_int[j], _num(lb[j] if math.isfinite(lb[j]) else None),
                 _num(ub[j] if math.isfinite(ub[j]) else None), _num(obj[j])) for j in cols]
    crow = [([pos[j] for j in idx], coef, sense, rhs) for idx, coef, sense, rhs in rows]
    bad = any(lb[j] > ub[j] + 1e-9 for j in range(n))
    return Canonical(cols, labels, crow, sgn * float(form.get("const") or 0.0), bad)


def _flip_equality(items: list[tuple[int, float]], rhs: float) -> bool:
    """An equality's sign is free: pick the one whose sorted coefficients (then rhs) are larger,
    so it does not depend on how the row was written or ordered."""
    pos = sorted(_num(a) for _, a in items)
    neg = sorted(_num(-a) for _, a in items)
    pos_key = [float(x) for x in pos] + [rhs]
    neg_key = [float(x) for x in neg] + [-rhs]
    return neg_key > pos_key


def refine(c: Canonical) -> tuple[list[str], list[str]]:
    """Colour refinement on the bipartite graph (variables, rows; edges labelled by coefficient):
    the final colours of variables and rows."""
    vcol = list(c.var_labels)
    rcol = [_h("r", sense, _num(rhs)) for _, _, sense, rhs in c.rows]
    adj: list[list[tuple[str, int]]] = [[] for _ in vcol]
    for i, (idx, coef, _, _) in enumerate(c.rows):
        for j, a in zip(idx, coef, strict=True):
            adj[j].append((_num(a), i))
    classes = len(set(vcol)) + len(set(rcol))
    for _ in range(WL_ROUNDS):
        new_r = [_h(rcol[i], sorted((_num(a), vcol[j]) for j, a in zip(idx, coef, strict=True)))
                 for i, (idx, coef, _, _) in enumerate(c.rows)]
        new_v = [_h(vcol[j], sorted((a, rcol[i]) for a, i in adj[j])) for j in range(len(vcol))]
        vcol, rcol = new_v, new_r
        now = len(set(vcol)) + len(set(rcol))
        if now == classes:
            break
        classes = now
    return vcol, rcol


def fingerprint(form: dict[str, Any]) -> str:
    """The canonical fingerprint (32 hex digits) of a captured formulation."""
    c = canonical(form)
    vcol, rcol = refine(c)
    return hashlib.sha256(repr((_num(c.const), c.infeasible_bounds, sorted(vcol), sorted(rcol))).encode()
                          ).hexdigest()[:32]


# ---------------------------------------------------------------- answer_source


def _models(execs: Iterable[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in execs:
        models = e.get("models") if isinstance(e, dict) else getattr(e, "models", None)
        out.extend(m for m in (models or []) if isinstance(m, dict) and "error" not in m)
    return out


def solve_behind(parsed: Any, models: Sequence[dict[str, Any]], profile: str) -> int | None:
    """Index of the last solve whose objective (or status) equals the submitted answer under the
    grading profile, else None. SciPy minimises only: ``-res.fun`` is its maximisation's answer."""
    if parsed is None:
        return None
    for k in range(len(models) - 1, -1, -1):
        m = models[k]
        if isinstance(parsed, str):
            if m.get("status") == parsed:
                return k
            continue
        obj = m.get("objective")
        if obj is None:
            continue
        candidates = [obj, -obj] if m.get("sense") is None else [obj]
        if any(grade(parsed, o, profile) for o in candidates):
            return k
    return None


# ---------------------------------------------------------------- reference verdicts


def _norm_name(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


def variable_map(form: dict[str, Any], ref: dict[str, Any], same: bool) -> tuple[dict[int, int] | None, str]:
    """Reference variable index -> trajectory variable index: by name, else (same fingerprint) by
    the refinement's colours when every colour names one variable; None with the reason."""
    names = [_norm_name(v[0]) for v in form["vars"]]
    ref_names = [_norm_name(v[0]) for v in ref["vars"]]
    where: dict[str, list[int]] = {}
    for j, nm in enumerate(names):
        where.setdefault(nm, []).append(j)
    if all(len(where.get(nm, [])) == 1 for nm in ref_names) and len(set(ref_names)) == len(ref_names):
        return {i: where[nm][0] for i, nm in enumerate(ref_names)}, "mapped by name"
    if not same:
        return None, "no variable mapping: the names differ and the formulations are not the same"
    c, rc = canonical(form), canonical(ref)
    vcol, _ = refine(c)
    rcol, _ = refine(rc)
    if len(set(vcol)) != len(vcol):
        return None, "no variable mapping: names differ and the structure leaves symmetric variables"
    by_colour = {col: c.cols[k] for k, col in enumerate(vcol)}
    mapping = {rc.cols[k]: by_colour[col] for k, col in enumerate(rcol) if col in by_colour}
    unused = set(range(len(ref["vars"]))) - set(rc.cols)
    if len(mapping) + len(unused) != len(ref["vars"]) or unused:
        return None, "no variable mapping: the reference has variables the structure does not place"
    return mapping, "mapped by structure"


def violation(ref: dict[str, Any], x: Sequence[float]) -> tuple[float, bool]:
    """Largest absolute violation of the reference's rows, bounds and integrality by x, and
    whether x is feasible. A violation within FEAS_TOL (relative to the right-hand side or bound:
    a solver's own feasibility tolerance, CBC's 1e-7 scaled rows leave 2e-5 on a 220) counts 0."""
    worst, feasible = 0.0, True
    for j, (_, typ, lo, up) in enumerate(ref["vars"]):
        v = x[j]
        d = max(0.0, (lo - v) if lo is not None else 0.0, (v - up) if up is not None else 0.0)
        if typ in ("I", "B"):
            d = max(d, abs(v - round(v)))
        if d <= FEAS_TOL * (1 + abs(lo or 0) + abs(up or 0)):
            continue
        worst, feasible = max(worst, d), False
    for idx, coef, sense, rhs in ref["rows"]:
        lhs = sum(a * x[j] for j, a in zip(idx, coef, strict=True))
        d = {"<=": lhs - rhs, ">=": rhs - lhs}.get(sense, abs(lhs - rhs))
        if d <= FEAS_TOL * (1 + abs(rhs)):
            continue
        worst, feasible = max(worst, d), False
    return worst, feasible


def objective_value(form: dict[str, Any], x: Sequence[float]) -> float:
    return float(form.get("const") or 0.0) + sum(c * x[j] for j, c in zip(*form["obj"], strict=True))


# ---------------------------------------------------------------- one trajectory


@dataclass
class Verification:
    """What the ledger row, regrade's --details line and the reward service report."""

    answer_source: str
    fingerprint: str = ""
    reference_match: str = "unknown"
    reference_feasible: bool | None = None
    reference_violation: float | None = None
    reference_gap: float | None = None
    reason: str = ""  # why reference_* is what it is
    n_models: int = 0
    n_unsupported: int = 0
    forms: dict[str, dict[str, Any]] = field(default_factory=dict)  # fingerprint -> formulation

    def columns(self) -> dict[str, Any]:
        """The pinned names (ledger columns and --details keys) with their values."""
        return {"answer_source": self.answer_source, "fingerprint": self.fingerprint,
                "reference_match": self.reference_match, "reference_feasible": self.reference_feasible,
                "reference_violation": self.reference_violation}


@dataclass
class Reference:
    """A reference program's captured solve: its formulation and fingerprint (None when none)."""

    form: dict[str, Any] | None
    fingerprint: str = ""
    objective: float | None = None
    reason: str = ""


def reference_from_models(models: Sequence[dict[str, Any]]) -> Reference:
    """The reference's model: its last captured solve with a formulation."""
    with_form = [m for m in models if m.get("form")]
    if not with_form:
        why = next((m.get("capture_reason") for m in reversed(models) if m.get("capture_reason")), None)
        return Reference(None, reason=f"the reference captured no formulation ({why or 'no solve'})")
    m = with_form[-1]
    return Reference(m["form"], fingerprint(m["form"]), m.get("objective"))


def verify(execs: Iterable[Any], parsed: Any, profile: str, reference: Reference | None = None) -> Verification:
    """Verdicts for one trajectory from its executions' captured models and its parsed answer."""
    models = _models(execs)
    k = solve_behind(parsed, models, profile)
    source = "no_submission" if parsed is None else ("solve" if k is not None else "unsolved")
    forms: dict[str, dict[str, Any]] = {}
    fps: list[str] = []
    for m in models:
        if m.get("form"):
            fp = fingerprint(m["form"])
            forms[fp] = m["form"]
            fps.append(fp)
            m["fingerprint"] = fp
    unsupported = sum(1 for m in models if m.get("capture") in ("unsupported", "capped", "error"))
    chosen = models[k] if k is not None else next((m for m in reversed(models) if m.get("form")), None)
    fp = chosen.get("fingerprint", "") if chosen is not None else ""
    v = Verification(source, fp, n_models=len(models), n_unsupported=unsupported, forms=forms)
    if reference is None:
        v.reason = "no reference program for this problem"
        return v
    if reference.form is None:
        v.reason = reference.reason
        return v
    if chosen is None or not chosen.get("form"):
        why = chosen.get("capture_reason") if chosen is not None else None
        v.reason = f"the trajectory captured no formulation ({why or 'no solve'})"
        return v
    form = chosen["form"]
    same = fp == reference.fingerprint
    v.reference_match = "same" if same else "different"
    mapping, how = variable_map(form, reference.form, same)
    if mapping is None:
        v.reason = how
        return v
    if chosen.get("status") != "optimal":  # an infeasible solve's values mean nothing
        v.reason = f"{how}; the solve ended {chosen.get('status')}: no decision vector to check"
        return v
    if form.get("x") is None or any(form["x"][mapping[i]] is None for i in mapping):
        v.reason = f"{how}; the solve left no decision vector"
        return v
    x = [float(form["x"][mapping[i]]) for i in range(len(reference.form["vars"]))]
    worst, ok = violation(reference.form, x)
    v.reference_violation, v.reference_feasible = worst, ok
    if reference.objective is not None:
        v.reference_gap = objective_value(reference.form, x) - reference.objective
    v.reason = how
    return v


# ---------------------------------------------------------------- the algebraic listing


def listing(form: dict[str, Any], max_rows: int = 60) -> list[str]:
    """The formulation as text: objective, constraints, bounds, integrality, decision vector."""
    names = [v[0] or f"x{j}" for j, v in enumerate(form["vars"])]

    def expr(idx: Sequence[int], coef: Sequence[float]) -> str:
        parts = []
        for j, a in zip(idx, coef, strict=True):
            sign = "-" if a < 0 else "+"
            mag = abs(a)
            term = names[j] if mag == 1 else f"{_num(mag)} {names[j]}"
            parts.append(f"{sign} {term}")
        text = " ".join(parts) or "0"
        return text[2:] if text.startswith("+ ") else text

    const = float(form.get("const") or 0.0)
    lines = [f"{'maximize' if form.get('sense') == 'max' else 'minimize'} "
             f"{expr(*form['obj'])}{f' + {_num(const)}' if const else ''}", "subject to"]
    for k, (idx, coef, sense, rhs) in enumerate(form["rows"]):
        if k == max_rows:
            lines.append(f"  ... {len(form['rows']) - max_rows} more rows")
            break
        lines.append(f"  {expr(idx, coef)} {sense} {_num(rhs)}")
    bounds = [f"  {_num(v[2]) if v[2] is not None else '-inf'} <= {names[j]} <= "
              f"{_num(v[3]) if v[3] is not None else 'inf'}" for j, v in enumerate(form["vars"])]
    lines += ["bounds", *bounds[:max_rows]]
    ints = [names[j] for j, v in enumerate(form["vars"]) if v[1] in ("I", "B")]
    if ints:
        lines.append("integer " + ", ".join(ints[:max_rows]))
    if form.get("x") is not None:
        lines.append("solution " + ", ".join(f"{names[j]} = {_num(x) if x is not None else '?'}"
                                              for j, x in enumerate(form["x"][:max_rows])))
    return lines


# ---------------------------------------------------------------- per-cell counts


UNSOLVED_COLUMNS = ("correct_unsolved", "correct_solve")


def with_unsolved(summary: Any, rows: Any) -> Any:
    """``summary`` (a pandas frame, one row per model x method x benchmark) with the correct
    trajectories split by ``answer_source``: ``correct_unsolved`` (graded correct, no solve behind
    the answer) and ``correct_solve``; 0 where the ledger predates the column (unknown)."""
    import pandas as pd  # the reports' own dependency; opteval.evalcore's core does not need it

    by = [c for c in ("model", "method", "benchmark") if c in summary.columns]
    out = summary.drop(columns=[c for c in UNSOLVED_COLUMNS if c in summary.columns])
    if not len(out):
        return out
    df = pd.DataFrame(rows)
    if "answer_source" not in df.columns or not len(df):
        for c in UNSOLVED_COLUMNS:
            out[c] = 0
        return out
    ok = df[df["correct"].fillna(False).astype(bool)]
    counts = pd.DataFrame({
        "correct_unsolved": ok[ok["answer_source"] == "unsolved"].groupby(by).size(),
        "correct_solve": ok[ok["answer_source"] == "solve"].groupby(by).size(),
    }).reset_index()
    if not len(counts):
        counts = pd.DataFrame(columns=[*by, *UNSOLVED_COLUMNS])
    out = out.merge(counts, on=by, how="left")
    for c in UNSOLVED_COLUMNS:
        out[c] = out[c].fillna(0).astype(int)
    return out


def verification_lines(row: dict[str, Any], form: dict[str, Any] | None) -> list[str]:
    """``opteval show``'s verification section: each verdict with its reason, then the captured
    model (``form``, read from the ledger's model store) as an algebraic listing."""
    def shown(v: Any) -> str:
        return "unknown (written before issue 36)" if v is None or v != v else str(v)

    lines = ["", "verification", f"  answer_source: {shown(row.get('answer_source'))}",
             f"  fingerprint: {row.get('model_fingerprint') or '-'}",
             f"  reference_match: {shown(row.get('reference_match'))}",
             f"  reference_feasible: {shown(row.get('reference_feasible'))}",
             f"  reference_violation: {shown(row.get('reference_violation'))}",
             f"  reference_gap: {shown(row.get('reference_gap'))}"]
    if row.get("verify_note"):
        lines.append(f"  why: {row['verify_note']}")
    if form is not None:
        lines += ["", "captured model (the solve behind the answer, else the last)",
                  *(f"  {ln}" for ln in listing(form))]
    return lines
