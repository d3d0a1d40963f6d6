"""Metrics against hand-computed cases."""
from __future__ import annotations

import itertools
import math

import pandas as pd
import pyarrow as pa
import pytest

from evalcore import metrics as M
from evalcore.records import LEDGER_SCHEMA


def test_avg_at_k_keeps_missing_in_the_denominator():
    assert M.avg_at_k([True, False, None, True], planned=8) == 2 / 8
    assert M.avg_at_k([True, False, float("nan")]) == 1 / 3
    with pytest.raises(ValueError, match="5 graded trajectories but only 4 planned"):
        M.avg_at_k([True] * 5, planned=4)
    with pytest.raises(ValueError):
        M.avg_at_k([], planned=0)


def test_count_benchmark():
    c = M.count_benchmark([True, False, None], planned=5, statuses=["submitted", "error", "no_submission"])
    assert (c.planned, c.scored, c.missing, c.correct, c.errors) == (5, 3, 2, 1, 1)
    assert c.avg == 0.2


def test_macro_is_unweighted_and_refuses_holes():
    assert M.macro({"a": 0.5, "b": 1.0, "c": 0.0}) == 0.5
    assert M.macro([0.2, 0.4]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="no value: b"):
        M.macro({"a": 0.5, "b": None})
    with pytest.raises(ValueError):
        M.macro({})


# -- pass@k ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 3, 1 - 35 / 120),  # 1 - C(7,3)/C(10,3)
        (5, 2, 4, 1.0),  # n - c < k: every 4-subset holds a correct sample
        (5, 0, 3, 0.0),
        (5, 5, 1, 1.0),
        (200, 1, 100, 0.5),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert M.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_brute_force_over_subsets():
    for n in range(1, 7):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
                assert M.pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_undefined_and_invalid():
    assert M.pass_at_k(3, 1, 4) is None
    assert M.mean_pass_at_k([(4, 1), (3, 0)], 4) is None
    assert M.mean_pass_at_k([(4, 1), (4, 4)], 1) == pytest.approx((0.25 + 1.0) / 2)
    with pytest.raises(ValueError):
        M.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        M.pass_at_k(3, 1, 0)


# -- maj@k -------------------------------------------------------------------------------------


def test_majority_clusters_by_tolerance_and_breaks_ties_by_first_submission():
    subs = ["1", 2.0, 2.004, "abc", None, 1.0]
    # clusters: {1, 1.0} and {2.0, 2.004}: a tie, the cluster opened first wins
    assert M.majority_answer(subs) == 1.0
    assert M.maj_at_k(subs, 1) and not M.maj_at_k(subs, 2)
    assert M.maj_at_k(subs, 2, k=3)  # first three: 1 vs {2.0, 2.004}
    # exact duplicates only under sirl: 2.0 and 2.004 are different answers there
    assert M.majority_answer([2.0, 2.004, 3.0, 3.0], "sirl") == 3.0


def test_majority_statuses_vote_and_unparseable_do_not():
    assert M.majority_answer(["Infeasible", 5, "INFEASIBLE", "junk", "junk", "junk"]) == "infeasible"
    assert M.majority_answer([None, "junk", float("nan")]) is None
    assert not M.maj_at_k([None, "junk"], 0.0)
    assert M.maj_at_k([100, 104, 200], 100, profile="orlm")


# -- tokens and execution ------------------------------------------------------------------------


def test_tokens_missing_is_excluded_and_counted_zero_is_kept():
    assert M.trajectory_tokens(None, 5) is None and M.trajectory_tokens(0, 0) == 0
    tm = M.mean_tokens([10, None, 0, 20, float("nan")])
    assert (tm.mean, tm.n_used, tm.n_missing) == (10.0, 3, 2)
    assert M.mean_tokens([None]).mean is None


def test_token_macro_averages_benchmark_means():
    a = M.mean_tokens([10, 10, 10])
    b = M.mean_tokens([30])
    assert M.token_macro({"a": a, "b": b}) == 20.0  # pooled mean would be 15
    with pytest.raises(ValueError, match="no value: c"):
        M.token_macro({"a": a, "c": M.mean_tokens([None])})


def test_execution_rate():
    assert M.executed_ok(1, 3.0, None) and M.executed_ok(2, None, "infeasible")
    assert not M.executed_ok(0, 3.0, None) and not M.executed_ok(2, None, None)
    assert not M.executed_ok(None, 3.0, None) and not M.executed_ok(1, float("nan"), None)
    assert M.execution_rate([True, False, True], planned=4) == 0.5


# -- intervals -----------------------------------------------------------------------------------


def test_wilson_hand_values():
    low, high = M.wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    low, high = M.wilson_interval(0, 10)
    z2 = 1.959963984540054**2
    assert low == 0.0 and high == pytest.approx(z2 / (10 + z2), abs=1e-12)
    assert M.wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        M.wilson_interval(11, 10)


def test_cluster_bootstrap_is_seeded_and_respects_clustering():
    # 20 problems x 8 samples, each problem all right or all wrong: 160 samples that carry
    # the information of 20, so the interval must be about as wide as for 20 iid draws.
    per_problem = [[i % 2 == 0] * 8 for i in range(20)]
    est, low, high = M.bootstrap_ci(per_problem, seed=7)
    assert est == 0.5 and low < 0.5 < high
    assert (est, low, high) == M.bootstrap_ci(per_problem, seed=7)
    w_low, w_high = M.wilson_interval(80, 160)
    assert (high - low) > 1.5 * (w_high - w_low)
    assert M.bootstrap_ci([[True, True], [True]]) == (1.0, 1.0, 1.0)


# -- paired tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "b, c, p",
    [
        (0, 0, 1.0),
        (1, 0, 1.0),
        (5, 0, 2 / 32),
        (10, 2, 2 * (1 + 12 + 66) / 4096),
        (2, 10, 2 * (1 + 12 + 66) / 4096),
        (6, 6, 1.0),
        (3, 1, 2 * (1 + 4) / 16),
    ],
)
def test_mcnemar_exact_hand_values(b, c, p):
    assert M.mcnemar_exact(b, c) == pytest.approx(p, abs=1e-15)


def test_mcnemar_matches_scipy_binomtest():
    from scipy.stats import binomtest

    for b, c in [(7, 19), (30, 12), (0, 9), (50, 51)]:
        assert M.mcnemar_exact(b, c) == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


def test_paired_net_gain_hand_case():
    a = [1, 1, 1, 0, 0]
    b = [1, 0, 0, 0, 1]
    r = M.paired_net_gain(a, b)
    assert (r.n, r.a_only, r.b_only, r.both, r.neither) == (5, 2, 1, 1, 1)
    assert r.net_gain == pytest.approx(0.2)
    half = 1.959963984540054 * math.sqrt((3 / 5 - 0.04) / 5)
    assert (r.low, r.high) == (pytest.approx(0.2 - half), pytest.approx(min(1.0, 0.2 + half)))
    assert r.p_value == 1.0
    with pytest.raises(ValueError):
        M.paired_net_gain([1], [1, 0])


def test_paired_bootstrap_keeps_pairs():
    a = [[True, True]] * 10 + [[False, False]] * 10
    est, low, high = M.paired_bootstrap(a, a, seed=1)
    assert (est, low, high) == (0.0, 0.0, 0.0)  # identical methods: every resample differs by 0
    b = [[False, False]] * 20
    est, low, high = M.paired_bootstrap(a, b, seed=1)
    assert est == 0.5 and 0.2 < low < 0.5 < high < 0.8


# -- over a ledger table ---------------------------------------------------------------------------


def _ledger_row(bench, pid, sample, correct, pt=100, ct=50, exec_ok=1, value=1.0, status="submitted"):
    return {
        "key": f"m/direct/{bench}/{pid}/{sample}", "model": "m", "method": "direct", "benchmark": bench,
        "problem_id": pid, "sample": sample, "status": status, "correct": correct, "simulated": True,
        "prompt_tokens": pt, "completion_tokens": ct, "exec_ok": exec_ok, "submission_value": value,
    }


def test_summarize_and_macro_table_over_an_arrow_ledger():
    rows = [
        _ledger_row("a", "a-1", 0, True),
        _ledger_row("a", "a-1", 1, False, pt=None, exec_ok=0, value=None, status="no_submission"),
        _ledger_row("a", "a-2", 0, True, pt=0, ct=0),
        _ledger_row("b", "b-1", 0, False, status="error", exec_ok=0, value=None),
    ]
    table = pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)
    planned = {("m", "direct", "a"): 4, ("m", "direct", "b"): 2}
    s = M.summarize(table, planned=planned).set_index("benchmark")
    assert s.loc["a", ["planned", "scored", "missing", "correct"]].tolist() == [4, 3, 1, 2]
    assert s.loc["a", "avg"] == 0.5 and s.loc["b", "avg"] == 0.0
    assert s.loc["b", "errors"] == 1 and s.loc["b", "missing"] == 1
    assert s.loc["a", "tokens_mean"] == 75.0 and s.loc["a", "tokens_missing"] == 1  # (150 + 0) / 2
    assert s.loc["a", "exec_rate"] == 0.5  # 2 of 4 planned ran and submitted
    assert bool(s.loc["a", "simulated"])
    mt = M.macro_table(s.reset_index())
    assert len(mt) == 1 and mt.loc[0, "macro"] == 0.25 and mt.loc[0, "planned"] == 6
    assert mt.loc[0, "tokens_macro"] == pytest.approx((75.0 + 150.0) / 2)


def test_summarize_counts_planned_groups_with_no_rows_and_dedupes_keys():
    df = pd.DataFrame([_ledger_row("a", "a-1", 0, False), _ledger_row("a", "a-1", 0, True)])
    s = M.summarize(df, by=("benchmark",), planned={"a": 2, "b": 3}).set_index("benchmark")
    assert s.loc["a", "scored"] == 1 and s.loc["a", "correct"] == 1  # the retry replaced the first
    assert s.loc["b", ["planned", "scored", "missing", "correct"]].tolist() == [3, 0, 3, 0]
    assert s.loc["b", "avg"] == 0.0
