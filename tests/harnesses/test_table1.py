"""Table 1: the sweep plan of configs/sweeps/table1.yaml and the report layout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from opteval.evalcore.problems import REGISTRY
from opteval.evalcore.reporting.table1 import TABLE1_BENCHMARKS, TABLE1_METHODS, table1, table1_markdown
from opteval.sweepcore.config import load_config

REPO = Path(__file__).resolve().parents[2]
TABLE1 = REPO / "configs" / "sweeps" / "table1.yaml"
SHARED = REPO.parent / "shared" / "benchmarks"


def test_table1_yaml_is_nine_methods_on_two_backbones():
    cfg = load_config([str(TABLE1)])
    assert list(cfg.models) == ["Qwen3-4B", "Qwen3.5-9B"]
    assert set(cfg.methods) == set(TABLE1_METHODS) and len(cfg.methods) == 9
    assert set(cfg.benchmarks) == set(TABLE1_BENCHMARKS)
    counts = {b: REGISTRY[b].count for b in cfg.samples.per_benchmark}
    assert None not in counts.values()
    per_mm = sum(int(counts[b] or 0) * int(n) for b, n in cfg.samples.per_benchmark.items())
    assert per_mm * 9 * 2 == 321336


@pytest.mark.skipif(not (SHARED / "nl4opt.jsonl").exists(),
                    reason="needs the nine benchmarks in CI's copy beside the checkout (the only place this test reads)")
def test_plan_only_prints_the_table1_total(tmp_path):
    env = dict(os.environ, OPTEVAL_DATA=str(SHARED))
    out = subprocess.run([sys.executable, str(REPO / "jobs" / "sweep.py"), str(TABLE1), "plan_only=true",
                          f"sweep.output_dir={tmp_path}", "tracking.enabled=false"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "planned 321336 trajectories" in out.stdout


def _summary() -> pd.DataFrame:
    rows = []
    for model in ("Qwen3-4B", "Qwen3.5-9B"):
        for i, method in enumerate(["optistate", "cafa", "direct", "zzz_extra"]):
            for b, planned in (("nl4opt", 10), ("mamo_easy", 20)):
                correct = {"optistate": 8, "cafa": 3, "direct": 5, "zzz_extra": 5}[method] * planned // 10
                rows.append({"model": model, "method": method, "benchmark": b, "planned": planned, "correct": correct,
                             "missing": 0, "errors": 0, "simulated": False,
                             "tokens_mean": 1000.0 * (i + 1) + (b == "nl4opt") * 500,
                             "tokens_missing": 0, "cached_mean": None})
    return pd.DataFrame(rows)


def test_table1_layout_rows_columns_macro_tokens():
    t = table1(_summary())
    # paper column order (mamo_easy before nl4opt), methods in the paper's row order, extras last
    values = [c for c in t.columns if ":" not in c and c not in ("model", "method", "label", "tokens_k", "simulated")]
    assert values == ["mamo_easy", "nl4opt", "Macro"]
    assert list(t[t.model == "Qwen3-4B"]["method"]) == ["direct", "cafa", "optistate", "zzz_extra"]
    row = t[(t.model == "Qwen3-4B") & (t.method == "optistate")].iloc[0]
    assert row["Macro"] == pytest.approx(0.8) and row["Macro:mark"] == "best"
    assert t[(t.model == "Qwen3-4B") & (t.method == "direct")].iloc[0]["Macro:mark"] == "second"
    # tokens per trajectory: unweighted mean over benchmarks, in thousands (optistate: (1000 + 1500) / 2)
    assert row["tokens_k"] == pytest.approx(1.25)
    md = table1_markdown(t)
    assert "**Qwen3-4B**" in md and "| OptiState | **80.00** | **80.00** | **80.00** | 1.25 |" in md
    assert md.index("Direct Generation") < md.index("CAFA") < md.index("OptiState")
