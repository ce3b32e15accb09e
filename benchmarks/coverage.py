"""Coverage of the 95% intervals the report prints, by simulation from known truths.

    python benchmarks/coverage.py                  # the full grid (a few minutes)
    python benchmarks/coverage.py --small          # the grid the test suite runs
    python benchmarks/coverage.py --methods all    # also the methods we do not use

Shares of replies (refusal_rate, bias_rate_passed, guard rates): replies are grouped in
dialogues and correlated within them. Each cell of the grid draws ``--reps`` data sets:
``dialogues`` dialogues of ``replies`` replies each, each dialogue's own rate drawn from a
beta distribution with mean ``truth`` and intraclass correlation ``icc`` (0: independent
replies; 0.6: strongly alike within a dialogue). For every interval method it prints the
share of data sets whose interval holds the truth (coverage; nominal 95%), the mean width,
and how often the interval had zero width. The summary gives each method's worst cell
among those with at least 10 dialogues (the target: coverage at least 93%) and its zero-
width count at every size (the target: none).

Methods: ``cluster-wilson`` (what the report prints: a Wilson score interval on the
effective sample size, the replies divided by the design effect of the ratio estimator,
never fewer than one per dialogue, with a small-sample correction of the degrees of
freedom); ``bootstrap`` (the percentile bootstrap over dialogues the report printed
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


def run_corrected(reps: int, seed: int) -> list[dict]:
    """The judge-corrected (Rogan-Gladen) rate: a judge of known sensitivity and
    specificity labels a reference set and a run of items with true prevalence ``truth``;
    the interval must hold ``truth``."""
    from pytest_socialbias.stats import rogan_gladen_interval

    rng = np.random.default_rng(seed)
    rows = []
    for truth in CORRECTED["truth"]:
        for reference in CORRECTED["reference"]:
            for accuracy in CORRECTED["accuracy"]:
                for n in CORRECTED["run"]:
                    covered = zero = usable = 0
                    widths = []
                    for rep in range(reps):
                        half = reference // 2
                        tp = int(rng.binomial(half, accuracy))
                        tn = int(rng.binomial(half, accuracy))
                        pairs = [(1, 1)] * tp + [(1, 0)] * (half - tp) + [(0, 0)] * tn + [(0, 1)] * (half - tn)
                        theta = truth * accuracy + (1 - truth) * (1 - accuracy)
                        x = int(rng.binomial(n, theta))
                        _, low, high = rogan_gladen_interval(x, n, pairs, seed=rep)
                        if low is None:
                            continue
                        usable += 1
                        covered += low - 1e-9 <= truth <= high + 1e-9
                        zero += high - low <= 1e-12
                        widths.append(high - low)
                    rows.append({"method": "bayes-corrected", "truth": truth, "reference": reference,
                                 "accuracy": accuracy, "run": n, "coverage": covered / max(usable, 1),
                                 "width": float(np.mean(widths)) if widths else float("nan"),
                                 "zero_width": zero, "reps": usable})
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
                             "specificity 0.7-0.99; --reps 200 takes a few minutes)")
    args = parser.parse_args(argv)
    if args.corrected:
        rows = run_corrected(args.reps, args.seed)
        print("judge-corrected rate: truth  reference  accuracy  run   coverage  width  zero-width")
        for r in rows:
            print(f"  {r['truth']:<6} {r['reference']:<10} {r['accuracy']:<9} {r['run']:<5} {100 * r['coverage']:6.1f}%  "
                  f"{r['width']:.3f}  {r['zero_width']}")
        sized = [r for r in rows if r["run"] >= MIN_UNITS and r["reference"] >= 20]
        worst = min(sized, key=lambda r: r["coverage"])
        print(f"worst cell: {100 * worst['coverage']:.1f}% at truth {worst['truth']}, reference {worst['reference']}, "
              f"accuracy {worst['accuracy']}, run {worst['run']}; cells < 93%: "
              f"{sum(1 for r in sized if r['coverage'] < TARGET_COVERAGE)}/{len(sized)}; "
              f"zero-width intervals: {sum(r['zero_width'] for r in rows)}")
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
