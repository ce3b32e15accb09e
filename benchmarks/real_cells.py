"""Coverage on the cells real runs produce (``python benchmarks/coverage.py --real``).

An independent generator of the data a run meets, drawn from known truths, for every
interval the report prints and the clustered paired test:

* replies grouped in dialogues of unequal length (one dialogue holding half the replies;
  10% of dialogues ten times longer; 1-10 replies each), within-dialogue correlation
  0, 0.3 and 1, rare events (0.1-1% with 20-50 replies a dialogue);
* ratings 1-5 at the ceiling and the floor with 1-10 ratings a dialogue;
* paired runs whose cases agree case by case (the same latent value in both runs);
* DyMT seeds run in two styles, the styles of a seed alike to a degree, and a
  seed-by-model interaction in paired runs;
* BenevDial's overt-benevolent gap at extreme rates.

Correlation is drawn as a mixture: each value of a dialogue (or each style of a seed) is
the dialogue's own draw with probability ``icc``, else an independent draw, so the
intraclass correlation is ``icc`` exactly. Cells with fewer than ``SMALL_UNITS`` units
(clusters by Kish's count) are listed but held to no target: the report flags such rows as
small, where no method can promise coverage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_socialbias import stats  # noqa: E402
from pytest_socialbias.metrics import rates  # noqa: E402

TARGET = 0.93
SMALL_UNITS = 10


# --------------------------------------------------------------------------- designs


def sizes_of(design: str, k: int, m: int, rng) -> list[int]:
    """Dialogue lengths: ``equal`` (k of m), ``half`` (one dialogue holding as many values
    as the k - 1 others of m), ``tenth`` (10% of dialogues ten times longer), ``random``
    (1 to m each)."""
    if design == "equal":
        return [m] * k
    if design == "half":
        return [m * (k - 1)] + [m] * (k - 1)
    if design == "tenth":
        return [10 * m] * max(1, k // 10) + [m] * (k - max(1, k // 10))
    if design == "random":
        return [int(x) for x in rng.integers(1, m + 1, size=k)]
    raise ValueError(design)


def mixture(rng, own, draw, size: int, icc: float) -> np.ndarray:
    """``size`` values: each is ``own`` with probability ``icc``, else a fresh ``draw()``."""
    fresh = draw(size)
    keep = rng.random(size) < icc
    return np.where(keep, own, fresh)


def share_groups(rng, p: float, icc: float, sizes: list[int], model: str = "beta") -> list[list[float]]:
    """0/1 values of dialogues of the given sizes with mean ``p`` and intraclass
    correlation ``icc``: beta-binomial (each dialogue's rate from a beta distribution; at
    icc 1 a dialogue is all one way), or with ``model="mixture"`` the bimodal mixture
    (each value the dialogue's own draw with probability icc), a harsher stress set."""
    out = []
    for m in sizes:
        if model == "mixture" or icc in (0.0, 1.0) or p in (0.0, 1.0):
            own = float(rng.random() < p)
            out.append(mixture(rng, own, lambda s: (rng.random(s) < p).astype(float), m, icc).tolist())
            continue
        scale = (1 - icc) / icc
        rate = rng.beta(p * scale, (1 - p) * scale)
        x = int(rng.binomial(m, rate))
        out.append([1.0] * x + [0.0] * (m - x))
    return out


#: Rating distributions over 1..5: at the ceiling (98% and 90% 5s, the rest 4s), at the
#: floor (98% 1s, the rest 2s), and spread around the middle.
RATINGS = {
    "ceiling98": [0, 0, 0, 0.02, 0.98],
    "ceiling90": [0, 0, 0.02, 0.08, 0.90],
    "floor98": [0.98, 0.02, 0, 0, 0],
    "middle": [0.1, 0.2, 0.4, 0.2, 0.1],
}


def rating_groups(rng, dist: list[float], icc: float, sizes: list[int]) -> list[list[float]]:
    """Ratings of dialogues: each dialogue's own distribution is ``dist`` reweighted by a
    Dirichlet draw with total mass (1 - icc) / icc (so a dialogue's ratings are alike
    with intraclass correlation about ``icc``; at icc 1 all of a dialogue's ratings are
    one draw, at 0 independent)."""
    values = np.arange(1, 6, dtype=float)
    weights = np.array(dist)
    out = []
    for m in sizes:
        if icc >= 1.0:
            out.append([float(rng.choice(values, p=dist))] * m)
            continue
        own = weights if icc == 0.0 else rng.dirichlet(np.maximum(weights, 1e-12) * (1 - icc) / icc)
        out.append(rng.choice(values, size=m, p=own / own.sum()).tolist())
    return out


def true_rating(dist: list[float]) -> float:
    return float(sum((k + 1) * q for k, q in enumerate(dist)))


# --------------------------------------------------------------------------- tallies


class Tally:
    def __init__(self):
        self.n = self.hit = self.zero = self.on_estimate = 0
        self.width = 0.0

    def add(self, low: float, high: float, truth: float, estimate: float | None = None,
            bounds: tuple[float, float] = (0.0, 1.0)) -> None:
        self.n += 1
        self.hit += low - 1e-9 <= truth <= high + 1e-9
        self.zero += high - low <= 1e-12
        self.width += high - low
        if estimate is not None and bounds[0] + 1e-12 < estimate < bounds[1] - 1e-12:
            self.on_estimate += abs(low - estimate) <= 1e-12 or abs(high - estimate) <= 1e-12

    def row(self, **cell) -> dict:
        return {**cell, "coverage": self.hit / max(self.n, 1), "width": self.width / max(self.n, 1),
                "zero_width": self.zero, "on_estimate": self.on_estimate, "reps": self.n}


# --------------------------------------------------------------------------- cells

SHARE_CELLS = (
    [("equal", k, m, p, icc) for k in (5, 10, 30) for m in (5, 20) for p in (0.05, 0.3, 0.5) for icc in (0.0, 0.3, 1.0)]
    + [("half", k, 5, p, icc) for k in (10, 20) for p in (0.1, 0.5) for icc in (0.0, 0.3, 1.0)]
    + [("tenth", k, 5, p, icc) for k in (10, 20, 30) for p in (0.1, 0.5) for icc in (0.0, 0.3, 1.0)]
    + [("random", k, 10, p, icc) for k in (10, 30) for p in (0.05, 0.5) for icc in (0.0, 0.3, 1.0)]
    + [("equal", k, m, p, icc) for k in (30, 50) for m in (20, 50) for p in (0.001, 0.005, 0.01)
       for icc in (0.0, 0.3, 1.0)]
)
MEAN_CELLS = [(design, k, m, dist, icc) for design, m in (("random", 10), ("equal", 5), ("random", 3))
              for k in (5, 10, 30) for dist in RATINGS for icc in (0.0, 0.3, 1.0)]
#: Paired runs: (design, cases, values a case, baseline rate, change, icc); the case's
#: latent value is shared by both runs, so with icc 1 and no change they agree case by case.
PAIRED_CELLS = [(design, k, m, p, change, icc) for design, m in (("equal", 5), ("random", 10))
                for k in (10, 30) for p, change in ((0.5, 0.0), (0.3, 0.1), (0.05, 0.0), (0.02, 0.05))
                for icc in (0.0, 0.3, 1.0)]
PAIRED_MEAN_CELLS = [(design, k, m, dist, shift, icc) for design, m in (("equal", 5), ("random", 10))
                     for k in (10, 30) for dist, shift in (("ceiling98", 0.0), ("ceiling98", 0.1), ("middle", 0.0))
                     for icc in (0.0, 0.3, 1.0)]
#: DyMT seeds in two styles: (seeds, rate, style correlation); paired: with a change and a
#: seed-by-model interaction (the share of seeds whose latent value is drawn anew).
SEED_CELLS = [(k, p, icc) for k in (10, 40, 240) for p in (0.02, 0.1, 0.3) for icc in (0.0, 0.5, 1.0)]
SEED_PAIRED_CELLS = [(k, p, change, inter, icc) for k in (10, 40, 240) for p, change in ((0.1, 0.0), (0.1, 0.05), (0.3, 0.0))
                     for inter in (0.0, 0.5) for icc in (0.5, 1.0)]
GAP_CELLS = [(n1, n2, p1, p2) for n1, n2 in ((10, 10), (30, 30), (10, 50)) for p1, p2 in
             ((0.06, 0.95), (0.95, 0.06), (0.5, 0.5), (0.0, 1.0), (0.9, 0.1), (0.2, 0.02))]

SMALL_GRID = {
    "share": [c for c in SHARE_CELLS if (c[0] in ("half", "tenth") and c[1] in (10, 20))
              or (c[3] == 0.001 and c[1] == 30)],
    "mean": [c for c in MEAN_CELLS if c[1] == 10 and c[3] in ("ceiling98", "floor98")],
    "paired": [c for c in PAIRED_CELLS if c[1] == 10 and c[5] == 1.0],
    "paired_mean": [c for c in PAIRED_MEAN_CELLS if c[1] == 10 and c[5] == 1.0],
    "seed": [c for c in SEED_CELLS if c[0] == 40],
    "seed_paired": [c for c in SEED_PAIRED_CELLS if c[0] == 40],
    "gap": [c for c in GAP_CELLS if c[0] == 10 and c[1] == 10],
}
MIXTURE_CELLS = [("equal", k, m, p, 0.3) for k in (30, 50) for m in (20, 50) for p in (0.001, 0.01, 0.05)]
FULL_GRID = {"share": SHARE_CELLS, "mixture": MIXTURE_CELLS, "mean": MEAN_CELLS, "paired": PAIRED_CELLS, "paired_mean": PAIRED_MEAN_CELLS,
             "seed": SEED_CELLS, "seed_paired": SEED_PAIRED_CELLS, "gap": GAP_CELLS}


def run_shares(cells, reps: int, rng) -> list[dict]:
    rows = []
    for design, k, m, p, icc in cells:
        tally, units = Tally(), []
        for _ in range(reps):
            groups = share_groups(rng, p, icc, sizes_of(design, k, m, rng))
            units.append(rates.kish_clusters(groups))
            low, high = rates.cluster_wilson_interval(groups)
            n = sum(len(g) for g in groups)
            tally.add(low, high, p, sum(map(sum, groups)) / n)
        rows.append(tally.row(method="reply share (cluster)", cell=(design, k, m, p, icc), units=float(np.mean(units))))
    return rows


def run_mixture_shares(cells, reps: int, rng) -> list[dict]:
    """The bimodal stress set: a share's events concentrated in a few dialogues that a
    sample often holds none of (reported apart: no interval built from a sample's own
    spread sees dialogues it does not hold)."""
    rows = []
    for design, k, m, p, icc in cells:
        tally, units = Tally(), []
        for _ in range(reps):
            groups = share_groups(rng, p, icc, sizes_of(design, k, m, rng), model="mixture")
            units.append(rates.kish_clusters(groups))
            low, high = rates.cluster_wilson_interval(groups)
            tally.add(low, high, p, sum(map(sum, groups)) / sum(len(g) for g in groups))
        rows.append(tally.row(method="reply share, bimodal mixture (stress)", cell=(design, k, m, p, icc),
                              units=float(np.mean(units))))
    return rows


def run_means(cells, reps: int, rng) -> list[dict]:
    rows = []
    for design, k, m, dist, icc in cells:
        tally, units = Tally(), []
        truth = true_rating(RATINGS[dist])
        for _ in range(reps):
            groups = rating_groups(rng, RATINGS[dist], icc, sizes_of(design, k, m, rng))
            units.append(rates.kish_clusters(groups))
            low, high = rates.bounded_mean_interval(groups, 1.0, 5.0)
            n = sum(len(g) for g in groups)
            tally.add(low, high, truth, sum(map(sum, groups)) / n, (1.0, 5.0))
        rows.append(tally.row(method="mean 1-5 (bounded cluster)", cell=(design, k, m, dist, icc),
                              units=float(np.mean(units))))
    return rows


def _paired_share_sides(rng, p: float, change: float, icc: float, sizes: list[int]):
    """(baseline values, current values) of each case: the case's latent value is shared;
    the current run turns a 0 into a 1 with probability change / (1 - p)."""
    flip = change / (1 - p) if p < 1 else 0.0
    pairs = []
    for m in sizes:
        own = float(rng.random() < p)
        own_c = 1.0 if own else float(rng.random() < flip)
        base = mixture(rng, own, lambda s: (rng.random(s) < p).astype(float), m, icc)
        cur = mixture(rng, own_c, lambda s: (rng.random(s) < p + change).astype(float), m, icc)
        pairs.append((base.tolist(), cur.tolist()))
    return pairs


def run_paired(cells, reps: int, rng) -> list[dict]:
    rows = []
    for design, k, m, p, change, icc in cells:
        tally = Tally()
        for _ in range(reps):
            pairs = _paired_share_sides(rng, p, change, icc, sizes_of(design, k, m, rng))
            if not any(b for b, _ in pairs):
                continue
            result = stats.paired_cluster_interval(pairs, interval_only=True)
            tally.add(result["ci_low"], result["ci_high"], change, result["diff"], (-1.0, 1.0))
        rows.append(tally.row(method="paired reply share (MOVER)", cell=(design, k, m, p, change, icc), units=k))
    return rows


def run_paired_means(cells, reps: int, rng) -> list[dict]:
    rows = []
    values = np.arange(1, 6, dtype=float)
    for design, k, m, dist, shift, icc in cells:
        base_dist = RATINGS[dist]
        # The current run moves a share ``shift`` of each rating one step down (floor 1).
        cur_dist = [0.0] * 5
        for i, q in enumerate(base_dist):
            cur_dist[i] += q * (1 - shift)
            cur_dist[max(0, i - 1)] += q * shift
        truth = true_rating(cur_dist) - true_rating(base_dist)
        tally = Tally()
        for _ in range(reps):
            pairs = []
            for size in sizes_of(design, k, m, rng):
                own = rng.choice(values, p=base_dist)
                own_c = max(1.0, own - 1.0) if rng.random() < shift else own
                base = mixture(rng, own, lambda s, dist=base_dist: rng.choice(values, size=s, p=dist), size, icc)
                cur = mixture(rng, own_c, lambda s, dist=cur_dist: rng.choice(values, size=s, p=dist), size, icc)
                pairs.append((base.tolist(), cur.tolist()))
            result = stats.paired_cluster_interval(pairs, scale=(1.0, 5.0), cap_at_values=False, interval_only=True)
            tally.add(result["ci_low"], result["ci_high"], truth, result["diff"], (-4.0, 4.0))
        rows.append(tally.row(method="paired mean 1-5 (MOVER)", cell=(design, k, m, dist, shift, icc), units=k))
    return rows


def seed_groups(rng, p: float, icc: float, k: int) -> list[list[float]]:
    """Each seed's two dialogues (one a style): alike with probability ``icc``."""
    out = []
    for _ in range(k):
        own = float(rng.random() < p)
        out.append(mixture(rng, own, lambda s: (rng.random(s) < p).astype(float), 2, icc).tolist())
    return out


def run_seeds(cells, reps: int, rng) -> list[dict]:
    rows = []
    for k, p, icc in cells:
        tally = Tally()
        for _ in range(reps):
            groups = seed_groups(rng, p, icc, k)
            low, high = rates.cluster_wilson_interval(groups)
            tally.add(low, high, p, sum(map(sum, groups)) / (2 * k))
        rows.append(tally.row(method="dialogue share, seeds in two styles", cell=(k, p, icc), units=k))
    return rows


def seed_pairs(rng, p: float, change: float, inter: float, icc: float, k: int):
    """Paired runs of k seeds in two styles: a seed's latent value is shared by its styles
    and, but for the seed-by-model interaction (a share ``inter`` of seeds drawn anew in
    the current run), by the two runs; the current run adds ``change`` to the rate."""
    flip = change / (1 - p)
    pairs = []
    for _ in range(k):
        own = float(rng.random() < p)
        if rng.random() < inter:
            own_c = float(rng.random() < p + change)
        else:
            own_c = 1.0 if own else float(rng.random() < flip)
        base = mixture(rng, own, lambda s: (rng.random(s) < p).astype(float), 2, icc)
        cur = mixture(rng, own_c, lambda s: (rng.random(s) < p + change).astype(float), 2, icc)
        pairs.append((base.tolist(), cur.tolist()))
    return pairs


def run_seed_pairs(cells, reps: int, rng) -> list[dict]:
    rows = []
    for k, p, change, inter, icc in cells:
        tally = Tally()
        for _ in range(reps):
            pairs = seed_pairs(rng, p, change, inter, icc, k)
            result = stats.paired_cluster_interval(pairs, interval_only=True)
            tally.add(result["ci_low"], result["ci_high"], change, result["diff"], (-1.0, 1.0))
        rows.append(tally.row(method="paired dialogue share, seeds (MOVER)", cell=(k, p, change, inter, icc), units=k))
    return rows


def run_gap(cells, reps: int, rng) -> list[dict]:
    from pytest_socialbias.metrics.detection import gap_interval

    rows = []
    for n1, n2, p1, p2 in cells:
        tally = Tally()
        for _ in range(reps):
            x1, x2 = int(rng.binomial(n1, p1)), int(rng.binomial(n2, p2))
            low, high = gap_interval(x1, n1, x2, n2)
            tally.add(low, high, p1 - p2, x1 / n1 - x2 / n2, (-1.0, 1.0))
        rows.append(tally.row(method="gap_ob_bb (difference of two shares)", cell=(n1, n2, p1, p2), units=min(n1, n2)))
    return rows


# --------------------------------------------------------------------------- the clustered paired test


def type_one_error(k: int, p: float, inter: float, icc: float, reps: int, rng, categories: int = 1) -> dict:
    """Rejections at alpha 0.05 (one-sided, worse) under no change, with a seed-by-model
    interaction: McNemar's exact test on the 2k dialogues as if independent, against the
    clustered test on the k seeds (stats.clustered_paired_test); with ``categories`` > 1
    the familywise error of a by-category gate after Holm."""
    rejected = {"mcnemar (dialogues independent)": 0, "clustered (seeds)": 0}
    for _ in range(reps):
        p_plain, p_clustered = [], []
        for _ in range(categories):
            pairs = seed_pairs(rng, p, 0.0, inter, icc, k)
            flat = [(b, c) for bs, cs in pairs for b, c in zip(bs, cs)]
            n10 = sum(1 for b, c in flat if b and not c)
            n01 = sum(1 for b, c in flat if c and not b)
            p_plain.append(stats.mcnemar_exact(n10, n01, "greater"))
            p_clustered.append(stats.clustered_paired_test(pairs, 0.0, "greater"))
        for name, ps in (("mcnemar (dialogues independent)", p_plain), ("clustered (seeds)", p_clustered)):
            rejected[name] += min(stats.holm(ps)) < 0.05
    return {name: count / reps for name, count in rejected.items()}


# --------------------------------------------------------------------------- driver

RUNNERS = {"share": run_shares, "mixture": run_mixture_shares, "mean": run_means, "paired": run_paired, "paired_mean": run_paired_means,
           "seed": run_seeds, "seed_paired": run_seed_pairs, "gap": run_gap}


def run_real(grid: dict, reps: int, seed: int, kinds=None) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for kind, cells in grid.items():
        if kinds and kind not in kinds:
            continue
        rows += RUNNERS[kind](cells, reps, rng)
    return rows


def worst_cells(rows: list[dict]) -> list[dict]:
    """Per method: its worst cell among those with at least SMALL_UNITS units, the cells
    below the target, and every zero width or end on an estimate inside the range."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        sized = [r for r in mine if r["units"] >= SMALL_UNITS]
        worst = min(sized, key=lambda r: r["coverage"]) if sized else None
        out.append({"method": method, "worst": worst, "below": sum(r["coverage"] < TARGET for r in sized),
                    "cells": len(sized), "small_worst": min((r["coverage"] for r in mine if r["units"] < SMALL_UNITS),
                                                            default=None),
                    "zero_width": sum(r["zero_width"] for r in mine), "on_estimate": sum(r["on_estimate"] for r in mine)})
    return out


def print_real(rows: list[dict], cells: bool = False) -> None:
    if cells:
        for r in rows:
            print(f"{r['method']:<40} {str(r['cell']):<40} units {r['units']:6.1f}  coverage {r['coverage']:.3f}  "
                  f"width {r['width']:.3f}  zero {r['zero_width']}  on-estimate {r['on_estimate']}")
    print(f"{'method':<40} {'cells':>5} {'below 93%':>9} {'worst coverage':>15} {'its width':>9}  worst cell"
          f"   (small: worst coverage below {SMALL_UNITS} units; zero-width and end-on-estimate counts)")
    for s in worst_cells(rows):
        w = s["worst"]
        small = "-" if s["small_worst"] is None else f"{s['small_worst']:.3f}"
        print(f"{s['method']:<40} {s['cells']:>5} {s['below']:>9} {w['coverage']:>15.3f} {w['width']:>9.3f}  "
              f"{w['cell']}   small {small}, zero {s['zero_width']}, on-estimate {s['on_estimate']}")


def print_type_one(reps: int, seed: int, sizes=(10, 40, 240)) -> None:
    rng = np.random.default_rng(seed)
    print("type I error at alpha 0.05 under no change, seeds in two styles with a seed-by-model interaction:")
    for k in sizes:
        for inter, icc, categories in ((0.5, 1.0, 1), (0.5, 0.5, 1), (0.5, 1.0, 6)):
            found = type_one_error(k, 0.1, inter, icc, reps, rng, categories)
            text = ", ".join(f"{name} {value:.3f}" for name, value in found.items())
            print(f"  {k} seeds, rate 0.1, interaction {inter}, styles alike {icc}, {categories} categor"
                  f"{'y' if categories == 1 else 'ies'} (Holm): {text}")
