"""Files written by ``Report.write`` (valid, non-empty PNGs; CSV/LaTeX/Markdown) and the
MLflow round trip: child-run metrics on a SQLite store give the same main table."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from opteval.evalcore.reporting import build_report
from tests.report.synth import ANSWERS, MODEL_META, PLANNED, ledger_frame

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_write_all_files(tmp_path: Path):
    rep = build_report(ledger_frame(), ANSWERS, PLANNED, model_meta=MODEL_META, compare=("direct", "opticycle"),
                       out_dir=tmp_path / "out")
    out = tmp_path / "out"
    names = {p.relative_to(out).as_posix() for p in rep.written}
    assert {"report.md", "summary.json", "main_table.csv", "main_table.tex"} <= names
    pngs = sorted(n for n in names if n.startswith("plots/"))
    # acc vs tokens: M1 only (M2 has no macro); size: one family; bars: one per backbone
    assert pngs == ["plots/acc_vs_size_Fam.png", "plots/acc_vs_tokens_M1.png",
                    "plots/benchmarks_M1.png", "plots/benchmarks_M2.png"]
    for n in pngs:
        blob = (out / n).read_bytes()
        assert blob[:8] == PNG_MAGIC and len(blob) > 5000, n
    md = (out / "report.md").read_text()
    for section in ("## Main table", "## Missing scores", "## Tokens", "## Execution and failures", "## Repair",
                    "## Sampling", "## Selection", "## Difficulty", "## Paired comparison", "## Grading sensitivity",
                    "## Latency", "## Plots"):
        assert section in md, section
    assert "](plots/benchmarks_M1.png)" in md
    csv = pd.read_csv(out / "main_table.csv")
    assert list(csv["method"]) == ["direct", "opticycle", "direct", "opticycle"]
    assert csv.loc[0, "Macro_mark"] == "best" and bool(csv.loc[0, "A_dagger"])
    assert (out / "main_table.tex").read_text().startswith("\\begin{table}")
    assert all(p.stat().st_size > 0 for p in rep.written)


def test_no_model_meta_skips_size_plot(tmp_path: Path):
    rep = build_report(ledger_frame(), ANSWERS, PLANNED)
    paths = rep.write(tmp_path)
    assert not any("acc_vs_size" in p.name for p in paths)
    assert "## Paired comparison" not in (tmp_path / "report.md").read_text()


def _log_sweep(uri: str, experiment: str, sweep: str, summary: pd.DataFrame) -> None:
    """What the tracking module logs: a parent tagged with the sweep, children per model x
    method with acc/, planned/, missing/ (+ errors/, tokens/, exec_rate/) per benchmark."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(experiment)
    parent = client.create_run(exp, run_name=sweep, tags={"opteval.sweep": sweep, "opteval.role": "parent"}).info.run_id
    # a decoy sweep that must not leak into the table
    other = client.create_run(exp, tags={"opteval.sweep": "other", "opteval.role": "parent"}).info.run_id
    client.create_run(exp, tags={"mlflow.parentRunId": other, "model": "M9", "method": "direct"})
    for (model, method), g in summary.groupby(["model", "method"]):
        tags = {"opteval.sweep": sweep, "opteval.role": "child", "model": model, "method": method,
                "mlflow.parentRunId": parent}
        if bool(g["simulated"].any()):
            tags["opteval.simulated"] = "true"
        run = client.create_run(exp, run_name=f"{model}/{method}", tags=tags).info.run_id
        ms = []
        for r in g.to_dict("records"):
            b = r["benchmark"]
            vals = {f"acc/{b}": r["avg"], f"planned/{b}": r["planned"], f"missing/{b}": r["missing"],
                    f"errors/{b}": r["errors"], f"exec_rate/{b}": r["exec_rate"], f"tokens/{b}": r["tokens_mean"]}
            ms += [Metric(k, float(v), 0, 0) for k, v in vals.items() if v is not None and not pd.isna(v)]
        if len(g) == 3:
            ms.append(Metric("acc/macro", float(g["avg"].mean()), 0, 0))
        client.log_batch(run, metrics=ms)
        client.set_terminated(run)


def test_mlflow_round_trip_gives_the_same_table(tmp_path: Path):
    from opteval.sweepcore.tracking.mlflow_views import MlflowViewError, table_from_mlflow

    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    rep = build_report(ledger_frame(), ANSWERS, PLANNED)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _log_sweep(uri, "opteval", "s1", rep.summary)
    table = table_from_mlflow(uri, "opteval", "s1")
    # values, marks and daggers are the same; a problem-level interval needs per-problem grades,
    # which the tracking server does not hold, so the MLflow table shows none (never Wilson)
    ci_cols = [c for c in table.columns if c.endswith((":low", ":high"))]
    pd.testing.assert_frame_equal(table.drop(columns=ci_cols).reset_index(drop=True),
                                  rep.main_table.drop(columns=ci_cols).reset_index(drop=True), check_dtype=False)
    assert all(v is None or pd.isna(v) for c in ci_cols for v in table[c])
    assert "M9" not in set(table["model"])
    with pytest.raises(MlflowViewError, match="nope"):
        table_from_mlflow(uri, "opteval", "nope")
