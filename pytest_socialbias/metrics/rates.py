"""Rates and intervals: the arithmetic every metric row shares. Pure functions.

Shares of independent units (dialogues, pairs) carry Wilson 95% score intervals with
continuity correction; shares of replies grouped in dialogues the same on the effective
sample size (the design effect over dialogues); means of bounded ratings the same on
their scale mapped to 0-1; statistics of a confusion table (F1, macro-F1, kappa, AC1) a
seeded Dirichlet posterior of the table (``dirichlet_interval``). benchmarks/coverage.py
measures the coverage of every one of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from statistics import NormalDist

Z95 = 1.959963984540054
_NORMAL = NormalDist()
#: Metric values and interval ends are rounded to this many digits in every row.
DIGITS = 6

#: Base seed of the seeded intervals (Dirichlet posterior draws); each group mixes in its own
#: identity (group_seed). The name is historical: the value must stay, or reports change.
BOOTSTRAP_SEED = 20251130


def wilson_interval(successes: int, n: int, z: float = Z95, corrected: bool = True) -> tuple[float, float]:
    """Wilson's score interval with continuity correction (Newcombe 1998, method 4) for
    a binomial proportion; (0, 1) when n is 0.

    The plain score interval's coverage dips well below 95% near 0 and 1 (90.4% at
    n = 10, p = 0.01; 92.1% at n = 100, p = 0.01); with the correction its coverage is at
    least 95.1% at every p for n = 10 to 500, for a width 2.5-15% larger
    (benchmarks/coverage.py). ``corrected=False``: the plain score interval (Wilson
    1927), which Newcombe's difference intervals are built from as published."""
    if n <= 0:
        return (0.0, 1.0)
    if not corrected:
        return _wilson_plain(successes / n, float(n), z)
    return _wilson_cc(successes / n, float(n), z)


def _wilson_plain(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The score interval of share ``p`` of a sample of size ``n`` (fractional for an
    effective size), without continuity correction."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def _wilson_cc(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The continuity-corrected score interval of share ``p`` of a sample of size ``n``
    (fractional for an effective size)."""
    q = 1 - p
    x = p * n
    low = 0.0
    if x > 1e-12:
        low = (2 * n * p + z * z - 1 - z * math.sqrt(max(0.0, z * z - 2 - 1 / n + 4 * p * (n * q + 1)))) / (2 * (n + z * z))
    high = 1.0
    if n - x > 1e-12:
        high = (2 * n * p + z * z + 1 + z * math.sqrt(max(0.0, z * z + 2 - 1 / n + 4 * p * (n * q - 1)))) / (2 * (n + z * z))
    # Clamp so rounding never puts an end on the wrong side of the estimate.
    return (max(0.0, min(p, low)), min(1.0, max(p, high)))


#: Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t975(df: int) -> float:
    """Student's t 97.5% quantile: the table to 30 degrees of freedom, then the
    Cornish-Fisher expansion around the normal quantile (error below 1e-4)."""
    return t_quantile(0.975, df)


def _t_cdf(t: float, df: int) -> float:
    """Student's t distribution function for integer degrees of freedom, in closed form
    (Abramowitz and Stegun 26.7.3-4: a finite sum in the angle atan(t / sqrt(df)))."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:
        total, term = 0.0, 1.0
        if df > 1:
            total = term = math.cos(theta)
            for k in range(3, df - 1, 2):
                term *= c2 * (k - 1) / k
                total += term
        inside = 2 / math.pi * (theta + math.sin(theta) * total) if df > 1 else 2 * theta / math.pi
    else:
        total = term = 1.0
        for k in range(2, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = math.sin(theta) * total
    return 0.5 + inside / 2


def t_quantile(q: float, df: int) -> float:
    """Student's t quantile at probability ``q`` (0.5 to 1): the table at 97.5% and, to 30
    degrees of freedom, the closed-form distribution function inverted by Newton's method;
    beyond 30 the Cornish-Fisher expansion around the normal quantile (error below 1e-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if not 0.5 <= q < 1:
        raise ValueError(f"t_quantile: q must be in [0.5, 1), got {q}")
    if q == 0.975 and df <= len(_T975):
        return _T975[df - 1]
    z = Z95 if q == 0.975 else _NORMAL.inv_cdf(q)
    guess = (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
             + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))
    if df > len(_T975):
        return guess
    # Newton's method on the closed-form distribution function, from the expansion (which
    # overshoots at few degrees of freedom: never start beyond the Cauchy quantile).
    t = min(guess, math.tan(math.pi * (q - 0.5))) if df == 1 else guess
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(100):
        density = math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))
        step = (_t_cdf(t, df) - q) / density
        t = max(t - step, t / 2)
        if abs(step) < 1e-12 * max(1.0, t):
            break
    return t


# --------------------------------------------------------------------------- beta


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for real a, b > 0."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of Beta(a, b): Newton's method on ``beta_cdf`` kept inside a
    bracket that bisection narrows whenever a step would leave it (to 1e-12)."""
    low, high = 0.0, 1.0
    x = a / (a + b)
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    for _ in range(200):
        gap = beta_cdf(x, a, b) - q
        if gap < 0:
            low = x
        else:
            high = x
        if high - low < 1e-12 or gap == 0:
            break
        density = math.exp(log_norm + (a - 1) * math.log(x) + (b - 1) * math.log1p(-x)) if 0 < x < 1 else 0.0
        step = x - gap / density if density > 0 else -1.0
        x = step if low < step < high else (low + high) / 2
    if x < 1e-9 and abs(beta_cdf(x, a, b) - q) > 1e-9 * q:
        # A quantile below 1e-9 (a tiny effective count's lower end): bisect its logarithm.
        lo, hi = math.log(1e-300), math.log(max(high, 1e-300))
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if beta_cdf(math.exp(mid), a, b) < q else (lo, mid)
            if hi - lo < 1e-10:
                break
        x = math.exp((lo + hi) / 2)
    return x


def clopper_pearson(x: float, n: float, tail: float = 0.025) -> tuple[float, float]:
    """The Clopper-Pearson interval of ``x`` events in ``n`` trials, each end with error
    ``tail``; ``x`` and ``n`` may be fractional (an effective count and size), read
    through the beta distribution. Never an end on the estimate unless it is 0 or 1."""
    if n <= 0:
        return (0.0, 1.0)
    x = min(max(x, 0.0), n)
    low = 0.0 if x <= 1e-12 else beta_quantile(tail, x, n - x + 1.0)
    high = 1.0 if n - x <= 1e-12 else beta_quantile(1.0 - tail, x + 1.0, n - x)
    p = x / n
    return (min(low, p), max(high, p))


def kish_clusters(groups: list[list[float]]) -> float:
    """Kish's effective number of clusters, (sum of sizes)^2 / sum of squared sizes: the
    sample size of a share whose clusters are wholly alike (5 dialogues of 20 replies
    and 45 of 2 are 16.6 units, not 50)."""
    sizes = [len(g) for g in groups if g]
    total = sum(sizes)
    return total * total / sum(m * m for m in sizes) if sizes else 0.0


def cluster_design(groups: list[list[float]]) -> tuple[float, float | None, int | None]:
    """(share, design effect, degrees of freedom) of values in 0-1 grouped in clusters:
    the cluster-robust variance of the ratio estimator over the binomial one, and the
    clusters that hold both outcomes' rarer one, less one (the clusters less one at
    most). The design effect and degrees of freedom are None where there is nothing to
    estimate them from: a single cluster, a share of 0 or 1, or no spread."""
    kept = [g for g in groups if g]
    clusters = len(kept)
    n = sum(len(g) for g in kept)
    p = math.fsum(math.fsum(g) for g in kept) / n
    if clusters < 2 or not 0 < p < 1:
        return p, None, None
    variance = clusters / (clusters - 1) * math.fsum((math.fsum(g) - p * len(g)) ** 2 for g in kept) / n ** 2
    if variance <= 0:
        return p, None, None
    with_events = sum(1 for g in kept if math.fsum(g) > 0)
    without = sum(1 for g in kept if math.fsum(g) < len(g))
    # Where a few clusters hold most of the values (dialogues of unequal length), the
    # variance rests on about as many clusters as Kish's effective number.
    df = max(1, min(clusters - 1, min(with_events, without) - 1, math.floor(kish_clusters(kept)) - 1))
    return p, variance / (p * (1 - p) / n), df


def cluster_wilson_interval(
    groups: list[list[float]],
    *,
    cap_at_values: bool = True,
    tail: float = 0.025,
    corrected: bool = True,
    design: tuple[float, int] | None = None,
) -> tuple[float, float]:
    """95% interval for a share of 0/1 values grouped in clusters (replies in dialogues).

    Korn and Graubard's (1998) interval for clustered samples: Clopper-Pearson on the
    effective sample size, the values divided by the design effect of the ratio estimator
    (its cluster-robust variance over the binomial one), times ``(z / t)^2`` with t on
    the degrees of freedom the variance rests on (the clusters that hold both outcomes'
    rarer one, less one; the clusters less one at most). The effective size is never more
    than the values (with ``cap_at_values``) nor less than Kish's effective number of
    clusters (``kish_clusters``: what the share's variance would be if every cluster's
    values were alike, the most any correlation can give). At 0 or 1 (no variance to
    estimate) and with a single cluster it is Kish's clusters. Clopper-Pearson, not
    Wilson, because effective counts are often fractional and small: Wilson's
    continuity-corrected lower end sat on the estimate for one event in 200 replies
    (0.005, 0.351), and the interval covered 58% at a 0.1% rate; with dialogues of unequal
    length the floor at the dialogues' count (not Kish's) covered 49-74%.
    benchmarks/coverage.py --real measures it on the cells real runs produce.

    Values between 0 and 1 (a bounded score mapped to 0-1, ``bounded_mean_interval``)
    work the same way; with ``cap_at_values`` False the effective size may exceed the
    values (a score that varies less than a 0/1 value carries more information).

    ``tail``: each end's error (0.025 for 95%); ``corrected``: kept for callers (the
    interval is Clopper-Pearson either way); ``design``: a (design effect, degrees of
    freedom) to use where these values give none (``paired_cluster_interval`` lends one
    run's to the other's)."""
    del corrected
    kept = [g for g in groups if g]
    if not kept:
        return (0.0, 1.0)
    n = sum(len(g) for g in kept)
    p, deff, df = cluster_design(kept)
    if deff is None and design is not None and 0 <= p <= 1:
        deff, df = design
    floor = kish_clusters(kept)
    effective = floor
    if deff is not None and df is not None:  # (cluster_design gives both or neither)
        z = Z95 if tail == 0.025 else _NORMAL.inv_cdf(1 - tail)
        effective = max(floor, n / deff * (z / t_quantile(1 - tail, df)) ** 2)
    if cap_at_values:
        effective = min(float(n), effective)
    return clopper_pearson(p * effective, effective, tail)


def bounded_mean_interval(groups: list[list[float]], low: float, high: float) -> tuple[float, float]:
    """95% interval for the pooled mean of values on a bounded scale [low, high] grouped in
    clusters (coherence ratings 1-5, by dialogue): ``cluster_wilson_interval`` of the
    values mapped to 0-1, without the cap at the number of values, mapped back. Where
    the ratings vary it is about the cluster-robust t interval (degrees of freedom as
    there); where every rating is the same (all 5s) it is Wilson's over the dialogues,
    never of zero width (the percentile bootstrap it replaces gave (5, 5), and a single
    dialogue its own mean). benchmarks/coverage.py --means measures its coverage."""
    if not high > low:
        raise ValueError(f"bounded_mean_interval: the scale needs low < high, got [{low}, {high}]")
    width = high - low
    scaled = []
    for group in groups:
        for value in group:
            if not low <= value <= high:
                raise ValueError(f"bounded_mean_interval: {value} is outside the scale [{low}, {high}]")
        scaled.append([(value - low) / width for value in group])
    if not any(scaled):
        raise ValueError("bounded_mean_interval: no values")
    a, b = cluster_wilson_interval(scaled, cap_at_values=False)
    return (low + width * a, low + width * b)


def percentile(ordered: list[float], q: float) -> float:
    """Percentile q (0..100) of sorted values, linear interpolation between order statistics."""
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


#: Draws of the Dirichlet posterior behind a statistic's interval, the prior's total mass
#: (spread evenly over the table's cells: Perks's prior) and the credible level its ends
#: are read at. Measured by benchmarks/coverage.py --statistics: the Jeffreys prior (1/2 a
#: cell, 4.5 in all for three classes) pulled small tables toward chance (three-class AC1
#: covered 77.5% at 10 items); with a mass of 1 the 95% credible interval still covered
#: as little as 79.5% (three-class macro-F1) and 89.7% (kappa) at 10 items, read at 97.5%
#: 87.5%, read at 98.5% at least 96% for kappa, AC1 and F1, for a width about 1.24 times
#: the 95% one. The three-class macro-F1 (nine cells, a rare class often absent from a
#: small sample) still covered 91.3-92% in 3 of 27 cells at 10 items at 98.5%; it is read
#: at 99% (MACRO_F1_LEVEL): at least 94.0% in every cell at 10 items. The interval is
#: reported as a 95% interval.
DIRICHLET_DRAWS = 2000
DIRICHLET_LEVEL = 0.985
MACRO_F1_LEVEL = 0.99
PRIOR_MASS = 1.0


def dirichlet_interval(
    counts: Sequence[float], statistic, seed: int, estimate: float | None = None,
    draws: int = DIRICHLET_DRAWS, level: float = DIRICHLET_LEVEL,
) -> tuple[float, float] | None:
    """Interval of ``statistic`` of a table's cell probabilities (kappa, AC1, F1 of a
    confusion table, its cells flattened): equal-tailed at ``level`` over seeded draws
    from the table's posterior, Dirichlet(counts + PRIOR_MASS / cells), widened to hold
    ``estimate`` (a perfect table's statistic is at the edge of every draw). Unlike the
    percentile bootstrap over items it replaces, which gave a perfect judge the interval
    (1, 1) and covered as little as 16% near-perfect ones, it never has zero width and a
    cell never seen keeps some probability. ``statistic`` returns None for a draw where
    it is undefined (skipped); None when every draw was."""
    rng = random.Random(seed)
    alphas = [c + PRIOR_MASS / len(counts) for c in counts]
    values = []
    for _ in range(draws):
        gammas = [rng.gammavariate(a, 1.0) for a in alphas]
        total = math.fsum(gammas)
        value = statistic([g / total for g in gammas])
        if value is not None:
            values.append(value)
    if not values:
        return None
    values.sort()
    low, high = percentile(values, 100 * (1 - level) / 2), percentile(values, 100 * (1 + level) / 2)
    if estimate is not None:
        low, high = min(low, estimate), max(high, estimate)
    return (low, high)


def newcombe_unpaired(x1: int, n1: int, x2: int, n2: int, corrected: bool = False) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p1 - p2 of independent samples: method 10, or
    with ``corrected`` method 11 (the Wilson intervals with continuity correction)."""
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson_interval(x1, n1, corrected=corrected)
    l2, u2 = wilson_interval(x2, n2, corrected=corrected)
    d = p1 - p2
    return (d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


def group_seed(suite: str, category, style, base: int = BOOTSTRAP_SEED) -> int:
    """The seed of one metric group's draws: stable across runs and processes.

    hashlib, not hash(): Python salts str hashes per process (PYTHONHASHSEED).
    """
    key = json.dumps([base, suite, category, style]).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


# --------------------------------------------------------------------------- rows
# A metric row: {suite, metric, category, style, value, ci_low, ci_high, n, ci_method};
# None where a field does not apply; value None when n is 0. ci_method names the interval.

#: Interval methods, as rows name them.
WILSON = "wilson"  # Wilson score interval (continuity-corrected) of a share of independent units
CLUSTER_CP = "cluster clopper-pearson"  # a share of values grouped in clusters (cluster_wilson_interval)
BOUNDED_CP = "bounded cluster clopper-pearson"  # a mean on a bounded scale (bounded_mean_interval)
DIRICHLET = "dirichlet posterior"  # a statistic of a table: the table's posterior (dirichlet_interval)
DIFFERENCE_HULL = "difference hull"  # a difference of two independent shares (detection.gap_interval)


#: Rows resting on fewer independent units than this are flagged ``small``: no interval
#: method can promise its coverage there (benchmarks/coverage.py --real lists those cells).
SMALL_UNITS = 10


def _flag_small(row: dict, units: float) -> dict:
    """Mark a row with a value that rests on fewer than SMALL_UNITS independent units."""
    if row.get("value") is not None and units < SMALL_UNITS:
        row["small"] = True
    return row


def rate_row(suite, metric, category, style, successes, n) -> dict:
    low, high = wilson_interval(successes, n)
    return _flag_small({
        "suite": suite,
        "metric": metric,
        "category": category,
        "style": style,
        "value": round(successes / n, DIGITS) if n else None,
        "ci_low": round(low, DIGITS) if n else None,
        "ci_high": round(high, DIGITS) if n else None,
        "n": n,
        "ci_method": WILSON,
    }, n)


def value_row(suite, metric, category, style, value, interval, n, ci_method: str = DIRICHLET) -> dict:
    """A statistic's row; its interval is clamped to [-1, 1]; small under SMALL_UNITS items
    (a Dirichlet interval covered 90-93.6% at 5 items)."""
    return _flag_small({
        "suite": suite, "metric": metric, "category": category, "style": style,
        "value": None if value is None else round(value, DIGITS),
        "ci_low": None if value is None or interval is None else round(max(-1.0, interval[0]), DIGITS),
        "ci_high": None if value is None or interval is None else round(min(1.0, interval[1]), DIGITS),
        "n": n,
        "ci_method": ci_method,
    }, n)


def reply_rate_row(suite, metric, category, style, groups: list[list[float]]) -> dict:
    """A share of replies (0/1 values grouped by dialogue) with its cluster Wilson
    interval (``cluster_wilson_interval``); n = replies."""
    values = [x for g in groups for x in g]
    row = {"suite": suite, "metric": metric, "category": category, "style": style,
           "value": None, "ci_low": None, "ci_high": None, "n": len(values), "ci_method": CLUSTER_CP}
    if values:
        low, high = cluster_wilson_interval(groups)
        row.update(value=round(math.fsum(values) / len(values), DIGITS), ci_low=round(low, DIGITS), ci_high=round(high, DIGITS))
    return _flag_small(row, kish_clusters(groups))


def mean_row(suite, metric, category, style, groups: list[list[float]], scale: tuple[float, float]) -> dict:
    """The pooled mean of per-dialogue values on ``scale`` (coherence: 1-5) with its
    ``bounded_mean_interval`` over the dialogues; n = values."""
    values = [x for g in groups for x in g]
    row = {"suite": suite, "metric": metric, "category": category, "style": style,
           "value": None, "ci_low": None, "ci_high": None, "n": len(values), "ci_method": BOUNDED_CP}
    if values:
        low, high = bounded_mean_interval(groups, *scale)
        row.update(
            value=round(math.fsum(values) / len(values), DIGITS),
            ci_low=round(low, DIGITS),
            ci_high=round(high, DIGITS),
        )
    return _flag_small(row, kish_clusters(groups))
