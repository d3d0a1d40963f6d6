"""The sweep driver: plan -> skip committed -> bounded fan-out -> retries -> grade -> commit -> report.

Split by what each part needs and who else uses it:

- ``prepare``: config -> problems -> plan -> ledger -> committed keys; never imports Ray
  (``plan_only`` and read-only tools use only this).
- ``dispatch``: bounded fan-out over the worker actors, retries on other workers with backoff.
- ``commit``: grading (the driver alone holds the answers), ledger rows, batched commits,
  results read back from the ledger.
- ``progress``: the printed progress line, the bench's clocks, MLflow progress off the loop.
- ``signals``: SIGINT/SIGTERM from the driver's first line through the event loop's stop state.
- ``run``: actors, stages (deploy, dispatch, tear down), ``drive`` and ``run_sweep``.

Importing this package imports nothing else (the entry points below load on first use):
``jobs/sweep.py`` imports ``opteval.cluster.driver.signals`` on its first line, before anything slow.
The ``prepare`` function is imported from ``opteval.cluster.driver.prepare`` (the package attribute of
that name is the submodule).
"""
from __future__ import annotations

import importlib
from typing import Any

# no import of run (not even under TYPE_CHECKING): run imports serve.fleet, which imports
# opteval.cluster.driver.schedule, so this package's __init__ would close a cycle (tests/core/test_layering.py)
__all__ = ["Prepared", "plan_report", "run_sweep"]

_HOME = {"Prepared": "prepare", "plan_report": "prepare", "run_sweep": "run"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
