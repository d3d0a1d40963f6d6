"""Issue 37: ``opteval regrade --ledger`` output is a ledger that report, view and audit accept (fast
tier: the verdicts are made here, not by the sandbox; the real path is tests/models' regrade tests)."""
from __future__ import annotations

import pandas as pd

from opteval.evalcore.formulation import Verification
from opteval.evalcore.problems import load_benchmark
from opteval.evalcore.records import LEDGER_SCHEMA
from opteval.jobs.regrade import Verdict
from opteval.jobs.regrade_ledger import write_ledger
from opteval.sweepcore.ledger import Ledger


def _verdicts(keys: dict) -> tuple[list[Verdict], list]:
    verdicts, records = [], []
    for i, (pid, key) in enumerate(sorted(keys.items())[:10]):
        right = i % 3 != 0
        sub = key if right else 999.0
        verdicts.append(Verdict(pid, 0, None if right else "wrong", sub, "ok",
                                verification=Verification("solve", fingerprint=f"fp{i}")))
        records.append(type("R", (), {"id": pid, "sample": 0, "completion": f"```python\nsubmit({sub!r})\n```"})())
    verdicts.append(Verdict("sample-0011", 0, "no_code"))
    records.append(type("R", (), {"id": "sample-0011", "sample": 0, "completion": "no code"})())
    return verdicts, records


def test_the_regraded_ledger_is_read_by_report_view_and_audit(tmp_path, capsys):
    from opteval.jobs import audit, report, view

    keys = load_benchmark("sample")[1].answers
    verdicts, records = _verdicts(keys)
    n = write_ledger(tmp_path / "pub", verdicts, records, model="Some-Model-7B", method="published",
                     benchmark="sample", profile="optagentbench", extraction="submit", source="C.jsonl")
    assert n == 11
    led = Ledger.open_existing(str(tmp_path), "pub")
    table = led.read_table()
    assert table.schema.names[: len(LEDGER_SCHEMA.names)] == LEDGER_SCHEMA.names
    df = table.to_pandas()
    assert set(df["model"]) == {"Some-Model-7B"} and not df["simulated"].any()
    assert df["correct"].sum() == 6 and (df["status"] == "no_submission").sum() == 1
    plan = led.read_plan()
    assert plan is not None and plan.num_rows == 11
    # the same again adds nothing (the keys are committed)
    assert write_ledger(tmp_path / "pub", verdicts, records, model="Some-Model-7B", method="published",
                        benchmark="sample", profile="optagentbench", extraction="submit", source="C.jsonl") == 0

    base = ["sweep.name=pub", f"sweep.output_dir={tmp_path}"]
    assert report.main([*base, "--out", str(tmp_path / "rep"), "--bootstrap", "100"]) == 0, capsys.readouterr().err
    assert "Some-Model-7B" in capsys.readouterr().out
    assert view.main([*base, "--out", str(tmp_path / "view")]) == 0, capsys.readouterr().err
    assert (tmp_path / "view" / "index.html").is_file()
    capsys.readouterr()
    assert audit.main(["--ledger", str(tmp_path / "pub"), "--out", str(tmp_path / "aud")]) == 0
    aud = pd.read_parquet(tmp_path / "aud" / "audit.parquet").set_index("problem_id")
    assert len(aud) == 46 and aud.loc["sample-0002", "trajectories"] == 1


def test_ledger_without_model_or_benchmark_is_one_line_and_exit_2(tmp_path, capsys):
    from opteval.jobs import regrade

    c = tmp_path / "C.jsonl"
    c.write_text('{"id": "sample-0001", "completion": "x"}\n')
    a = tmp_path / "A.jsonl"
    a.write_text('{"id": "sample-0001", "answer": 1}\n')
    assert regrade.main(["--completions", str(c), "--answers", str(a), "--ledger", str(tmp_path / "L")]) == 2
    assert "--ledger needs --model NAME and --benchmark SLUG" in capsys.readouterr().err
