"""Issue 37: ``opteval report --audit`` puts trusted accuracy beside the raw and flags a comparison
whose winner changes once the suspect keys are left out (a synthetic ledger where it does)."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from opteval.evalcore.audit import COLUMNS
from opteval.evalcore.problems import load_benchmark
from tests.audit.synth_audit import row, write_ledger

PIDS = [f"sample-{i:04d}" for i in range(1, 13)]
SUSPECT = PIDS[:5]


def _rows() -> list[dict]:
    """A is right on the 5 suspect problems (it agrees with their keys) and on 3 of the 7 others; B is
    wrong on the suspects and right on 6 of the 7 others. Raw: A 8/12 > B 6/12; trusted: A 3/7 < B 6/7."""
    keys = load_benchmark("sample")[1].answers
    out = []
    for i, pid in enumerate(PIDS):
        a_right = pid in SUSPECT or i in (5, 6, 7)
        b_right = pid not in SUSPECT and i != 5
        for s in range(2):
            for method, right in (("A", a_right), ("B", b_right)):
                out.append(row("M", method, "sample", pid, s, keys[pid] if right else 1e9, f"{method}{i}",
                               correct=right))
    return out


def _audit(tmp_path) -> str:
    d = tmp_path / "aud"
    d.mkdir()
    rows = [dict.fromkeys(COLUMNS, "") | {"benchmark": "sample", "problem_id": p,
                                        "verdict": "suspect" if p in SUSPECT else "ok"} for p in PIDS]
    ints = {"support_trajectories", "support_models", "support_formulations", "key_trajectories",
            "solved_trajectories", "trajectories"}
    pq.write_table(pa.table({c: [0 if c in ints else r[c] for r in rows] for c in COLUMNS}), d / "audit.parquet")
    return str(d)


def test_trusted_accuracy_and_a_winner_that_changes(tmp_path, capsys):
    from opteval.jobs import report

    write_ledger(tmp_path, "wc", _rows())
    out = tmp_path / "rep"
    rc = report.main(["sweep.name=wc", f"sweep.output_dir={tmp_path}", "--out", str(out), "--compare", "A,B",
                      "--audit", _audit(tmp_path), "--bootstrap", "500"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "Accuracy on trusted keys" in cap.out and "left out of numerator and denominator" in cap.out
    assert "| M | A | sample | 66.7 | 42.9 | 12 | 5 |" in cap.out
    assert "| M | B | sample | 50.0 | 85.7 | 12 | 5 |" in cap.out
    cmp = pd.read_csv(out / "tables" / "trusted_compare.csv")
    assert cmp.loc[0, "raw_diff"] > 0 > cmp.loc[0, "trusted_diff"]
    assert "winner changes" in cmp.loc[0, "flag"]
    assert "winner changes" in (out / "report.md").read_text()


def test_a_missing_audit_dir_is_one_line_and_exit_2(tmp_path, capsys):
    from opteval.jobs import report

    write_ledger(tmp_path, "wc", _rows())
    rc = report.main(["sweep.name=wc", f"sweep.output_dir={tmp_path}", "--out", str(tmp_path / "r"),
                      "--audit", str(tmp_path / "nope")])
    assert rc == 2 and "no audit.parquet" in capsys.readouterr().err


def test_the_viewer_marks_suspect_problems_with_their_evidence(tmp_path, capsys):
    from opteval.jobs import view

    write_ledger(tmp_path, "wc", _rows())
    out = tmp_path / "view"
    rc = view.main(["sweep.name=wc", f"sweep.output_dir={tmp_path}", "--out", str(out), "--audit", _audit(tmp_path)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "audit: 20 trajectory pages marked suspect" in cap.out  # 5 problems x 2 methods x 2 samples
    page = (out / "audit.html").read_text()
    assert page.count("<li>") == 5 and "sample-0001" in page and "Suspect answer key" in page
    assert 'href="audit.html"' in (out / "index.html").read_text()
    marked = [p for p in out.glob("*.html") if 'class="opteval-audit"' in p.read_text() and p.name != "index.html"]
    assert len(marked) == 20
    assert view.main(["sweep.name=wc", f"sweep.output_dir={tmp_path}", "--out", str(out), "--audit",
                      str(tmp_path / "none")]) == 2
