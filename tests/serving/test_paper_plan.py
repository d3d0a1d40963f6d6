"""The paper's sweep plans 17,852 trajectories per model x method, 53,556 per model, 589,116 in all."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from opteval.evalcore.problems import REGISTRY, load_benchmark
from opteval.sweepcore.config import load_config
from opteval.sweepcore.plan import expand_plan

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "configs" / "sweeps" / "paper.yaml"
TABLE3 = {"mamo_easy": 4, "optibench": 4, "icml_competition": 8, "nlp4lp": 8, "nl4opt": 8,
          "mamo_complex": 8, "optmath": 8, "industryor": 16, "complexor": 64}


def test_paper_yaml_matches_the_protocol():
    cfg = load_config([str(PAPER)])
    assert len(cfg.models) == 11 and all(str(m).startswith("Qwen3") for m in cfg.models)
    assert list(cfg.methods) == ["direct", "opticycle", "optistate"]
    assert dict(cfg.samples.per_benchmark) == TABLE3 and set(cfg.benchmarks) == set(TABLE3)
    s = cfg.sampling
    assert (s.temperature, s.top_p, s.top_k, s.max_tokens, s.base_seed) == (0.6, 0.95, 20, 16384, 42)
    # registry counts alone give the table's totals
    per_mm = sum((REGISTRY[b].count or 0) * n for b, n in TABLE3.items())
    assert per_mm == 17852


def test_expanded_paper_plan_totals(shared_benchmarks, monkeypatch):
    monkeypatch.setenv("OPTEVAL_DATA", str(shared_benchmarks))
    cfg = load_config([str(PAPER)])
    ids = {b: [p.id for p in load_benchmark(b, shared_benchmarks)[0]] for b in cfg.benchmarks}
    assert sum(len(v) for v in ids.values()) == 2634
    plan = expand_plan(cfg, ids)
    assert len(plan) == 589116
    per_mm = Counter((p.model, p.method) for p in plan)
    assert len(per_mm) == 33 and set(per_mm.values()) == {17852}
    per_model = Counter(p.model for p in plan)
    assert set(per_model.values()) == {53556}
    assert len({p.key for p in plan}) == len(plan)


def test_sweep_plan_only_prints_the_total(shared_benchmarks, tmp_path):
    sweep = REPO / "jobs" / "sweep.py"
    assert sweep.exists(), "jobs/sweep.py is missing"
    env = dict(os.environ, OPTEVAL_DATA=str(shared_benchmarks))
    out = subprocess.run([sys.executable, str(sweep), str(PAPER), "plan_only=true",
                          f"sweep.output_dir={tmp_path}", "tracking.enabled=false"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "planned 589116 trajectories" in out.stdout
