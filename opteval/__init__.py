"""opteval: a distributed evaluation cluster for LLM optimization modeling.

One import namespace for the whole product (a wheel claims no generic top-level name):

* ``opteval.evalcore``: one trajectory, without Ray (harnesses, models, sandbox, grading,
  rewards, reporting);
* ``opteval.sweepcore``: a sweep's config, plan, ledger and tracking, without Ray;
* ``opteval.cluster``: the Ray side (driver, actors, Serve apps);
* ``opteval.jobs``: the commands (``opteval <job>``, ``python -m opteval``, ``python jobs/<job>.py``);
* ``opteval/configs``: the YAML configs, shipped inside the package.

What authors of harnesses, grading and extraction profiles, reward schemes and benchmarks
import is :mod:`opteval.harness` (public, kept stable); everything else may move.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("opteval")
except PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"

__all__ = ["__version__"]
