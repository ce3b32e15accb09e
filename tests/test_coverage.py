"""The coverage benchmark's small grid, as a test: the intervals the report prints for
shares of replies hold the truth at least 93% of the time in every cell with 10 or more
dialogues, and never have zero width (benchmarks/coverage.py has the full grid)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")  # the dev extra brings it (with matplotlib)

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "coverage.py"


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
