"""jobs/report.py's interval options: --bootstrap and --seed parse to integers, and a bad
value is one clear line (a UsageError, exit 2 in main), never a traceback."""
from __future__ import annotations

import pytest

from opteval.jobs import report as job


def test_bootstrap_and_seed_options():
    opts, rest = job.parse_args(["sweep.name=x", "--bootstrap", "500", "--seed=3"])
    assert rest == ["sweep.name=x"]
    assert job._int_opt(opts, "--bootstrap", 2000, minimum=100) == 500
    assert job._int_opt(opts, "--seed", 0, minimum=0) == 3
    assert job._int_opt({"--seed": None}, "--seed", 0, minimum=0) == 0
    with pytest.raises(job.UsageError, match=r"--bootstrap takes an integer, got 'many'"):
        job._int_opt({"--bootstrap": "many"}, "--bootstrap", 2000, minimum=100)
    with pytest.raises(job.UsageError, match="--bootstrap must be at least 100, got 10"):
        job._int_opt({"--bootstrap": "10"}, "--bootstrap", 2000, minimum=100)
