"""``Report.write`` emits the paper's Table 1 (``tables/table1.md``) and Figure 2-left
(OptiState - OptiCycle per benchmark, paired by problem) on the synthetic ledger of synth.py,
plus an M1 ``optistate`` arm: a copy of M1 direct on A, every answer right on B and C."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from opteval.evalcore.records import LEDGER_SCHEMA_V1
from opteval.evalcore.reporting import build_report
from tests.report import synth

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def with_optistate() -> tuple[pd.DataFrame, dict]:
    import pyarrow as pa

    rows = synth.rows()
    extra = []
    for r in rows:
        if r["model"] == "M1" and r["method"] == "direct" and r["benchmark"] == "A":
            extra.append({**r, "method": "optistate", "key": r["key"].replace("/direct/", "/optistate/")})
    right = {"b1": 5.0, "b2": 7.0, "c1": 100.0, "c2": 200.0}
    for bench, pid, sample in [("B", "b1", 0), ("B", "b1", 1), ("B", "b2", 0), ("B", "b2", 1), ("C", "c1", 0),
                               ("C", "c2", 0)]:
        extra.append(synth._row("M1", "optistate", bench, pid, sample, right[pid], pt=500, ct=100))
    planned = {**synth.PLANNED, ("M1", "optistate", "A"): 6, ("M1", "optistate", "B"): 4,
               ("M1", "optistate", "C"): 2}
    table = pa.Table.from_pylist(rows + extra, schema=LEDGER_SCHEMA_V1)
    return table.to_pandas(), planned


def test_table1_md_in_the_paper_layout_and_figure_2_left(tmp_path: Path):
    df, planned = with_optistate()
    rep = build_report(df, synth.ANSWERS, planned, out_dir=tmp_path)
    md = (tmp_path / "tables" / "table1.md").read_text()
    lines = md.splitlines()
    assert "| method | A | B | C | Macro | tokens/traj (k) |" in lines
    m1 = lines.index("**M1**")
    rows = [ln for ln in lines[m1:] if ln.startswith("| ")][1:4]
    # the paper's row order: Direct, ..., OptiCycle, OptiState
    assert [r.split(" | ")[0] for r in rows] == ["| Direct Generation", "| OptiCycle", "| OptiState"]
    cells = {r.split(" | ")[0][2:]: r.strip("| ").split(" | ")[1:] for r in rows}
    # OptiState: A = direct's 4/6 (a2 s2 not run: dagger), B 4/4, C 2/2; tokens 600 on B, C
    assert cells["OptiState"][1:3] == ["**100.00**", "**100.00**"]
    assert cells["OptiState"][0].startswith("**66.67**") and cells["OptiState"][0].endswith("†")
    # OptiCycle: C 1/2 (100.5 is wrong under optagentbench), B 0/4; 400 tokens per scored trajectory
    assert cells["OptiCycle"][1:3] == ["<u>0.00</u>", "<u>50.00</u>"]  # ties share a mark
    assert cells["OptiCycle"][4] == "0.40"
    assert "| Direct Generation (simulated) |" in md.split("**M2**")[1]

    fig = tmp_path / "plots" / "fig2_left_M1.png"
    assert fig in rep.written and fig.read_bytes()[:8] == PNG_MAGIC and fig.stat().st_size > 5000
    assert not (tmp_path / "plots" / "fig2_left_M2.png").exists()  # M2 has no optistate
    f2 = pd.read_csv(tmp_path / "tables" / "fig2_left.csv").set_index("benchmark")
    assert f2.loc["B", "net_gain"] == pytest.approx(1.0) and f2.loc["C", "net_gain"] == pytest.approx(0.5)
    assert set(f2["method_a"]) == {"optistate"} and set(f2["method_b"]) == {"opticycle"}
    report = (tmp_path / "report.md").read_text()
    assert "`tables/table1.md`" in report and "Figure 2 (left): optistate - opticycle" in report
    assert "](plots/fig2_left_M1.png)" in report


def test_without_optistate_table1_is_written_and_report_says_why_no_figure(tmp_path: Path):
    rep = build_report(synth.ledger_frame(), synth.ANSWERS, synth.PLANNED, out_dir=tmp_path)
    assert (tmp_path / "tables" / "table1.md") in rep.written
    assert "| OptiCycle |" in (tmp_path / "tables" / "table1.md").read_text()
    assert not list((tmp_path / "plots").glob("fig2_left_*.png"))
    assert ("Figure 2 (left) not drawn: it needs both optistate and opticycle in the sweep "
            "(present: direct, opticycle)") in (tmp_path / "report.md").read_text()
