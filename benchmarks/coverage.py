"""Coverage of the 95% intervals the report prints, by simulation from known truths.

    python benchmarks/coverage.py                  # the full grid (a few minutes)
    python benchmarks/coverage.py --small          # the grid the test suite runs
    python benchmarks/coverage.py --methods all    # also the methods we do not use
    python benchmarks/coverage.py --means          # means of 1-5 ratings (coherence)
    python benchmarks/coverage.py --corrected      # judge-corrected (Rogan-Gladen) rates
    python benchmarks/coverage.py --differences    # Newcombe's difference intervals (exact)
    python benchmarks/coverage.py --statistics     # kappa, AC1, F1 (judge check, detectors)
    python benchmarks/coverage.py --paired         # a rate over replies or a mean against a baseline
    python benchmarks/coverage.py --real           # the cells real runs produce (real_cells.py)

Shares of replies (refusal_rate, bias_rate_passed, guard rates): replies are grouped in
dialogues and correlated within them. Each cell of the grid draws ``--reps`` data sets:
``dialogues`` dialogues of ``replies`` replies each, each dialogue's own rate drawn from a
beta distribution with mean ``truth`` and intraclass correlation ``icc`` (0: independent
replies; 0.6: strongly alike within a dialogue). For every interval method it prints the
share of data sets whose interval holds the truth (coverage; nominal 95%), the mean width,
and how often the interval had zero width. The summary gives each method's worst cell
among those with at least 10 dialogues (the target: coverage at least 93%) and its zero-
width count at every size (the target: none).

Methods: ``cluster-wilson`` (what the report prints, named for its history: Clopper-Pearson
on the effective sample size, the replies divided by the design effect of the ratio
estimator, never fewer than Kish's effective number of dialogues, with a small-sample
correction of the degrees of freedom; rates.cluster_wilson_interval); ``bootstrap`` (the percentile bootstrap over dialogues the report printed
before); ``wilson-replies`` (Wilson over replies, as if they were independent);
``wilson-dialogues`` (Wilson over dialogues of their pooled share, as if each were one
observation).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_socialbias.metrics.rates import Z95, cluster_wilson_interval  # noqa: E402

FULL = {
    "truth": (0.0, 0.01, 0.05, 0.3, 0.5, 0.95, 0.99, 1.0),
    "dialogues": (1, 2, 5, 10, 30, 100, 500),
    "replies": (1, 2, 5, 10),
    "icc": (0.0, 0.2, 0.6),
}
SMALL = {
    "truth": (0.0, 0.05, 0.5, 1.0),
    "dialogues": (1, 10, 30),
    "replies": (2, 5),
    "icc": (0.0, 0.6),
}
TARGET_COVERAGE = 0.93
MIN_UNITS = 10


class Tally:
    """One method's intervals in one cell of a grid: how many were given, held the truth,
    had zero width, and their summed width; ``fields()`` gives them as a row's figures."""

    def __init__(self):
        self.usable = self.covered = self.zero = 0
        self.width = 0.0

    def add(self, low: float, high: float, truth: float) -> None:
        self.usable += 1
        self.covered += low - 1e-9 <= truth <= high + 1e-9
        self.zero += high - low <= 1e-12
        self.width += high - low

    def fields(self) -> dict:
        return {"coverage": self.covered / max(self.usable, 1),
                "width": self.width / self.usable if self.usable else float("nan"),
                "zero_width": self.zero, "reps": self.usable}


def draw(rng: np.random.Generator, truth: float, dialogues: int, replies: int, icc: float, reps: int) -> np.ndarray:
    """Events per dialogue, shape (reps, dialogues): beta-binomial with mean ``truth``."""
    if truth in (0.0, 1.0) or icc == 0:
        rates = np.full((reps, dialogues), truth)
    else:
        scale = (1 - icc) / icc
        rates = rng.beta(truth * scale, (1 - truth) * scale, size=(reps, dialogues))
    return rng.binomial(replies, rates)


def wilson(successes, n):
    """Wilson score interval, vectorised, for real-valued counts."""
    p = successes / n
    denom = 1 + Z95 ** 2 / n
    centre = (p + Z95 ** 2 / (2 * n)) / denom
    half = Z95 * np.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / denom
    return np.maximum(0.0, np.minimum(p, centre - half)), np.minimum(1.0, np.maximum(p, centre + half))


def method_cluster_wilson(events: np.ndarray, replies: int, rng) -> tuple:
    lows, highs = [], []
    for row in events:
        low, high = cluster_wilson_interval([[1.0] * int(x) + [0.0] * (replies - int(x)) for x in row])
        lows.append(low)
        highs.append(high)
    return np.array(lows), np.array(highs)


def method_bootstrap(events: np.ndarray, replies: int, rng, resamples: int = 400) -> tuple:
    """The percentile bootstrap over dialogues (equal dialogue sizes: the share of a
    resample is the mean of its dialogues' shares)."""
    reps, k = events.shape
    lows, highs = np.empty(reps), np.empty(reps)
    for i in range(reps):
        draws = rng.integers(0, k, size=(resamples, k))
        means = events[i][draws].mean(axis=1) / replies
        lows[i], highs[i] = np.percentile(means, 2.5), np.percentile(means, 97.5)
    return lows, highs


def method_wilson_replies(events: np.ndarray, replies: int, rng) -> tuple:
    n = events.shape[1] * replies
    return wilson(events.sum(axis=1).astype(float), float(n))


def method_wilson_dialogues(events: np.ndarray, replies: int, rng) -> tuple:
    k = events.shape[1]
    return wilson(events.sum(axis=1) / replies, float(k))


METHODS = {
    "cluster-wilson": method_cluster_wilson,
    "bootstrap": method_bootstrap,
    "wilson-replies": method_wilson_replies,
    "wilson-dialogues": method_wilson_dialogues,
}
USED = ("cluster-wilson", "bootstrap")


def run(grid: dict, methods: list[str], reps: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for truth in grid["truth"]:
        for dialogues in grid["dialogues"]:
            for replies in grid["replies"]:
                for icc in grid["icc"]:
                    if truth in (0.0, 1.0) and icc:
                        continue  # a certain truth has no spread to correlate
                    events = draw(rng, truth, dialogues, replies, icc, reps)
                    for name in methods:
                        low, high = METHODS[name](events, replies, rng)
                        covered = (low <= truth + 1e-12) & (truth - 1e-12 <= high)
                        rows.append({
                            "method": name, "truth": truth, "dialogues": dialogues, "replies": replies, "icc": icc,
                            "coverage": float(covered.mean()), "width": float((high - low).mean()),
                            "zero_width": int(((high - low) <= 1e-12).sum()), "reps": reps,
                        })
    return rows


# --------------------------------------------------------------------------- corrected rates

CORRECTED = {
    "truth": (0.0, 0.05, 0.3, 0.7),
    "reference": (20, 200),  # labelled items, half of them positive
    "accuracy": (0.7, 0.9, 0.99),  # the judge's sensitivity and specificity
    "run": (20, 200),  # items the run judged
}


def corrected_clipped(x: int, n: int, pairs: list, seed: int, resamples: int = 500):
    """The interval the report printed before: each resample draws the run's rate from
    its Jeffreys posterior, resamples the reference, corrects and clips at 0 and 1."""
    import random

    from pytest_socialbias.stats import rogan_gladen

    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        rate = rng.betavariate(x + 0.5, n - x + 0.5)
        drawn = rng.choices(pairs, k=len(pairs))
        pos = [j for r, j in drawn if r]
        neg = [j for r, j in drawn if not r]
        if not pos or not neg:
            continue
        value = rogan_gladen(rate, sum(pos) / len(pos), 1 - sum(neg) / len(neg))
        if value is not None:
            draws.append(value)
    if not draws:
        return None, None
    draws.sort()
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def corrected_credible(x: int, n: int, pairs: list, seed: int):
    """The credible interval alone (uniform prior), without the hull with the set of
    prevalences the count does not reject."""
    import random

    from pytest_socialbias import stats

    n11, n10, n01, n00 = stats._cells(sorted(pairs))
    rng = random.Random(seed)
    lines = []
    for _ in range(200):
        se, sp = rng.betavariate(1 + n11, 1 + n10), rng.betavariate(1 + n00, 1 + n01)
        if se + sp > 1:
            lines.append((1 - sp, se + sp - 1))
    if not lines:
        return None, None
    estimate = stats.rogan_gladen(x / n, n11 / (n11 + n10), n00 / (n01 + n00))
    if estimate is None:  # as rogan_gladen_interval: no interval where the estimate is undefined
        return None, None
    low, high = stats._credible_interval(x, n, lines, 0.025)
    return min(low, estimate), max(high, estimate)


def corrected_used(x: int, n: int, pairs: list, seed: int):
    from pytest_socialbias.stats import rogan_gladen_interval

    _, low, high = rogan_gladen_interval(x, n, pairs, seed=seed)
    return low, high


CORRECTED_METHODS = {"hull": corrected_used, "credible": corrected_credible, "clipped-bootstrap": corrected_clipped}


def run_corrected(reps: int, seed: int, methods: list[str], grid: dict | None = None) -> list[dict]:
    """The judge-corrected (Rogan-Gladen) rate: a judge of known sensitivity and
    specificity labels a reference set and a run of items with true prevalence ``truth``;
    the interval must hold ``truth``. Every method sees the same data sets."""
    grid = grid or CORRECTED
    rng = np.random.default_rng(seed)
    rows = []
    for truth in grid["truth"]:
        for reference in grid["reference"]:
            for accuracy in grid["accuracy"]:
                for n in grid["run"]:
                    data = []
                    for _ in range(reps):
                        half = reference // 2
                        tp = int(rng.binomial(half, accuracy))
                        tn = int(rng.binomial(half, accuracy))
                        pairs = [(1, 1)] * tp + [(1, 0)] * (half - tp) + [(0, 0)] * tn + [(0, 1)] * (half - tn)
                        theta = truth * accuracy + (1 - truth) * (1 - accuracy)
                        data.append((int(rng.binomial(n, theta)), pairs))
                    for name in methods:
                        tally = Tally()
                        for rep, (x, pairs) in enumerate(data):
                            low, high = CORRECTED_METHODS[name](x, n, pairs, rep)
                            if low is not None:
                                tally.add(low, high, truth)
                        rows.append({"method": name, "truth": truth, "reference": reference, "accuracy": accuracy,
                                     "run": n, **tally.fields()})
    return rows


# --------------------------------------------------------------------------- means

#: Ratings 1-5 (coherence): round(mu + dialogue effect + reply noise), clipped to 1-5;
#: (mu, dialogue sd, reply sd): near the floor, middle with no, some and strong
#: correlation, high, near the ceiling, and always 5.
MEANS = {
    "truth": ((1.3, 0.3, 0.6), (3.0, 0.0, 1.0), (3.0, 0.7, 0.7), (3.0, 1.0, 0.4), (4.3, 0.3, 0.5),
              (4.7, 0.3, 0.4), (4.9, 0.2, 0.3), (4.6, 0.0, 0.6), (5.0, 0.0, 0.0)),
    "dialogues": (1, 2, 5, 10, 30, 100),
    "replies": (1, 5, 10),
}
MEANS_SMALL = {"truth": ((3.0, 0.7, 0.7), (4.9, 0.2, 0.3), (5.0, 0.0, 0.0)), "dialogues": (1, 10, 30), "replies": (1, 5)}


def true_mean(mu: float, dialogue_sd: float, reply_sd: float) -> float:
    """The expected rating: P(rating = k) from the normal distribution of mu + effects."""
    from statistics import NormalDist

    sd = math.hypot(dialogue_sd, reply_sd)
    if sd == 0:
        return float(min(5, max(1, round(mu))))
    cdf = NormalDist(mu, sd).cdf
    edges = [-math.inf, 1.5, 2.5, 3.5, 4.5, math.inf]
    return sum(k * (cdf(edges[k]) - cdf(edges[k - 1])) for k in range(1, 6))


def draw_ratings(rng, mu, dialogue_sd, reply_sd, dialogues, replies, reps) -> np.ndarray:
    effect = rng.normal(0, dialogue_sd, (reps, dialogues, 1))
    noise = rng.normal(0, reply_sd, (reps, dialogues, replies))
    return np.clip(np.rint(mu + effect + noise), 1, 5)


def mean_bounded_wilson(ratings: np.ndarray, rng) -> tuple:
    """What the report prints (rates.bounded_mean_interval), called on every data set."""
    from pytest_socialbias.metrics.rates import bounded_mean_interval

    ends = [bounded_mean_interval(row.tolist(), 1.0, 5.0) for row in ratings]
    return np.array([e[0] for e in ends]), np.array([e[1] for e in ends])


def mean_bootstrap(ratings: np.ndarray, rng, resamples: int = 400) -> tuple:
    """The percentile bootstrap over dialogues the report printed before."""
    reps, k, _ = ratings.shape
    means = ratings.mean(axis=2)
    lows, highs = np.empty(reps), np.empty(reps)
    for i in range(reps):
        drawn = means[i][rng.integers(0, k, size=(resamples, k))].mean(axis=1)
        lows[i], highs[i] = np.percentile(drawn, 2.5), np.percentile(drawn, 97.5)
    return lows, highs


def mean_cluster_t(ratings: np.ndarray, rng) -> tuple:
    """The cluster-robust t interval (df: dialogues - 1); none for one dialogue."""
    from pytest_socialbias.metrics.rates import t975

    reps, k, r = ratings.shape
    if k < 2:
        return np.full(reps, np.nan), np.full(reps, np.nan)
    n = k * r
    mean = ratings.mean(axis=(1, 2))
    variance = k / (k - 1) * ((ratings.sum(axis=2) - mean[:, None] * r) ** 2).sum(axis=1) / n ** 2
    half = t975(k - 1) * np.sqrt(variance)
    return np.clip(mean - half, 1, 5), np.clip(mean + half, 1, 5)


MEAN_METHODS = {"bounded-wilson": mean_bounded_wilson, "bootstrap": mean_bootstrap, "cluster-t": mean_cluster_t}


def run_means(grid: dict, methods: list[str], reps: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for mu, dialogue_sd, reply_sd in grid["truth"]:
        truth = true_mean(mu, dialogue_sd, reply_sd)
        for dialogues in grid["dialogues"]:
            for replies in grid["replies"]:
                ratings = draw_ratings(rng, mu, dialogue_sd, reply_sd, dialogues, replies, reps)
                for name in methods:
                    low, high = MEAN_METHODS[name](ratings, rng)
                    if np.isnan(low).all():
                        continue
                    covered = (low <= truth + 1e-9) & (truth - 1e-9 <= high)
                    rows.append({"method": name, "truth": (mu, dialogue_sd, reply_sd), "mean": round(truth, 3),
                                 "dialogues": dialogues, "replies": replies, "coverage": float(covered.mean()),
                                 "width": float((high - low).mean()), "zero_width": int(((high - low) <= 1e-12).sum()),
                                 "reps": reps})
    return rows


def widest_against_best(rows: list[dict]) -> dict:
    """Per method: its largest mean width over the narrowest other method's, among cells
    with 10 or more dialogues where both cover at least 93% and the other has no zero-width
    interval."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["truth"], r["dialogues"], r["replies"]), {})[r["method"]] = r
    out = {}
    for cell, by in cells.items():
        if cell[1] < MIN_UNITS:
            continue
        for name, r in by.items():
            others = [o["width"] for m, o in by.items() if m != name and o["coverage"] >= TARGET_COVERAGE and not o["zero_width"]]
            if r["coverage"] >= TARGET_COVERAGE and others and min(others) > 0:
                ratio = r["width"] / min(others)
                if ratio > out.get(name, (0, None))[0]:
                    out[name] = (ratio, cell)
    return out


# --------------------------------------------------------------------------- differences

#: Differences of two shares, coverage computed exactly (every outcome enumerated):
#: paired (a run against its baseline, case by case: p_baseline, the change, and the
#: correlation of the two outcomes of a case) and unpaired (TR_OB - TR_BB: two shares).
DIFFERENCES = {
    "baseline": (0.0, 0.02, 0.1, 0.3, 0.5),
    "change": (0.0, 0.05, 0.2),
    "correlation": (0.0, 0.5),
    "n": (10, 30, 80),
}


def _paired_cells(p2: float, p1: float, rho: float) -> tuple[float, float, float, float] | None:
    """(pi11, pi10, pi01, pi00) with P(current) = p1, P(baseline) = p2 and correlation
    rho, where it exists (pi10: baseline only, pi01: current only)."""
    cov = rho * math.sqrt(p1 * (1 - p1) * p2 * (1 - p2))
    pi11 = p1 * p2 + cov
    cells = (pi11, p2 - pi11, p1 - pi11, 1 - p1 - p2 + pi11)
    return cells if min(cells) >= -1e-12 else None


def paired_coverage(n: int, cells, corrected: bool) -> tuple[float, float, float]:
    """Exact coverage, mean width and probability of zero width of the paired interval."""
    from pytest_socialbias.stats import paired_diff_interval

    pi11, pi10, pi01, pi00 = (max(0.0, c) for c in cells)
    truth = (pi11 + pi01) - (pi11 + pi10)
    logf = [math.lgamma(k + 1) for k in range(n + 1)]

    def log(x, k):
        return 0.0 if k == 0 else (k * math.log(x) if x > 0 else -math.inf)

    covered = width = zero = 0.0
    for a in range(n + 1):
        for b in range(n + 1 - a):
            for c in range(n + 1 - a - b):
                d = n - a - b - c
                lp = logf[n] - logf[a] - logf[b] - logf[c] - logf[d] + log(pi11, a) + log(pi10, b) + log(pi01, c) + log(pi00, d)
                if lp == -math.inf:
                    continue
                prob = math.exp(lp)
                if prob < 1e-15:
                    continue
                low, high = paired_diff_interval(a, b, c, d, corrected=corrected)
                covered += prob * (low - 1e-12 <= truth <= high + 1e-12)
                width += prob * (high - low)
                zero += prob * (high - low <= 1e-12)
    return covered, width, zero


def unpaired_coverage(n: int, p1: float, p2: float, corrected: bool) -> tuple[float, float, float]:
    from pytest_socialbias.metrics.rates import newcombe_unpaired

    pmf1 = [math.comb(n, k) * p1 ** k * (1 - p1) ** (n - k) for k in range(n + 1)]
    pmf2 = [math.comb(n, k) * p2 ** k * (1 - p2) ** (n - k) for k in range(n + 1)]
    covered = width = zero = 0.0
    for x1, q1 in enumerate(pmf1):
        if q1 < 1e-15:
            continue
        for x2, q2 in enumerate(pmf2):
            if q2 < 1e-15:
                continue
            low, high = newcombe_unpaired(x1, n, x2, n, corrected=corrected)
            covered += q1 * q2 * (low - 1e-12 <= p1 - p2 <= high + 1e-12)
            width += q1 * q2 * (high - low)
            zero += q1 * q2 * (high - low <= 1e-12)
    return covered, width, zero


def run_differences(grid: dict, methods: list[str]) -> list[dict]:
    rows = []
    for n in grid["n"]:
        for p2 in grid["baseline"]:
            for change in grid["change"]:
                p1 = p2 + change
                if p1 > 1:
                    continue
                for name in methods:
                    corrected = name.endswith("-cc")
                    if name.startswith("paired"):
                        for rho in grid["correlation"]:
                            cells = _paired_cells(p2, p1, rho)
                            if cells is None or (rho and (p1 in (0, 1) or p2 in (0, 1))):
                                continue
                            cov, width, zero = paired_coverage(n, cells, corrected)
                            rows.append({"method": name, "n": n, "baseline": p2, "change": change, "correlation": rho,
                                         "coverage": cov, "width": width, "zero_width": zero})
                    else:
                        cov, width, zero = unpaired_coverage(n, p1, p2, corrected)
                        rows.append({"method": name, "n": n, "baseline": p2, "change": change, "correlation": None,
                                     "coverage": cov, "width": width, "zero_width": zero})
    return rows


DIFFERENCE_METHODS = ("paired", "paired-cc", "unpaired", "unpaired-cc")


# --------------------------------------------------------------------------- statistics

#: Judge or detector against reference labels: (prevalence, sensitivity, specificity),
#: from a chance-level judge to a perfect one, and items labelled.
STATISTICS = {
    "truth": ((0.5, 0.7, 0.7), (0.5, 0.9, 0.9), (0.5, 0.9, 1.0), (0.5, 0.99, 0.95), (0.5, 1.0, 1.0),
              (0.2, 0.7, 0.7), (0.2, 0.9, 0.9), (0.2, 0.9, 1.0), (0.2, 0.99, 0.95), (0.2, 1.0, 1.0)),
    "n": (10, 30, 100, 300),
}
STATISTICS_SMALL = {"truth": ((0.2, 0.9, 1.0), (0.5, 1.0, 1.0)), "n": (10, 30)}


def _table_statistics(cells) -> dict:
    """kappa, AC1 and F1 of a 2x2 table (tp, fn, fp, tn) of counts or probabilities."""
    from pytest_socialbias.metrics.detection import _f1_of_cells
    from pytest_socialbias.stats import _kappa_ac1

    kappa, ac1 = _kappa_ac1(*cells)
    return {"kappa": kappa, "ac1": ac1, "f1": _f1_of_cells(cells)}


def stat_used(cells: list[int], seed: int, draws: int) -> dict:
    """What the report prints: stats.agreement (kappa, AC1) and detection.f1_statistic."""
    from pytest_socialbias.metrics.detection import f1_statistic
    from pytest_socialbias.stats import agreement

    tp, fn, fp, tn = cells
    pairs = [(1, 1)] * tp + [(1, 0)] * fn + [(0, 1)] * fp + [(0, 0)] * tn
    result = agreement(pairs, seed=seed, resamples=draws)
    items = [("BB", None, 1)] * tp + [("BB", None, 0)] * fn + [("N", None, 1)] * fp + [("N", None, 0)] * tn
    _, f1_interval, _ = f1_statistic(items, seed)
    return {"kappa": (result["kappa_low"], result["kappa_high"]), "ac1": (result["ac1_low"], result["ac1_high"]),
            "f1": f1_interval or (None, None)}


def stat_bootstrap(cells: list[int], seed: int, draws: int) -> dict:
    """The percentile bootstrap over items the report printed before."""
    rng = np.random.default_rng(seed)
    n = sum(cells)
    values: dict = {"kappa": [], "ac1": [], "f1": []}
    for drawn in rng.multinomial(n, np.array(cells) / n, size=draws):
        for name, value in _table_statistics([int(x) for x in drawn]).items():
            if value is not None:
                values[name].append(value)
    return {name: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) if v else (None, None)
            for name, v in values.items()}


STAT_METHODS = {"dirichlet": stat_used, "bootstrap": stat_bootstrap}


#: Three classes (N, OB, BB: the treatment judge and detectors): class shares, and a
#: judge that keeps a class with probability ``accuracy`` and else picks one of the others.
MULTICLASS = {"shares": ((1 / 3, 1 / 3, 1 / 3), (0.6, 0.2, 0.2), (0.8, 0.15, 0.05)), "accuracy": (0.6, 0.9, 1.0),
              "n": (10, 30, 100)}


def _multiclass_truths(table: list[list[float]]) -> dict:
    """macro-F1, kappa and AC1 of a 3 x 3 table (rows: reference) of counts or probabilities,
    as the report computes them (classes absent from both sides left out of macro-F1)."""
    from pytest_socialbias.metrics.detection import _macro_f1_of_cells
    from pytest_socialbias.stats import _multiclass_kappa_ac1

    kappa, ac1 = _multiclass_kappa_ac1(table)
    return {"macro_f1": _macro_f1_of_cells([x for row in table for x in row]), "kappa3": kappa, "ac1_3": ac1}


def run_multiclass(grid: dict, reps: int, seed: int, draws: int = 2000) -> list[dict]:
    """Coverage of the report's three-class intervals (stats.multiclass_agreement, and
    detection.macro_f1_statistic) for judges of known accuracy."""
    from pytest_socialbias.metrics.detection import macro_f1_statistic
    from pytest_socialbias.stats import multiclass_agreement

    classes = ("N", "OB", "BB")
    rng = np.random.default_rng(seed)
    rows = []
    for shares in grid["shares"]:
        for accuracy in grid["accuracy"]:
            table = [[shares[i] * (accuracy if i == j else (1 - accuracy) / 2) for j in range(3)] for i in range(3)]
            truths = _multiclass_truths(table)
            flat = [x for row in table for x in row]
            for n in grid["n"]:
                tally = {name: Tally() for name in truths}
                for rep in range(reps):
                    counts = rng.multinomial(n, flat)
                    pairs = [(classes[i // 3], classes[i % 3]) for i, c in enumerate(counts) for _ in range(int(c))]
                    result = multiclass_agreement(pairs, classes, seed=rep, resamples=draws)
                    value, interval, _ = macro_f1_statistic([(r, j, 1) for r, j in pairs], rep)
                    ends = {"kappa3": (result["kappa_low"], result["kappa_high"]),
                            "ac1_3": (result["ac1_low"], result["ac1_high"]), "macro_f1": interval or (None, None)}
                    for name, (low, high) in ends.items():
                        if low is not None:
                            tally[name].add(low, high, truths[name])
                for name, counted in tally.items():
                    if counted.usable:
                        rows.append({"method": f"{name} dirichlet", "truth": (tuple(round(x, 3) for x in shares), accuracy),
                                     "value": round(truths[name], 4), "dialogues": n, **counted.fields()})
    return rows


def run_statistics(grid: dict, methods: list[str], reps: int, seed: int, draws: int = 2000) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for prevalence, sensitivity, specificity in grid["truth"]:
        probabilities = [prevalence * sensitivity, prevalence * (1 - sensitivity),
                         (1 - prevalence) * (1 - specificity), (1 - prevalence) * specificity]
        truths = _table_statistics(probabilities)
        for n in grid["n"]:
            tables = [[int(x) for x in rng.multinomial(n, probabilities)] for _ in range(reps)]
            for name in methods:
                tally = {stat: Tally() for stat in truths}
                for rep, cells in enumerate(tables):
                    estimates = _table_statistics(cells)
                    for stat, (low, high) in STAT_METHODS[name](cells, rep, draws).items():
                        if low is not None and estimates[stat] is not None:
                            tally[stat].add(low, high, truths[stat])
                for stat, counted in tally.items():
                    if counted.usable:
                        rows.append({"method": f"{stat} {name}", "truth": (prevalence, sensitivity, specificity),
                                     "value": round(truths[stat], 4), "dialogues": n, **counted.fields()})
    return rows


# --------------------------------------------------------------------------- paired bootstrap

#: Rates over replies compared with a baseline, case by case (compare.py): baseline rate,
#: the change, cases, replies per dialogue; each case's two dialogues share a case effect
#: (the same seed), their replies a dialogue effect.
PAIRED = {"baseline": (0.0, 0.05, 0.3), "change": (0.0, 0.1), "cases": (10, 30, 100), "replies": (2, 5)}
PAIRED_SMALL = {"baseline": (0.0, 0.05), "change": (0.0, 0.1), "cases": (10, 30), "replies": (2,)}
#: Means of 1-5 ratings against a baseline: (mu, case sd, reply sd) of the baseline, the
#: change of mu, cases, replies per dialogue; the case effect is shared by both runs.
PAIRED_MEANS = {"truth": ((3.0, 0.7, 0.7), (4.6, 0.3, 0.5), (5.0, 0.0, 0.0)), "change": (0.0, -0.4),
                "cases": (10, 30, 100), "replies": (2, 5)}
PAIRED_MEANS_SMALL = {"truth": ((4.6, 0.3, 0.5), (5.0, 0.0, 0.0)), "change": (-0.4,), "cases": (10, 30), "replies": (2,)}
PAIRED_METHODS = ("mover", "bootstrap")


def _paired_ends(method: str, pairs, rep: int, resamples: int, scale=(0.0, 1.0)) -> tuple[float, float]:
    """mover: what compare.py prints (stats.paired_cluster_interval); bootstrap: the
    percentile bootstrap over cases it printed before."""
    from pytest_socialbias.stats import paired_bootstrap, paired_cluster_interval

    if method == "mover":
        result = paired_cluster_interval(pairs, scale=scale, cap_at_values=scale == (0.0, 1.0))
    else:
        result = paired_bootstrap(pairs, seed=rep, resamples=resamples)
    return result["ci_low"], result["ci_high"]


def run_paired(grid: dict, reps: int, seed: int, resamples: int = 1000, methods=PAIRED_METHODS) -> list[dict]:

    rng = np.random.default_rng(seed)
    rows = []
    for base in grid["baseline"]:
        for change in grid["change"]:
            current = base + change
            # The population difference of mean rates, the case effect integrated out.
            many = rng.normal(0, 0.8, 400_000)

            def population(p, base=base, many=many):  # as rates() below: no case effect when the baseline is 0 or 1
                if p in (0.0, 1.0) or base in (0.0, 1.0):
                    return p
                return float(np.mean(1 / (1 + np.exp(-(np.log(p / (1 - p)) + many)))))

            truth = population(current) - population(base)
            for cases in grid["cases"]:
                for replies in grid["replies"]:
                    tally = {m: Tally() for m in methods}
                    for rep in range(reps):
                        # A case effect on the logit scale moves both dialogues of a case.
                        effect = rng.normal(0, 0.8, cases) if 0 < base < 1 else np.zeros(cases)
                        def rates(p, cases=cases, effect=effect):
                            if p in (0.0, 1.0):
                                return np.full(cases, p)
                            logit = np.log(p / (1 - p)) + effect
                            return 1 / (1 + np.exp(-logit))
                        b = rng.binomial(replies, rates(base))
                        c = rng.binomial(replies, rates(current))
                        pairs = [([1.0] * int(x) + [0.0] * (replies - int(x)), [1.0] * int(y) + [0.0] * (replies - int(y)))
                                 for x, y in zip(b, c)]
                        for method in methods:
                            tally[method].add(*_paired_ends(method, pairs, rep, resamples), truth)
                    for method, counted in tally.items():
                        rows.append({"method": method, "truth": (base, change, round(truth, 4)), "dialogues": cases,
                                     "replies": replies, **counted.fields()})
    return rows


def run_paired_means(grid: dict, reps: int, seed: int, resamples: int = 1000, methods=PAIRED_METHODS) -> list[dict]:
    """Means of 1-5 ratings against a baseline: each case's effect moves both runs'
    ratings; the truth is the difference of the two expected ratings (true_mean)."""
    rng = np.random.default_rng(seed)
    rows = []
    for mu, case_sd, reply_sd in grid["truth"]:
        for change in grid["change"]:
            truth = true_mean(mu + change, case_sd, reply_sd) - true_mean(mu, case_sd, reply_sd)
            for cases in grid["cases"]:
                for replies in grid["replies"]:
                    tally = {m: Tally() for m in methods}
                    for rep in range(reps):
                        effect = rng.normal(0, case_sd, (cases, 1))
                        base = np.clip(np.rint(mu + effect + rng.normal(0, reply_sd, (cases, replies))), 1, 5)
                        cur = np.clip(np.rint(mu + change + effect + rng.normal(0, reply_sd, (cases, replies))), 1, 5)
                        pairs = [(b.tolist(), c.tolist()) for b, c in zip(base, cur)]
                        for method in methods:
                            tally[method].add(*_paired_ends(method, pairs, rep, resamples, (1.0, 5.0)), truth)
                    for method, counted in tally.items():
                        rows.append({"method": method, "truth": (mu, case_sd, reply_sd, change, round(truth, 3)),
                                     "dialogues": cases, "replies": replies, **counted.fields()})
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per method: its worst cell with at least MIN_UNITS dialogues, and zero widths."""
    out = []
    for name in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == name]
        sized = [r for r in mine if r["dialogues"] >= MIN_UNITS]
        worst = min(sized, key=lambda r: (r["coverage"], -r["width"])) if sized else None
        out.append({
            "method": name,
            "worst": worst,
            "cells_below_target": sum(1 for r in sized if r["coverage"] < TARGET_COVERAGE),
            "cells": len(sized),
            "zero_width": sum(r["zero_width"] for r in mine),
            "zero_width_cells": sum(1 for r in mine if r["zero_width"]),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the small grid the tests run")
    parser.add_argument("--reps", type=int, default=1000, help="data sets per cell (default 1000)")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--methods", default="used", help="used (default), all, or a comma-separated list")
    parser.add_argument("--cells", action="store_true", help="print every cell, not only the summary")
    parser.add_argument("--corrected", action="store_true",
                        help="the judge-corrected rate's interval instead (reference sets of 20 and 200, sensitivity and "
                             "specificity 0.7-0.99; methods hull (used), credible, clipped-bootstrap (before); "
                             "--reps 200 takes about ten minutes a method)")
    parser.add_argument("--differences", action="store_true",
                        help="Newcombe's intervals of a difference of two shares, paired (against a baseline) and "
                             "unpaired (TR_OB - TR_BB), exact coverage; methods paired, unpaired (used), paired-cc, "
                             "unpaired-cc (continuity-corrected components)")
    parser.add_argument("--statistics", action="store_true",
                        help="kappa, AC1 (judge check) and F1 (detectors) against reference labels, and the three-class "
                             "macro-F1, kappa and AC1: methods dirichlet (used), bootstrap (before, two classes)")
    parser.add_argument("--paired", action="store_true",
                        help="the interval of a rate over replies, and of a mean of 1-5 ratings, against a baseline "
                             "(compare.py): methods mover (used: each run's cluster score interval combined), bootstrap "
                             "(the percentile bootstrap over cases, before)")
    parser.add_argument("--real", action="store_true",
                        help="the cells real runs produce (benchmarks/real_cells.py): dialogues of unequal length, "
                             "correlation 0-1, rare events, ratings at the scale's ends, runs that agree case by case, "
                             "seeds in two styles, extreme gaps; every interval the report prints and the clustered "
                             "paired test's type I error (--kinds share,mean,... to run part)")
    parser.add_argument("--kinds", default="", help="with --real: share, mean, paired, paired_mean, seed, seed_paired, "
                                                    "gap, type1 (comma-separated; default all)")
    parser.add_argument("--means", action="store_true",
                        help="means of 1-5 ratings (coherence) instead: methods bounded-wilson (used), bootstrap "
                             "(before), cluster-t")
    args = parser.parse_args(argv)
    if args.real:
        import real_cells

        kinds = [k for k in args.kinds.split(",") if k]
        started = time.perf_counter()
        grid = real_cells.SMALL_GRID if args.small else real_cells.FULL_GRID
        rows = real_cells.run_real(grid, args.reps, args.seed, [k for k in kinds if k != "type1"] or None)
        if rows:
            print(f"coverage on the cells real runs produce, {args.reps} data sets per cell, "
                  f"{time.perf_counter() - started:.0f} s")
            real_cells.print_real(rows, args.cells)
        if not kinds or "type1" in kinds:
            real_cells.print_type_one(args.reps, args.seed, (40,) if args.small else (10, 40, 240))
        return 0
    if args.corrected:
        names = ["hull"] if args.methods == "used" else list(CORRECTED_METHODS) if args.methods == "all" else args.methods.split(",")
        started = time.perf_counter()
        rows = run_corrected(args.reps, args.seed, names)
        if args.cells:
            print("method             truth  reference  accuracy  run   coverage  width  zero-width")
            for r in rows:
                print(f"{r['method']:<18} {r['truth']:<6} {r['reference']:<10} {r['accuracy']:<9} {r['run']:<5} "
                      f"{100 * r['coverage']:6.1f}%  {r['width']:.3f}  {r['zero_width']}")
        print(f"judge-corrected rates, {args.reps} data sets per cell, {len(rows) // len(names)} cells, "
              f"{time.perf_counter() - started:.0f} s")
        for name in names:
            mine = [r for r in rows if r["method"] == name]
            worst = min(mine, key=lambda r: r["coverage"])
            print(f"{name:<18} worst cell {100 * worst['coverage']:.1f}% (width {worst['width']:.3f}) at truth "
                  f"{worst['truth']}, reference {worst['reference']}, accuracy {worst['accuracy']}, run {worst['run']}; "
                  f"cells < 93%: {sum(1 for r in mine if r['coverage'] < TARGET_COVERAGE)}/{len(mine)}; "
                  f"zero-width intervals: {sum(r['zero_width'] for r in mine)}")
        return 0
    if args.differences:
        names = ["paired", "unpaired"] if args.methods == "used" else list(DIFFERENCE_METHODS) if args.methods == "all" else args.methods.split(",")
        started = time.perf_counter()
        rows = run_differences(DIFFERENCES, names)
        if args.cells:
            print("method        n    baseline  change  correlation  coverage  width  P(zero width)")
            for r in rows:
                print(f"{r['method']:<13} {r['n']:<4} {r['baseline']:<9} {r['change']:<7} {str(r['correlation']):<12} "
                      f"{100 * r['coverage']:6.2f}%  {r['width']:.3f}  {r['zero_width']:.4f}")
        print(f"differences of two shares, exact coverage (every outcome enumerated), {time.perf_counter() - started:.0f} s")
        for name in names:
            mine = [r for r in rows if r["method"] == name]
            worst = min(mine, key=lambda r: r["coverage"])
            print(f"{name:<13} worst cell {100 * worst['coverage']:.2f}% (width {worst['width']:.3f}) at n {worst['n']}, "
                  f"baseline {worst['baseline']}, change {worst['change']}, correlation {worst['correlation']}; "
                  f"cells < 93%: {sum(1 for r in mine if r['coverage'] < TARGET_COVERAGE)}/{len(mine)}; "
                  f"largest chance of a zero-width interval: {max(r['zero_width'] for r in mine):.4f}")
        return 0
    if args.statistics:
        names = ["dirichlet"] if args.methods == "used" else list(STAT_METHODS) if args.methods == "all" else args.methods.split(",")
        started = time.perf_counter()
        rows = run_statistics(STATISTICS_SMALL if args.small else STATISTICS, names, args.reps, args.seed)
        if not args.small:
            rows += run_multiclass(MULTICLASS, args.reps, args.seed)
        if args.cells:
            print("statistic, method     truth (prevalence, se, sp)  value   items  coverage  width  zero-width")
            for r in rows:
                print(f"{r['method']:<21} {str(r['truth']):<27} {r['value']:<7} {r['dialogues']:<6} "
                      f"{100 * r['coverage']:6.1f}%  {r['width']:.3f}  {r['zero_width']}")
        print(f"kappa, AC1 and F1 against reference labels, {args.reps} data sets per cell, "
              f"{time.perf_counter() - started:.0f} s")
        for s in summary(rows):
            w = s["worst"]
            print(f"{s['method']:<21} worst cell (>= 10 items) {100 * w['coverage']:.1f}% (width {w['width']:.3f}) at "
                  f"{w['truth']}, {w['dialogues']} items; cells < 93%: {s['cells_below_target']}/{s['cells']}; "
                  f"zero-width intervals: {s['zero_width']} in {s['zero_width_cells']} cells")
        return 0
    if args.paired:
        started = time.perf_counter()
        names = ("mover",) if args.methods == "used" else PAIRED_METHODS if args.methods == "all" else tuple(args.methods.split(","))
        for what, rows in (
            ("rates over replies", run_paired(PAIRED_SMALL if args.small else PAIRED, args.reps, args.seed, methods=names)),
            ("means of 1-5 ratings", run_paired_means(PAIRED_MEANS_SMALL if args.small else PAIRED_MEANS, args.reps, args.seed,
                                                      methods=names)),
        ):
            if args.cells:
                for r in rows:
                    print(f"{r['method']:<17} {str(r['truth']):<30} {r['dialogues']:<5} {r['replies']:<3} "
                          f"{100 * r['coverage']:6.1f}%  {r['width']:.3f}  {r['zero_width']}")
            print(f"paired differences of {what}, {args.reps} data sets per cell, {time.perf_counter() - started:.0f} s")
            for s in summary(rows):
                w = s["worst"]
                print(f"{s['method']:<17} worst cell (>= 10 cases) {100 * w['coverage']:.1f}% (width {w['width']:.3f}) at "
                      f"{w['truth']}, {w['dialogues']} x {w['replies']}; cells < 93%: {s['cells_below_target']}/{s['cells']}; "
                      f"zero-width intervals: {s['zero_width']} in {s['zero_width_cells']} cells")
            if len(names) > 1:
                ratio = widest_against_best(rows)
                print(f"  widest against the narrowest covering method, cell by cell: {ratio}")
        return 0
    if args.means:
        names = ["bounded-wilson"] if args.methods == "used" else list(MEAN_METHODS) if args.methods == "all" else args.methods.split(",")
        started = time.perf_counter()
        rows = run_means(MEANS_SMALL if args.small else MEANS, names, args.reps, args.seed)
        if args.cells:
            print("method          truth (mu, sd, sd)  mean   dialogues  replies  coverage  width  zero-width")
            for r in rows:
                print(f"{r['method']:<15} {str(r['truth']):<19} {r['mean']:<6} {r['dialogues']:<10} {r['replies']:<8} "
                      f"{100 * r['coverage']:6.1f}%  {r['width']:.3f}  {r['zero_width']}")
        print(f"means of 1-5 ratings, {args.reps} data sets per cell, {time.perf_counter() - started:.0f} s")
        ratios = widest_against_best(rows)
        for s in summary(rows):
            w = s["worst"]
            ratio = ratios.get(s["method"])
            print(f"{s['method']:<15} worst cell (>= 10 dialogues) {100 * w['coverage']:.1f}% (width {w['width']:.3f}) at "
                  f"{w['truth']}, {w['dialogues']} x {w['replies']}; cells < 93%: {s['cells_below_target']}/{s['cells']}; "
                  f"zero-width intervals: {s['zero_width']} in {s['zero_width_cells']} cells; widest against the "
                  f"narrowest covering other: {f'{ratio[0]:.2f}x at {ratio[1]}' if ratio else '-'}")
        return 0
    grid = SMALL if args.small else FULL
    methods = list(USED) if args.methods == "used" else list(METHODS) if args.methods == "all" else args.methods.split(",")
    started = time.perf_counter()
    rows = run(grid, methods, args.reps, args.seed)
    if args.cells:
        print("method            truth  dialogues  replies  icc   coverage  width   zero-width")
        for r in rows:
            print(f"{r['method']:<17} {r['truth']:<6} {r['dialogues']:<10} {r['replies']:<8} {r['icc']:<5} "
                  f"{100 * r['coverage']:6.1f}%  {r['width']:.3f}   {r['zero_width']}")
    print(f"shares of replies, {args.reps} data sets per cell, {len(rows) // len(methods)} cells, "
          f"{time.perf_counter() - started:.0f} s")
    print("method            worst cell (>= 10 dialogues): coverage  width  at (truth, dialogues, replies, icc)"
          "   cells < 93%   zero-width intervals")
    for s in summary(rows):
        w = s["worst"]
        where = f"({w['truth']}, {w['dialogues']}, {w['replies']}, {w['icc']})" if w else "-"
        print(f"{s['method']:<17} {100 * w['coverage']:6.1f}%  {w['width']:.3f}  {where:<24} "
              f"{s['cells_below_target']}/{s['cells']}   {s['zero_width']} in {s['zero_width_cells']} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
