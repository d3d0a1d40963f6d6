"""Every number of the report on the synthetic ledger of ``synth.py``, worked out by hand.

The expected values below are derived from the scenario table in ``synth.py``'s docstring
(comments show the arithmetic), not copied from the code's output.
"""
from __future__ import annotations

import math

import pandas as pd
import pytest

from opteval.evalcore.reporting import build_report, isc_select, k_values
from opteval.evalcore.reporting.frame import ReportError
from tests.report.synth import ANSWERS, MODEL_META, PLANNED, ledger_frame, rows


@pytest.fixture(scope="module")
def rep():
    return build_report(ledger_frame(), ANSWERS, PLANNED, model_meta=MODEL_META, compare=("direct", "opticycle"))


def cell(df: pd.DataFrame, **where):
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        m &= df[k] == v
    out = df[m]
    assert len(out) == 1, (where, len(out))
    return out.iloc[0]


def test_main_table_values_intervals_marks_daggers(rep):
    t = rep.main_table
    d = cell(t, model="M1", method="direct")
    o = cell(t, model="M1", method="opticycle")
    # direct A: a1 x3 right, a2 s0 right, a2 s1 wrong, a2 s2 not run -> 4/6
    assert d["A"] == pytest.approx(4 / 6) and o["A"] == pytest.approx(3 / 6)
    assert d["B"] == 0 and o["B"] == 0  # the all-wrong benchmark
    assert d["C"] == pytest.approx(1 / 2) and o["C"] == pytest.approx(1 / 2)
    assert d["Macro"] == pytest.approx((4 / 6 + 0 + 1 / 2) / 3)
    assert o["Macro"] == pytest.approx((3 / 6 + 0 + 1 / 2) / 3)
    # problem-level percentile bootstrap, by hand. Direct A: problem rates a1 = 3/3, a2 = 1/3;
    # two problems resampled give 1/3 (p 1/4), 2/3 (p 1/2), 1 (p 1/4): the 2.5% and 97.5%
    # quantiles fall inside the end atoms, so the interval is exactly [1/3, 1].
    assert (d["A:low"], d["A:high"]) == pytest.approx((1 / 3, 1.0))
    assert (o["A:low"], o["A:high"]) == pytest.approx((1 / 3, 2 / 3))  # a1 1/3, a2 2/3
    assert (o["B:low"], o["B:high"]) == (0.0, 0.0)  # every problem wrong: nothing to resample
    # Macro: A in {1/3, 2/3, 1}, B = 0, C in {0 (1/4), 1/2 (1/2), 1 (1/4)}, independent;
    # the extremes (1/3 + 0) / 3 and (1 + 1) / 3 each have probability 1/16 > 2.5%
    assert (d["Macro:low"], d["Macro:high"]) == pytest.approx((1 / 9, 2 / 3))
    # marks per backbone, ties included
    assert (d["A:mark"], o["A:mark"]) == ("best", "second")
    assert (d["B:mark"], o["B:mark"]) == ("best", "best")
    assert (d["C:mark"], o["C:mark"]) == ("best", "best")
    assert (d["Macro:mark"], o["Macro:mark"]) == ("best", "second")
    m2d, m2o = cell(t, model="M2", method="direct"), cell(t, model="M2", method="opticycle")
    assert (m2d["C"], m2o["C"]) == (1.0, 0.5) and (m2d["C:mark"], m2o["C:mark"]) == ("best", "second")
    assert m2d["A"] is None or pd.isna(m2d["A"])
    assert m2d["Macro"] is None or pd.isna(m2d["Macro"])  # a benchmark without value: no macro
    # daggers: A has a not-run (direct) and an error (opticycle); Macro inherits
    assert d["A:dagger"] and o["A:dagger"] and d["Macro:dagger"] and o["Macro:dagger"]
    assert not d["B:dagger"] and not d["C:dagger"] and not m2d["Macro:dagger"]
    assert bool(m2d["simulated"]) and not bool(d["simulated"])


def test_missing_list(rep):
    miss = rep.missing.set_index("key")["reason"].to_dict()
    assert miss == {"M1/direct/A/a2/2": "not run", "M1/opticycle/A/a1/2/h": "timeout exception"}


def test_renderers(rep):
    md = rep.markdown()
    assert "| M1 | direct | **66.7**† [" in md
    assert "<u>50.0</u>†" in md
    assert "direct (simulated)" in md and "**SIMULATED**" in md
    from opteval.evalcore.reporting import to_csv_frame, to_latex

    csv = to_csv_frame(rep.main_table)
    r = cell(csv, model="M1", method="opticycle")
    assert r["A"] == 50.0 and r["A_mark"] == "second" and bool(r["A_dagger"]) and r["Macro"] == 33.33
    tex = to_latex(rep.main_table)
    assert r"\textbf{66.7}$^\dagger$" in tex and r"\underline{50.0}$^\dagger$" in tex
    assert "opticycle (simulated)" in tex and tex.count(r"\midrule") == 2


def test_tokens(rep):
    t = rep.tokens
    d = cell(t, model="M1", method="direct")
    # prompt 100+10*sample + 50: A rows 150,160,170,150,160 -> 158; B 150,160,150,160 -> 155;
    # C: c1 150, c2 has no count (left out) -> 150
    assert (d["A"], d["B"], d["C"]) == pytest.approx((158, 155, 150))
    assert d["Macro"] == pytest.approx((158 + 155 + 150) / 3)
    assert d["tokens_missing"] == 1 and d["cached:Macro"] is None
    o = cell(t, model="M1", method="opticycle")
    assert o["Macro"] == pytest.approx(400) and o["cached:A"] == pytest.approx(200)
    assert o["tokens_missing"] == 1  # the error row has no counts
    assert bool(cell(t, model="M2", method="direct")["simulated"])


def test_failure_split_and_exec_rate(rep):
    f = rep.failures
    cats = ["correct", "no_submission", "syntactic", "semantic", "missing"]
    assert cell(f, model="M1", method="direct", benchmark="A")[cats].tolist() == [4, 0, 0, 1, 1]
    assert cell(f, model="M1", method="direct", benchmark="B")[cats].tolist() == [0, 1, 2, 1, 0]
    assert cell(f, model="M1", method="opticycle", benchmark="A")[cats].tolist() == [3, 0, 0, 2, 1]
    assert cell(f, model="M1", method="opticycle", benchmark="B")[cats].tolist() == [0, 0, 1, 3, 0]
    assert cell(f, model="M1", method="direct", benchmark="all")[cats].tolist() == [5, 1, 2, 3, 1]
    assert (f[cats].sum(axis=1) == f["planned"]).all()
    # exec rate: an ok execution and a parseable submission, over planned
    assert cell(f, model="M1", method="direct", benchmark="A")["exec_rate"] == pytest.approx(5 / 6)
    assert cell(f, model="M1", method="direct", benchmark="B")["exec_rate"] == pytest.approx(2 / 4)
    assert cell(f, model="M1", method="opticycle", benchmark="B")["exec_rate"] == pytest.approx(3 / 4)
    assert cell(f, model="M1", method="direct", benchmark="all")["exec_rate"] == pytest.approx(9 / 12)


def test_repair(rep):
    r = rep.repair
    assert set(r["method"]) == {"opticycle"}  # direct never makes a second call or execution
    a = cell(r, model="M1", method="opticycle", benchmark="all")
    assert (a["first_failed"], a["repaired"]) == (3, 1) and a["repair_rate"] == pytest.approx(1 / 3)
    assert cell(r, model="M1", method="opticycle", benchmark="C")["repair_rate"] is None


def test_pass_and_maj_curves(rep):
    c = rep.curves
    assert sorted(set(c["k"])) == [1, 2, 3]
    da = c[(c.model == "M1") & (c.method == "direct") & (c.benchmark == "A")].set_index("k")
    # a1: n=3 c=3; a2: n=3 c=1 -> pass@2 = (1 + (1 - C(2,2)/C(3,2))) / 2
    assert da.loc[1, "pass@k"] == pytest.approx((1 + 1 / 3) / 2)
    assert da.loc[2, "pass@k"] == pytest.approx((1 + 2 / 3) / 2)
    assert da.loc[3, "pass@k"] == pytest.approx(1.0)
    # maj@2 on a2: infeasible vs 12 tie -> earliest (infeasible) -> right
    assert da.loc[2, "maj@k"] == pytest.approx(1.0)
    cc = c[(c.model == "M1") & (c.method == "direct") & (c.benchmark == "C")].set_index("k")
    assert cc.loc[1, "pass@k"] == pytest.approx(0.5)
    assert cc.loc[2, "pass@k"] is None and cc.loc[3, "maj@k"] is None  # undefined, not 0
    assert c[(c.model == "M1") & (c.benchmark == "B") & (c.k <= 2)]["pass@k"].tolist() == [0.0] * 4
    assert "| M1 | direct | C | 50.0 | — | — |" in rep.markdown()


def test_selection_columns(rep):
    s = rep.selection
    d = cell(s, model="M1", method="direct")
    assert d["maj@n:A"] == pytest.approx(1.0)  # tie on a2 goes to the earliest (infeasible)
    assert d["isc@n:A"] == pytest.approx(0.5)  # ISC on a2 picks 12: its model features agree with themselves
    assert d["pass@n:A"] == pytest.approx(1.0) and d["n:A"] == 3 and d["n:C"] == 1
    assert d["maj@n:B"] == 0 and d["isc@n:B"] == 0
    assert d["maj@n:Macro"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert d["isc@n:Macro"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    o = cell(s, model="M1", method="opticycle")
    assert o["maj@n:A"] == pytest.approx(1.0) and o["isc@n:A"] == pytest.approx(0.5)


def test_orr1_vote_next_to_the_tolerance_vote(rep):
    d = cell(rep.selection, model="M1", method="direct")
    # OR-R1's released vote: a1's 10, 10.001 and "10" all vote int 10 (three votes: right); a2's
    # infeasible does not vote and 12 alone has one vote, short of the two a winner needs (wrong)
    # -> 1/2, where maj@n lets infeasible vote and win the tie (1.0)
    assert "dec:A" not in d and d["orr1@n:A"] == pytest.approx(0.5) and d["maj@n:A"] == pytest.approx(1.0)
    # B: no number twice; C: one sample per problem, so never two votes (maj@n takes the lone answer)
    assert d["orr1@n:B"] == 0 and d["orr1@n:C"] == 0 and d["maj@n:C"] == pytest.approx(0.5)
    o = cell(rep.selection, model="M1", method="opticycle")
    assert o["orr1@n:A"] == 0  # a1: 10 and 11 one vote each -> no winner; a2: only statuses -> None
    assert d["isc_unscored:A"] == 1 and d["isc_unscored:C"] == 2  # a2's "infeasible"; C rows carry no model
    assert "orr1@n" in rep.markdown() and "released vote" in rep.markdown()


def test_orr1_vote_is_the_released_rule():
    from opteval.evalcore.rewards_released import orr1_vote as released
    from opteval.evalcore.selection import orr1_vote, select

    # int(float(x)): 1.9 and 1.2 both vote 1 and beat 2.0's single vote; statuses never vote
    assert orr1_vote([1.9, 2.0, 1.2, "infeasible", "infeasible", "infeasible"]) == 1.0
    assert released(["1.9", "2.0", "1.2", None, None, None]) == 1
    # a tie of two votes each: the first value to reach the count wins (1, reached at index 2)
    assert orr1_vote([1.0, 2.0, 1.5, 2.5]) == 1.0
    # no value with two votes: no answer, however many samples
    assert orr1_vote([1.004, 0.996, 2.0]) is None and orr1_vote([7.0]) is None
    assert orr1_vote(["infeasible", None]) is None
    assert orr1_vote([float("nan"), 3.0, 3.4]) == 3.0 and orr1_vote([float("nan"), float("nan")]) is None
    assert isc_select([float("nan"), 4.0], [None, None], "optagentbench") == (4.0, [0.0, 1.0])
    assert select([5.0, 5.001, 6.0], "optagentbench", "tolerance") == 5.0
    assert select([5.0, 5.7, 6.0], "optagentbench", "orr1") == 5.0
    with pytest.raises(ValueError, match="unknown selection profile"):
        select([1.0], "optagentbench", "mode")


def test_isc_scipy_sense_from_the_submission():
    # two SciPy maximizations (submitted -fun) and one SciPy minimization with the same counts
    lp = {"library": "scipy.linprog", "sense": None, "solver_sense": "min", "n_binary": 0, "n_integer": 0}
    ms = [{**lp, "objective": -11.0}, {**lp, "objective": -9.0}, {**lp, "objective": 9.0}]
    ans, scores = isc_select([11.0, 9.0, 9.0], ms, "optagentbench")
    # senses max, max, min: psi = 2, 2, 1; objectives 11 alone, 9 twice; counts agree 3x
    s0 = 1 + math.sqrt(2) + 2 * math.sqrt(3)
    s1 = math.sqrt(2) + math.sqrt(2) + 2 * math.sqrt(3)
    s2 = math.sqrt(2) + 1 + 2 * math.sqrt(3)
    assert scores == pytest.approx([s0, s1, s2]) and ans == 9.0


def test_isc_scores_by_hand():
    a = {"sense": "min", "n_binary": 2, "n_integer": 0}
    b = {"sense": "max", "n_binary": 2, "n_integer": 1}
    # three candidates: 5 (a), 5 (b), 7 (a); answers 5 agree twice
    ans, scores = isc_select([5.0, 5.0, 7.0], [a, b, a], "optagentbench")
    s0 = math.sqrt(2) + math.sqrt(2) + math.sqrt(3) + math.sqrt(2)
    s1 = math.sqrt(2) + 1 + math.sqrt(3) + 1
    s2 = 1 + math.sqrt(2) + math.sqrt(3) + math.sqrt(2)
    assert scores == pytest.approx([s0, s1, s2]) and ans == 5.0
    # a non-voting candidate scores 0; nothing voting -> None
    assert isc_select([None, None], [a, a], "optagentbench") == (None, [0.0, 0.0])
    # tie between candidates -> earliest
    assert isc_select([3.0, 4.0], [a, a], "optagentbench")[0] == 3.0


def test_difficulty(rep):
    lab = rep.difficulty_labels.set_index(["model", "problem_id"])["difficulty"].to_dict()
    assert lab[("M1", "a1")] == "Easy" and lab[("M1", "a2")] == "Medium"  # a2: 1 right, 1 wrong, 1 not run
    assert lab[("M1", "b1")] == lab[("M1", "b2")] == lab[("M1", "c2")] == "Hard" and lab[("M1", "c1")] == "Easy"
    d = rep.difficulty[rep.difficulty["benchmark"] == "all"]
    o = d[(d.model == "M1") & (d.method == "opticycle")].set_index("difficulty")
    # Easy a1 (1 of 3) + c1 (0 of 1); Medium a2 (2 of 3); Hard B (0 of 4) + c2 (1 of 1)
    assert (o.loc["Easy", "correct"], o.loc["Easy", "planned"]) == (1, 4)
    assert o.loc["Medium", "acc"] == pytest.approx(2 / 3) and o.loc["Hard", "acc"] == pytest.approx(1 / 5)


def test_paired(rep):
    from scipy.stats import beta

    p = rep.paired
    a = cell(p, model="M1", benchmark="A")
    # by problem, k = 3: a1 direct 3/3 vs opticycle 1/3 (A better), a2 1/3 vs 2/3 (B better)
    assert (a["n"], a["k"], a["a_only"], a["b_only"]) == (2, "3", 1, 1)
    assert a["net_gain"] == pytest.approx(1 / 6) and "bootstrap" in a["test"]
    # bootstrap of (sum ca - cb) / sum k over 2 problems: 2/3, -1/3 (p 1/4 each), 1/6 (p 1/2): 90% -> ends
    assert (a["low"], a["high"]) == pytest.approx((-1 / 3, 2 / 3))
    assert a["p_value"] == pytest.approx(1.0)  # differences 2/3, -1/3: every sign pattern is as extreme
    c = cell(p, model="M1", benchmark="C")
    # k = 1: exact McNemar on the discordant problems (c1 A only, c2 B only) and SemOPT's interval
    assert (c["a_only"], c["b_only"], c["net_gain"], c["p_value"]) == (1, 1, 0.0, 1.0) and "McNemar" in c["test"]
    assert (c["low"], c["high"]) == pytest.approx((2 * (2 * beta.ppf(0.05, 1, 2) - 1) / 2,
                                                   2 * (2 * beta.ppf(0.95, 2, 1) - 1) / 2))
    b = cell(p, model="M1", benchmark="B")
    assert (b["net_gain"], b["low"], b["high"], b["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    al = cell(p, model="M1", benchmark="all")
    assert (al["n"], al["k"]) == (6, "1-3") and al["net_gain"] == pytest.approx(1 / 12)
    m = cell(p, model="M1", benchmark="Macro")
    assert m["net_gain"] == pytest.approx(((4 / 6 - 3 / 6) + 0 + 0) / 3)
    # Macro delta replicates = (A + 0 + C) / 3 with A in {4/6, -2/6 (1/4 each), 1/6 (1/2)} and C in
    # {1, -1 (1/4 each), 0 (1/2)}: each extreme has probability 1/16 > 5%, so the 90% interval is
    # [(-1/3 - 1) / 3, (2/3 + 1) / 3]
    assert (m["low"], m["high"]) == pytest.approx((-4 / 9, 5 / 9))
    # weighted sign flips of (2, -1) / 18 and (3, -3) / 18 (B's zeros do not move): every sum is
    # odd in 1/18 units, so none is below the observed 1/18: p = 1 (exact enumeration)
    assert m["p_value"] == pytest.approx(1.0) and "stratified" in m["test"]
    assert len(p[(p.model == "M2") & (p.benchmark == "Macro")]) == 0  # one benchmark: no macro row
    md = rep.markdown()
    assert "Paired by problem" in md and "90% interval" in md


def test_grading_sensitivity(rep):
    s = rep.sensitivity
    d, o = cell(s, model="M1", method="direct"), cell(s, model="M1", method="opticycle")
    assert d["A[sirl]"] == pytest.approx(3 / 6)  # 10.001 vs 10: 1e-3/11 >= 1e-6
    assert d["A[optagentbench]"] == pytest.approx(4 / 6) and d["A[orlm]"] == pytest.approx(4 / 6)
    assert o["C[orlm]"] == pytest.approx(1.0) and o["C[optagentbench]"] == pytest.approx(0.5)  # 100.5 -> 101
    assert o["Macro[orlm]"] == pytest.approx((0.5 + 0 + 1) / 3)


def test_latency(rep):
    lt = rep.latency
    d = cell(lt, model="M1", method="direct")
    # walls 1+sample over 11 rows: 1 x6, 2 x4, 3 x1 -> median 1, p90 (index 9 of 10) 2
    assert (d["wall_median_s"], d["wall_p90_s"]) == (1.0, 2.0)
    assert d["call_median_s"] == 0.5 and d["calls_per_traj"] == 1.0
    o = cell(lt, model="M1", method="opticycle")
    # 11 rows with calls (1 s, 3 s) and the error row with none: 22 latencies
    assert (o["call_median_s"], o["call_p90_s"]) == (2.0, 3.0)
    assert o["calls_per_traj"] == pytest.approx(22 / 12) and o["execs_per_traj"] == pytest.approx(13 / 12)


def test_profile_change_regrades(rep):
    r = build_report(ledger_frame(), ANSWERS, PLANNED, profile="sirl")
    assert cell(r.main_table, model="M1", method="direct")["A"] == pytest.approx(3 / 6)


def test_plan_table_names_missing_and_rejects_unplanned_rows():
    plan = pd.DataFrame([{"key": f"{m}/{x}/{b}/{p}/{s}/h", "model": m, "method": x, "benchmark": b, "problem_id": p, "sample": s}
                         for (m, x, b), n in PLANNED.items()
                         for p in sorted(ANSWERS[b].answers) for s in range(n // len(ANSWERS[b]))])
    r = build_report(ledger_frame(), ANSWERS, plan)
    assert "M1/direct/A/a2/2/h" in set(r.missing["key"])
    bad = dict(PLANNED)
    del bad[("M2", "direct", "C")]
    with pytest.raises(ReportError, match="M2/direct/C"):
        build_report(ledger_frame(), ANSWERS, bad)
    over = {**PLANNED, ("M1", "direct", "C"): 1}
    with pytest.raises(ReportError, match="2 committed"):
        build_report(ledger_frame(), ANSWERS, over)


def test_counts_without_grid_count_missing():
    # 7 planned on A cannot be laid on 2 problems: the missing trajectory is counted, not named
    pl = {**PLANNED, ("M1", "direct", "A"): 7}
    r = build_report(ledger_frame(), ANSWERS, pl)
    d = cell(r.main_table, model="M1", method="direct")
    assert d["A"] == pytest.approx(4 / 7) and d["A:dagger"]
    assert any("M1/direct/A: 2 planned" in n for n in r.notes)
    assert cell(r.failures, model="M1", method="direct", benchmark="A")["missing"] == 2


def test_k_values():
    assert k_values(1) == [1] and k_values(8) == [1, 2, 4, 8] and k_values(6) == [1, 2, 4, 6]


def test_pyarrow_input_and_duplicate_keys_keep_last():
    import pyarrow as pa

    from opteval.evalcore.records import LEDGER_SCHEMA_V1

    rs = rows()
    dup = dict(rs[-1])  # M2 opticycle c2: re-committed, now wrong
    dup["submission"], dup["submission_value"] = "999", 999.0
    rs.append(dup)
    r = build_report(pa.Table.from_pylist(rs, schema=LEDGER_SCHEMA_V1), ANSWERS, PLANNED)
    assert cell(r.main_table, model="M2", method="opticycle")["C"] == 0.0
