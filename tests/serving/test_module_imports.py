"""Each serving module imports alone, and no import path (lazy imports included) leads from
``opteval.cluster.serve.llm_serving`` back to ``opteval.cluster.serve.serving``; ``Endpoint`` lives in a leaf module."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["opteval.sweepcore.endpoint", "opteval.cluster.serve.serve_apps", "opteval.cluster.serve.sim_serving",
           "opteval.cluster.serve.serving", "opteval.cluster.serve.llm_serving", "opteval.sweepcore.backends",
           "opteval.sweepcore.config"]


def _loaded_after_import(module: str) -> set[str]:
    code = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('opteval.cluster', 'opteval.sweepcore', 'ray')))))")
    out = subprocess.run([sys.executable, "-c", code, module], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone(module):
    loaded = _loaded_after_import(module)
    assert module in loaded
    if module == "opteval.cluster.serve.llm_serving":
        assert "opteval.cluster.serve.serving" not in loaded
    # plan_only runs never import Ray
    if module in ("opteval.sweepcore.endpoint", "opteval.sweepcore.backends", "opteval.sweepcore.config"):
        assert not any(m == "ray" or m.startswith("ray.") for m in loaded), sorted(loaded)
        serving = {"opteval.cluster.serve.serving", "opteval.cluster.serve.llm_serving", "opteval.cluster.serve.sim_serving"}
        assert not serving & loaded


def _imports(path: Path) -> set[str]:
    """Every cluster or opteval.sweepcore module ``path`` imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("opteval.cluster", "opteval.sweepcore")):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith(("opteval.cluster", "opteval.sweepcore"))}
    return out


def _graph() -> dict[str, set[str]]:
    mods = {}
    for p in [*(ROOT / "opteval" / "cluster").rglob("*.py"), *(ROOT / "opteval" / "sweepcore").rglob("*.py")]:
        parts = p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    return {m: {i for i in _imports(p) if i in mods and i != m} for m, p in mods.items()}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    seen, stack = {start}, [[start]]
    while stack:
        path = stack.pop()
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append([*path, nxt])
    return None


def test_no_import_path_from_llm_serving_back_to_serving():
    graph = _graph()
    # the walk sees lazy imports (run.py's is in a function)
    assert "opteval.cluster.serve.fleet" in graph["opteval.cluster.driver.run"]
    assert _reaches(graph, "opteval.cluster.serve.llm_serving", "opteval.cluster.serve.serving") is None, \
        _reaches(graph, "opteval.cluster.serve.llm_serving", "opteval.cluster.serve.serving")
    assert graph["opteval.sweepcore.endpoint"] == set()  # the leaf: Endpoint imports no cluster or opteval.sweepcore module
