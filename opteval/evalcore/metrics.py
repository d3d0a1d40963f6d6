"""Accuracy, sampling, token and significance metrics, as the harness paper accounts them.

Pure functions over plain Python / numpy values, plus :func:`summarize` over a ledger table
(pandas or pyarrow, columns of :data:`opteval.evalcore.records.LEDGER_SCHEMA`).

Accounting rules (paper, Appendix A):

* **avg@k** per benchmark = correct / *planned* trajectories. A planned trajectory with no
  committed record (missing), an unparseable submission, or an infrastructure error counts
  as wrong and stays in the denominator.
* **macro** = unweighted mean of the per-benchmark values.
* **tokens**: input + output tokens summed over a trajectory's calls; the mean is taken
  within each benchmark and the benchmark means are averaged without weights. A trajectory
  whose count is missing (server did not report it) is left out of the mean and counted in
  ``n_missing``; recorded zeros are kept.
* **execution rate** (SIRL, Section 4.3.1): the share of planned trajectories whose program
  ran to completion and returned a valid (parseable) result.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opteval.evalcore.grading import DEFAULT_PROFILE, Parsed, get_profile, grade_parsed, parse_submission

# -- accuracy -----------------------------------------------------------------------------


def _as_correct(v: Any) -> bool:
    """A recorded grade; None / NaN (missing) is wrong."""
    if v is None:
        return False
    if isinstance(v, float) and math.isnan(v):
        return False
    return bool(v)


def avg_at_k(correct: Iterable[Any], planned: int | None = None) -> float:
    """Fraction correct among ``planned`` trajectories (default: as many as given).

    ``correct`` holds the grades of the committed trajectories (None counts as wrong).
    Trajectories planned but never committed are the difference ``planned - len(correct)``
    and count as wrong. Raises ValueError when nothing was planned or when more grades than
    planned trajectories are given (a double count is a bug, not a rounding matter).
    """
    vals = [_as_correct(v) for v in correct]
    n = len(vals) if planned is None else planned
    if n <= 0:
        raise ValueError("avg@k is undefined with no planned trajectories")
    if len(vals) > n:
        raise ValueError(f"{len(vals)} graded trajectories but only {n} planned")
    return sum(vals) / n


def macro(values: Mapping[str, float | None] | Iterable[float | None]) -> float:
    """Unweighted mean over benchmarks. A None value (a benchmark with nothing to average)
    is an error naming the benchmark: silently dropping it would change the macro's meaning."""
    items = list(values.items()) if isinstance(values, Mapping) else list(enumerate(values))
    if not items:
        raise ValueError("macro of no benchmarks is undefined")
    present: list[float] = []
    bad: list[str] = []
    for k, v in items:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            bad.append(str(k))
        else:
            present.append(v)
    if bad:
        raise ValueError(f"macro over benchmarks with no value: {', '.join(bad)}")
    return float(sum(float(v) for v in present) / len(items))


@dataclass(frozen=True)
class BenchmarkCounts:
    """Accuracy accounting for one benchmark (or any group).

    ``scored`` is committed records with a grade; ``missing`` is planned minus scored.
    ``errors`` are committed records with status ``error`` (scored, wrong).
    """

    planned: int
    scored: int
    missing: int
    correct: int
    errors: int = 0

    @property
    def avg(self) -> float:
        if self.planned <= 0:
            raise ValueError("avg@k is undefined with no planned trajectories")
        return self.correct / self.planned


def count_benchmark(correct: Iterable[Any], planned: int, statuses: Iterable[str] | None = None) -> BenchmarkCounts:
    """:class:`BenchmarkCounts` from the grades of committed records and the plan size."""
    vals = [_as_correct(v) for v in correct]
    if len(vals) > planned:
        raise ValueError(f"{len(vals)} scored trajectories but only {planned} planned")
    errors = sum(1 for s in statuses if s == "error") if statuses is not None else 0
    return BenchmarkCounts(planned=planned, scored=len(vals), missing=planned - len(vals), correct=sum(vals), errors=errors)


# -- pass@k and maj@k -----------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k of Chen et al. (2021): ``1 - C(n-c, k) / C(n, k)``.

    ``n`` samples of which ``c`` are correct. Returns None when ``k > n`` (the estimator
    is undefined there; None lets a caller skip or flag the problem instead of catching an
    exception for an ordinary short plan). Computed with exact integer binomials, so it
    does not lose precision for large ``n``.
    """
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if k > n:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean pass@k over problems given ``(n, c)`` per problem; None if any problem has
    fewer than ``k`` samples (the mean would silently cover a different problem set)."""
    return mean_if_all([pass_at_k(n, c, k) for n, c in counts])


def mean_if_all(vals: Sequence[float | None]) -> float | None:
    """The mean of ``vals``; None when there are none or any is None (undefined)."""
    present = [v for v in vals if v is not None]
    if not vals or len(present) < len(vals):
        return None
    return float(sum(present) / len(present))


def majority_answer(submissions: Sequence[Any], profile: str = DEFAULT_PROFILE) -> Parsed:
    """The majority answer among submissions, clustering answers that grade equal.

    Only parseable submissions (numbers and statuses) vote. Clusters are built greedily in
    submission order: an answer joins the first cluster whose *first* member it grades
    equal to (``grade(answer, first, profile)``), else it opens a new cluster. The largest
    cluster wins; ties go to the cluster opened earliest (the earliest-submitted answer),
    which is deterministic, does not depend on the values, and agrees with
    ``collections.Counter.most_common`` on exact duplicates. The winner is represented by
    its first member. None when nothing voted.
    """
    get_profile(profile)
    reps: list[Parsed] = []
    sizes: list[int] = []
    for raw in submissions:
        p = parse_submission(raw)
        if p is None:
            continue
        for i, rep in enumerate(reps):
            if grade_parsed(p, rep, profile):
                sizes[i] += 1
                break
        else:
            reps.append(p)
            sizes.append(1)
    if not reps:
        return None
    best = max(range(len(reps)), key=lambda i: (sizes[i], -i))
    return reps[best]


def maj_at_k(submissions: Sequence[Any], expected: Any, profile: str = DEFAULT_PROFILE, k: int | None = None) -> bool:
    """Whether the majority answer of the first ``k`` submissions (all if None, in sample
    order) grades correct. Missing samples are passed as None and do not vote."""
    subs = list(submissions) if k is None else list(submissions)[:k]
    winner = majority_answer(subs, profile)
    return grade_parsed(winner, parse_submission(expected), profile)


# -- tokens and execution --------------------------------------------------------------------


def trajectory_tokens(prompt_tokens: int | None, completion_tokens: int | None) -> int | None:
    """Input + output tokens of a trajectory; None (missing) if either side is missing."""
    if prompt_tokens is None or completion_tokens is None:
        return None
    if _isnan(prompt_tokens) or _isnan(completion_tokens):
        return None
    return int(prompt_tokens) + int(completion_tokens)


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


@dataclass(frozen=True)
class TokenMean:
    """Mean tokens per trajectory over those with recorded counts; ``n_missing`` were left out."""

    mean: float | None
    n_used: int
    n_missing: int


def mean_tokens(tokens: Iterable[int | float | None]) -> TokenMean:
    """Mean of recorded per-trajectory token totals; None / NaN are missing (left out and
    counted), recorded zeros are kept."""
    vals = list(tokens)
    used = [float(t) for t in vals if t is not None and not _isnan(t)]
    return TokenMean(mean=(sum(used) / len(used)) if used else None, n_used=len(used), n_missing=len(vals) - len(used))


def token_macro(per_benchmark: Mapping[str, TokenMean | float | None]) -> float:
    """Unweighted mean of per-benchmark token means (the paper's token accounting)."""
    return macro({k: (v.mean if isinstance(v, TokenMean) else v) for k, v in per_benchmark.items()})


def execution_rate(executed_ok: Iterable[Any], planned: int | None = None) -> float:
    """Share of planned trajectories whose code ran and returned a valid result.

    ``executed_ok`` holds one flag per committed trajectory (see :func:`executed_ok`);
    planned-but-missing trajectories count as not executed.
    """
    return avg_at_k(executed_ok, planned)


def executed_ok(exec_ok: int | None, submission_value: float | None, submission_status: str | None) -> bool:
    """A ledger row's execution flag: at least one execution ended ``ok`` and the
    trajectory submitted a parseable answer (a number or a status)."""
    ran = exec_ok is not None and not _isnan(exec_ok) and int(exec_ok) > 0
    has_value = submission_value is not None and not _isnan(submission_value)
    return bool(ran and (has_value or bool(submission_status)))


# -- intervals ---------------------------------------------------------------------------------
#
# Samples of one problem are correlated (same question, same model), so a rate over
# problems x samples has the uncertainty of its *problems*: the report's intervals are a
# percentile cluster bootstrap over problems. Wilson and Clopper-Pearson (scipy) remain for
# a proportion of independent items (one sample per problem, discordant pairs).


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (scipy's ``binomtest(...).proportion_ci(method="wilson")``) for
    ``successes`` of ``n`` *independent* items. Not for k samples of one problem."""
    _check_binomial(successes, n, "Wilson interval")
    # deferred: scipy.stats takes seconds; rewards and the driver import this
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=_conf(confidence), method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


def clopper_pearson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval, scipy's ``proportion_ci(method="exact")``."""
    _check_binomial(successes, n, "Clopper-Pearson interval")
    # deferred: scipy.stats takes seconds; rewards and the driver import this
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=_conf(confidence), method="exact")
    return float(ci.low), float(ci.high)


def _check_binomial(successes: int, n: int, what: str) -> None:
    if n <= 0:
        raise ValueError(f"{what} needs n > 0")
    if not 0 <= successes <= n:
        raise ValueError(f"{what} needs 0 <= successes <= n, got {successes}/{n}")


def _conf(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)


def _z(confidence: float) -> float:
    # deferred: scipy.stats takes seconds; rewards and the driver import this
    from scipy.stats import norm

    return float(norm.ppf(0.5 + _conf(confidence) / 2))


def bootstrap_seed(seed: int, *parts: Any) -> list[int]:
    """A numpy seed sequence from ``seed`` and names (e.g. the benchmark): stable across
    runs and Python processes (no ``hash()``), so a report is reproducible and two methods
    evaluated on the same benchmark get the same resampled problem sets (paired)."""
    return [int(seed)] + [zlib.crc32(str(p).encode("utf-8")) for p in parts]


def problem_bootstrap(correct: Sequence[float] | np.ndarray, planned: Sequence[float] | np.ndarray,
                      n_resamples: int = 2000, seed: int | Sequence[int] = 0) -> np.ndarray:
    """``n_resamples`` bootstrap replicates of ``sum(correct) / sum(planned)`` with the
    problems (entries) resampled with replacement, each problem's samples kept together.

    ``correct[i]``/``planned[i]``: problem i's correct and planned sample counts. With the
    same seed and problem count the same problems are drawn, whatever the counts."""
    c = np.asarray(correct, dtype=float)
    p = np.asarray(planned, dtype=float)
    if c.shape != p.shape or c.ndim != 1 or len(c) == 0 or p.sum() <= 0:
        raise ValueError("bootstrap needs at least one problem with planned samples")
    if n_resamples < 1:
        raise ValueError(f"bootstrap needs n_resamples >= 1, got {n_resamples}")
    idx = np.random.default_rng(seed).integers(0, len(c), size=(int(n_resamples), len(c)))
    return c[idx].sum(axis=1) / np.maximum(p[idx].sum(axis=1), 1e-300)


def percentile_interval(replicates: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates (numpy's linear quantiles)."""
    alpha = (1 - _conf(confidence)) / 2
    low, high = np.quantile(np.asarray(replicates, dtype=float), [alpha, 1 - alpha])
    return float(low), float(high)


def bootstrap_ci(
    per_problem: Sequence[Sequence[Any]] | np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Cluster bootstrap over problems for avg@k: ``(estimate, low, high)``.

    ``per_problem[i]`` holds the grades of problem i's k samples (missing = False/None).
    Problems are resampled with replacement, keeping each problem's samples together,
    because samples of one problem are correlated and resampling them independently would
    understate the uncertainty. Problems may have different k; the estimate is
    correct / planned over the resampled problems. Percentile interval, seeded.
    """
    correct = np.array([sum(_as_correct(v) for v in row) for row in per_problem], dtype=float)
    planned = np.array([len(row) for row in per_problem], dtype=float)
    if len(correct) == 0 or planned.sum() == 0:
        raise ValueError("bootstrap needs at least one problem with samples")
    _conf(confidence)
    reps = problem_bootstrap(correct, planned, n_resamples, seed)
    low, high = percentile_interval(reps, confidence)
    return float(correct.sum() / planned.sum()), low, high


# -- paired comparison --------------------------------------------------------------------------


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts: scipy's two-sided
    binomial test of ``b`` successes in ``b + c`` at 1/2. ``b`` = items only A got right,
    ``c`` = only B. p = 1 when there are no discordant items."""
    if b < 0 or c < 0:
        raise ValueError(f"McNemar needs non-negative counts, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    # deferred: scipy.stats takes seconds; rewards and the driver import this
    from scipy.stats import binomtest

    return float(binomtest(int(b), int(b + c), 0.5, alternative="two-sided").pvalue)


def conditional_exact_interval(b: int, c: int, n: int, confidence: float = 0.90) -> tuple[float, float]:
    """SemOPT's interval for the paired net gain ``(b - c) / n``: conditional on the
    ``b + c`` discordant items, ``b ~ Binomial(b + c, pi)``; the exact (Clopper-Pearson)
    interval [pi_lo, pi_hi] maps to ``(b + c) * (2 pi - 1) / n``. No discordant items:
    the gain is exactly 0 given the data, so [0, 0]."""
    if n <= 0 or b < 0 or c < 0 or b + c > n:
        raise ValueError(f"net-gain interval needs 0 <= b + c <= n, got b={b}, c={c}, n={n}")
    nd = b + c
    if nd == 0:
        return 0.0, 0.0
    lo, hi = clopper_pearson(b, nd, confidence)
    return nd * (2 * lo - 1) / n, nd * (2 * hi - 1) / n


EXACT_TEST = "exact McNemar on discordant problems; conditional exact interval (SemOPT)"
BOOTSTRAP_TEST = "paired cluster bootstrap over problems; sign-flip permutation p-value"


@dataclass(frozen=True)
class PairedResult:
    """A vs B on the same problems: net gain of A over B with an interval and a p-value.

    With one sample per problem the counts are problems: ``a_only``/``b_only`` the
    discordant problems (McNemar's b and c). With k > 1 samples they are problems where A's
    rate is above / below B's (``both``/``neither`` then count ties with rate 1 / 0).
    ``test`` names the method used."""

    n: int
    a_only: int  # b in McNemar's table
    b_only: int  # c
    both: int
    neither: int
    net_gain: float  # acc(A) - acc(B)
    low: float
    high: float
    p_value: float
    test: str = EXACT_TEST
    confidence: float = 0.90


def paired_net_gain(a: Sequence[Any], b: Sequence[Any], confidence: float = 0.90) -> PairedResult:
    """Paired comparison of two methods with one graded sample per problem (same order).

    Net gain = acc(A) - acc(B) = (a_only - b_only) / n; its interval is SemOPT's
    conditional exact interval (:func:`conditional_exact_interval`, 90% by default) and
    the p-value the exact McNemar test on the discordant problems. Missing grades are
    wrong. Items must be independent (problems, not samples of one problem): for k > 1
    samples per problem use :func:`paired_by_problem`."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        raise ValueError("paired comparison of no items")
    av = [_as_correct(x) for x in a]
    bv = [_as_correct(x) for x in b]
    a_only = sum(1 for x, y in zip(av, bv) if x and not y)
    b_only = sum(1 for x, y in zip(av, bv) if y and not x)
    both = sum(1 for x, y in zip(av, bv) if x and y)
    neither = n - a_only - b_only - both
    low, high = conditional_exact_interval(a_only, b_only, n, confidence)
    return PairedResult(n=n, a_only=a_only, b_only=b_only, both=both, neither=neither,
                        net_gain=(a_only - b_only) / n, low=low, high=high,
                        p_value=mcnemar_exact(a_only, b_only), test=EXACT_TEST, confidence=confidence)


def sign_flip_pvalue(diffs: Sequence[float] | np.ndarray, n_resamples: int = 9999, seed: int | Sequence[int] = 0) -> float:
    """Two-sided sign-flip permutation p-value for mean(diffs) = 0 (scipy's
    ``permutation_test`` with one sample, ``permutation_type="samples"``: exact when
    ``2**n <= n_resamples``). All-zero differences give 1."""
    # deferred: scipy.stats takes seconds; rewards and the driver import this
    from scipy.stats import permutation_test

    d = np.asarray(diffs, dtype=float)
    if len(d) == 0:
        raise ValueError("sign-flip test of no problems")
    if not np.any(d != 0):
        return 1.0
    res = permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                           vectorized=True, alternative="two-sided", n_resamples=int(n_resamples),
                           rng=np.random.default_rng(seed), batch=sign_flip_batch(len(d)))
    return float(min(1.0, res.pvalue))


SIGN_FLIP_CELLS = 1 << 20  # values per batch of sign flips: ~16 MB for each of scipy's index and data arrays


def sign_flip_batch(n: int) -> int:
    """Permutations per batch for ``n`` differences, so a test's memory stays bounded (unbatched, scipy
    holds every flip of every problem at once: 9,999 x 2 x n values, 1.4 GB of a report at 4,000
    problems). The p-value is the same for any batch: scipy draws each permutation from the stream in
    order and never permutes in place."""
    return max(1, SIGN_FLIP_CELLS // max(1, n))


def paired_by_problem(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]], confidence: float = 0.90,
                      n_resamples: int = 2000, seed: int | Sequence[int] = 0) -> PairedResult:
    """A vs B paired by problem: ``a[i]``/``b[i]`` are problem i's sample grades.

    One sample per problem everywhere: :func:`paired_net_gain` (exact McNemar, SemOPT's
    conditional exact interval). Otherwise the per-problem differences
    ``d_i = acc_i(A) - acc_i(B)``: net gain = ``sum(c_a - c_b) / sum(k)`` (= acc(A) -
    acc(B) over planned samples), percentile interval from a cluster bootstrap of the
    problems (the same problems drawn for both methods), and a sign-flip permutation
    p-value on the d_i."""
    if len(a) != len(b) or not len(a):
        raise ValueError("paired comparison needs the same non-empty list of problems for both methods")
    ka = [len(r) for r in a]
    if ka != [len(r) for r in b] or min(ka) == 0:
        raise ValueError("paired comparison needs the same planned samples per problem for both methods")
    if max(ka) == 1:
        return paired_net_gain([r[0] for r in a], [r[0] for r in b], confidence)
    ca = np.array([sum(_as_correct(v) for v in r) for r in a], dtype=float)
    cb = np.array([sum(_as_correct(v) for v in r) for r in b], dtype=float)
    k = np.array(ka, dtype=float)
    reps = problem_bootstrap(ca - cb, k, n_resamples, seed)
    low, high = percentile_interval(reps, confidence)
    d = (ca - cb) / k
    return PairedResult(
        n=len(ca), a_only=int((d > 0).sum()), b_only=int((d < 0).sum()),
        both=int(((d == 0) & (ca == k)).sum()), neither=int(((d == 0) & (ca < k)).sum()),
        net_gain=float((ca - cb).sum() / k.sum()), low=low, high=high,
        p_value=sign_flip_pvalue(d, seed=seed), test=BOOTSTRAP_TEST, confidence=confidence)


def paired_bootstrap(
    a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]], confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Cluster bootstrap of avg@k(A) - avg@k(B) over problems: ``(estimate, low, high)``.

    ``a[i]`` and ``b[i]`` are problem i's sample grades under each method; resampling the
    same problems for both keeps the pairing."""
    if len(a) != len(b) or not a:
        raise ValueError("paired bootstrap needs the same non-empty list of problems for both methods")
    ca = np.array([sum(_as_correct(v) for v in r) for r in a], dtype=float)
    pa = np.array([len(r) for r in a], dtype=float)
    cb = np.array([sum(_as_correct(v) for v in r) for r in b], dtype=float)
    pb = np.array([len(r) for r in b], dtype=float)
    if pa.sum() == 0 or pb.sum() == 0:
        raise ValueError("paired bootstrap needs samples for both methods")
    _conf(confidence)
    est = float(ca.sum() / pa.sum() - cb.sum() / pb.sum())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ca), size=(n_resamples, len(ca)))
    diff = ca[idx].sum(1) / np.maximum(pa[idx].sum(1), 1) - cb[idx].sum(1) / np.maximum(pb[idx].sum(1), 1)
    low, high = percentile_interval(diff, confidence)
    return est, low, high


# -- over a ledger table -------------------------------------------------------------------------

SUMMARY_BY = ("model", "method", "benchmark")


def _to_pandas(table: Any) -> Any:
    # deferred: pandas only for ledger tables; rewards imports this module
    import pandas as pd

    if isinstance(table, pd.DataFrame):
        return table
    if hasattr(table, "to_pandas"):
        return table.to_pandas()
    return pd.DataFrame(table)


def _planned_for(planned: Any, key: tuple, by: Sequence[str], committed: int) -> int:
    if planned is None:
        return committed
    if isinstance(planned, int):
        return planned
    k = key[0] if len(by) == 1 else key
    if k not in planned:
        raise KeyError(f"no planned count for {dict(zip(by, key))}")
    return int(planned[k])


def summarize(
    table: Any,
    by: Sequence[str] = SUMMARY_BY,
    planned: Mapping[Any, int] | int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    problem_planned: Mapping[Any, Mapping[str, int]] | None = None,
) -> Any:
    """Per-group accounting from a ledger table (pyarrow Table or pandas DataFrame with
    :data:`opteval.evalcore.records.LEDGER_SCHEMA` columns; ``correct`` is required, token,
    execution and status columns are used when present).

    ``planned`` gives the planned trajectory count per group (keyed by the group's value
    tuple, or the bare value for one ``by`` column), or one int for every group; None means
    "as many as committed" (no missing). Groups planned but absent from the table appear
    with zero scored. Rows sharing a ``key`` count once (the last one wins: a retry
    replaces the archived attempt). Returns a pandas DataFrame, one row per group, with
    ``planned, scored, missing, correct, errors, avg, ci_low, ci_high, ci_method``,
    ``tokens_mean, tokens_n, tokens_missing, exec_rate, simulated``.

    Interval: with a ``problem_id`` column, a percentile cluster bootstrap over the group's
    problems (:func:`problem_bootstrap`, seeded by ``seed`` and the benchmark); planned but
    uncommitted trajectories count as wrong samples of their own problems when
    ``problem_planned`` (group -> problem id -> planned samples, from the plan) is given, which
    is exactly the report's interval (:mod:`opteval.evalcore.reporting.intervals`: same problems, same
    seed, same resamples); without it, every problem's denominator is scaled by planned / scored.
    Without ``problem_id``, Wilson over trajectories, which
    treats a problem's samples as independent and is too narrow when k > 1: ``ci_method``
    says which was used.
    """
    # deferred: pandas only for ledger tables; rewards imports this module
    import pandas as pd

    df = _to_pandas(table)
    by = list(by)
    if "key" in df.columns and df["key"].duplicated().any():
        df = df.drop_duplicates("key", keep="last")
    groups = {k if isinstance(k, tuple) else (k,): g for k, g in df.groupby(by, sort=True, dropna=False)} if len(df) else {}
    if isinstance(planned, Mapping):
        for k in planned:
            kt = k if isinstance(k, tuple) else (k,)
            groups.setdefault(kt, df.iloc[0:0])
    out = []
    for key in sorted(groups, key=lambda t: tuple(str(x) for x in t)):
        g = groups[key]
        n_planned = _planned_for(planned, key, by, len(g))
        statuses = g["status"].tolist() if "status" in g.columns else None
        counts = count_benchmark(g["correct"].tolist(), n_planned, statuses)
        row: dict[str, Any] = dict(zip(by, key))
        row.update(planned=counts.planned, scored=counts.scored, missing=counts.missing,
                   correct=counts.correct, errors=counts.errors)
        if counts.planned > 0:
            row["avg"] = counts.avg
            per_problem = problem_planned.get(key if len(key) > 1 else key[0]) if problem_planned else None
            row["ci_low"], row["ci_high"], row["ci_method"] = _group_interval(
                g, counts, confidence, n_resamples, seed, row.get("benchmark", key), per_problem)
        else:
            row["avg"] = row["ci_low"] = row["ci_high"] = row["ci_method"] = None
        if {"prompt_tokens", "completion_tokens"} <= set(g.columns):
            tm = mean_tokens(trajectory_tokens(_none(p), _none(c)) for p, c in zip(g["prompt_tokens"], g["completion_tokens"]))
            row.update(tokens_mean=tm.mean, tokens_n=tm.n_used, tokens_missing=tm.n_missing)
        if "exec_ok" in g.columns and counts.planned > 0:
            sv = g["submission_value"] if "submission_value" in g.columns else [None] * len(g)
            ss = g["submission_status"] if "submission_status" in g.columns else [None] * len(g)
            flags = [executed_ok(_none(e), _none(v), _none(s)) for e, v, s in zip(g["exec_ok"], sv, ss)]
            row["exec_rate"] = execution_rate(flags, counts.planned)
        if "simulated" in g.columns:
            row["simulated"] = bool(g["simulated"].fillna(False).astype(bool).any())
        out.append(row)
    return pd.DataFrame(out)


CI_BOOTSTRAP = "cluster bootstrap over problems"
CI_WILSON = "wilson over trajectories (no problem ids)"


def _group_interval(g: Any, counts: BenchmarkCounts, confidence: float, n_resamples: int, seed: int,
                    benchmark: Any, per_problem: Mapping[str, int] | None) -> tuple[float, float, str]:
    """summarize's interval for one group (see there). The draw is seeded by the seed, the
    benchmark and its problem count, as the report's (``reporting.intervals.draw_seed``)."""
    if "problem_id" not in g.columns or (counts.scored == 0 and not per_problem):
        return (*wilson_interval(counts.correct, counts.planned, confidence), CI_WILSON)
    ok = g["correct"].map(_as_correct)
    per = ok.groupby(g["problem_id"].astype(str), sort=True).agg(["sum", "size"])
    if per_problem:
        ids = sorted(set(map(str, per_problem)) | set(per.index))
        correct = per["sum"].reindex(ids, fill_value=0).to_numpy(float)
        sizes = np.array([max(int(per_problem.get(i, 0)), int(per["size"].get(i, 0))) for i in ids], dtype=float)
    else:
        ids = list(per.index)
        correct = per["sum"].to_numpy(float)
        sizes = per["size"].to_numpy(float) * (counts.planned / counts.scored)
    reps = problem_bootstrap(correct, sizes, n_resamples, bootstrap_seed(seed, benchmark, len(ids)))
    return (*percentile_interval(reps, confidence), CI_BOOTSTRAP)


def _none(v: Any) -> Any:
    """pandas gives NaN / NA / NaT for nulls; the pure functions expect None."""
    try:
        # deferred: pandas only for ledger tables; rewards imports this module
        import pandas as pd

        if v is None or (not isinstance(v, (str, bytes)) and pd.isna(v)):
            return None
    except (TypeError, ValueError):
        pass
    return v


def macro_table(summary: Any, over: str = "benchmark") -> Any:
    """Macro rows from a :func:`summarize` result: for each group of the remaining ``by``
    columns, the unweighted mean of ``avg`` (and of ``tokens_mean`` when every benchmark
    has one) over ``over``, with planned/scored/missing summed."""
    # deferred: pandas only for ledger tables; rewards imports this module
    import pandas as pd

    df = _to_pandas(summary)
    keys = [c for c in df.columns if c in SUMMARY_BY and c != over] or None
    rows = []
    grouped = df.groupby(keys, sort=True) if keys else [((), df)]
    for key, g in grouped:
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(keys or [], key))
        row["n_benchmarks"] = len(g)
        for col in ("planned", "scored", "missing", "correct", "errors"):
            if col in g.columns:
                row[col] = int(g[col].sum())
        row["macro"] = macro(dict(zip(g[over], g["avg"])))
        if "tokens_mean" in g.columns:
            vals = dict(zip(g[over], (_none(v) for v in g["tokens_mean"])))
            row["tokens_macro"] = macro(vals) if all(v is not None for v in vals.values()) else None
        if "simulated" in g.columns:
            row["simulated"] = bool(g["simulated"].any())
        rows.append(row)
    return pd.DataFrame(rows)
