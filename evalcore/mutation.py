"""Semantic mutation operators: source-level edits that keep a solver program runnable but
change what it models (the SemOPT paper, Appendix B.1 Table 9: variable, objective and
constraint mutations).

Why a module of its own: the simulated policy uses them to write plausible wrong programs,
and ``jobs/mutants.py`` uses them to build hard negatives (preference pairs) for training a
semantic reward model (SemOPT section 3.1). Pure: ``ast``/``re`` only, no execution here.
"""
from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable

MUTATION_OPS = (
    "flip_sense",
    "relax_integrality",
    "change_comparator",
    "drop_constraint",
    "perturb_coefficient",
    "perturb_rhs",
)


def source_lines(src: str) -> list[str]:
    return src.splitlines(keepends=True)


def stmt_span(node: ast.stmt) -> tuple[int, int]:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start - 1, node.end_lineno or node.lineno  # 0-based [start, end)


def compiles(src: str) -> bool:
    try:
        compile(src, "<sim>", "exec")
        return True
    except SyntaxError:
        return False


def replace_span(src: str, lineno: int, col: int, end_col: int, new: str) -> str:
    """Replace [col, end_col) on 1-based line ``lineno`` (columns are UTF-8 byte offsets)."""
    lines = source_lines(src)
    raw = lines[lineno - 1].encode()
    lines[lineno - 1] = (raw[:col] + new.encode() + raw[end_col:]).decode()
    return "".join(lines)


def replace_node(src: str, node: ast.expr, new: str) -> str:
    """Replace a one-line expression (a name, a constant) parsed from ``src`` by ``new``."""
    if node.end_col_offset is None:  # ast.parse sets it on every expression
        raise ValueError(f"{type(node).__name__} without an end position")
    return replace_span(src, node.lineno, node.col_offset, node.end_col_offset, new)


def constraint_nodes(tree: ast.AST) -> list[ast.stmt]:
    """Statements that add a constraint: ``prob += a <= b`` or ``m.addCons(...)``-style calls."""
    out: list[ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            val = node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value
            if isinstance(val, ast.Compare):
                out.append(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            fn = node.value.func
            if isinstance(fn, ast.Attribute) and fn.attr in {"addCons", "addConstr", "addConstrs", "addLConstr", "addRow"}:
                out.append(node)
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def _op_flip_sense(src: str, rng: random.Random) -> str | None:
    pairs = {
        "LpMinimize": "LpMaximize", "LpMaximize": "LpMinimize",
        '"minimize"': '"maximize"', '"maximize"': '"minimize"',
        "'minimize'": "'maximize'", "'maximize'": "'minimize'",
        "MINIMIZE": "MAXIMIZE", "MAXIMIZE": "MINIMIZE",
        "ObjSense.kMinimize": "ObjSense.kMaximize", "ObjSense.kMaximize": "ObjSense.kMinimize",
        ".minimize(": ".maximize(", ".maximize(": ".minimize(",
    }
    pattern = re.compile("|".join(re.escape(k) for k in sorted(pairs, key=len, reverse=True)))
    out = pattern.sub(lambda m: pairs[m.group(0)], src)
    if out == src:
        # scipy convention of the sample programs: SENSE = -1 for maximisation (c negated)
        out = re.sub(r"^(SENSE\s*=\s*)(-?)1\b", lambda m: m.group(1) + ("" if m.group(2) else "-") + "1", src, flags=re.M)
    return out if out != src else None


def _op_relax_integrality(src: str, rng: random.Random) -> str | None:
    subs: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
        (r"""cat\s*=\s*(["'])(Integer|Binary)\1""", 'cat="Continuous"'),
        (r"\b(pulp\.)?Lp(Integer|Binary)\b", lambda m: (m.group(1) or "") + "LpContinuous"),
        (r"""vtype\s*=\s*(["'])(I|B|INTEGER|BINARY|integer|binary)\1""", 'vtype="C"'),
        (r"\b(GRB|COPT)\.(INTEGER|BINARY)\b", lambda m: m.group(1) + ".CONTINUOUS"),
        (r"HighsVarType\.kInteger\b", "HighsVarType.kContinuous"),
        (r"integrality\s*=\s*", "integrality=0 * "),
    ]
    out = src
    for pat, rep in subs:
        out = re.sub(pat, rep, out)
    return out if out != src else None


def _op_change_comparator(src: str, rng: random.Random) -> str | None:
    nodes = constraint_nodes(ast.parse(src))
    rng.shuffle(nodes)
    flip = {"<=": ">=", ">=": "<=", "==": "<="}
    for node in nodes:
        start, end = stmt_span(node)
        lines = source_lines(src)
        seg = "".join(lines[start:end])
        m = re.search(r"<=|>=|==", seg)
        if m:
            seg = seg[: m.start()] + flip[m.group(0)] + seg[m.end():]
            return "".join(lines[:start]) + seg + "".join(lines[end:])
    return None


def _op_drop_constraint(src: str, rng: random.Random) -> str | None:
    nodes = constraint_nodes(ast.parse(src))
    if not nodes:
        return None
    node = rng.choice(nodes)
    start, end = stmt_span(node)
    lines = source_lines(src)
    line = lines[start]
    indent = line[: len(line) - len(line.lstrip())].rstrip("\n")
    return "".join(lines[:start]) + f"{indent}pass\n" + "".join(lines[end:])


def _numeric_constants(node: ast.AST) -> list[ast.Constant]:
    return [
        n for n in ast.walk(node)
        if isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.value not in (0, 1)
    ]


def _perturb(src: str, const: ast.Constant, rng: random.Random) -> str:
    v = const.value
    if isinstance(v, int):
        new = repr(v + max(1, round(abs(v) * 0.2)))
    elif isinstance(v, float):
        new = repr(round(v * rng.choice((0.8, 1.25)), 6))
    else:
        raise TypeError(f"not a numeric constant: {v!r}")
    return replace_node(src, const, new)


# names a program gives its objective's coefficient vector (c = [...], costs = [...])
_COEFF_NAME = re.compile(r"^(c|obj\w*|cost\w*|costs|profit\w*|price\w*|revenue\w*|value\w*|score\w*)$", re.I)


def _objective_nodes(tree: ast.AST) -> list[ast.AST]:
    """Where the objective's coefficients live: ``prob += expr`` (no comparison), objective
    calls (``setObjective``, ``.minimize``/``.maximize``), and cost/profit vectors (``c = [...]``)."""
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            val = node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value
            if not isinstance(val, ast.Compare) and not (isinstance(val, ast.Constant) and isinstance(val.value, str)):
                out.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in {
            "setObjective", "minimize", "maximize", "setMinimize", "setMaximize",
        }:
            out.append(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and _COEFF_NAME.match(t.id) for t in node.targets
        ):
            out.append(node.value)
    return out


def _op_perturb_coefficient(src: str, rng: random.Random) -> str | None:
    """Perturb one objective coefficient (an objective term's number or a cost vector entry)."""
    tree = ast.parse(src)
    pool: list[ast.Constant] = []
    for node in _objective_nodes(tree):
        pool += _numeric_constants(node)
    pool = [c for c in pool if not _inside_call_named(tree, c, {"range", "round", "len"})]
    if not pool:
        return None
    return _perturb(src, rng.choice(pool), rng)


def _op_perturb_rhs(src: str, rng: random.Random) -> str | None:
    pool: list[ast.Constant] = []
    for node in constraint_nodes(ast.parse(src)):
        for cmp in (n for n in ast.walk(node) if isinstance(n, ast.Compare)):
            for right in cmp.comparators:
                pool += _numeric_constants(right)
    if not pool:
        return None
    return _perturb(src, rng.choice(pool), rng)


def _inside_call_named(tree: ast.AST, target: ast.AST, names: set[str]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            if any(n is target for n in ast.walk(node)):
                return True
    return False


_OPS: dict[str, Callable[[str, random.Random], str | None]] = {
    "flip_sense": _op_flip_sense,
    "relax_integrality": _op_relax_integrality,
    "change_comparator": _op_change_comparator,
    "drop_constraint": _op_drop_constraint,
    "perturb_coefficient": _op_perturb_coefficient,
    "perturb_rhs": _op_perturb_rhs,
}


# How often an operator changes the optimum (measured on the sample benchmark), used as the
# weight of its place in the seeded order: sense flips almost always do, dropped or relaxed
# constraints often turn out not to bind.
_OP_WEIGHTS = {
    "flip_sense": 4.0, "perturb_coefficient": 2.0, "change_comparator": 1.5,
    "drop_constraint": 1.5, "relax_integrality": 1.0, "perturb_rhs": 1.0,
}


def _weighted_order(ops: list[str], rng: random.Random) -> list[str]:
    """A seeded order of ``ops``, sampled without replacement by ``_OP_WEIGHTS``."""
    keyed = [(rng.random() ** (1.0 / _OP_WEIGHTS[op]), op) for op in ops]
    return [op for _, op in sorted(keyed, reverse=True)]


def mutate(src: str, rng: random.Random, ops: tuple[str, ...] = MUTATION_OPS) -> tuple[str, str]:
    """(mutant source, operator name). Tries the operators in a seeded order; the first that
    applies and still compiles wins. Last resort: scale the submitted value (``scale_submission``)."""
    order = _weighted_order(list(ops), rng)
    for name in order:
        try:
            out = _OPS[name](src, rng)
        except (SyntaxError, ValueError):
            out = None
        if out is not None and out != src and compiles(out):
            return out, name
    out = re.sub(r"\bsubmit\(round\(", "submit(1.1 * round(", src)
    if out == src:
        out = src.replace("submit(", "submit(1.1 * ", 1)
    return out, "scale_submission"


def apply_operator(src: str, op: str, rng: random.Random) -> str | None:
    """``src`` with the single operator ``op`` injected, or None when it does not apply (no
    site for it, the source does not parse, or the result would not compile or not differ).
    Unlike :func:`mutate` there is no fallback: a hard negative must come from the named
    operator (SemOPT 3.1 injects each sampled operator independently)."""
    if op not in _OPS:
        raise ValueError(f"unknown mutation operator {op!r}; known {list(MUTATION_OPS)}")
    try:
        out = _OPS[op](src, rng)
    except (SyntaxError, ValueError):
        return None
    return out if out is not None and out != src and compiles(out) else None
