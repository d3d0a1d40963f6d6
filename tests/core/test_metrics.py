"""Metrics against hand-computed cases."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from opteval.evalcore import metrics as M
from opteval.evalcore.records import LEDGER_SCHEMA


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
    assert r.net_gain == pytest.approx(0.2) and r.confidence == 0.90
    # SemOPT's 90% conditional exact interval: 2 of 3 discordant go to A. Clopper-Pearson for
    # 2/3: lower solves the Beta(2, 2) cdf 3x^2 - 2x^3 = 0.05, upper = 0.95^(1/3) (Beta(3, 1));
    # net gain bounds = 3 * (2 pi - 1) / 5.
    lo = _bisect(lambda x: 3 * x * x - 2 * x ** 3 - 0.05, 0.0, 1.0)
    hi = 0.95 ** (1 / 3)
    assert (r.low, r.high) == (pytest.approx(3 * (2 * lo - 1) / 5, abs=1e-9), pytest.approx(3 * (2 * hi - 1) / 5))
    assert r.p_value == 1.0 and "McNemar" in r.test
    with pytest.raises(ValueError):
        M.paired_net_gain([1], [1, 0])


def _bisect(f, lo: float, hi: float) -> float:
    for _ in range(200):
        mid = (lo + hi) / 2
        if (f(lo) < 0) == (f(mid) < 0):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def test_semopt_combined_hard_subset_example():
    # SemOPT F.2: 79 instances, 7 wins and 1 loss -> 7.6-point net gain, positive 90% interval
    r = M.paired_net_gain([1] * 7 + [0] + [1] * 10 + [0] * 61, [0] * 7 + [1] + [1] * 10 + [0] * 61)
    assert round(100 * r.net_gain, 1) == 7.6 and r.low > 0
    from scipy.stats import beta

    assert r.low == pytest.approx(8 * (2 * beta.ppf(0.05, 7, 2) - 1) / 79)
    assert r.high == pytest.approx(8 * (2 * beta.ppf(0.95, 8, 1) - 1) / 79)
    assert r.p_value == pytest.approx(2 * (1 + 8) / 2 ** 8)  # P(X <= 1), X ~ Bin(8, 1/2), doubled
    assert M.conditional_exact_interval(0, 0, 10) == (0.0, 0.0)


def test_clopper_pearson_and_wilson_match_scipy():
    from scipy.stats import beta, binomtest

    assert M.clopper_pearson(3, 10, 0.9) == pytest.approx((beta.ppf(0.05, 3, 8), beta.ppf(0.95, 4, 7)))
    ci = binomtest(37, 80).proportion_ci(0.95, method="wilson")
    assert M.wilson_interval(37, 80) == pytest.approx((ci.low, ci.high))


def test_sign_flip_pvalue_exact_by_enumeration():
    d = [0.5, 0.25, 0.75, -0.25, 0.5, 0.0]
    obs = abs(sum(d))
    flips = list(itertools.product([1, -1], repeat=len(d)))
    expected = sum(abs(sum(s * x for s, x in zip(f, d))) >= obs - 1e-12 for f in flips) / len(flips)
    assert M.sign_flip_pvalue(d) == pytest.approx(expected)
    assert M.sign_flip_pvalue([0.0, 0.0]) == 1.0


def test_sign_flip_pvalue_batched_equals_scipy_unbatched(monkeypatch):
    """The report's sign flips run in bounded batches (issue 44) and give scipy's unbatched p-value."""
    from scipy.stats import permutation_test

    d = np.random.default_rng(3).integers(-3, 4, 300) / 4.0
    whole = permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                             vectorized=True, alternative="two-sided", n_resamples=9999,
                             rng=np.random.default_rng([0, 7]))
    monkeypatch.setattr(M, "SIGN_FLIP_CELLS", 300 * 7)  # 7 permutations a batch: 1,429 batches
    assert M.sign_flip_batch(len(d)) == 7
    assert M.sign_flip_pvalue(d, seed=[0, 7]) == float(whole.pvalue)
    assert M.sign_flip_batch(10 ** 9) == 1 and M.sign_flip_batch(0) == M.SIGN_FLIP_CELLS


def test_paired_by_problem_chooses_the_test_by_k():
    one = M.paired_by_problem([[1], [1], [0]], [[0], [1], [0]])
    assert one.test == M.EXACT_TEST and (one.a_only, one.b_only) == (1, 0)
    a = [[1, 1, 1, 0]] * 6 + [[0, 0, 0, 0]] * 4
    b = [[1, 0, 0, 0]] * 6 + [[0, 0, 0, 0]] * 4
    r = M.paired_by_problem(a, b, n_resamples=4000, seed=3)
    assert r.test == M.BOOTSTRAP_TEST and r.n == 10
    assert r.net_gain == pytest.approx((6 * 3 - 6 * 1) / 40)  # acc(A) - acc(B) over planned samples
    assert (r.a_only, r.b_only, r.neither) == (6, 0, 4)
    # independent check: resample the 10 per-problem differences with numpy
    d = np.array([0.5] * 6 + [0.0] * 4)
    reps = d[np.random.default_rng(99).integers(0, 10, (20000, 10))].mean(1)
    assert r.low == pytest.approx(np.quantile(reps, 0.05), abs=0.03)
    assert r.high == pytest.approx(np.quantile(reps, 0.95), abs=0.03)
    assert r.p_value == pytest.approx(2 / 2 ** 6)  # six equal positive differences: 2 of 64 sign patterns
    with pytest.raises(ValueError, match="same planned samples"):
        M.paired_by_problem([[1, 0]], [[1]])


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


def test_summarize_bootstraps_over_problems_when_problem_ids_are_present():
    # 10 problems x 4 samples, all right or all wrong: the problem-level interval matches a
    # numpy bootstrap over the 10 problems and is much wider than Wilson over 40 samples
    rows = [_ledger_row("a", f"p{i}", s, i < 6) for i in range(10) for s in range(4)]
    s = M.summarize(pd.DataFrame(rows), planned={("m", "direct", "a"): 40}, n_resamples=4000).iloc[0]
    assert s["ci_method"] == M.CI_BOOTSTRAP and s["avg"] == 0.6
    x = np.array([1.0] * 6 + [0.0] * 4)
    reps = x[np.random.default_rng(5).integers(0, 10, (20000, 10))].mean(1)
    assert s["ci_low"] == pytest.approx(np.quantile(reps, 0.025), abs=0.03)
    assert s["ci_high"] == pytest.approx(np.quantile(reps, 0.975), abs=0.03)
    w = M.summarize(pd.DataFrame(rows).drop(columns=["problem_id"]), planned={("m", "direct", "a"): 40}).iloc[0]
    assert w["ci_method"] == M.CI_WILSON and (w["ci_low"], w["ci_high"]) == pytest.approx(M.wilson_interval(24, 40))
    assert s["ci_high"] - s["ci_low"] > 1.5 * (w["ci_high"] - w["ci_low"])
