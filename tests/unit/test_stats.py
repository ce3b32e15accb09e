"""Unit tests for stats.py: exact McNemar, Tango's margin test, Newcombe's paired interval,
Holm, Connor's minimum detectable difference, paired bootstrap, judge agreement and
Rogan-Gladen prevalence. Expected values are computed by hand (shown in comments), taken
from a published example, or recomputed here independently from the formula."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from statistics import NormalDist

import pytest

from pytest_socialbias.metrics.rates import cluster_wilson_interval, t_quantile
from pytest_socialbias.stats import (
    _margin_critical,
    agreement,
    holm,
    mcnemar_exact,
    paired_bootstrap,
    paired_cluster_interval,
    paired_diff_interval,
    paired_margin_test,
    rogan_gladen,
    rogan_gladen_interval,
    tango_z,
)

NORMAL = NormalDist()
Z_975 = NORMAL.inv_cdf(0.975)


# --------------------------------------------------------------------------- mcnemar_exact


def exact_half_tail(lo: int, hi: int, n: int) -> Fraction:
    """P(lo <= X <= hi) for X ~ Binomial(n, 1/2), as an exact fraction."""
    return Fraction(sum(math.comb(n, k) for k in range(max(lo, 0), min(hi, n) + 1)), 2**n)


def test_mcnemar_hand_example():
    # b = 2, c = 8, n = 10: P(X >= 8) = (C(10,8) + C(10,9) + C(10,10)) / 2^10
    #                                 = (45 + 10 + 1) / 1024 = 56/1024 = 0.0546875
    assert mcnemar_exact(2, 8, "greater") == pytest.approx(0.0546875, rel=1e-14)
    # two-sided: 2 * min(56/1024, P(X <= 8) = 1013/1024) = 0.109375
    assert mcnemar_exact(2, 8, "two-sided") == pytest.approx(0.109375, rel=1e-14)
    # less: P(X <= 8) = 1 - (C(10,9) + C(10,10)) / 1024 = 1013/1024
    assert mcnemar_exact(2, 8, "less") == pytest.approx(1013 / 1024, rel=1e-14)


@pytest.mark.parametrize("b, c", [(0, 1), (1, 0), (3, 3), (0, 7), (7, 0), (5, 12), (40, 25), (13, 200), (300, 280)])
def test_mcnemar_matches_exact_fractions(b, c):
    n = b + c
    greater = exact_half_tail(c, n, n)
    less = exact_half_tail(0, c, n)
    assert mcnemar_exact(b, c, "greater") == pytest.approx(float(greater), rel=1e-12, abs=1e-300)
    assert mcnemar_exact(b, c, "less") == pytest.approx(float(less), rel=1e-12, abs=1e-300)
    assert mcnemar_exact(b, c, "two-sided") == pytest.approx(float(min(1, 2 * min(greater, less))), rel=1e-12)


@pytest.mark.parametrize("b, c", [(2, 8), (8, 2), (5, 5), (0, 4), (30, 45)])
def test_mcnemar_one_sided_tails_overlap_in_one_point(b, c):
    # P(X >= c) + P(X <= c) = 1 + P(X = c), and swapping b and c swaps the tails.
    n = b + c
    point = math.comb(n, c) / 2**n
    assert mcnemar_exact(b, c, "greater") + mcnemar_exact(b, c, "less") == pytest.approx(1 + point, rel=1e-12)
    assert mcnemar_exact(b, c, "greater") == pytest.approx(mcnemar_exact(c, b, "less"), rel=1e-12)


def test_mcnemar_no_discordance_is_one():
    for alternative in ("greater", "less", "two-sided"):
        assert mcnemar_exact(0, 0, alternative) == 1.0


def test_mcnemar_large_n_without_overflow():
    # n = 100000; at b = c the two-sided p is 1, and far tails underflow to 0 cleanly.
    assert mcnemar_exact(50000, 50000, "two-sided") == 1.0
    assert mcnemar_exact(100000, 0, "greater") == 1.0
    assert mcnemar_exact(100000, 0, "less") == 0.0  # 2^-100000, below the float range
    # Near the centre the exact tail matches the normal approximation with continuity
    # correction to a few parts in a thousand: z = (50150 - 0.5 - 50000) / sqrt(100000 / 4)
    p = mcnemar_exact(49850, 50150, "greater")
    z = (50150 - 0.5 - 50000) / math.sqrt(100000 / 4)
    assert p == pytest.approx(1 - NORMAL.cdf(z), rel=1e-3)
    assert 0.0 < p < 0.5


def test_mcnemar_rejects_bad_input():
    with pytest.raises(ValueError, match="alternative"):
        mcnemar_exact(1, 2, "bigger")
    with pytest.raises(ValueError, match="non-negative integer"):
        mcnemar_exact(-1, 2, "greater")


# --------------------------------------------------------------------------- paired_margin_test


@pytest.mark.parametrize("cells", [(10, 2, 8, 30), (59, 16, 6, 80), (0, 0, 0, 5), (3, 7, 7, 3)])
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_margin_zero_is_exact_mcnemar(cells, alternative):
    n11, n10, n01, n00 = cells
    assert paired_margin_test(n11, n10, n01, n00, 0.0, alternative) == mcnemar_exact(n10, n01, alternative)


def restricted_mle_p10(n10: int, n01: int, n: int, delta: float) -> float:
    """Maximise the multinomial log-likelihood over p10 subject to p01 - p10 = delta by
    golden-section search (the log-likelihood is concave), independently of Tango's closed form."""

    def loglik(p10):
        p01 = p10 + delta
        concordant = 1 - p10 - p01
        return n10 * math.log(p10) + n01 * math.log(p01) + (n - n10 - n01) * math.log(concordant)

    lo, hi = max(0.0, -delta) + 1e-15, (1 - delta) / 2 - 1e-15
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if loglik(a) < loglik(b):
            lo = a
        else:
            hi = b
    return (lo + hi) / 2


@pytest.mark.parametrize("cells", [(59, 16, 6, 80), (10, 2, 8, 30), (20, 5, 15, 60), (1, 7, 1, 12)])
@pytest.mark.parametrize("margin", [0.02, 0.1, 0.25])
def test_tango_matches_independent_score_statistic(cells, margin):
    n11, n10, n01, n00 = cells
    n = sum(cells)
    for sign, delta in ((1, margin), (-1, -margin)):
        p10 = restricted_mle_p10(n10, n01, n, delta)
        # Score statistic: (observed discordant difference - n delta) / sqrt(n Var), with
        # Var = p10 + p01 - delta^2 = 2 p10 + delta (1 - delta) under the restricted MLE.
        z = (n01 - n10 - n * delta) / math.sqrt(n * (2 * p10 + delta * (1 - delta)))
        # "less" is "greater" with the roles swapped (the statistic's sign flips).
        got = tango_z(n10, n01, n, margin) if sign == 1 else -tango_z(n01, n10, n, margin)
        assert got == pytest.approx(z, rel=1e-6)


def test_tango_tiny_margin_approaches_asymptotic_mcnemar():
    # At delta = 0 the restricted MLE is p10 = (b + c) / 2n and Tango's Z is McNemar's
    # (c - b) / sqrt(b + c): (6 - 16) / sqrt(22) = -2.1320.
    assert tango_z(16, 6, 161, 1e-12) == pytest.approx((6 - 16) / math.sqrt(22), rel=1e-6)


def test_margin_makes_the_test_harder():
    # H1: d > margin needs more evidence as the margin grows; d_hat = (12 - 2) / 100 = 0.1.
    ps = [paired_margin_test(40, 2, 12, 46, m, "greater") for m in (0.01, 0.05, 0.1, 0.2)]
    assert ps == sorted(ps)
    assert ps[2] >= 0.5  # an observed difference equal to the margin is no evidence beyond it


def _size(n: int, margin: float, p10: float, threshold: float) -> float:
    """P(Z >= threshold) for the trinomial on the null boundary, by exact enumeration of
    every (N10, N01) outcome (independent of stats' own region code)."""
    p01 = p10 + margin
    rest = 1 - p10 - p01
    logs = [math.lgamma(k + 1) for k in range(n + 1)]
    total = 0.0
    for a in range(n + 1):
        for b in range(n - a + 1):
            if tango_z(a, b, n, margin) >= threshold - 1e-12:
                c = n - a - b
                total += math.exp(logs[n] - logs[a] - logs[b] - logs[c] + a * math.log(p10) + b * math.log(p01)
                                  + (c * math.log(rest) if c else 0.0))
    return total


@pytest.mark.slow
@pytest.mark.parametrize("n, p10", [(80, 0.04), (240, 0.01)])  # 10% and 4% discordance, margin 0.02
def test_the_margin_test_keeps_its_size_where_tango_did_not(n, p10):
    margin, alpha = 0.02, 0.05
    # Before: Tango's normal tail rejected when Z >= 1.645; by exact enumeration its size at
    # these points was 6.3% and 6.2%.
    tango_size = _size(n, margin, p10, NORMAL.inv_cdf(1 - alpha))
    assert tango_size == pytest.approx({80: 0.063, 240: 0.062}[n], abs=0.0015)
    # Now: the exact unconditional test rejects at Z >= its critical value, and its size
    # there, and over the whole null boundary, is at most alpha.
    critical = _margin_critical(n, margin, alpha)
    assert _size(n, margin, p10, critical) <= alpha
    top = (1 - margin) / 2
    boundary = [top * (i / 60) ** 2 for i in range(1, 61)]
    assert max(_size(n, margin, p, critical) for p in boundary[::6] + [p10]) <= alpha + 1e-9


def test_tango_less_is_greater_with_roles_swapped():
    assert paired_margin_test(40, 12, 2, 46, 0.05, "less") == pytest.approx(
        paired_margin_test(40, 2, 12, 46, 0.05, "greater"), rel=1e-12
    )


def test_margin_test_edges_and_errors():
    assert paired_margin_test(0, 0, 0, 0, 0.1, "greater") == 1.0
    with pytest.raises(ValueError, match="margin"):
        paired_margin_test(1, 2, 3, 4, -0.1, "greater")
    with pytest.raises(ValueError, match="margin"):
        paired_margin_test(1, 2, 3, 4, 1.0, "greater")
    with pytest.raises(ValueError, match="alternative"):
        paired_margin_test(1, 2, 3, 4, 0.1, "two-sided")


# --------------------------------------------------------------------------- paired_diff_interval


def wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson (1927) bounds (2k + z^2 -+ z sqrt(z^2 + 4k(n-k)/n)) / (2(n + z^2))."""
    root = z * math.sqrt(z * z + 4 * k * (n - k) / n)
    return (2 * k + z * z - root) / (2 * (n + z * z)), (2 * k + z * z + root) / (2 * (n + z * z))


def wilson_cc(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's interval with continuity correction (Newcombe 1998, method 4):
    (2np + z^2 -/+ 1 -/+ z sqrt(z^2 -/+ 2 - 1/n +/- 4p(nq +/- 1))) / (2(n + z^2)), 0 and 1
    at k = 0 and k = n."""
    p, q = k / n, 1 - k / n
    low = 0.0 if k == 0 else (2 * n * p + z * z - 1 - z * math.sqrt(z * z - 2 - 1 / n + 4 * p * (n * q + 1))) / (2 * (n + z * z))
    high = 1.0 if k == n else (2 * n * p + z * z + 1 + z * math.sqrt(z * z + 2 - 1 / n + 4 * p * (n * q - 1))) / (2 * (n + z * z))
    return low, high


def newcombe_10(n11, n10, n01, n00, z=Z_975):
    """Newcombe (1998) method 10, written out from the paper's formulas."""
    n = n11 + n10 + n01 + n00
    p1, p2 = (n11 + n01) / n, (n11 + n10) / n  # current, baseline
    l1, u1 = wilson(n11 + n01, n, z)
    l2, u2 = wilson(n11 + n10, n, z)
    margins = (n11 + n01) * (n10 + n00) * (n11 + n10) * (n01 + n00)
    a = n11 * n00 - n10 * n01
    if margins == 0:
        phi = 0.0
    elif a > n / 2:
        phi = (a - n / 2) / math.sqrt(margins)
    elif a >= 0:
        phi = 0.0
    else:
        phi = a / math.sqrt(margins)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return max(-1.0, low), min(1.0, high)


def test_newcombe_published_example():
    # Cavo et al. (2012), complete response before/after consolidation, as worked in
    # Fagerland, Lydersen & Laake (2017, ch. 8): table [[59, 6], [16, 80]], estimate
    # (6 - 16) / 161 = -0.0621, Newcombe square-and-add 95% CI -0.1186 to -0.0046.
    # Rows are "current" here: n11 = 59, n01 = 6 (current 1 only), n10 = 16, n00 = 80.
    low, high = paired_diff_interval(59, 16, 6, 80)
    assert low == pytest.approx(-0.1186, abs=5e-5)
    assert high == pytest.approx(-0.0046, abs=5e-5)


@pytest.mark.parametrize(
    "cells",
    [(59, 16, 6, 80), (1, 7, 1, 12), (10, 2, 8, 30), (0, 3, 9, 0), (5, 0, 0, 5), (0, 0, 4, 6), (12, 3, 3, 1), (2, 9, 1, 0)],
)
def test_newcombe_matches_formula(cells):
    low, high = paired_diff_interval(*cells)
    exp_low, exp_high = newcombe_10(*cells)
    assert low == pytest.approx(exp_low, abs=1e-12)
    assert high == pytest.approx(exp_high, abs=1e-12)
    n11, n10, n01, n00 = cells
    estimate = (n01 - n10) / sum(cells)
    assert -1.0 <= low <= estimate <= high <= 1.0


def test_newcombe_zero_margin_sets_phi_zero():
    # Baseline never 1 (n11 = n10 = 0): a margin is empty, phi = 0, and the interval is
    # the plain square-and-add of the two Wilson intervals.
    z = NORMAL.inv_cdf(0.975)
    l1, u1 = wilson(4, 10, z)
    l2, u2 = wilson(0, 10, z)
    low, high = paired_diff_interval(0, 0, 4, 6)
    assert low == pytest.approx(0.4 - math.hypot(0.4 - l1, u2 - 0.0), abs=1e-12)
    assert high == pytest.approx(0.4 + math.hypot(u1 - 0.4, 0.0 - l2), abs=1e-12)


def test_newcombe_edges():
    assert paired_diff_interval(0, 0, 0, 0) == (-1.0, 1.0)
    low, high = paired_diff_interval(0, 0, 3, 0)  # every pair went 0 -> 1: d = 1
    assert high == 1.0 and 0 < low < 1
    narrow = paired_diff_interval(59, 16, 6, 80, confidence=0.8)
    wide = paired_diff_interval(59, 16, 6, 80, confidence=0.99)
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    with pytest.raises(ValueError, match="confidence"):
        paired_diff_interval(1, 1, 1, 1, confidence=95)


# --------------------------------------------------------------------------- holm


def test_holm_hand_example():
    # sorted: 0.005, 0.01, 0.03, 0.04 (m = 4) -> 4*0.005 = 0.02, 3*0.01 = 0.03,
    # 2*0.03 = 0.06, max(0.06, 1*0.04) = 0.06; back in input order:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)


def test_holm_caps_ties_and_edges():
    # ties: 3*0.2 = 0.6, then max(0.6, 2*0.2) = 0.6, then min(1, 1*0.9) = 0.9
    assert holm([0.2, 0.9, 0.2]) == pytest.approx([0.6, 0.9, 0.6])
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == []
    assert holm([0.03]) == [0.03]
    with pytest.raises(ValueError, match=r"pvalues\[1\]"):
        holm([0.1, 1.5])


def test_holm_is_monotone_in_the_sorted_order():
    rng = random.Random(7)
    ps = [rng.random() for _ in range(20)]
    adjusted = holm(ps)
    pairs = sorted(zip(ps, adjusted))
    assert all(a <= b for (_, a), (_, b) in zip(pairs, pairs[1:]))
    assert all(adj >= p for p, adj in zip(ps, adjusted))


# --------------------------------------------------------------------------- paired_bootstrap


PAIRS = [
    ([0, 0, 1], [1, 1, 1]),
    ([0], [0]),
    ([1, 0], [1, 1]),
    ([], [1]),
    ([0, 0], []),
    ([0, 1, 0, 0], [0, 1, 1, 0]),
]


def test_bootstrap_observed_difference_by_hand():
    # current: 3 + 0 + 2 + 1 + 0 + 2 = 8 ones of 3+1+2+1+0+4 = 11 values -> 8/11
    # baseline: 1 + 0 + 1 + 0 + 0 + 1 = 3 ones of 3+1+2+0+2+4 = 12 values -> 3/12
    result = paired_bootstrap(PAIRS, seed=1)
    assert result["diff"] == pytest.approx(8 / 11 - 3 / 12, abs=1e-15)
    assert result["ci_low"] <= result["diff"] <= result["ci_high"]
    assert 0 < result["p_greater"] < 0.05 < result["p_less"] <= 1
    assert 1 <= result["resamples"] <= 2000


def test_bootstrap_is_deterministic_and_order_free():
    first = paired_bootstrap(PAIRS, seed=42, margin=0.1, resamples=500)
    assert paired_bootstrap(PAIRS, seed=42, margin=0.1, resamples=500) == first
    shuffled = PAIRS[:]
    random.Random(3).shuffle(shuffled)
    assert paired_bootstrap(shuffled, seed=42, margin=0.1, resamples=500) == first
    assert paired_bootstrap(PAIRS, seed=43, margin=0.1, resamples=500) != first


def test_bootstrap_constant_cases_give_exact_p_values():
    # Every case has baseline mean 0 and current mean 1/2, so every resample gives 0.5:
    # the interval is a point, #{theta* <= 0} = 0 -> p_greater = 1/(B+1), and
    # #{theta* >= -0} = B -> p_less = (1 + B)/(B + 1) = 1.
    pairs = [([0, 0], [0, 1])] * 5
    result = paired_bootstrap(pairs, seed=0, resamples=99)
    assert result == {"diff": 0.5, "ci_low": 0.5, "ci_high": 0.5, "p_greater": 1 / 100, "p_less": 1.0, "resamples": 99}
    # With margin 0.5 the observed difference sits on the margin: #{theta* <= 0.5} = 99.
    assert paired_bootstrap(pairs, seed=0, margin=0.5, resamples=99)["p_greater"] == 1.0


def test_bootstrap_skips_one_sided_resamples():
    # Two cases, one with only baseline values, one with only current values: a resample
    # is usable only when it draws both (probability 1/2).
    result = paired_bootstrap([([0.0], []), ([], [1.0])], seed=5, resamples=400)
    assert result["diff"] == 1.0
    assert 100 < result["resamples"] < 300


def test_bootstrap_errors():
    with pytest.raises(ValueError, match="both sides"):
        paired_bootstrap([([], [1.0])], seed=1)
    with pytest.raises(ValueError, match="both sides"):
        paired_bootstrap([], seed=1)
    with pytest.raises(ValueError, match="margin"):
        paired_bootstrap(PAIRS, seed=1, margin=-0.1)


# --------------------------------------------------------------------------- paired_cluster_interval


def test_t_quantile_matches_published_values_at_any_level():
    # Published two-sided tables (e.g. Abramowitz and Stegun table 26.10).
    assert t_quantile(0.95, 1) == pytest.approx(6.3138, abs=1e-4)
    assert t_quantile(0.95, 10) == pytest.approx(1.8125, abs=1e-4)
    assert t_quantile(0.995, 4) == pytest.approx(4.6041, abs=1e-4)
    assert t_quantile(0.9, 30) == pytest.approx(1.3104, abs=1e-4)
    assert t_quantile(0.95, 60) == pytest.approx(1.6706, abs=1e-4)
    assert t_quantile(0.5, 3) == 0.0
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0.9, 0)


def test_paired_interval_with_no_event_in_either_run_is_not_a_point():
    """The bootstrap gave (0, 0) for 10 cases of 2 replies with no refusal either time, so
    any worsening looked significant; the MOVER interval is Clopper-Pearson's over the
    dialogues on each side, and neither tail rejects."""
    quiet = [([0.0, 0.0], [0.0, 0.0])] * 10
    assert paired_bootstrap(quiet, seed=1)["ci_high"] == 0.0
    result = paired_cluster_interval(quiet)
    upper = 1 - 0.025 ** (1 / 10)  # Clopper-Pearson's upper end at 0 of the 10 dialogues
    assert result["diff"] == 0.0
    assert result["ci_low"] == pytest.approx(-upper) and result["ci_high"] == pytest.approx(upper)
    assert result["p_greater"] == result["p_less"] == 0.5


def test_paired_interval_tests_invert_the_interval():
    """The test and the interval are one method: the one-sided p-value is the error level
    at which the interval's end reaches the margin."""
    rng = random.Random(7)
    pairs = [([float(rng.random() < 0.2) for _ in range(3)], [float(rng.random() < 0.4) for _ in range(3)])
             for _ in range(25)]
    for margin in (0.0, 0.05):
        result = paired_cluster_interval(pairs, margin=margin)
        p = result["p_greater"]
        assert 0 < p < 0.5
        at_p = paired_cluster_interval(pairs, confidence=1 - 2 * p)
        assert at_p["ci_low"] == pytest.approx(margin, abs=1e-6)
    assert paired_cluster_interval(pairs)["p_less"] > 0.5
    assert paired_cluster_interval(pairs, margin=0.05)["p_greater"] > paired_cluster_interval(pairs)["p_greater"]


def test_paired_interval_borrows_the_design_effect_for_a_run_without_events():
    """The baseline never refused: its interval takes the current run's design effect (the
    same cases), not the floor of one unit per dialogue, nor the replies as independent."""
    current = [[1.0, 1.0, 0.0, 0.0], [0.0] * 4, [1.0, 0.0, 0.0, 0.0], [0.0] * 4] * 5
    baseline = [[0.0] * 4] * 20
    result = paired_cluster_interval(list(zip(baseline, current)))
    from pytest_socialbias.metrics.rates import cluster_design

    _, deff, df = cluster_design(current)
    lent = cluster_wilson_interval(baseline, corrected=False, design=(deff, df))
    alone = cluster_wilson_interval(baseline, corrected=False)
    assert 1 < deff and lent[1] < alone[1]
    # No correlation to use (the baseline has no spread): the lower end is the current
    # run's lower end less the baseline's upper end, in quadrature.
    low_cur = cluster_wilson_interval(current, corrected=False)[0]
    assert result["diff"] == 3 / 16
    assert result["ci_low"] == pytest.approx(3 / 16 - math.hypot(3 / 16 - low_cur, lent[1]))


def test_paired_interval_is_deterministic_and_order_free_and_checks_input():
    pairs = [([1, 2, 3], [2, 2, 3]), ([5, 5], [4, 5]), ([3], [1, 2]), ([4, 4], [4, 4])]
    first = paired_cluster_interval(pairs, scale=(1.0, 5.0), cap_at_values=False)
    assert paired_cluster_interval(list(reversed(pairs)), scale=(1.0, 5.0), cap_at_values=False) == first
    assert first["diff"] == pytest.approx(27 / 9 - 27 / 8)  # 3.0 - 3.375
    assert -4 <= first["ci_low"] < first["diff"] < first["ci_high"] <= 4
    with pytest.raises(ValueError, match="both sides"):
        paired_cluster_interval([([], [1.0])])
    with pytest.raises(ValueError, match="outside the scale"):
        paired_cluster_interval([([7.0], [1.0])], scale=(1.0, 5.0))
    with pytest.raises(ValueError, match="margin"):
        paired_cluster_interval(pairs, margin=-0.1, scale=(1.0, 5.0))


# --------------------------------------------------------------------------- agreement


def table_pairs(n11, n10, n01, n00):
    """(reference, judge) pairs for a 2x2 table: n10 = reference 1 / judge 0."""
    return [(1, 1)] * n11 + [(1, 0)] * n10 + [(0, 1)] * n01 + [(0, 0)] * n00


def test_agreement_hand_computation():
    # reference/judge table: n11 = 20, n10 = 5, n01 = 10, n00 = 15; n = 50
    # po = 35/50 = 0.7; pr = 25/50 = 0.5, pj = 30/50 = 0.6
    # kappa: pe = 0.5*0.6 + 0.5*0.4 = 0.5 -> (0.7 - 0.5) / (1 - 0.5) = 0.4
    # AC1: pi = (0.5 + 0.6)/2 = 0.55, pe = 2*0.55*0.45 = 0.495 -> (0.7 - 0.495) / 0.505 = 0.405941
    # sensitivity 20/25 = 0.8, specificity 15/25 = 0.6
    result = agreement(table_pairs(20, 5, 10, 15), seed=11, resamples=500)
    assert result["n"] == 50
    assert result["agreement"] == pytest.approx(0.7)
    assert result["kappa"] == pytest.approx(0.4, abs=1e-15)
    assert result["ac1"] == pytest.approx(0.205 / 0.505, abs=1e-15)
    assert result["sensitivity"] == pytest.approx(0.8)
    assert result["specificity"] == pytest.approx(0.6)
    # Wilson 95% for 20/25: (40 + 3.8415 -+ 1.96 sqrt(3.8415 + 80*5/25)) / (2 * 28.8415)
    z = NORMAL.inv_cdf(0.975)
    assert (result["sensitivity_low"], result["sensitivity_high"]) == pytest.approx(wilson_cc(20, 25, z), abs=1e-12)
    assert (result["specificity_low"], result["specificity_high"]) == pytest.approx(wilson_cc(15, 25, z), abs=1e-12)
    assert result["prevalence_reference"] == 0.5 and result["prevalence_judge"] == 0.6
    assert result["kappa_low"] < 0.4 < result["kappa_high"]
    assert result["ac1_low"] < result["ac1"] < result["ac1_high"]


def test_agreement_high_agreement_low_kappa_paradox():
    # The paradox Gwet's AC1 answers (Feinstein & Cicchetti 1990; Gwet 2008): n11 = 118,
    # n10 = 5, n01 = 2, n00 = 0; n = 125, po = 118/125 = 0.944.
    # kappa: pe = (123*120 + 2*5) / 125^2 = 14770/15625 = 0.94528
    #        -> (0.944 - 0.94528) / (1 - 0.94528) = -0.00128 / 0.05472 = -0.0233918
    # AC1:   pi = (123 + 120) / 250 = 0.972, pe = 2*0.972*0.028 = 0.054432
    #        -> (0.944 - 0.054432) / (1 - 0.054432) = 0.889568 / 0.945568 = 0.9407763
    result = agreement(table_pairs(118, 5, 2, 0), seed=3, resamples=300)
    assert result["kappa"] == pytest.approx(float(Fraction(-128, 5472)), abs=1e-15)
    assert result["kappa"] == pytest.approx(-0.0233918, abs=1e-7)
    assert result["ac1"] == pytest.approx(0.889568 / 0.945568, abs=1e-12)
    assert result["ac1"] == pytest.approx(0.9407763, abs=1e-7)
    assert result["specificity"] == 0.0


@pytest.mark.parametrize("n", [10, 40])
def test_a_perfect_judge_no_longer_gets_a_zero_width_kappa(n):
    """Issue item: the percentile bootstrap over items gave a judge that agreed with every
    reference label the interval (1, 1): every resample agrees perfectly too. The
    posterior of the table keeps the chance of a disagreement not yet seen."""
    pairs = [(1, 1)] * (n // 2) + [(0, 0)] * (n // 2)
    result = agreement(pairs, seed=2, resamples=2000)
    assert result["kappa"] == 1.0 and result["kappa_high"] == 1.0
    assert 0.2 < result["kappa_low"] < 1.0 - 0.5 / n  # 0.45 at 10 items, 0.84 at 40
    assert result["kappa_low"] < agreement(pairs * 4, seed=2, resamples=2000)["kappa_low"]  # more items, narrower


def test_agreement_degenerate_kappa_and_missing_classes():
    # Both raters always say 1: pe = 1 and po = 1, kappa defined as 1.0;
    # AC1: pi = 1, pe = 0 -> 1.0. No reference negatives -> no specificity.
    result = agreement([(1, 1)] * 8, seed=0, resamples=50)
    assert result["kappa"] == 1.0 and result["kappa_high"] == 1.0
    # Eight items, all positive on both sides, say little about chance-corrected
    # agreement: the interval is wide, where the bootstrap over items gave (1, 1).
    assert result["kappa_low"] < 0.5
    assert result["ac1"] == 1.0 and result["ac1_high"] == 1.0 and result["ac1_low"] < 0.9
    assert result["sensitivity"] == 1.0
    assert result["specificity"] is None and result["specificity_low"] is None
    # Reference always 0, judge always 1: po = 0, pe = 0*1 + 1*0 = 0 -> kappa 0;
    # AC1: pi = 1/2, pe = 1/2 -> (0 - 1/2) / (1/2) = -1.
    result = agreement([(0, 1)] * 4, seed=0, resamples=50)
    assert result["kappa"] == 0.0 and result["ac1"] == -1.0
    assert result["sensitivity"] is None


def test_agreement_empty_and_invalid():
    empty = agreement([], seed=0)
    assert empty["n"] == 0 and empty["kappa"] is None and empty["sensitivity"] is None
    with pytest.raises(ValueError, match=r"pairs\[1\]"):
        agreement([(1, 1), (1, 2)], seed=0)


def test_agreement_bootstrap_is_deterministic_and_order_free():
    pairs = table_pairs(20, 5, 10, 15)
    first = agreement(pairs, seed=9, resamples=300)
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    assert agreement(shuffled, seed=9, resamples=300) == first
    assert agreement(pairs, seed=10, resamples=300)["kappa_low"] != first["kappa_low"]


# --------------------------------------------------------------------------- rogan_gladen


def test_rogan_gladen_hand_value():
    # (0.3 + 0.8 - 1) / (0.9 + 0.8 - 1) = 0.1 / 0.7 = 0.142857...
    assert rogan_gladen(0.3, 0.9, 0.8) == pytest.approx(1 / 7, abs=1e-15)


def test_rogan_gladen_clips_and_refuses_chance_judges():
    assert rogan_gladen(0.1, 0.9, 0.8) == 0.0  # (0.1 - 0.2) / 0.7 < 0
    assert rogan_gladen(0.99, 0.9, 0.95) == 1.0  # (0.94) / 0.85 > 1
    assert rogan_gladen(0.3, 0.5, 0.5) is None  # se + sp - 1 = 0
    assert rogan_gladen(0.3, 0.3, 0.4) is None  # worse than chance
    assert rogan_gladen(0.3, 1.0, 1.0) == pytest.approx(0.3)  # a perfect judge changes nothing
    with pytest.raises(ValueError, match="sensitivity"):
        rogan_gladen(0.3, 1.2, 0.8)


def test_rogan_gladen_interval():
    # Reference: se = 18/20 = 0.9, sp = 24/30 = 0.8; run: 30 of 100 positive
    # -> estimate (0.3 + 0.8 - 1) / (0.9 + 0.8 - 1) = 1/7.
    reference = table_pairs(18, 2, 6, 24)
    estimate, low, high = rogan_gladen_interval(30, 100, reference, seed=4, resamples=500)
    assert estimate == pytest.approx(1 / 7, abs=1e-15)
    assert 0.0 <= low < estimate < high <= 1.0
    shuffled = reference[:]
    random.Random(2).shuffle(shuffled)
    assert rogan_gladen_interval(30, 100, shuffled, seed=4, resamples=500) == (estimate, low, high)
    # More reference labels (same se, sp) give a narrower interval.
    _, low10, high10 = rogan_gladen_interval(30, 100, reference * 10, seed=4, resamples=500)
    assert high10 - low10 < high - low


def test_rogan_gladen_interval_with_a_near_perfect_judge_is_the_runs_own():
    """With thousands of reference labels, all right, se and sp are all but known to be 1:
    the interval is the run's own rate's, about 0.3 -+ 1.96 sqrt(0.3 * 0.7 / 400)."""
    estimate, low, high = rogan_gladen_interval(120, 400, table_pairs(4000, 0, 0, 4000), seed=8)
    assert estimate == pytest.approx(0.3)
    half = 1.96 * math.sqrt(0.3 * 0.7 / 400)
    assert low == pytest.approx(0.3 - half, abs=0.01)
    assert high == pytest.approx(0.3 + half, abs=0.01)
    # Ten reference labels a side say little about se and sp, and the interval says so
    # (the bootstrap of them said se = sp = 1 in every resample: the run's interval alone).
    _, low10, high10 = rogan_gladen_interval(120, 400, table_pairs(10, 0, 0, 10), seed=8)
    assert high10 - low10 > 2 * (high - low)


@pytest.mark.parametrize(
    "positives, n, reference, expect_low, expect_high",
    [
        # Issue fixtures: a rate below 1 - specificity gave (0, 0); 50/50 gave (1, 1).
        (0, 50, (18, 2, 4, 16), (0.0, 0.0), (0.03, 0.2)),
        (0, 20, (30, 0, 0, 30), (0.0, 0.0), (0.1, 0.25)),
        (20, 20, (30, 0, 0, 30), (0.7, 0.9), (1.0, 1.0)),
        (50, 50, (50, 0, 0, 50), (0.85, 0.97), (1.0, 1.0)),
    ],
)
def test_rogan_gladen_interval_keeps_its_width_at_the_edges(positives, n, reference, expect_low, expect_high):
    _, low, high = rogan_gladen_interval(positives, n, table_pairs(*reference), seed=4)
    assert expect_low[0] <= low <= expect_low[1]
    assert expect_high[0] <= high <= expect_high[1]
    assert high - low > 0.03


def test_rogan_gladen_interval_undefined():
    assert rogan_gladen_interval(3, 10, table_pairs(5, 5, 5, 5), seed=0) == (None, None, None)  # se + sp = 1
    assert rogan_gladen_interval(3, 10, table_pairs(5, 0, 0, 0), seed=0) == (None, None, None)  # no negatives
    assert rogan_gladen_interval(0, 0, table_pairs(5, 1, 1, 5), seed=0) == (None, None, None)  # empty run
    with pytest.raises(ValueError, match="exceed"):
        rogan_gladen_interval(11, 10, table_pairs(5, 1, 1, 5), seed=0)


def _beta_quantile(a: float, b: float, q: float) -> float:
    """The q quantile of Beta(a, b) by numerical inversion of its CDF: an independent
    reference for the corrected rates' interval (x = u^2 removes the singularity at 0
    of a = 1/2; Simpson's rule on 20,000 panels)."""
    panels = 20000
    us = [i / panels for i in range(panels + 1)]
    density = [2 * u ** (2 * a - 1) * (1 - u * u) ** (b - 1) if 0 < u < 1 else (2.0 if u == 0 and a == 0.5 else 0.0)
               for u in us]
    cumulative, running = [0.0], 0.0
    for i in range(0, panels, 2):
        running += (density[i] + 4 * density[i + 1] + density[i + 2]) / (3 * panels)
        cumulative.append(running)
    total = cumulative[-1]
    target = q * total
    for k in range(1, len(cumulative)):
        if cumulative[k] >= target:
            return (2 * k / panels) ** 2
    return 1.0


def test_corrected_rates_keep_an_honest_width_at_zero_and_n():
    """Issue fixture: reference sensitivity 0.9 (18/20), specificity 0.8 (16/20). A run
    with 0/20 positives had the corrected interval (0, 0), and 20/20 had (1, 1)."""
    reference = [(1, 1)] * 18 + [(1, 0)] * 2 + [(0, 0)] * 16 + [(0, 1)] * 4
    _, low, high = rogan_gladen_interval(0, 20, reference, seed=7)
    assert low == 0.0 and high > 0.05  # it was 0.0049, and a test only asked for > 0
    _, low, high = rogan_gladen_interval(20, 20, reference, seed=7)
    assert high == 1.0 and low < 0.95
    # Against a reference computation: with a judge all but known to be perfect (4,000
    # reference labels a side, all right), the credible interval is that of the posterior
    # Beta(x + 1, n - x + 1) and the set of prevalences not rejected is Clopper-Pearson's,
    # (Beta(x, n - x + 1) at 2.5%, Beta(x + 1, n - x) at 97.5%); the interval is their hull.
    perfect = [(1, 1)] * 4000 + [(0, 0)] * 4000
    for positives in (0, 3, 20):
        _, low, high = rogan_gladen_interval(positives, 20, perfect, seed=11)
        credible = (_beta_quantile(positives + 1, 21 - positives, 0.025), _beta_quantile(positives + 1, 21 - positives, 0.975))
        clopper = (0.0 if positives == 0 else _beta_quantile(positives, 21 - positives, 0.025),
                   1.0 if positives == 20 else _beta_quantile(positives + 1, 20 - positives, 0.975))
        assert low == pytest.approx(min(credible[0], clopper[0]), abs=0.01)
        assert high == pytest.approx(max(credible[1], clopper[1]), abs=0.01)
    assert rogan_gladen_interval(3, 20, perfect, seed=11)[1] == pytest.approx(0.0321, abs=0.005)  # Clopper-Pearson's


def test_corrected_rate_holds_a_true_prevalence_of_zero():
    """A credible interval's lower end is above 0 whenever the estimate is: with a true
    prevalence of 0 and a judge of 99% sensitivity and specificity (100 reference labels
    a side), 3 false positives in 200 give an estimate of 0.005 and a credible interval
    of about (0.001, 0.03), which misses 0; the count is well within what p = 0 predicts,
    so 0 is in the interval."""
    reference = [(1, 1)] * 99 + [(1, 0)] + [(0, 0)] * 99 + [(0, 1)]
    estimate, low, high = rogan_gladen_interval(3, 200, reference, seed=1)
    assert 0 < estimate < 0.01 and low == 0.0 and 0.02 < high < 0.06


# --------------------------------------------------------------------------- exact power


def brute_force_power(n: int, discordance: float, difference: float, alpha: float) -> float:
    """Every outcome (n10, n01) of n pairs, weighted by its multinomial probability, the
    exact McNemar test run on each."""
    p01, p10 = (discordance + difference) / 2, (discordance - difference) / 2
    rest = 1 - discordance
    total = 0.0
    for n10 in range(n + 1):
        for n01 in range(n - n10 + 1):
            if mcnemar_exact(n10, n01, "greater") <= alpha:
                ways = math.comb(n, n10) * math.comb(n - n10, n01)
                total += ways * p10 ** n10 * p01 ** n01 * rest ** (n - n10 - n01)
    return total


@pytest.mark.parametrize("n, discordance, difference", [(20, 0.3, 0.1), (20, 0.3, 0.3), (35, 0.5, 0.2), (12, 1.0, 0.5)])
def test_exact_power_matches_brute_force_enumeration(n, discordance, difference):
    from pytest_socialbias.stats import mcnemar_exact_power

    assert mcnemar_exact_power(n, discordance, difference, 0.05) == pytest.approx(
        brute_force_power(n, discordance, difference, 0.05), abs=1e-9)


@pytest.mark.parametrize("n", [30, 100, 240, 480])
@pytest.mark.parametrize("rate", [0.02, 0.1, 0.3])
def test_the_mde_is_where_the_exact_test_reaches_its_power_as_the_discordance_grows(n, rate):
    """Issue fixture: the MDE printed held the discordance at its no-change value, so a
    worsening by it was caught with power 0.45-0.78, not 0.8. Now the MDE is where the
    exact McNemar test reaches 0.8 when the worsening adds discordant pairs (p10 stays
    at half the no-change discordance, p01 = p10 + d), checked by the power function and,
    at 30 pairs, by brute-force enumeration of every table."""
    from pytest_socialbias.stats import mcnemar_exact_power, paired_mde

    discordance = 2 * rate * (1 - rate)  # independent pairs at the baseline rate
    mde = paired_mde(n, discordance, rate, 0.05, 0.8)
    if mde is None:  # only where no worsening the rate can make reaches the power
        top = 1 - rate - discordance / 2
        assert mcnemar_exact_power(n, discordance + top, top, 0.05) < 0.8
        return
    p10 = discordance / 2
    assert mcnemar_exact_power(n, 2 * p10 + mde, mde, 0.05) >= 0.8
    assert mcnemar_exact_power(n, 2 * p10 + mde - 1e-3, mde - 1e-3, 0.05) < 0.8
    if n == 30:
        assert brute_force_power(n, 2 * p10 + mde, mde, 0.05) == pytest.approx(
            mcnemar_exact_power(n, 2 * p10 + mde, mde, 0.05), abs=1e-9)


def test_the_old_mde_overstated_power_and_no_events_is_not_none():
    """The issue's figures: at 240 pairs and a 2% rate the old MDE (0.033) is caught with
    power about 0.54 once the discordance grows with the worsening; with no event in 240
    pairs, a worsening to 3% is caught with power 0.85, so the MDE is not "none"."""
    from pytest_socialbias.stats import mcnemar_exact_power, paired_mde

    discordance = 2 * 0.02 * 0.98
    assert mcnemar_exact_power(240, discordance + 0.033, 0.033, 0.05) == pytest.approx(0.54, abs=0.03)
    assert paired_mde(240, discordance, 0.02) > 0.033
    assert mcnemar_exact_power(240, 0.03, 0.03, 0.05) == pytest.approx(0.85, abs=0.02)
    none_seen = paired_mde(240, 0.0, 0.0)
    assert none_seen is not None and none_seen < 0.03


@pytest.mark.parametrize("discordance, difference", [(0.3, 0.1), (0.5, 0.3), (0.2, 0.2), (0.4, 0.05)])
def test_margin_test_power_matches_running_the_test_on_every_outcome(discordance, difference):
    """The power by the test's rejection region, against running paired_margin_test on
    every (n10, n01) of 20 pairs and adding the trinomial probabilities of the rejected."""
    from pytest_socialbias.stats import margin_test_power

    n, margin, alpha = 20, 0.05, 0.05
    p10, p01 = (discordance - difference) / 2, (discordance + difference) / 2
    brute = 0.0
    for a in range(n + 1):
        for b in range(n - a + 1):
            if paired_margin_test(0, a, b, n - a - b, margin, "greater") <= alpha:
                brute += (math.factorial(n) / (math.factorial(a) * math.factorial(b) * math.factorial(n - a - b))
                          * p10 ** a * p01 ** b * (1 - discordance) ** (n - a - b))
    assert margin_test_power(n, discordance, difference, margin, alpha) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize("n", [30, 100, 240])
@pytest.mark.parametrize("rate", [0.02, 0.1, 0.3])
def test_the_margin_tests_mde_is_where_it_reaches_its_power(n, rate):
    """The shipped margin (0.02): the MDE is where the exact margin test's own power
    reaches 0.8 under the growing-discordance alternative, or none where it never does."""
    from pytest_socialbias.stats import margin_test_power, paired_mde

    discordance = 2 * rate * (1 - rate)
    p10 = discordance / 2
    mde = paired_mde(n, discordance, rate, 0.05, 0.8, margin=0.02)
    if mde is None:
        top = 1 - rate - p10
        assert margin_test_power(n, 2 * p10 + top, top, 0.02, 0.05) < 0.8
        return
    assert mde > 0.02
    assert margin_test_power(n, 2 * p10 + mde, mde, 0.02, 0.05) >= 0.8
    assert margin_test_power(n, 2 * p10 + mde - 1e-3, mde - 1e-3, 0.02, 0.05) < 0.8


def test_no_detectable_worsening_is_none_never_zero_and_says_what_it_would_need():
    from pytest_socialbias.stats import paired_mde, paired_min_p, paired_pairs_needed

    assert paired_mde(0, 0.2, 0.1) is None
    assert paired_mde(500, 0.3, 0.2) > 0
    # 4 pairs: the exact test's smallest p is 1/16 = 0.0625 > 0.05, whatever the data.
    assert paired_min_p(4) == pytest.approx(0.0625)
    assert paired_min_p(5) == pytest.approx(0.03125)
    needed = paired_pairs_needed(0.0, 0.0, 0.05)
    assert needed is not None and paired_mde(needed, 0.0, 0.0) is not None and paired_mde(needed - 1, 0.0, 0.0) is None
    assert paired_min_p(4, margin=0.02) > paired_min_p(4)
    assert paired_mde(10, 0.4, 0.9) is None  # a 90% rate can rise by at most 0.1 - p10: never found at 10 pairs


