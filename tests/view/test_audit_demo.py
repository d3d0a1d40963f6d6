"""Issue 37: ``opteval audit`` on the demo sweep (the viewer tests' shared sweep: the sample's first
problems, whose keys are right by construction) writes the three files with the pinned columns and
finds no suspect key."""
from __future__ import annotations

import pandas as pd

from tests.view.conftest import SWEEP

PINNED = ["benchmark", "problem_id", "key", "verdict", "alternative", "evidence", "support", "why"]


def test_audit_of_the_demo_sweep_finds_no_suspect(demo, capsys):
    from opteval.jobs import audit

    out = demo / "audit"
    assert audit.main([f"sweep.name={SWEEP}", f"sweep.output_dir={demo}", "--out", str(out)]) == 0
    capsys.readouterr()
    df = pd.read_parquet(out / "audit.parquet")
    assert list(df.columns[: len(PINNED)]) == PINNED
    assert (out / "audit.csv").is_file() and (out / "audit.md").is_file()
    assert len(df) == 46 and not (df["verdict"] == "suspect").any()
