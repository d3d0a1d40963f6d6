"""Every key the sweep schema accepts is read by the code, and reading a key the schema does
not have is a type error.

The first half walks the :class:`SweepConfig` dataclass tree and looks, in the sources, for a
read of each leaf through its section: ``<...>.<section>.<field>``, a name bound to the section
(``c = prep.cfg.cluster`` then ``c.retries``, or a parameter annotated with the section's type)
or ``<section>.get("field")``. ``sweepcore/config/`` counts only in its derived-value functions
(validation is not a use). The ``sampling``/``budgets``/``limits`` sections are opteval.evalcore's types,
so opteval.evalcore's reads count for them.
"""
from __future__ import annotations

import ast
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from opteval.sweepcore import config as C

REPO = Path(__file__).resolve().parents[2]
# validation, loading and plumbing in sweepcore/config/: reading a key there is not using it
NOT_A_USE = {"load_config", "_check_ranges", "_check_values", "_sweep_view", "resolved", "as_plain", "overlay"}
EVALCORE_SECTIONS = {"sampling", "budgets", "limits"}
TOP = "cfg"  # the receiver name that stands for the whole SweepConfig
# Reads the scan cannot attribute to a section, each with the file and the text that reads it.
READ_ELSEWHERE = {
    ("limits", "max_procs"): ("evalcore/sandbox/child.py", 'lim.get("max_procs"'),  # limits sent as a dict
}


def _leaves() -> list[tuple[str, str]]:
    """(section, field) for every leaf; top-level scalars and lists have section ``cfg``.
    ``budgets.exec_limits`` is one leaf (it is filled from ``limits``)."""
    hints = typing.get_type_hints(C.SweepConfig)
    out = []
    for f in fields(C.SweepConfig):
        typ = hints[f.name]
        if is_dataclass(typ):
            out += [(f.name, g.name) for g in fields(typ)]
        else:
            out.append((TOP, f.name))
    return out


def _section_of(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The section an expression stands for: ``x.cluster`` -> cluster, an alias, ``cfg``."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    if isinstance(node, ast.Name) and node.id in aliases:
        return aliases[node.id]
    if name is not None:  # ``exec_limits``, ``self._default_limits``: named for their section
        return next((s for s in SECTIONS if name == s or name.endswith("_" + s)), name)
    if isinstance(node, ast.Call):  # _serving_section(cfg).get(...)
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        return next((s for s, _ in _leaves() if s != TOP and s in name), None)
    return None


SECTIONS = {s for s, _ in _leaves() if s != TOP}
TYPE_TO_SECTION = {typing.get_type_hints(C.SweepConfig)[f.name].__name__: f.name
                   for f in fields(C.SweepConfig) if is_dataclass(typing.get_type_hints(C.SweepConfig)[f.name])}
TYPE_TO_SECTION["SweepConfig"] = TOP


def _reads(tree: ast.AST) -> set[tuple[str, str]]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in TYPE_TO_SECTION:  # its own methods read self.<field>
            aliases["self"] = TYPE_TO_SECTION[node.name]  # names bound to a section, module-wide (good enough for short modules)
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                else [(target, value)]
            for name, expr in pairs:  # c = prep.cfg.cluster; c, name = prep.cfg.cluster, ...
                if isinstance(name, ast.Name) and isinstance(expr, ast.Attribute) and expr.attr in SECTIONS:
                    aliases[name.id] = expr.attr
        if isinstance(node, ast.arg) and node.annotation is not None:
            ann = ast.unparse(node.annotation).strip("'\"").split("|")[0].strip()
            if ann in TYPE_TO_SECTION:
                aliases[node.arg] = TYPE_TO_SECTION[ann]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            sec = _section_of(node.value, aliases)
            if sec is not None:
                found.add((sec, node.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            sec = _section_of(node.func.value, aliases)
            if sec is not None:
                found.add((sec, str(node.args[0].value)))
    return found


def _scan(paths: list[Path]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in paths:
        tree = ast.parse(path.read_text())
        if path.parent == REPO / "opteval" / "sweepcore" / "config":
            for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in NOT_A_USE]:
                found |= _reads(fn)
        else:
            found |= _reads(tree)
    return found


def _py(*dirs: str) -> list[Path]:
    return [p for d in dirs for p in sorted((REPO / d).rglob("*.py"))]


def test_every_schema_key_is_read_somewhere():
    in_driver = _scan(_py("opteval/sweepcore", "opteval/cluster", "opteval/jobs"))
    in_evalcore = _scan(_py("opteval/evalcore"))
    for (section, key), (path, text) in READ_ELSEWHERE.items():
        assert text in (REPO / path).read_text(), f"{section}.{key} is no longer read in {path}"
    unread = [f"{s}.{k}" if s != TOP else k for s, k in _leaves()
              if (s, k) not in in_driver and (s, k) not in READ_ELSEWHERE
              and not (s in EVALCORE_SECTIONS and (s, k) in in_evalcore)]
    assert not unread, f"keys the schema accepts but no code reads (wire them or remove them): {unread}"


def test_the_scan_sees_a_read_and_misses_a_non_read():
    tree = ast.parse("def f(cfg):\n    c = cfg.cluster\n    s, n = cfg.serving, 1\n"
                     "    return c.retries, cfg.sweep.name, cfg.serving.get('gpus'), s.standin\n")
    assert {("cluster", "retries"), ("sweep", "name"), ("serving", "gpus"), ("serving", "standin")} <= _reads(tree)
    assert ("cluster", "workers") not in _reads(tree)


def test_method_overrides_name_fields_of_what_they_override():
    """The overlay applies a method's overrides by field name: a misnamed override field would
    be accepted and do nothing."""
    from opteval.evalcore.harnesses.base import Budgets
    from opteval.evalcore.sandbox.types import Limits

    assert {f.name for f in fields(C.MethodBudgetOverrides)} <= {f.name for f in fields(Budgets)}
    assert {f.name for f in fields(C.MethodLimitsOverrides)} <= {f.name for f in fields(Limits)}


def test_mypy_rejects_a_key_the_schema_does_not_have(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (the lint tool .ci/run uses)")
    snippet = tmp_path / "reads.py"
    snippet.write_text(
        "from opteval.sweepcore.config import SweepConfig\n\n"
        "def ok(cfg: SweepConfig) -> float:\n    return cfg.cluster.retry_backoff_s + cfg.limits.wall_s\n\n"
        "def typo(cfg: SweepConfig) -> object:\n    return cfg.cluster.retry_backof_s\n\n"
        "def unknown(cfg: SweepConfig) -> object:\n    return cfg.sampling.temprature\n")
    out, err, _ = api.run(["--follow-imports=silent", "--ignore-missing-imports", "--no-error-summary",
                           "--cache-dir", str(REPO / ".mypy_cache"), str(snippet)])
    errors = [line for line in out.splitlines() if "error:" in line]
    assert len(errors) == 2, out + err
    assert '"ClusterSection" has no attribute "retry_backof_s"' in out
    assert '"Sampling" has no attribute "temprature"' in out
