"""SemOPT's Tables 5-8 and 16 and its critic label, from a synthetic ledger worked out by hand,
through ``build_report`` (the SemOPT section of ``opteval report``).

Answer key U: p1 = 7, p2 = 5, p3 = 3; one sample each; tau 0.6. Candidates (phase, executed, R,
submission, first_failed, reflections):

semopt (LLM critic)
  p1  C_init ok R .9 -> 7 (right)                         accepted; answer 7 (right)     2 calls, 1 s
  p2  C_init ok R .8 -> 4 (wrong), failed once, 1 reflection    accepted; answer 4 (wrong)  4 calls, 2 s
  p3  C_init never ran (3 reflections); leaf R .3 -> 3 (right); leaf R .7 -> 9 (wrong, failed once,
      2 reflections)                                      answer 9 (wrong)               12 calls, 6 s
semopt_rm (reward model)
  p1  C_init R .95 -> 7                                   answer 7 (right)               2 calls, 1.5 s
  p2  C_init R .2 -> 4; leaf R .9 -> 5.0005 (right under optagentbench, wrong under semopt's 1e-6)
                                                          answer 5.0005                  10 calls, 5 s
  p3  C_init R .1 -> 9; leaf R .4 -> 3                    answer 3 (right)               10 calls, 5 s
direct: p1 right, p2 and p3 wrong -> Hard = {p2, p3}.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from opteval.evalcore.grading import grade, submission_fields
from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.records import LEDGER_SCHEMA_V1
from opteval.evalcore.reporting import build_report
from opteval.evalcore.reporting.semopt_tables import auc, f1

KEY = {"U": AnswerKey("U", {"p1": 7.0, "p2": 5.0, "p3": 3.0})}
PLANNED = {("M", m, "U"): 3 for m in ("semopt", "semopt_rm", "direct")}

# (phase, executed, R, submission, first_failed, reflections)
Cand = tuple[str, bool, float | None, Any, bool, int]
SEMOPT: dict[str, tuple[list[Cand], Any, int, float]] = {
    "p1": ([("gate", True, 0.9, 7, False, 0)], 7, 2, 1.0),
    "p2": ([("gate", True, 0.8, 4, True, 1)], 4, 4, 2.0),
    "p3": ([("gate", False, None, None, True, 3), ("search", True, 0.3, 3, False, 0),
            ("search", True, 0.7, 9, True, 2)], 9, 12, 6.0),
}
SEMOPT_RM: dict[str, tuple[list[Cand], Any, int, float]] = {
    "p1": ([("gate", True, 0.95, 7, False, 0)], 7, 2, 1.5),
    "p2": ([("gate", True, 0.2, 4, False, 0), ("search", True, 0.9, 5.0005, False, 0)], 5.0005, 10, 5.0),
    "p3": ([("gate", True, 0.1, 9, False, 0), ("search", True, 0.4, 3, False, 0)], 3, 10, 5.0),
}


def _row(method: str, pid: str, sub: Any, n_calls: int, wall: float, execs: list[dict[str, Any]],
         transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"key": f"M/{method}/U/{pid}/0", "sweep": "s", "model": "M", "method": method, "benchmark": "U",
            "problem_id": pid, "sample": 0, "seed": 42, "status": "submitted", **submission_fields(sub),
            "extraction": "submit", "correct": grade(sub, KEY["U"].answers[pid]), "grading_profile": "optagentbench",
            "prompt_tokens": 10 * n_calls, "completion_tokens": 5 * n_calls, "n_calls": n_calls,
            "n_execs": len(execs), "exec_ok": len(execs), "first_exec_outcome": "ok", "wall_s": wall, "simulated": False,
            "attempts": 1, "fingerprint": "f", "calls": json.dumps([{"turn": 0, "stage": "x"}] * n_calls),
            "execs": json.dumps(execs), "transcript": json.dumps(transcript), "budgets": "{}"}


def _semopt_row(method: str, critic: str, pid: str, spec: tuple[list[Cand], Any, int, float]) -> dict[str, Any]:
    cands, sub, n_calls, wall = spec
    execs, transcript = [], []
    for i, (phase, executed, r, s, ff, refl) in enumerate(cands):
        exec_index = None
        if s is not None:
            execs.append({"turn": i, "outcome": "ok", "submission": s})
            exec_index = len(execs) - 1
        info = {"candidate": i, "phase": phase, "path": [], "executed": executed, "R": r,
                "S": r if executed and r is not None else 0.0, "exec": exec_index, "critic": critic,
                "first_failed": ff, "reflections": refl}
        if i == 0:
            info.update(gate="accept" if (r or 0) > 0.6 else "search", tau=0.6)
        transcript.append({"call": i, "semopt": info})
    return _row(method, pid, sub, n_calls, wall, execs, transcript)


def ledger() -> pd.DataFrame:
    import pyarrow as pa

    rows = [_semopt_row("semopt", "llm", p, s) for p, s in SEMOPT.items()]
    rows += [_semopt_row("semopt_rm", "reward_model", p, s) for p, s in SEMOPT_RM.items()]
    rows += [_row("direct", p, v, 1, 0.5, [{"turn": 0, "outcome": "ok", "submission": v}], [])
             for p, v in (("p1", 7), ("p2", 1), ("p3", 1))]
    return pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA_V1).to_pandas()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    rep = build_report(ledger(), KEY, PLANNED, out_dir=out, n_resamples=200)
    assert rep.semopt is not None
    return rep, out


def _all(df: pd.DataFrame, method: str) -> dict[str, Any]:
    (row,) = df[(df["method"] == method) & (df["benchmark"] == "all")].to_dict("records")
    return row


def test_table5_auc_and_f1_per_critic(report):
    t5 = report[0].semopt.table5
    s, rm = _all(t5, "semopt"), _all(t5, "semopt_rm")
    # C_init: p1 .9 right, p2 .8 wrong (p3's never ran): AUC 1, F1 = 2*1 / (2*1 + 1 FP) at R > .6
    assert (s["c_init_n"], s["c_init_positives"], s["c_init_auc"], s["c_init_f1"]) == (2, 1, 1.0, 0.667)
    # all: right .9, .3; wrong .8, .7 -> 2 of 4 pairs ordered; F1: TP .9, FP .8 .7, FN .3 -> 2/5
    assert (s["all_n"], s["all_auc"], s["all_f1"]) == (4, 0.5, 0.4)
    # the reward model, graded under semopt's 1e-6: p2's 5.0005 is wrong. all: right .95, .4; wrong .2, .1, .9
    assert (rm["c_init_auc"], rm["c_init_f1"]) == (1.0, 1.0)
    assert rm["all_auc"] == pytest.approx(0.833, abs=1e-3) and rm["all_f1"] == 0.5
    assert s["tau"] == 0.6


def test_table6_and_table8_best_of_n_under_semopts_own_rule(report):
    rep = report[0]
    assert rep.semopt.profile == "semopt"
    t6 = rep.semopt.table6.set_index("method")
    assert t6.loc["semopt", "all"] == pytest.approx(33.33) and t6.loc["semopt_rm", "all"] == pytest.approx(66.67)
    assert t6.loc["semopt", "critic"] == "llm" and t6.loc["semopt_rm", "critic"] == "reward_model"
    # the main table grades under optagentbench: semopt_rm's 5.0005 is right there
    main = rep.main_table.set_index("method")
    assert main.loc["semopt_rm", "U"] == pytest.approx(1.0)
    t8 = _all(rep.semopt.table8, "semopt")
    assert (t8["accuracy"], t8["calls_mean"], t8["cell"]) == (pytest.approx(33.33), 6.0, "33.3 / 6.0")


def test_table7_on_the_hard_problems(report):
    t7 = report[0].semopt.table7.set_index("method")
    assert report[0].semopt.table7_source == "direct (first 3 samples)"
    assert set(t7.index) == {"direct", "semopt", "semopt_rm"} and set(t7["problems"]) == {2}  # p2, p3
    assert (t7.loc["semopt", "accuracy"], t7.loc["semopt", "wall_s_mean"], t7.loc["semopt", "calls_mean"]) == (0.0, 4.0, 8.0)
    assert (t7.loc["semopt_rm", "accuracy"], t7.loc["semopt_rm", "calls_mean"]) == (50.0, 10.0)


def test_table16_error_handling(report):
    t16 = _all(report[0].semopt.table16, "semopt")
    # 5 evaluated nodes; p2's C_init, p3's C_init and p3's second leaf failed first; 2 of them were repaired
    assert (t16["nodes"], t16["triggered"], t16["error_rate"]) == (5, 3, 60.0)
    assert (t16["repaired"], t16["failed"], t16["reflections_mean_repaired"]) == (66.67, 33.33, 1.5)
    assert _all(report[0].semopt.table16, "semopt_rm")["triggered"] == 0


def test_report_md_names_the_critic_and_what_is_not_produced(report):
    rep, out = report
    md = (out / "report.md").read_text()
    assert "## SemOPT runs" in md and "### Table 5: critic discrimination" in md and "### Table 16" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("- `semopt`: "))
    assert "critic ablation" in line and "not public" in line and "not its trained semantic reward model" in line
    assert "- `semopt_rm`: `reward_model`: semantic reward model" in md
    assert "Graded under `semopt` (the SemOPT paper's rule, 5.1: |a-b| < 1e-6)." in md
    assert "Naive Search (NS" in md and "RM-only reranking" in md and "Self-Refinement (SR)" in md
    for name in ("summary", "table5", "table6", "table7", "table8", "table16"):
        assert (out / "tables" / f"semopt_{name}.csv") in rep.written
    assert pd.read_csv(out / "tables" / "semopt_table16.csv").shape[0] == 4  # 2 methods x (U, all)


def test_no_semopt_method_no_section(tmp_path: Path):
    from tests.report import synth

    rep = build_report(synth.ledger_frame(), synth.ANSWERS, synth.PLANNED, out_dir=tmp_path, n_resamples=200)
    assert rep.semopt is None and "SemOPT runs" not in (tmp_path / "report.md").read_text()
    assert not list((tmp_path / "tables").glob("semopt_*.csv"))


def test_auc_and_f1_edges():
    assert auc([0.1, 0.2], [True, True]) is None and auc([0.5, 0.5], [True, False]) == 0.5
    assert f1([0.1], [False], 0.6) is None and f1([0.9], [False], 0.6) == 0.0
