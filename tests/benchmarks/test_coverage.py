"""The coverage benchmark's small grids, as tests: the intervals the report prints for
shares of replies, means of ratings and judge-corrected rates hold the truth at least 93%
of the time in every cell with 10 or more units, and never have zero width
(benchmarks/coverage.py has the full grids)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")  # the dev extra brings it (with matplotlib)

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage.py"


def load():
    spec = importlib.util.spec_from_file_location("coverage_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_printed_interval_covers_in_every_cell_of_the_small_grid():
    coverage = load()
    rows = coverage.run(coverage.SMALL, ["cluster-wilson"], reps=1000, seed=20261201)
    sized = [r for r in rows if r["dialogues"] >= coverage.MIN_UNITS]
    assert sized
    worst = min(sized, key=lambda r: r["coverage"])
    assert worst["coverage"] >= coverage.TARGET_COVERAGE, worst
    assert sum(r["zero_width"] for r in rows) == 0


def test_the_old_bootstrap_would_not():
    """The percentile bootstrap over dialogues (what reply rates had before): zero-width
    intervals at 0 events, and coverage far below 93% in clustered cells."""
    coverage = load()
    rows = coverage.run(coverage.SMALL, ["bootstrap"], reps=200, seed=20261201)
    assert sum(r["zero_width"] for r in rows) > 0
    assert min(r["coverage"] for r in rows if r["dialogues"] >= coverage.MIN_UNITS) < 0.9


def test_the_printed_mean_interval_covers_in_every_cell_of_the_small_grid():
    """Means of 1-5 ratings (coherence): the bounded cluster Wilson interval holds the
    true mean in every cell with 10 or more dialogues and never has zero width, where the
    percentile bootstrap over dialogues (before) gave all-5 sets and single dialogues a
    zero-width interval and missed near the ceiling."""
    coverage = load()
    rows = coverage.run_means(coverage.MEANS_SMALL, ["bounded-wilson", "bootstrap"], reps=1000, seed=20261201)
    used = [r for r in rows if r["method"] == "bounded-wilson"]
    before = [r for r in rows if r["method"] == "bootstrap"]
    worst = min((r for r in used if r["dialogues"] >= coverage.MIN_UNITS), key=lambda r: r["coverage"])
    assert worst["coverage"] >= coverage.TARGET_COVERAGE, worst
    assert sum(r["zero_width"] for r in used) == 0
    assert sum(r["zero_width"] for r in before) > 0
    assert min(r["coverage"] for r in before if r["dialogues"] >= coverage.MIN_UNITS) < 0.9


def test_the_corrected_rate_holds_a_true_zero_where_the_credible_interval_alone_would_not():
    coverage = load()
    grid = {"truth": (0.0,), "reference": (200,), "accuracy": (0.99,), "run": (200,)}
    rows = coverage.run_corrected(60, 7, ["hull", "credible"], grid)
    by = {r["method"]: r for r in rows}
    assert by["hull"]["coverage"] >= 0.93 and by["hull"]["zero_width"] == 0
    assert by["credible"]["coverage"] < 0.8


def test_kappa_ac1_and_f1_intervals_cover_where_the_bootstrap_over_items_did_not():
    """A judge of sensitivity 0.9 and specificity 1 on 10 and 30 items, and a perfect one:
    the percentile bootstrap over items gave most perfect tables a zero-width interval and
    covered the near-perfect judge's kappa about a quarter of the time; the Dirichlet
    posterior of the table (read at 98.5%) covers at least 93% and is never of zero width."""
    coverage = load()
    rows = coverage.run_statistics(coverage.STATISTICS_SMALL, ["dirichlet", "bootstrap"], reps=100, seed=20261201, draws=500)
    used = [r for r in rows if r["method"].endswith("dirichlet")]
    before = [r for r in rows if r["method"].endswith("bootstrap")]
    assert {r["method"].split()[0] for r in used} == {"kappa", "ac1", "f1"}
    assert min(r["coverage"] for r in used) >= coverage.TARGET_COVERAGE, min(used, key=lambda r: r["coverage"])
    assert sum(r["zero_width"] for r in used) == 0
    assert sum(r["zero_width"] for r in before) > 0 and min(r["coverage"] for r in before) < 0.5


def test_the_paired_interval_against_a_baseline_covers_where_the_bootstrap_did_not():
    """Rates over replies and means of ratings compared case by case with a baseline: the
    paired cluster MOVER interval holds the true difference in every cell with 10 or more
    cases and never has zero width; the percentile bootstrap over cases (before) gave zero
    width where neither run had an event."""
    coverage = load()
    rates = coverage.run_paired(coverage.PAIRED_SMALL, reps=120, seed=20261201, resamples=300)
    means = coverage.run_paired_means(coverage.PAIRED_MEANS_SMALL, reps=120, seed=20261201, resamples=300)
    for rows in (rates, means):
        used = [r for r in rows if r["method"] == "mover"]
        assert min(r["coverage"] for r in used) >= coverage.TARGET_COVERAGE
        assert sum(r["zero_width"] for r in used) == 0
    before = [r for r in rates + means if r["method"] == "bootstrap"]
    assert sum(r["zero_width"] for r in before) > 0


def load_real():
    import sys

    sys.path.insert(0, str(BENCHMARK.parent))
    try:
        spec = importlib.util.spec_from_file_location("real_cells", BENCHMARK.parent / "real_cells.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARK.parent))
    return module


def test_every_printed_interval_covers_on_the_cells_real_runs_produce():
    """The fast subset of `benchmarks/coverage.py --real` (400 data sets a cell; the full
    grid holds 93% at 1,000): dialogues of unequal length, correlation 0.3 and 1, rare
    events, ratings at the ceiling and the floor, paired runs that agree case by case,
    seeds in two styles, extreme OB-BB gaps. Cells under 10 units are flagged small in the
    report and held to nothing here; no interval has zero width or an end on an estimate
    inside the range."""
    real = load_real()
    rows = real.run_real(real.SMALL_GRID, reps=400, seed=20261204)
    sized = [r for r in rows if r["units"] >= real.SMALL_UNITS]
    assert {r["method"] for r in sized} >= {"reply share (cluster)", "mean 1-5 (bounded cluster)",
                                           "paired reply share (MOVER)", "paired mean 1-5 (MOVER)",
                                           "dialogue share, seeds in two styles", "gap_ob_bb (difference of two shares)"}
    worst = min(sized, key=lambda r: r["coverage"])
    assert worst["coverage"] >= 0.92, worst
    assert sum(r["zero_width"] for r in rows) == 0
    assert sum(r["on_estimate"] for r in rows) == 0


def test_the_clustered_paired_test_keeps_its_size_where_mcnemar_on_dialogues_does_not():
    """Seeds in two styles with a seed-by-model interaction, no change on average, six
    categories under Holm: McNemar's test on the dialogues as if independent rejects far
    more than 5% of the time; the sign-flip test over seeds stays under it."""
    real = load_real()
    found = real.type_one_error(40, 0.1, 0.5, 1.0, reps=300, rng=np.random.default_rng(7), categories=6)
    assert found["clustered (seeds)"] <= 0.05
    assert found["mcnemar (dialogues independent)"] >= 0.08
