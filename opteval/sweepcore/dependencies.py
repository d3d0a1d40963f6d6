"""The resolved version of every dependency opteval declares, so a score can be traced to the
libraries that produced it (a PuLP or SCIP major changes what a model's program does).

Recorded in each sweep's manifest (section ``dependencies``) and on its MLflow parent run
(``dependencies.json`` and one ``dep.<name>`` tag each); ``python -m opteval.sweepcore.dependencies``
prints them one per line (``.ci/run`` shows them before the tests)."""
from __future__ import annotations

import re
import sys
from importlib import metadata

# the distribution opteval is installed as; from a checkout without an install, the fallback list
PROJECT = "opteval"
_FALLBACK = ("ray", "mlflow", "pulp", "pyscipopt", "highspy", "pyomo", "scipy", "numpy", "pyarrow", "pandas",
             "omegaconf", "duckdb", "starlette", "httpx")


def _name(requirement: str) -> str | None:
    """``pulp>=3.0,<4 ; extra == "x"`` -> ``pulp``; None for an extra's requirement."""
    if "extra ==" in requirement:
        return None
    found = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    return found.group(0).lower() if found else None


def declared() -> list[str]:
    """The core dependencies' distribution names, sorted (from the installed metadata)."""
    try:
        reqs = metadata.requires(PROJECT) or []
    except metadata.PackageNotFoundError:
        return sorted(_FALLBACK)
    return sorted({n for n in map(_name, reqs) if n})


def resolved_versions(names: list[str] | None = None) -> dict[str, str | None]:
    """``{distribution: installed version or None}`` plus ``python`` itself."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in names if names is not None else declared():
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def main() -> int:
    for name, version in resolved_versions().items():
        print(f"{name} {version or 'not installed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
