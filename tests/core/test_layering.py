"""House rules, checked on the import graph (every import: at the top, inside functions and under
``TYPE_CHECKING`` alike):

- no import cycle in the package ``opteval`` (evalcore/, sweepcore/, cluster/, jobs/ and the rest);
- opteval.evalcore and opteval.sweepcore never import Ray nor opteval.cluster (opteval.evalcore not
  opteval.sweepcore either), not even lazily, and importing every one of their modules loads no Ray;
- cluster/ holds only what needs Ray: a module directly in cluster/ imports Ray itself (``ray`` or
  ``ray.*``, anywhere in the module); any other belongs to one of the subpackages in
  ``RAY_SUBPACKAGES`` (Serve, the driver, the actors), whose purpose needs Ray and each of which has
  modules that import it; a new subpackage must be named there;
- a private Ray API (``ray._private``, ``ray.serve._private``, ``ray.llm._internal``, an underscored
  name imported from ``ray``) is reached only through ``opteval.cluster.ray_private``, in the
  package and bench alike (imports, attribute chains and dotted paths in strings);
- no harness imports the simulator (opteval.evalcore.sim).
"""
from __future__ import annotations

import ast
import functools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package, least", [("opteval.evalcore", 30), ("opteval.sweepcore", 25)])
def test_importing_every_module_loads_no_ray_and_no_cluster(package, least):
    probe = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        import {package} as pkg
        names = [m.name for m in pkgutil.walk_packages(pkg.__path__, "{package}.")
                 if ".data.reference" not in m.name and not m.name.endswith(("._build", ".__main__"))]
        for name in names:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] == "ray" or m.startswith("opteval.cluster"))
        print(len(names), leaked)
        assert not leaked, leaked
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count = int(out.stdout.split()[0])
    assert count >= least, f"only {count} {package} modules were imported: the walk is broken"


# -- the import graph: no cycle, and the simulator stays outside the harnesses -----------------

PACKAGES = ("evalcore", "sweepcore", "cluster", "jobs")  # the subpackages of `opteval`
SIMULATOR = "opteval.evalcore.sim"
RAY_FREE = ("evalcore", "sweepcore")  # never import Ray nor opteval.cluster, not even lazily
RAY_SUBPACKAGES = ("opteval.cluster.serve", "opteval.cluster.driver", "opteval.cluster.actors")  # their purpose needs Ray
RAY_PRIVATE = "opteval.cluster.ray_private"  # the one module through which Ray's private APIs are reached
PRIVATE_PARTS = ("ray._private", "ray.serve._private", "ray.llm._internal", "ray._raylet")


def _pkg(module: str) -> str:
    """The subpackage of ``opteval`` a module belongs to (``opteval.evalcore.x`` -> ``evalcore``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "opteval" else parts[0]


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each file parsed once per session: the walks below read the same ~300 files many times."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def _run_nodes(path: Path) -> tuple[ast.AST, ...]:
    """The nodes of ``path`` Python may execute: all but those under ``if TYPE_CHECKING:``."""
    tree = _tree(path)
    type_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block)
                 for stmt in block.body for n in ast.walk(stmt)}  # type: ignore[attr-defined]
    return tuple(n for n in ast.walk(tree) if id(n) not in type_only)


@functools.cache
def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in (REPO / "opteval").rglob("*.py"):
        if "reference" in path.relative_to(REPO).parts:  # the sample's reference programs (run in the sandbox)
            continue
        if True:
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): a block Python never executes."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module ``module`` imports when Python runs it: at the top and inside
    functions alike (a lazy import still runs, later), not under ``TYPE_CHECKING`` (never run). ``from a import b``
    names the submodule ``a.b`` when there is one, else ``a``; every package ``__init__`` that
    Python executes on the way counts too. A module's own parent packages do not (Python has run
    them before the module itself)."""
    out: set[str] = set()
    for node in _run_nodes(path):
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
    # importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first: those are edges too
    for name in list(out):
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    own = module.split(".")
    out -= {".".join(own[:i]) for i in range(1, len(own) + 1)}
    return out & set(modules)


@functools.cache
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
    assert len([m for m in graph if m.startswith("opteval.cluster.")]) >= 25
    assert len([m for m in graph if m.startswith("opteval.sweepcore.")]) >= 25
    assert "opteval.evalcore.harnesses._common" in graph["opteval.evalcore.harnesses.direct"]
    assert "opteval.sweepcore.ledger" in graph["opteval.cluster.driver.commit"]


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_evalcore_sweepcore_cluster_or_jobs():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_harness_imports_the_simulator():
    graph = _graph()
    offenders = {m: sorted(d for d in deps if d == SIMULATOR or d.startswith(SIMULATOR + "."))
                 for m, deps in graph.items() if m.startswith("opteval.evalcore.harnesses")}
    assert not {m: d for m, d in offenders.items() if d}


def test_importing_the_harnesses_loads_no_simulator():
    probe = ("import sys, opteval.evalcore.harnesses; "
             "print(sorted(m for m in sys.modules if m.startswith(('opteval.evalcore.sim', 'opteval.evalcore.mutation'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


# -- Ray: where it may be imported, and its private APIs -------------------------------------------


@functools.cache
def _ray_imports(path: Path) -> frozenset[str]:
    """The Ray modules ``path`` imports anywhere (lazy and type-only included), and for ``from ray.x
    import y`` also ``ray.x.y``."""
    out: set[str] = set()
    for node in _run_nodes(path):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "ray"}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray":
            out.add(str(node.module))
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(out)


def _private_uses(path: Path) -> list[str]:
    """Private Ray APIs ``path`` names: imported, reached by an attribute chain from ``ray``, or
    written as a dotted path in a string (an import path Ray resolves, e.g. a request router)."""
    found = sorted(m for m in _ray_imports(path)
                   if m.startswith(PRIVATE_PARTS) or any(p.startswith("_") for p in m.split(".")[1:]))
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Attribute):
            chain, cur = [node.attr], node.value
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id == "ray" and ".".join(["ray", *reversed(chain)]).startswith(PRIVATE_PARTS):
                found.append(".".join(["ray", *reversed(chain)]))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [p for p in PRIVATE_PARTS if p + "." in node.value]
    return found


def test_evalcore_and_sweepcore_never_import_ray_or_cluster():
    modules = _modules()
    graph = _graph()
    bad = {m: sorted(_ray_imports(p)) for m, p in modules.items() if _pkg(m) in RAY_FREE and _ray_imports(p)}
    bad |= {m: sorted(d for d in graph[m] if _pkg(d) == "cluster")
            for m in graph if _pkg(m) in RAY_FREE and any(_pkg(d) == "cluster" for d in graph[m])}
    bad |= {m: sorted(d for d in graph[m] if _pkg(d) == "sweepcore")
            for m in graph if _pkg(m) == "evalcore" and any(_pkg(d) == "sweepcore" for d in graph[m])}
    assert not bad, bad


def test_cluster_holds_only_what_needs_ray():
    modules = {m: p for m, p in _modules().items() if _pkg(m) == "cluster" and m != "opteval.cluster"}
    outside = [m for m in modules if not m.startswith(tuple(s + "." for s in RAY_SUBPACKAGES)) and m not in RAY_SUBPACKAGES]
    assert set(outside) >= {"opteval.cluster.runtime", RAY_PRIVATE}, "the walk is broken"
    no_ray = [m for m in outside if not _ray_imports(modules[m])]
    assert not no_ray, f"modules directly in cluster/ that never import Ray (move them to sweepcore/): {no_ray}"
    subpackages = {".".join(m.split(".")[:3]) for m in modules if m.count(".") >= 3 or (REPO / m.replace(".", "/")).is_dir()}
    assert subpackages <= set(RAY_SUBPACKAGES), f"a cluster subpackage not named in RAY_SUBPACKAGES: {subpackages}"
    for sub in RAY_SUBPACKAGES:
        users = [m for m in modules if m.startswith(sub + ".") and _ray_imports(modules[m])]
        assert len(users) >= 2, f"{sub}: no module imports Ray, so it does not belong in cluster/"


def test_private_ray_apis_only_through_the_one_module():
    paths = {m: p for m, p in _modules().items()}
    paths.update({f"bench.{p.stem}": p for p in (REPO / "bench").glob("*.py")})
    uses = {m: _private_uses(p) for m, p in paths.items() if m != RAY_PRIVATE}
    assert not {m: u for m, u in uses.items() if u}, {m: u for m, u in uses.items() if u}
    assert _private_uses(paths[RAY_PRIVATE]), "the scan does not see opteval.cluster.ray_private's own uses: it is broken"


def test_the_private_api_scan_finds_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import ray\nimport ray._private.state as s\nfrom ray.serve.context import _get_global_client\n"
                   "x = ray._private.worker\nPATH = 'ray.llm._internal.serve.x:Y'\nfrom ray import serve\n")
    found = _private_uses(src)
    assert {"ray._private.state", "ray.serve.context._get_global_client", "ray._private.worker"} <= set(found)
    assert "ray.llm._internal" in found and not any("serve" == f.split(".")[-1] for f in found)


def test_a_package_init_is_an_edge_and_a_type_only_import_is_not(tmp_path):
    probe = tmp_path / "m.py"
    probe.write_text("from typing import TYPE_CHECKING\nfrom opteval.sweepcore.ledger.store import Ledger\n"
                     "if TYPE_CHECKING:\n    import opteval.cluster.runtime\n")
    deps = _imports("x.m", probe, _modules())
    assert {"opteval.sweepcore.ledger.store", "opteval.sweepcore.ledger", "opteval.sweepcore"} <= deps
    assert "opteval.cluster.runtime" not in deps


def test_reading_a_config_and_planning_a_real_model_load_no_simulator():
    """The simulator is a test double: a sweep of real models never imports it (nor the
    mutation operators it draws from), from reading the config through planning."""
    probe = (
        "import sys, opteval.sweepcore.config\n"
        "before = sorted(m for m in sys.modules if m.startswith(('opteval.evalcore.sim', 'opteval.evalcore.mutation')))\n"
        "import opteval.jobs.sweep\n"
        "rc = opteval.jobs.sweep.main(['models=[Qwen3-0.6B]', 'methods=[direct,opticycle]', 'benchmarks=[sample]',\n"
        "                      'plan_only=true'])\n"
        "after = sorted(m for m in sys.modules if m.startswith(('opteval.evalcore.sim', 'opteval.evalcore.mutation')))\n"
        "print('RESULT', rc, before, after)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))
    assert line == "RESULT 0 [] []", out.stdout[-2000:]


def test_nothing_imports_a_bare_top_level_name():
    """The checkout's top-level evalcore/, sweepcore/, cluster/ and jobs/ are links into opteval/
    (the promised layout); importing one by its bare name would load a second copy of every
    module (two registries, two ledgers' lock tables). Only ``opteval.*`` is imported."""
    bad = []
    for path in [*(REPO / "opteval").rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "bench").glob("*.py")]:
        if "reference" in path.parts:
            continue
        for node in ast.walk(_tree(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)} {n}" for n in names if n.split(".")[0] in PACKAGES]
    assert not bad, bad
