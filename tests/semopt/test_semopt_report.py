"""opteval.evalcore.reporting.semopt on trajectories the real harness produced.

Answer key: p1 = 7, p2 = 5; plan: p1, p2 x samples 0, 1. The scripted generator (tests'
ScriptedModel) always starts with ``submit(7)``:
  p1 s0  critic 0.9 -> gate accepts C_init (7)                 BoN ok,  Pass ok
  p2 s0  critic 0.3 -> search; one leaf submits 5 but scores 0.2, a 1xx leaf wins  BoN wrong, Pass ok
  p2 s1  critic 0.9 -> gate accepts 7                          BoN wrong, Pass wrong
  p1 s1  never committed (missing: wrong, no gate decision)
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import re

import pandas as pd
import pytest

from opteval.evalcore.grading import grade, submission_fields
from opteval.evalcore.harnesses import Budgets, HarnessContext, get_harness
from opteval.evalcore.models.base import Sampling
from opteval.evalcore.problems import AnswerKey, ProblemSpec
from opteval.evalcore.reporting.frame import prepare
from opteval.evalcore.reporting.semopt import main as report_main
from opteval.evalcore.reporting.semopt import semopt_report
from tests.semopt.test_semopt_harness import ScriptedModel

KEY = AnswerKey("U", {"p1": 7.0, "p2": 5.0})


def _traj(pid: str, sample: int, critic_c_init: float, local_executor):
    def critic(code: str) -> float:
        m = re.search(r"submit\((\d+)\)", code)
        assert m is not None, code
        v = int(m.group(1))
        return {7: critic_c_init, 5: 0.2}.get(v, 0.5)

    model = ScriptedModel(critic=critic, code_for=lambda s, m, c: "submit(5)\n" if (s, m, c) == (1, 0, 0)
                          else f"submit({100 * s + 10 * m + c + 100})\n")
    ctx = HarnessContext(model=model, executor=local_executor, sampling=Sampling(), sample=sample,
                         budgets=Budgets(max_calls=60, max_turns=60), method="semopt", model_name="M",
                         params={"iterations": 3, "expansion": 2, "reflections": 1})
    return asyncio.run(get_harness("semopt").run(ProblemSpec(id=pid, benchmark="U", question=f"q {pid}"), ctx))


def _row(t) -> dict:
    raw = t.submission.raw if t.submission else None
    return {"key": f"M/semopt/U/{t.problem_id}/{t.sample}", "model": "M", "method": "semopt", "benchmark": "U",
            "problem_id": t.problem_id, "sample": t.sample, "status": t.status, **submission_fields(raw),
            "correct": grade(raw, KEY.answers[t.problem_id]), "grading_profile": "optagentbench",
            "simulated": True, "n_calls": len(t.calls),
            "calls": json.dumps([dataclasses.asdict(c) for c in t.calls]),
            "execs": json.dumps([dataclasses.asdict(e) for e in t.execs]),
            "transcript": json.dumps(t.transcript)}


@pytest.fixture(scope="module")
def prep(local_executor):
    trajs = [_traj("p1", 0, 0.9, local_executor), _traj("p2", 0, 0.3, local_executor),
             _traj("p2", 1, 0.9, local_executor)]
    return prepare(pd.DataFrame([_row(t) for t in trajs]), {"U": KEY}, {("M", "semopt", "U"): 4})


def test_pass_at_n_best_of_n_gate_and_calls(prep):
    rep = semopt_report(prep)
    t = rep.trajectories.set_index(["problem_id", "sample"])
    assert t.loc[("p1", 0), "gate"] == "accept" and t.loc[("p2", 0), "gate"] == "search"
    assert pd.isna(t.loc[("p1", 1), "gate"]) and not t.loc[("p1", 1), "present"]
    assert list(t["best_of_n"].sort_index()) == [True, False, False, False]  # p1s0, p1s1, p2s0, p2s1
    assert list(t["pass_at_n"].sort_index()) == [True, False, True, False]
    (row,) = rep.summary[rep.summary["benchmark"] == "all"].to_dict(orient="records")
    assert row["trajectories"] == 4 and row["best_of_n"] == 25.0 and row["pass_at_n"] == 50.0
    assert row["gate_accept_rate"] == pytest.approx(66.67) and row["accepted"] == 2 and row["searched"] == 1
    assert row["init_acc"] == 25.0 and row["calls_mean_accepted"] == 2.0
    assert row["calls_mean_searched"] == t.loc[("p2", 0), "n_calls"] > 10
    dist = rep.calls_distribution
    assert dist[(dist["gate"] == "accept") & (dist["n_calls"] == 2)]["trajectories"].item() == 2
    assert dist[dist["gate"] == "none"]["n_calls"].tolist() == [0]  # the missing one: no calls, still counted
    assert rep.simulated and "SIMULATED" in rep.markdown()


def test_difficulty_from_c_init_without_a_direct_run(prep):
    d = semopt_report(prep).difficulty
    d = d[d["benchmark"] == "all"].set_index("difficulty")
    assert d.loc["Easy", "problems"] == 0 and d.loc["Medium", "problems"] == 1 and d.loc["Hard", "problems"] == 1
    assert d.loc["Medium", "best_of_n"] == 50.0 and d.loc["Hard", "pass_at_n"] == 50.0
    assert set(d["source"]) == {"semopt C_init (first 3 samples)"}


def test_cli_names_a_missing_sweep_dir(tmp_path, capsys):
    assert report_main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0]


def test_the_harness_records_what_tables_5_and_16_need(prep):
    rep = semopt_report(prep)
    c = rep.candidates
    assert len(c) and set(c["critic"]) == {"llm"} and c["first_failed"].notna().all()
    assert (c["reflections"] == 0).all() and not c["first_failed"].any()  # every scripted program ran first time
    t16 = rep.table16[rep.table16["benchmark"] == "all"].iloc[0]
    assert t16["nodes"] == len(c) and t16["triggered"] == 0 and t16["error_rate"] == 0.0
    assert "critic ablation" in rep.critics["semopt"] and "# SemOPT runs" in rep.markdown()
