"""House rules: evalcore never imports Ray, not even transitively; no import cycle in evalcore/,
cluster/ or jobs/; no harness imports the simulator (evalcore.sim)."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_evalcore_module_imports_ray():
    probe = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import evalcore
        names = [m.name for m in pkgutil.walk_packages(evalcore.__path__, "evalcore.")
                 if ".data.reference" not in m.name and not m.name.endswith(("._build", ".__main__"))]
        for name in names:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
        print(len(names), leaked)
        assert not leaked, leaked
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count = int(out.stdout.split()[0])
    assert count >= 30, f"only {count} evalcore modules were imported: the walk is broken"


# -- the import graph: no cycle, and the simulator stays outside the harnesses -----------------

PACKAGES = ("evalcore", "sweepcore", "cluster", "jobs")
SIMULATOR = "evalcore.sim"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            if "reference" in path.relative_to(REPO).parts:  # the sample's reference programs (run in the sandbox)
                continue
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module ``module`` imports: at the top, inside functions and under
    ``TYPE_CHECKING`` alike (a lazy or type-only import is still a dependency). ``from a import b``
    names the submodule ``a.b`` when there is one, else ``a``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in modules else base)
    out.discard(module)
    return out & set(modules)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_walk_sees_the_packages():
    graph = _graph()
    assert len([m for m in graph if m.startswith("cluster.")]) >= 25
    assert "evalcore.harnesses._common" in graph["evalcore.harnesses.direct"]
    assert "sweepcore.ledger" in graph["cluster.driver.commit"]


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_evalcore_cluster_or_jobs():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_harness_imports_the_simulator():
    graph = _graph()
    offenders = {m: sorted(d for d in deps if d == SIMULATOR or d.startswith(SIMULATOR + "."))
                 for m, deps in graph.items() if m.startswith("evalcore.harnesses")}
    assert not {m: d for m, d in offenders.items() if d}


def test_importing_the_harnesses_loads_no_simulator():
    probe = ("import sys, evalcore.harnesses; "
             "print(sorted(m for m in sys.modules if m.startswith(('evalcore.sim', 'evalcore.mutation'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
