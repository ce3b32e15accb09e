"""Statistics for comparing runs and checking judges: pure functions, standard library only.

Paired binary outcomes (the same cases answered by a baseline and a current model) form a
2x2 table ``n11`` (both 1), ``n10`` (baseline 1, current 0), ``n01`` (baseline 0, current
1), ``n00`` (both 0); the difference of interest is always ``p_current - p_baseline =
(n01 - n10) / n``.

Methods and references:

- :func:`mcnemar_exact`: the exact conditional McNemar test. Given the b + c discordant
  pairs, c ~ Binomial(b + c, 1/2) under H0 (McNemar 1947, Psychometrika 12:153-157; see
  Fagerland, Lydersen & Laake 2013, BMC Med Res Methodol 13:91). Tails are summed from
  the exactly computed first term ``comb(n, k) / 2**n`` (a correctly rounded division of
  integers) with the ratio recurrence in IEEE arithmetic, so the result is the same on
  every platform, with no libm ``lgamma`` involved.
- :func:`paired_margin_test`: exact McNemar for margin 0; for margin > 0 an exact
  unconditional test on Tango's score statistic (Tango 1998, Stat Med 17:891-908): the
  p-value is the largest probability of a statistic at least as extreme, over the nuisance
  parameter on the null boundary (Berger & Boos 1994 style supremum, by enumeration of
  the trinomial), so its size never exceeds alpha, unlike Tango's normal approximation
  (6.3% at n = 80 and 10% discordance, margin 0.02).
- :func:`paired_diff_interval`: Newcombe's hybrid score interval for a paired difference,
  method 10 of Newcombe (1998, Stat Med 17:2635-2650): Wilson (1927) intervals for both
  marginal proportions combined with the corrected phi coefficient.
- :func:`holm`: Holm (1979, Scand J Stat 6:65-70) step-down adjusted p-values.
- :func:`paired_mde`: minimum detectable worsening of the exact test that is run
  (McNemar's, or the margin test), where its exact power, by enumeration of the outcomes
  it rejects, reaches the target under an alternative whose discordance grows with the
  worsening; :func:`paired_min_p` and :func:`paired_pairs_needed` say when a test cannot
  decide at all and how many pairs it would need (a margin test's search starts from
  Connor's 1987 normal approximation, Biometrics 43:207-211, which overstates the exact
  tests' power).
- :func:`paired_cluster_interval`: paired difference of rates over replies or of bounded
  means grouped in cases: MOVER (Zou & Donner 2008) of each run's score interval on its
  effective sample size, and the one-sided tests that invert it.
- :func:`paired_bootstrap`: case-resampling percentile bootstrap (Efron & Tibshirani 1993)
  with Davison & Hinkley's (1997) ``(1 + count) / (B + 1)`` p-values (what the paired
  comparison of replies and means used before; kept for the coverage benchmark).
- :func:`agreement`: Cohen's (1960) kappa and Gwet's (2008, Br J Math Stat Psychol
  61:29-48) AC1 with intervals from the Dirichlet posterior of the agreement
  table; sensitivity and specificity with Wilson intervals.
- :func:`rogan_gladen`, :func:`rogan_gladen_interval`: prevalence corrected for an
  imperfect judge (Rogan & Gladen 1978, Am J Epidemiol 107:71-76), with the hull of a
  credible interval and the prevalences the run's count does not reject.

Every resampling takes a seed and uses its own ``random.Random(seed)``; inputs are put in a
canonical (sorted) order first, so a result depends only on the data and the seed, never on
input order.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from statistics import NormalDist

from .metrics.rates import (
    Z95,
    cluster_design,
    cluster_wilson_interval,
    dirichlet_interval,
    kish_clusters,
    percentile,
    wilson_interval,
)

ALTERNATIVES = ("greater", "less", "two-sided")

_NORMAL = NormalDist()
# A tail sum stops once the next term is below this share of the sum so far (terms only
# shrink from there on, geometrically far out in the tail).
_TAIL_EPS = 2.0**-60


# --------------------------------------------------------------------------- validation


def _check_alternative(alternative: str, allowed: tuple[str, ...] = ALTERNATIVES) -> None:
    if alternative not in allowed:
        raise ValueError(f"alternative must be one of {', '.join(allowed)}; got {alternative!r}")


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer count, got {value!r}")


def _check_confidence(confidence: float) -> float:
    """The two-sided normal quantile for ``confidence``, which must lie in (0, 1)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")
    return _NORMAL.inv_cdf(0.5 + confidence / 2)


def _check_resamples(resamples: int) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")


def _check_binary_pairs(pairs, what: str) -> list[tuple[int, int]]:
    checked = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2 or any(v not in (0, 1) for v in pair):
            raise ValueError(f"{what}[{i}] must be a (reference, judge) pair of 0/1 labels, got {pair!r}")
        checked.append((int(pair[0]), int(pair[1])))
    return checked


# --------------------------------------------------------------------------- McNemar


def _binom_half_upper(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if 2 * k <= n:
        # The upper tail holds the bulk: take the complement of the short tail, which by
        # symmetry is P(X <= k - 1) = P(X >= n - k + 1).
        return max(0.0, 1.0 - _binom_half_upper(n - k + 1, n))
    term = math.comb(n, k) / 2**n  # exact integers, correctly rounded division
    total = 0.0
    for j in range(k, n + 1):
        total += term
        term *= (n - j) / (j + 1)
        if term <= total * _TAIL_EPS:  # also ends a tail whose first term underflowed to 0
            break
    return min(1.0, total)


def mcnemar_exact(b: int, c: int, alternative: str) -> float:
    """Exact conditional McNemar p-value from the discordant pair counts.

    ``b``: pairs with baseline 1 / current 0; ``c``: pairs with baseline 0 / current 1.
    Under H0 (equal marginal rates), c ~ Binomial(b + c, 1/2). Returns

    - ``"greater"`` (H1: current rate > baseline rate): P(X >= c);
    - ``"less"`` (H1: current rate < baseline rate): P(X <= c);
    - ``"two-sided"``: min(1, 2 * min(P(X >= c), P(X <= c))).

    Returns 1.0 when there are no discordant pairs (b + c == 0).
    """
    _check_counts(b=b, c=c)
    _check_alternative(alternative)
    n = b + c
    if n == 0:
        return 1.0
    greater = _binom_half_upper(c, n)
    less = _binom_half_upper(n - c, n)  # P(X <= c) = P(X >= n - c) by symmetry
    if alternative == "greater":
        return greater
    if alternative == "less":
        return less
    return min(1.0, 2 * min(greater, less))


def tango_z(n10: int, n01: int, n: int, delta: float) -> float:
    """Tango's (1998) score statistic for H0: p_current - p_baseline = delta.

    In Tango's notation the difference is (x12 - x21) / n with x12 = n01 and x21 = n10;
    p21 is estimated by its maximum likelihood estimate restricted to the null difference
    (the root of 2n p^2 + B p + C = 0 in Tango's eq. for p21).
    """
    a = 2 * n
    b = -n01 - n10 + (2 * n - n01 + n10) * delta
    c = -n10 * delta * (1 - delta)
    p21 = (math.sqrt(max(0.0, b * b - 4 * a * c)) - b) / (2 * a)
    return (n01 - n10 - n * delta) / math.sqrt(n * (2 * p21 + delta * (1 - delta)))


def paired_margin_test(n11: int, n10: int, n01: int, n00: int, margin: float, alternative: str) -> float:
    """One-sided p-value for the paired difference d = p_current - p_baseline against a margin.

    ``p_baseline = (n11 + n10) / n`` and ``p_current = (n11 + n01) / n``, n the sum of the
    four cells; n10 is baseline 1 / current 0, n01 baseline 0 / current 1.

    - ``"greater"``: H0: d <= margin against H1: d > margin;
    - ``"less"``: H0: d >= -margin against H1: d < -margin.

    With ``margin == 0`` this is exactly :func:`mcnemar_exact` (``n10, n01``; there
    ``"two-sided"`` is accepted too). With ``0 < margin < 1`` it is an exact unconditional
    test on Tango's (1998) score statistic Z: with (N10, N01) trinomial under the null
    boundary p01 - p10 = margin, the p-value is ``sup over p10 of P(Z >= z_observed)``
    (see :func:`exact_margin_tail`), so the test's size is at most alpha for every value of
    the nuisance parameter. Returns 1.0 when n == 0.
    """
    _check_counts(n11=n11, n10=n10, n01=n01, n00=n00)
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1) (a difference of proportions), got {margin!r}")
    if margin == 0:
        return mcnemar_exact(n10, n01, alternative)
    _check_alternative(alternative, ("greater", "less"))
    n = n11 + n10 + n01 + n00
    if n == 0:
        return 1.0
    if alternative == "less":
        # d < -margin is d' > margin for the table with the roles swapped; Tango's
        # statistic is symmetric under that swap.
        n10, n01 = n01, n10
    return exact_margin_tail(n, margin, tango_z(n10, n01, n, margin))


#: Grid points of the nuisance parameter p10 on the null boundary (denser near 0, where
#: the supremum usually lies), then a local refinement around the largest.
_NUISANCE_GRID = 48
_REFINE_STEPS = 24


def _log_factorials(n: int) -> list[float]:
    return [math.lgamma(k + 1) for k in range(n + 1)]


def _binomial_pmf(m: int, p: float, logf: list[float]) -> list[float]:
    """P(X = k), k = 0..m, for X ~ Binomial(m, p)."""
    if p <= 0.0:
        return [1.0] + [0.0] * m
    if p >= 1.0:
        return [0.0] * m + [1.0]
    lp, lq = math.log(p), math.log1p(-p)
    return [math.exp(logf[m] - logf[k] - logf[m - k] + k * lp + (m - k) * lq) for k in range(m + 1)]


def _region(n: int, margin: float, threshold: float) -> tuple[list[list[int]], bool]:
    """For each n10 = a, the n01 values b with Z(a, b) >= threshold; or, when that region
    is the larger part of the sample space, its complement (flag True)."""
    inside = [[b for b in range(n - a + 1) if tango_z(a, b, n, margin) >= threshold - 1e-12] for a in range(n + 1)]
    size = sum(len(bs) for bs in inside)
    total = (n + 1) * (n + 2) // 2
    if size <= total // 2:
        return inside, False
    outside = [sorted(set(range(n - a + 1)) - set(bs)) for a, bs in enumerate(inside)]
    return outside, True


def _region_probability(n: int, margin: float, p10: float, region, complement: bool, logf) -> float:
    """P((N10, N01) in region) for the trinomial with p10 and p01 = p10 + margin."""
    p01 = p10 + margin
    conditional = min(1.0, p01 / (1.0 - p10)) if p10 < 1.0 else 0.0  # N01 | N10 = a ~ Bin(n - a, .)
    outer = _binomial_pmf(n, p10, logf)
    peak = max(outer)
    total = 0.0
    for a, bs in enumerate(region):
        # Values of N10 with a negligible probability add nothing (and most have one).
        if not bs or outer[a] <= peak * 1e-18:
            continue
        m = n - a
        if conditional <= 0.0 or conditional >= 1.0:
            inner = _binomial_pmf(m, conditional, logf)
            total += outer[a] * math.fsum(inner[b] for b in bs)
            continue
        lp, lq, base = math.log(conditional), math.log1p(-conditional), logf[m]
        total += outer[a] * math.fsum(math.exp(base - logf[b] - logf[m - b] + b * lp + (m - b) * lq) for b in bs)
    return min(1.0, max(0.0, 1.0 - total if complement else total))


def exact_margin_tail(n: int, margin: float, threshold: float) -> float:
    """``sup over p10 in [0, (1 - margin) / 2] of P(Z >= threshold)``, Z Tango's statistic
    for (N10, N01, rest) ~ Multinomial(n; p10, p10 + margin, 1 - 2 p10 - margin): the
    exact unconditional p-value of an observed Z = ``threshold``.

    The supremum is taken over a grid of the nuisance parameter (denser near 0) refined
    by golden-section search around the largest value; tests/unit/test_stats.py checks by
    exact enumeration that the resulting test keeps its size at the sizes we ship.
    """
    logf = _log_factorials(n)
    region, complement = _region(n, margin, threshold)
    top = (1.0 - margin) / 2
    grid = [top * ((i + 0.5) / _NUISANCE_GRID) ** 2 for i in range(_NUISANCE_GRID)] + [top]

    def prob(p10: float) -> float:
        return _region_probability(n, margin, p10, region, complement, logf)

    values = [prob(p) for p in grid]
    best = max(range(len(grid)), key=values.__getitem__)
    low = grid[best - 1] if best > 0 else 0.0
    high = grid[best + 1] if best + 1 < len(grid) else top
    ratio = (math.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = prob(a), prob(b)
    found = max(values)
    for _ in range(_REFINE_STEPS):
        found = max(found, fa, fb)
        if fa < fb:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = prob(b)
        else:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = prob(a)
    return min(1.0, max(found, fa, fb))


# --------------------------------------------------------------------------- interval


def _newcombe_phi(n11: int, n10: int, n01: int, n00: int) -> float:
    """Newcombe's (1998) corrected phi: 0 when a margin of the table is empty; else
    (A - n/2) / sqrt(margins) if A > n/2, 0 if 0 <= A <= n/2, A / sqrt(margins) if A < 0,
    with A = n11 n00 - n10 n01."""
    margins = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    if margins == 0:
        return 0.0
    n = n11 + n10 + n01 + n00
    a = n11 * n00 - n10 * n01
    if a > n / 2:
        numerator = a - n / 2
    elif a >= 0:
        numerator = 0.0
    else:
        numerator = a
    return numerator / math.sqrt(margins)


def paired_diff_interval(
    n11: int, n10: int, n01: int, n00: int, confidence: float = 0.95, corrected: bool = False
) -> tuple[float, float]:
    """Newcombe's (1998) method 10 interval for p_current - p_baseline of paired data.

    With p1 = p_current = (n11 + n01) / n and p2 = p_baseline = (n11 + n10) / n, Wilson
    intervals (l1, u1) and (l2, u2) at ``confidence``, and phi from :func:`_newcombe_phi`:

        lower = (p1 - p2) - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
        upper = (p1 - p2) + sqrt((u1 - p1)^2 - 2 phi (u1 - p1)(p2 - l2) + (p2 - l2)^2)

    Both ends are clamped to [-1, 1]. Returns (-1.0, 1.0) when n == 0. ``corrected``:
    the Wilson intervals with continuity correction (Newcombe's method 11).
    """
    _check_counts(n11=n11, n10=n10, n01=n01, n00=n00)
    z = _check_confidence(confidence)
    n = n11 + n10 + n01 + n00
    if n == 0:
        return (-1.0, 1.0)
    p1 = (n11 + n01) / n
    p2 = (n11 + n10) / n
    l1, u1 = wilson_interval(n11 + n01, n, z, corrected=corrected)
    l2, u2 = wilson_interval(n11 + n10, n, z, corrected=corrected)
    phi = _newcombe_phi(n11, n10, n01, n00)
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    diff = p1 - p2
    return (max(-1.0, diff - below), min(1.0, diff + above))


# --------------------------------------------------------------------------- multiplicity


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, returned in the input order.

    With the m p-values sorted ascending (ties keep their input order), the j-th smallest
    gets ``max over i <= j of min(1, (m - i + 1) p_(i))``. Rejecting where the adjusted
    value is <= alpha controls the family-wise error rate at alpha.
    """
    for i, p in enumerate(pvalues):
        if not 0 <= p <= 1:
            raise ValueError(f"pvalues[{i}] must be a probability in [0, 1], got {p!r}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])  # stable: ties keep input order
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------- power


def _connor_n(d: float, psi: float, z_alpha: float, z_beta: float, margin: float = 0.0) -> float:
    """Connor's (1987) pairs needed to detect a paired difference d with discordance psi,
    against the null difference ``margin`` (d > margin)."""
    return (z_alpha * math.sqrt(psi) + z_beta * math.sqrt(max(0.0, psi - d * d))) ** 2 / ((d - margin) ** 2)


# --------------------------------------------------------------------------- exact power


def _binomial_tail(k: int, q: float, c: int) -> float:
    """P(X >= c) for X ~ Binomial(k, q), summing only the terms that matter (within about
    13 standard deviations of the mean, beyond which the rest is below double precision),
    each from the one before it."""
    if c <= 0:
        return 1.0
    if c > k or q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    mean, spread = k * q, 13 * math.sqrt(k * q * (1 - q)) + 13
    ratio = q / (1 - q)

    def run(start: int, stop: int) -> float:  # sum of the pmf over start..stop
        term = math.exp(math.lgamma(k + 1) - math.lgamma(start + 1) - math.lgamma(k - start + 1)
                        + start * math.log(q) + (k - start) * math.log1p(-q))
        total = 0.0
        for j in range(start, stop + 1):
            total += term
            term *= (k - j) / (j + 1) * ratio
        return total

    if c <= mean:  # the complement is the short side
        return max(0.0, 1.0 - run(max(0, int(mean - spread)), c - 1))
    return min(1.0, run(c, min(k, int(mean + spread) + 1)))


@functools.lru_cache(maxsize=4096)  # process-wide: a pure function of its arguments
def _mcnemar_critical(k: int, alpha: float) -> int:
    """The smallest n01 the one-sided exact McNemar test rejects at with k discordant
    pairs: P(Binomial(k, 1/2) >= c) <= alpha (k + 1: never)."""
    low, high = (k + 1) // 2, k + 1
    while low < high:
        mid = (low + high) // 2
        if _binomial_tail(k, 0.5, mid) <= alpha:
            high = mid
        else:
            low = mid + 1
    return low


def mcnemar_exact_power(n: int, discordance: float, difference: float, alpha: float) -> float:
    """The power of the one-sided exact McNemar test (``mcnemar_exact(..., "greater")`` at
    level ``alpha``) with ``n`` pairs, when the share of discordant pairs is
    ``discordance`` and the true paired difference p_current - p_baseline is
    ``difference``: by enumeration of the discordant count D ~ Binomial(n, discordance)
    and, given D, of N01 ~ Binomial(D, (1 + difference / discordance) / 2) against the
    test's critical value for D."""
    _check_counts(n=n)
    if not 0 < discordance <= 1 or not 0 <= difference <= discordance:
        raise ValueError(f"need 0 < discordance <= 1 and 0 <= difference <= discordance, got {discordance}, {difference}")
    q = (1 + difference / discordance) / 2
    total = 0.0
    spread = 13 * math.sqrt(n * discordance * (1 - discordance)) + 13
    first = max(1, int(n * discordance - spread))
    last = min(n, int(n * discordance + spread) + 1)
    weight = math.exp(math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
                      + first * math.log(discordance) + (n - first) * math.log1p(-discordance)) if discordance < 1 else 0.0
    ratio = discordance / (1 - discordance) if discordance < 1 else 0.0
    if discordance >= 1:  # every pair discordant
        return _binomial_tail(n, q, _mcnemar_critical(n, alpha))
    for k in range(first, last + 1):
        if weight > 0.0:
            total += weight * _binomial_tail(k, q, _mcnemar_critical(k, alpha))
        weight *= (n - k) / (k + 1) * ratio  # P(D = k + 1) from P(D = k)
    return min(1.0, total)


def paired_mde(n: int, no_change_discordance: float, baseline_rate: float, alpha: float = 0.05,
               power: float = 0.8, margin: float = 0.0) -> float | None:
    """The smallest worsening (a rise of the paired rate, beyond ``margin``) that the
    one-sided paired test at ``alpha`` finds with probability ``power`` among ``n`` pairs,
    to 1e-4; None when no worsening the rate can still make is found that often.

    The alternative grows the discordance with the worsening, as a real worsening does:
    the share of pairs that got better stays at ``p10 = no_change_discordance / 2`` and
    the share that got worse is ``p01 = p10 + d``, so the discordance is ``2 p10 + d``
    (holding the discordance at its no-change value, as an earlier version did, made
    every extra discordant pair a worse one and overstated the power: 0.54 at the MDE it
    printed for 240 pairs at a 2% rate). ``p10`` is at most ``baseline_rate`` (only pairs
    positive in the baseline can get better) and ``d`` at most ``1 - baseline_rate - p10``
    (the current rate cannot pass 1). The test is the exact McNemar test at margin 0 and
    the exact unconditional margin test otherwise; power by enumeration
    (``mcnemar_exact_power``, ``margin_test_power``). Never 0."""
    _check_counts(n=n)
    if not 0 <= baseline_rate <= 1 or not 0 <= no_change_discordance <= 1:
        raise ValueError(f"need rates in [0, 1], got {baseline_rate}, {no_change_discordance}")
    p10 = min(no_change_discordance / 2, baseline_rate)
    top = 1.0 - baseline_rate - p10
    if n == 0 or top <= margin or top <= 0:
        return None

    def power_at(d: float) -> float:
        if margin == 0:
            return mcnemar_exact_power(n, 2 * p10 + d, d, alpha)
        return margin_test_power(n, 2 * p10 + d, d, margin, alpha)

    return _smallest_detectable(power_at, margin, top, power)


def paired_min_p(n: int, margin: float = 0.0) -> float:
    """The smallest one-sided p-value the paired test can give with ``n`` pairs (every
    pair discordant the worse way): 0.5 ** n for McNemar's exact test; the margin test's
    p for that table. A test whose smallest p is above its level cannot find any
    worsening, whatever the data: 4 pairs give 0.0625 against 0.05."""
    _check_counts(n=n)
    if n == 0:
        return 1.0
    return paired_margin_test(0, 0, n, 0, margin, "greater")


def paired_pairs_needed(no_change_discordance: float, baseline_rate: float, alpha: float, power: float = 0.8,
                        margin: float = 0.0, start: int = 1, limit: int = 100_000) -> int | None:
    """The fewest pairs with which ``paired_mde`` exists (some worsening is found with
    ``power``) and ``paired_min_p`` is below ``alpha``: what a gate that cannot decide
    would need. Exact for margin 0 (doubling, then bisection on n); for a margin, Connor's
    normal approximation for the largest possible worsening, rounded up (the exact margin
    test at thousands of pairs costs seconds), then checked and stepped up exactly where
    that is cheap. None above ``limit``."""
    def ok(n: int) -> bool:
        return paired_min_p(n, margin) < alpha and paired_mde(n, no_change_discordance, baseline_rate, alpha,
                                                              power, margin) is not None

    if margin > 0:
        p10 = min(no_change_discordance / 2, baseline_rate)
        d = 1.0 - baseline_rate - p10
        if d <= margin:
            return None
        z_alpha, z_beta = _NORMAL.inv_cdf(1 - alpha), _NORMAL.inv_cdf(power)
        guess = max(start, math.ceil(_connor_n(d, min(1.0, 2 * p10 + d), z_alpha, z_beta, margin)))
        if guess > limit:
            return None
        while guess <= min(limit, 150) and not ok(guess):
            guess += max(1, guess // 10)
        return guess if guess <= limit else None
    low, high = max(1, start), max(1, start)
    while not ok(high):
        low, high = high + 1, high * 2
        if high > limit:
            return None
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return high


def _smallest_detectable(power_at, low: float, high: float, power: float) -> float | None:
    """The smallest difference in (low, high] at which ``power_at`` (rising with the
    difference) reaches ``power``, by bisection to 1e-4; None when even ``high`` falls
    short."""
    high = float(high)
    if power_at(high) < power:
        return None
    low = float(low)  # power_at(low) < power <= power_at(high)
    while high - low > 1e-4:
        mid = (low + high) / 2
        if power_at(mid) >= power:
            high = mid
        else:
            low = mid
    return high


@functools.lru_cache(maxsize=256)  # process-wide: a pure function of its arguments
def _margin_critical(n: int, margin: float, alpha: float) -> float | None:
    """The smallest Tango statistic the exact unconditional margin test rejects at with n
    pairs (its p-value ``exact_margin_tail`` at most ``alpha``), found by bisection over
    the statistic's attainable values; None when no outcome is rejected."""
    values = sorted({round(tango_z(a, b, n, margin), 12) for a in range(n + 1) for b in range(n - a + 1)})
    if exact_margin_tail(n, margin, values[-1]) > alpha:
        return None
    low, high = 0, len(values) - 1  # tail(values[high]) <= alpha; the tail falls as z grows
    while low < high:
        mid = (low + high) // 2
        if exact_margin_tail(n, margin, values[mid]) <= alpha:
            high = mid
        else:
            low = mid + 1
    return values[low]


def margin_test_power(n: int, discordance: float, difference: float, margin: float, alpha: float) -> float:
    """The power of the exact unconditional margin test (``paired_margin_test(...,
    margin, "greater")`` at level ``alpha``) with ``n`` pairs, when the share of
    discordant pairs is ``discordance`` and the true paired difference is ``difference``:
    the trinomial probability of the outcomes whose statistic reaches the critical value,
    by enumeration."""
    _check_counts(n=n)
    if not 0 < discordance <= 1 or not 0 <= difference <= discordance:
        raise ValueError(f"need 0 < discordance <= 1 and 0 <= difference <= discordance, got {discordance}, {difference}")
    rejected = _margin_rejection_region(n, margin, alpha)
    if rejected is None:
        return 0.0
    region, complement = rejected
    p10 = (discordance - difference) / 2  # p01 = p10 + difference
    return _region_probability(n, difference, p10, region, complement, _log_factorials(n))


@functools.lru_cache(maxsize=64)  # process-wide: a pure function of its arguments
def _margin_rejection_region(n: int, margin: float, alpha: float):
    """``_region`` of the outcomes the margin test rejects (see ``_margin_critical``)."""
    critical = _margin_critical(n, margin, alpha)
    return None if critical is None else _region(n, margin, critical)


# --------------------------------------------------------------------------- bootstrap


def _quantile_ends(ordered: list[float], confidence: float) -> tuple[float, float]:
    """Percentile interval ends of sorted bootstrap statistics."""
    tail = (1 - confidence) / 2 * 100
    return percentile(ordered, tail), percentile(ordered, 100 - tail)


def paired_bootstrap(
    pairs: list[tuple[list[float], list[float]]],
    seed: int,
    margin: float = 0.0,
    resamples: int = 2000,
    confidence: float = 0.95,
) -> dict:
    """Case-resampling bootstrap of a paired difference of pooled means.

    Each pair is (baseline values, current values) of one case; either list may be empty.
    The statistic is the mean of all current values pooled over the cases minus the mean of
    all baseline values pooled over the cases. Each resample draws len(pairs) cases with
    replacement (a case's values move together); resamples in which a side has no values
    are skipped, so B (returned as ``resamples``) counts only the usable ones.

    Returns ``{"diff": observed statistic, "ci_low", "ci_high": percentile interval at
    confidence, "p_greater": (1 + #{theta* <= margin}) / (B + 1) (one-sided, H1: diff >
    margin), "p_less": (1 + #{theta* >= -margin}) / (B + 1) (H1: diff < -margin),
    "resamples": B}``. Pairs are sorted first, so input order does not matter. Raises
    ValueError when either side has no values at all, or no resample was usable.
    """
    _check_resamples(resamples)
    _check_confidence(confidence)
    if margin < 0:
        raise ValueError(f"margin must be non-negative, got {margin!r}")
    cases = sorted(([float(v) for v in base], [float(v) for v in cur]) for base, cur in pairs)
    base_sums = [math.fsum(base) for base, _ in cases]
    cur_sums = [math.fsum(cur) for _, cur in cases]
    base_counts = [len(base) for base, _ in cases]
    cur_counts = [len(cur) for _, cur in cases]
    if not sum(base_counts) or not sum(cur_counts):
        raise ValueError(
            "paired_bootstrap: needs values on both sides; got "
            f"{sum(base_counts)} baseline and {sum(cur_counts)} current values over {len(cases)} cases"
        )
    diff = math.fsum(cur_sums) / sum(cur_counts) - math.fsum(base_sums) / sum(base_counts)
    rng = random.Random(seed)
    indices = range(len(cases))
    stats = []
    for _ in range(resamples):
        drawn = rng.choices(indices, k=len(cases))
        n_base = sum(base_counts[i] for i in drawn)
        n_cur = sum(cur_counts[i] for i in drawn)
        if n_base and n_cur:
            stats.append(
                math.fsum(cur_sums[i] for i in drawn) / n_cur - math.fsum(base_sums[i] for i in drawn) / n_base
            )
    if not stats:
        raise ValueError(
            f"paired_bootstrap: none of {resamples} resamples had values on both sides; "
            "add cases that carry both baseline and current values"
        )
    stats.sort()
    low, high = _quantile_ends(stats, confidence)
    b = len(stats)
    return {
        "diff": diff,
        "ci_low": low,
        "ci_high": high,
        "p_greater": (1 + sum(1 for t in stats if t <= margin)) / (b + 1),
        "p_less": (1 + sum(1 for t in stats if t >= -margin)) / (b + 1),
        "resamples": b,
    }


def _paired_sides(pairs, scale: tuple[float, float]):
    """Each case's (baseline, current) values mapped to 0-1 on ``scale``, sorted."""
    low, high = scale
    if not high > low:
        raise ValueError(f"the scale needs low < high, got [{low}, {high}]")
    out = []
    for base, cur in pairs:
        mapped = []
        for side in (base, cur):
            for value in side:
                if not low <= float(value) <= high:
                    raise ValueError(f"{value} is outside the scale [{low}, {high}]")
            mapped.append([(float(v) - low) / (high - low) for v in side])
        out.append(tuple(mapped))
    out.sort()
    if not any(b for b, _ in out) or not any(c for _, c in out):
        raise ValueError(
            "paired_cluster_interval: needs values on both sides; got "
            f"{sum(len(b) for b, _ in out)} baseline and {sum(len(c) for _, c in out)} current values "
            f"over {len(out)} cases"
        )
    return out


def _effective(groups, p: float, deff: float | None) -> float:
    """The effective sample size of one run's values: the values over their design
    effect, between Kish's effective number of clusters and the values."""
    n = sum(len(g) for g in groups)
    floor = kish_clusters(groups)
    return floor if deff is None else min(float(n), max(floor, n / deff))


class _PairedClusters:
    """The two runs of a paired comparison of pooled shares or bounded means, ready to
    give the MOVER interval at any error level (``paired_cluster_interval``)."""

    def __init__(self, pairs, scale: tuple[float, float], cap_at_values: bool):
        cases = _paired_sides(pairs, scale)
        self.width = scale[1] - scale[0]
        self.cap = cap_at_values
        self.base = [b for b, _ in cases if b]
        self.cur = [c for _, c in cases if c]
        p_base, deff_base, df_base = cluster_design(self.base)
        p_cur, deff_cur, df_cur = cluster_design(self.cur)
        self.p_base, self.p_cur = p_base, p_cur
        # A run with no spread of its own (no event, every reply refused, one dialogue)
        # borrows the other's design effect: the same cases were asked both times.
        # (cluster_design gives both or neither)
        self.lend_base = (deff_cur, df_cur) if deff_cur is not None and df_cur is not None else None
        self.lend_cur = (deff_base, df_base) if deff_base is not None and df_base is not None else None
        n_base = sum(len(g) for g in self.base)
        n_cur = sum(len(g) for g in self.cur)
        both = [(b, c) for b, c in cases if b and c]
        e_base = [(math.fsum(b) - p_base * len(b)) / n_base for b, _ in both]
        e_cur = [(math.fsum(c) - p_cur * len(c)) / n_cur for _, c in both]
        s_bb = math.fsum(x * x for x in e_base)
        s_cc = math.fsum(y * y for y in e_cur)
        self.r = math.fsum(x * y for x, y in zip(e_base, e_cur)) / math.sqrt(s_bb * s_cc) if s_bb > 0 and s_cc > 0 else 0.0
        # Newcombe's correction of the correlation (his corrected phi, A - n/2), on the
        # effective sizes: runs that agree case by case (r = 1) no longer cancel the two
        # half-widths into an interval of zero width.
        if self.r > 0:
            spread = math.sqrt(p_base * (1 - p_base) * p_cur * (1 - p_cur))
            sizes = math.sqrt(_effective(self.base, p_base, deff_base) * _effective(self.cur, p_cur, deff_cur))
            correction = 1.0 / (2.0 * sizes * spread) if spread > 0 and sizes > 0 else 0.0
            self.r = max(0.0, self.r - correction)
        self.diff = p_cur - p_base

    def ends(self, tail: float) -> tuple[float, float]:
        """(low, high) of the difference on the 0-1 scale, each end with error ``tail``."""
        l1, u1 = cluster_wilson_interval(self.cur, cap_at_values=self.cap, tail=tail, corrected=False, design=self.lend_cur)
        l2, u2 = cluster_wilson_interval(self.base, cap_at_values=self.cap, tail=tail, corrected=False, design=self.lend_base)
        m1, m2, r = self.p_cur, self.p_base, self.r
        below = math.sqrt(max(0.0, (m1 - l1) ** 2 + (u2 - m2) ** 2 - 2 * r * (m1 - l1) * (u2 - m2)))
        above = math.sqrt(max(0.0, (u1 - m1) ** 2 + (m2 - l2) ** 2 - 2 * r * (u1 - m1) * (m2 - l2)))
        return (max(-1.0, self.diff - below), min(1.0, self.diff + above))

    def p_value(self, margin: float, alternative: str) -> float:
        """One-sided p-value of "current minus baseline exceeds ``margin``" (greater) or
        "is below minus ``margin``" (less): the error level at which the interval's end
        reaches the margin, found by bisection (the test and the interval are one method)."""
        sign = 1.0 if alternative == "greater" else -1.0
        bound = sign * margin / self.width

        def beyond(tail: float) -> bool:  # the end on the alternative's side clears the bound
            low, high = self.ends(tail)
            return low > bound if sign > 0 else high < bound

        def other_side(tail: float) -> bool:
            low, high = self.ends(tail)
            return high < bound if sign > 0 else low > bound

        near_half = 0.5 - 1e-9
        for test, flip in ((beyond, False), (other_side, True)):
            if not test(near_half):
                continue
            lo, hi = 0.0, near_half
            if test(1e-12):
                return 1.0 - 1e-12 if flip else 1e-12
            for _ in range(48):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if test(mid) else (mid, hi)
            return 1.0 - hi if flip else hi
        return 0.5


def paired_cluster_interval(
    pairs: list[tuple[list[float], list[float]]],
    margin: float = 0.0,
    scale: tuple[float, float] = (0.0, 1.0),
    cap_at_values: bool = True,
    confidence: float = 0.95,
    interval_only: bool = False,
) -> dict:
    """Paired difference of pooled means of values grouped in cases (rates over replies:
    0/1 values; means of bounded ratings on ``scale``): current minus baseline.

    The interval is the method of variance estimates recovery (MOVER; Zou and Donner
    2008; Newcombe's method 10 is its case for one 0/1 value a case): each run's own
    score interval on its effective sample size (``cluster_wilson_interval``, plain
    Wilson; a run with no spread of its own, such as no event at all, takes the other
    run's design effect, the same cases having been asked both times, and never fewer
    units than its dialogues), combined with the correlation of the two runs' case-level
    residuals:

        low = d - sqrt((m1 - l1)^2 + (u2 - m2)^2 - 2 r (m1 - l1)(u2 - m2))
        high = d + sqrt((u1 - m1)^2 + (m2 - l2)^2 - 2 r (u1 - m1)(m2 - l2))

    It never has zero width: with no event in either run it is about (-u, u) with u
    Wilson's upper end over the dialogues, where the percentile bootstrap over cases gave
    (0, 0). The one-sided tests invert the same intervals: ``p_greater`` is the error
    level at which the lower end reaches ``margin`` (H1: diff > margin), ``p_less`` the
    level at which the upper end reaches ``-margin``. benchmarks/coverage.py --paired
    measures the coverage. Deterministic (no resampling); pairs are sorted first.

    Returns ``{"diff", "ci_low", "ci_high", "p_greater", "p_less", "r"}`` on the scale
    (without the p-values with ``interval_only``, which skips their bisection).
    Raises ValueError when either side has no values or a value is off the scale."""
    _check_confidence(confidence)
    if margin < 0:
        raise ValueError(f"margin must be non-negative, got {margin!r}")
    if interval_only:
        runs = _PairedClusters(pairs, scale, cap_at_values)
        low, high = runs.ends((1 - confidence) / 2)
        return {"diff": runs.diff * runs.width, "ci_low": low * runs.width, "ci_high": high * runs.width, "r": runs.r}
    runs = _PairedClusters(pairs, scale, cap_at_values)
    low, high = runs.ends((1 - confidence) / 2)
    width = runs.width
    return {
        "diff": runs.diff * width,
        "ci_low": low * width,
        "ci_high": high * width,
        "p_greater": runs.p_value(margin, "greater"),
        "p_less": runs.p_value(margin, "less"),
        "r": runs.r,
    }


# --------------------------------------------------------------------------- agreement


def _cells(pairs) -> tuple[int, int, int, int]:
    """(both 1, reference 1 / judge 0, reference 0 / judge 1, both 0)."""
    n11 = n10 = n01 = n00 = 0
    for ref, judge in pairs:
        if ref and judge:
            n11 += 1
        elif ref:
            n10 += 1
        elif judge:
            n01 += 1
        else:
            n00 += 1
    return n11, n10, n01, n00


def _kappa_ac1(n11: int, n10: int, n01: int, n00: int) -> tuple[float, float]:
    """Cohen's kappa and Gwet's AC1 of a 2x2 agreement table, in exact integer arithmetic."""
    n = n11 + n10 + n01 + n00
    ref1, judge1 = n11 + n10, n11 + n01
    agree = n11 + n00
    # Scaled by n^2: observed n * agree, chance ref1 * judge1 + ref0 * judge0.
    chance = ref1 * judge1 + (n - ref1) * (n - judge1)
    kappa = 1.0 if chance == n * n else (n * agree - chance) / (n * n - chance)
    # AC1 chance 2 pi (1 - pi), pi = (ref1 + judge1) / 2n; scaled by 2 n^2.
    positives = ref1 + judge1
    chance_ac1 = positives * (2 * n - positives)
    ac1 = (2 * n * agree - chance_ac1) / (2 * n * n - chance_ac1)
    return kappa, ac1


def agreement(pairs: list[tuple[int, int]], seed: int, resamples: int = 2000) -> dict:
    """Agreement of a binary judge with reference labels; each pair is (reference, judge).

    Returns a dict with ``n`` (pairs); ``agreement``: share of pairs with equal labels;
    ``kappa``: Cohen's (po - pe) / (1 - pe), pe = pr pj + (1 - pr)(1 - pj) from the two
    positive shares, defined as 1.0 when pe == 1 (both raters constant and equal, so
    po == 1 too); ``ac1``: Gwet's (po - pe) / (1 - pe) with pe = 2 pi (1 - pi), pi = (pr +
    pj) / 2 (never degenerate: pe <= 1/2); ``kappa_low``/``kappa_high`` and
    ``ac1_low``/``ac1_high``: 95% intervals from the Dirichlet posterior of the 2x2 table
    (``rates.dirichlet_interval``, ``resamples`` seeded draws); ``sensitivity``: judge 1 among reference 1
    (None without reference positives) and ``specificity``: judge 0 among reference 0 (None
    without reference negatives), each with 95% Wilson ends ``*_low``/``*_high``;
    ``prevalence_reference`` and ``prevalence_judge``: the positive shares pr and pj.
    With no pairs, n is 0 and every other value None.
    """
    _check_resamples(resamples)
    items = sorted(_check_binary_pairs(pairs, "pairs"))
    n = len(items)
    keys = (
        "agreement", "kappa", "kappa_low", "kappa_high", "ac1", "ac1_low", "ac1_high",
        "sensitivity", "sensitivity_low", "sensitivity_high",
        "specificity", "specificity_low", "specificity_high",
        "prevalence_reference", "prevalence_judge",
    )
    result: dict = {"n": n, **dict.fromkeys(keys)}
    if n == 0:
        return result
    n11, n10, n01, n00 = _cells(items)
    kappa, ac1 = _kappa_ac1(n11, n10, n01, n00)
    cells = [n11, n10, n01, n00]
    result.update(
        agreement=(n11 + n00) / n,
        kappa=kappa,
        ac1=ac1,
        prevalence_reference=(n11 + n10) / n,
        prevalence_judge=(n11 + n01) / n,
    )
    result["kappa_low"], result["kappa_high"] = _ends(dirichlet_interval(
        cells, lambda p: _kappa_ac1(*p)[0], seed, estimate=kappa, draws=resamples))
    result["ac1_low"], result["ac1_high"] = _ends(dirichlet_interval(
        cells, lambda p: _kappa_ac1(*p)[1], seed, estimate=ac1, draws=resamples))
    # Each share's own denominator: the reference positives, the reference negatives.
    result["sensitivity_n"], result["specificity_n"] = n11 + n10, n01 + n00
    if n11 + n10:
        result["sensitivity"] = n11 / (n11 + n10)
        result["sensitivity_low"], result["sensitivity_high"] = wilson_interval(n11, n11 + n10, Z95)
    if n01 + n00:
        result["specificity"] = n00 / (n01 + n00)
        result["specificity_low"], result["specificity_high"] = wilson_interval(n00, n01 + n00, Z95)
    return result


def _ends(interval: tuple[float, float] | None) -> tuple[float | None, float | None]:
    """An interval's two ends, None and None where it has none (``dirichlet_interval``
    when the statistic was undefined in every draw)."""
    return (None, None) if interval is None else interval


def _multiclass_kappa_ac1(confusion: Sequence[Sequence[float]]) -> tuple[float, float]:
    """Cohen's kappa and Gwet's multi-category AC1 of a K x K table (rows: reference)."""
    k = len(confusion)
    n = sum(map(sum, confusion))
    agree = sum(confusion[i][i] for i in range(k))
    ref = [sum(row) for row in confusion]
    judge = [sum(confusion[i][j] for i in range(k)) for j in range(k)]
    # Scaled by n^2: chance agreement sum_k r_k j_k.
    chance = sum(r * j for r, j in zip(ref, judge))
    kappa = 1.0 if chance == n * n else (n * agree - chance) / (n * n - chance)
    # AC1 chance: sum_k pi_k (1 - pi_k) / (K - 1), pi_k = (r_k + j_k) / 2n; scaled by
    # 4 n^2 (K - 1) it is sum_k s_k (2n - s_k) with s_k = r_k + j_k; at most n^2 4/K < 4 n^2.
    chance_ac1 = sum((r + j) * (2 * n - (r + j)) for r, j in zip(ref, judge))
    scale = 4 * n * n * (k - 1)
    ac1 = (scale * agree / n - chance_ac1) / (scale - chance_ac1)
    return kappa, ac1


def multiclass_agreement(pairs: list[tuple[str, str]], classes: tuple, seed: int, resamples: int = 2000) -> dict:
    """Agreement of a K-class judge with reference labels; each pair is (reference, judge).

    Returns ``n``; ``confusion``: ``{reference: {judge: count}}`` over ``classes``;
    ``agreement`` (share of equal labels) with 95% Wilson ends; ``kappa``: Cohen's
    (po - pe) / (1 - pe), pe = sum_k pr_k pj_k (1.0 when pe == 1, as for two classes);
    ``ac1``: Gwet's multi-category (po - pe) / (1 - pe), pe = sum_k pi_k (1 - pi_k) / (K -
    1), pi_k = (pr_k + pj_k) / 2 (never degenerate: pe <= 1/K); both with 95% ends from
    the Dirichlet posterior of the K x K table (``rates.dirichlet_interval``, seeded); ``recall``: per reference class, the share the
    judge labels the same, with Wilson ends (None for a class absent from the reference).
    With no pairs, n is 0 and every value None.
    """
    _check_resamples(resamples)
    classes = tuple(classes)
    if len(classes) < 2:
        raise ValueError(f"multiclass_agreement needs at least two classes, got {classes!r}")
    for index, pair in enumerate(pairs):
        if len(pair) != 2 or pair[0] not in classes or pair[1] not in classes:
            raise ValueError(f"pairs[{index}]: expected (reference, judge) in {classes}, got {pair!r}")
    items = sorted((classes.index(r), classes.index(j)) for r, j in pairs)
    n = len(items)
    result: dict = {
        "n": n, "classes": list(classes), "confusion": None, "agreement": None, "agreement_low": None,
        "agreement_high": None, "kappa": None, "kappa_low": None, "kappa_high": None, "ac1": None,
        "ac1_low": None, "ac1_high": None, "recall": {c: None for c in classes},
    }
    if n == 0:
        return result

    def table(sample) -> list[list[int]]:
        out = [[0] * len(classes) for _ in classes]
        for r, j in sample:
            out[r][j] += 1
        return out

    confusion = table(items)
    kappa, ac1 = _multiclass_kappa_ac1(confusion)
    size = len(classes)
    cells = [confusion[i][j] for i in range(size) for j in range(size)]

    def square(p: list[float]) -> list[list[float]]:
        return [p[i * size:(i + 1) * size] for i in range(size)]

    agree = sum(confusion[i][i] for i in range(len(classes)))
    result.update(
        confusion={c: {d: confusion[i][j] for j, d in enumerate(classes)} for i, c in enumerate(classes)},
        agreement=agree / n,
        kappa=kappa,
        ac1=ac1,
    )
    result["agreement_low"], result["agreement_high"] = wilson_interval(agree, n, Z95)
    result["kappa_low"], result["kappa_high"] = _ends(dirichlet_interval(
        cells, lambda p: _multiclass_kappa_ac1(square(p))[0], seed, estimate=kappa, draws=resamples))
    result["ac1_low"], result["ac1_high"] = _ends(dirichlet_interval(
        cells, lambda p: _multiclass_kappa_ac1(square(p))[1], seed, estimate=ac1, draws=resamples))
    for i, c in enumerate(classes):
        total = sum(confusion[i])
        if total:
            low, high = wilson_interval(confusion[i][i], total, Z95)
            result["recall"][c] = {"value": confusion[i][i] / total, "low": low, "high": high, "n": total}
    return result


# --------------------------------------------------------------------------- prevalence


def rogan_gladen(p_obs: float, sensitivity: float, specificity: float) -> float | None:
    """Rogan-Gladen prevalence: (p_obs + sp - 1) / (se + sp - 1), clipped to [0, 1].

    None when se + sp - 1 <= 0: such a judge is no better than chance (or worse, i.e.
    inverted), and the observed rate says nothing about the true one.
    """
    for name, value in (("p_obs", p_obs), ("sensitivity", sensitivity), ("specificity", specificity)):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be a proportion in [0, 1], got {value!r}")
    youden = sensitivity + specificity - 1
    if youden <= 0:
        return None
    return min(1.0, max(0.0, (p_obs + specificity - 1) / youden))


#: Points of the prevalence grid on which the corrected rate's interval is found, and of
#: the table of binomial tails (over the judge's positive rate) they read.
_PREVALENCE_GRID = 200
_THETA_TABLE = 800


def _tail_table(positives: int, n: int) -> tuple[list[float], list[float]]:
    """P(X >= positives) and P(X <= positives) for X ~ Binomial(n, theta), at theta =
    j / _THETA_TABLE for j = 0.._THETA_TABLE."""
    upper, lower = [], []
    for j in range(_THETA_TABLE + 1):
        theta = j / _THETA_TABLE
        upper.append(_binomial_tail(n, theta, positives))
        lower.append(1.0 - _binomial_tail(n, theta, positives + 1))
    return upper, lower


def _read(table: list[float], theta: float) -> float:
    """The table at theta, linear between its points."""
    position = min(max(theta, 0.0), 1.0) * _THETA_TABLE
    j = min(int(position), _THETA_TABLE - 1)
    return table[j] + (table[j + 1] - table[j]) * (position - j)


def rogan_gladen_interval(
    positives: int,
    n: int,
    reference_pairs: list[tuple[int, int]],
    seed: int,
    resamples: int = 200,
    confidence: float = 0.95,
) -> tuple[float | None, float | None, float | None]:
    """Rogan-Gladen prevalence of a run with an interval that holds the true prevalence,
    0 and 1 included, and keeps its width at 0/n and n/n.

    The run judged ``positives`` of ``n`` items positive; ``reference_pairs`` are
    (reference, judge) labels that estimate the judge's sensitivity and specificity.
    Returns (estimate, low, high): the estimate is :func:`rogan_gladen` of positives / n.
    The run's count is Binomial(n, p se + (1 - p)(1 - sp)); the judge's sensitivity and
    specificity are drawn (``resamples`` seeded draws) from their posteriors on the
    reference, Beta(1 + true positives, 1 + false negatives) and Beta(1 + true negatives,
    1 + false positives), keeping draws with se + sp > 1 (a judge no better than chance
    says nothing about p). The interval is the hull of two sets, each computed on a grid of
    _PREVALENCE_GRID steps:

    * the equal-tailed credible interval of p under a uniform prior, the likelihood
      averaged over the draws: it keeps its width at 0/n and n/n, and speaks where the run
      has fewer positives than any prevalence predicts (0 of 50 with a reference of 18/20
      and 16/20: about (0, 0.084));
    * every p under which the run's count is in neither 2.5% tail, the tails averaged
      over the draws (with a judge known to be perfect, the Clopper-Pearson interval): it
      holds a true prevalence of exactly 0 or 1, which a credible interval misses about
      half the time (its lower end is above 0 whenever the estimate is).

    Correcting and clipping each resample, as before, gave (0, 0) for any rate below 1 -
    specificity. benchmarks/coverage.py --corrected measures the coverage.

    (None, None, None) when the estimate is undefined (n == 0, no reference positives or
    negatives, or se + sp - 1 <= 0); (estimate, None, None) when no draw was usable.
    """
    _check_counts(positives=positives, n=n)
    if positives > n:
        raise ValueError(f"positives ({positives}) cannot exceed n ({n})")
    _check_resamples(resamples)
    _check_confidence(confidence)
    items = sorted(_check_binary_pairs(reference_pairs, "reference_pairs"))
    n11, n10, n01, n00 = _cells(items)
    if n == 0 or not n11 + n10 or not n01 + n00:
        return (None, None, None)
    estimate = rogan_gladen(positives / n, n11 / (n11 + n10), n00 / (n01 + n00))
    if estimate is None:
        return (None, None, None)
    rng = random.Random(seed)
    lines = []  # per usable draw: (base, slope) of theta = base + slope * p
    for _ in range(resamples):
        se = rng.betavariate(1 + n11, 1 + n10)
        sp = rng.betavariate(1 + n00, 1 + n01)
        if se + sp > 1:
            lines.append((1 - sp, se + sp - 1))
    if not lines:
        return (estimate, None, None)
    tail = (1 - confidence) / 2
    low, high = _credible_interval(positives, n, lines, tail)
    kept = _not_rejected(positives, n, lines, tail)
    if kept is not None:
        low, high = min(low, kept[0]), max(high, kept[1])
    return (estimate, min(low, estimate), max(high, estimate))


def _credible_interval(positives: int, n: int, lines: list[tuple[float, float]], tail: float) -> tuple[float, float]:
    """The equal-tailed credible interval of the prevalence under a uniform prior, the
    likelihood of the run's count averaged over the drawn (base, slope) lines, on a grid
    of _PREVALENCE_GRID cells (linear within a cell)."""
    grid = [(i + 0.5) / _PREVALENCE_GRID for i in range(_PREVALENCE_GRID)]
    log, log1p, x, y = math.log, math.log1p, positives, n - positives
    logs = []
    for base, slope in lines:
        logs.append([x * log(base + slope * p) + y * log1p(-(base + slope * p)) for p in grid])
    top = max(max(row) for row in logs)
    weights = [math.fsum(math.exp(row[i] - top) for row in logs) for i in range(len(grid))]
    total = math.fsum(weights)
    cumulative, low, high = 0.0, None, None
    step = 1 / _PREVALENCE_GRID
    for point, weight in zip(grid, weights):
        before = cumulative
        cumulative += weight / total
        if low is None and cumulative >= tail:
            low = point - step / 2 + step * (tail - before) / (cumulative - before)
        if high is None and cumulative >= 1 - tail:
            high = point - step / 2 + step * (1 - tail - before) / (cumulative - before)
    assert low is not None and high is not None  # the cumulative share reaches 1 over the grid
    return max(0.0, low), min(1.0, high)


def _not_rejected(positives: int, n: int, lines: list[tuple[float, float]], tail: float) -> tuple[float, float] | None:
    """The prevalences (0 and 1 included) under which the run's count is in neither tail,
    the tails averaged over the drawn lines; None when there is none (fewer positives than
    any prevalence predicts: the credible interval alone speaks then)."""
    upper, lower = _tail_table(positives, n)
    grid = [i / _PREVALENCE_GRID for i in range(_PREVALENCE_GRID + 1)]
    # P(count >= positives) rises with p, P(count <= positives) falls.
    above = [math.fsum(_read(upper, base + slope * p) for base, slope in lines) / len(lines) for p in grid]
    below = [math.fsum(_read(lower, base + slope * p) for base, slope in lines) / len(lines) for p in grid]
    kept = [i for i in range(len(grid)) if above[i] > tail and below[i] > tail]
    if not kept:
        return None
    first, last = kept[0], kept[-1]
    step = 1 / _PREVALENCE_GRID
    low, high = grid[first], grid[last]
    if first > 0 and above[first] > above[first - 1]:
        low -= step * (above[first] - tail) / (above[first] - above[first - 1])
    if last < _PREVALENCE_GRID and below[last] > below[last + 1]:
        high += step * (below[last] - tail) / (below[last] - below[last + 1])
    return low, high


# --------------------------------------------------------------------------- clustered paired test


def cluster_sign_test(differences: list[int], alternative: str = "greater") -> float:
    """Exact one-sided p-value of the sign-flip test on clusters' paired differences.

    ``differences``: per cluster, the sum over its pairs of current minus baseline (an
    integer: the clusters' 0/1 outcomes, e.g. a DyMT seed's dialogues in two styles).
    Under no change the two runs are exchangeable within a cluster, so each cluster's
    difference is as likely to have either sign, independently of the others; the
    p-value is the share of the 2^k sign patterns whose sum reaches the observed one
    (counted exactly by dynamic programming over the sums). With every cluster a single
    pair this is McNemar's exact test. Clusters whose pairs move together (a
    seed-by-model interaction moves both styles of a seed) keep its size, where
    McNemar's test on the pairs as if independent rejected 7-9% of the time at 5%."""
    _check_alternative(alternative, ("greater", "less"))
    sizes = [abs(int(d)) for d in differences if d]
    observed = sum(int(d) for d in differences)
    if alternative == "less":
        observed = -observed
    if not sizes:
        return 1.0
    total = sum(sizes)
    # ways[s]: sign patterns giving sum s - total.
    ways = [0] * (2 * total + 1)
    ways[total] = 1
    for size in sizes:
        shifted = [0] * (2 * total + 1)
        for index, count in enumerate(ways):
            if count:
                shifted[index - size] += count
                shifted[index + size] += count
        ways = shifted
    reaching = sum(ways[total + observed:]) if observed > -total else 2 ** len(sizes)
    return min(1.0, reaching / 2 ** len(sizes))


def clustered_paired_test(pairs, margin: float, alternative: str = "greater") -> float:
    """One-sided p-value of a paired difference of 0/1 outcomes grouped in clusters
    (``pairs``: per cluster, its baseline values and its current values). Margin 0: the
    exact sign-flip test (``cluster_sign_test``); a margin: the paired cluster MOVER test
    (``paired_cluster_interval``), the interval the row prints, inverted."""
    if margin == 0:
        return cluster_sign_test([int(round(math.fsum(c) - math.fsum(b))) for b, c in pairs], alternative)
    found = paired_cluster_interval(pairs, margin=margin)
    return found["p_greater"] if alternative == "greater" else found["p_less"]
