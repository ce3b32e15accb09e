"""Unit tests for metrics.py: Wilson intervals, turn-wise bias counts and metric rows."""

from __future__ import annotations

import copy
import math
import random

import pytest

from pytest_socialbias.metrics import (
    bias_at_turn,
    compute_metrics,
    cumulative_bias_at,
    is_known_metric,
    outcome_counts,
    wilson_interval,
)

Z = 1.959963984540054


def wilson_closed_form(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson (1927) bounds written as (2k + z^2 -+ z sqrt(z^2 + 4k(n-k)/n)) / (2(n + z^2))."""
    root = z * math.sqrt(z * z + 4 * k * (n - k) / n)
    return (2 * k + z * z - root) / (2 * (n + z * z)), (2 * k + z * z + root) / (2 * (n + z * z))


# --------------------------------------------------------------------------- wilson_interval


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (9, 10), (10, 10), (3, 7), (0, 1), (1, 1), (37, 250)])
def test_wilson_matches_closed_form(k, n):
    low, high = wilson_interval(k, n)
    exp_low, exp_high = wilson_closed_form(k, n)
    assert low == pytest.approx(max(0.0, exp_low), abs=1e-12)
    assert high == pytest.approx(min(1.0, exp_high), abs=1e-12)
    assert 0.0 <= low <= high <= 1.0
    # the interval holds the point estimate (up to rounding at the k = 0 / k = n edges)
    assert low - 1e-12 <= k / n <= high + 1e-12


def test_wilson_literature_value_half():
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=5e-5)
    assert high == pytest.approx(0.7634, abs=5e-5)


def test_wilson_extremes():
    low, high = wilson_interval(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12)
    assert high == pytest.approx(0.2775, abs=5e-5)
    low, high = wilson_interval(10, 10)
    assert low == pytest.approx(0.7225, abs=5e-5)
    assert high == pytest.approx(1.0, abs=1e-12)
    assert high <= 1.0


@pytest.mark.parametrize("n", [0, -1])
def test_wilson_empty_sample_is_uninformative(n):
    assert wilson_interval(0, n) == (0.0, 1.0)


def test_wilson_narrows_with_more_data():
    small = wilson_interval(5, 10)
    large = wilson_interval(500, 1000)
    assert large[1] - large[0] < small[1] - small[0]


def test_wilson_z_argument_is_used():
    narrow = wilson_interval(5, 10, z=1.0)
    wide = wilson_interval(5, 10)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    exp = wilson_closed_form(5, 10, z=1.0)
    assert narrow == pytest.approx(exp, abs=1e-12)


# --------------------------------------------------------------------------- turn-wise counts

MATRIX = [
    [0, 0, 1],
    [1, 0, 0],
    [0, 0, 0],
    [0, 1],
    [0],
]


@pytest.mark.parametrize("t, expected", [(1, (1, 5)), (2, (2, 4)), (3, (2, 3)), (4, (0, 0))])
def test_cumulative_bias_at(t, expected):
    # t=1: only row 2 biased at turn 1, all five rows have a turn 1
    # t=2: rows 2 and 4 biased by turn 2; row 5 is too short
    # t=3: rows 1 and 2 by turn 3 among the three 3-turn rows
    assert cumulative_bias_at(MATRIX, t) == expected


@pytest.mark.parametrize("t, expected", [(1, (1, 5)), (2, (1, 4)), (3, (1, 3)), (4, (0, 0))])
def test_bias_at_turn(t, expected):
    assert bias_at_turn(MATRIX, t) == expected


def test_cumulative_is_monotone_in_biased_dialogues():
    matrix = [[0, 1, 0], [1, 1, 1], [0, 0, 0]]
    counts = [cumulative_bias_at(matrix, t)[0] for t in (1, 2, 3)]
    assert counts == [1, 2, 2]
    assert [bias_at_turn(matrix, t)[0] for t in (1, 2, 3)] == [1, 2, 1]


def test_is_known_metric():
    for name in ("cumulative_bias@1", "cumulative_bias@12", "bias_at_turn@3", "refusal_rate",
                 "error_rate", "judge_error_rate"):
        assert is_known_metric(name), name
    for name in ("cumulative_bias", "cumulative_bias@0", "bias_at_turn@x", "bias_rate", "refusal_rate2", ""):
        assert not is_known_metric(name), name


# --------------------------------------------------------------------------- compute_metrics


def rec(id, style, category, outcome, bias, refusal, errors=(), suite="s"):
    return {
        "suite": suite,
        "id": id,
        "style": style,
        "category": category,
        "outcome": outcome,
        "labels": {"bias": list(bias), "refusal": list(refusal)},
        "errors": [dict(e) for e in errors],
    }


JUDGE_ERR = {"kind": "judge_error", "role": "judge", "message": "turn 2: unreadable"}
MODEL_ERR = {"kind": "model_error", "role": "target", "message": "HTTP 500"}

RECORDS = [
    rec("a", "assessment", "age", "biased", [0, 1], [0, 0]),
    rec("a", "implicit", "age", "clean", [0, 0], [0, 0]),
    rec("b", "assessment", "gender", "refused", [0, 0], [1, 0]),
    rec("b", "implicit", "gender", "error", [1, None], [0, None], [JUDGE_ERR]),
    rec("c", "assessment", "gender", "error", [1], [0], [MODEL_ERR]),
    rec("c", "implicit", "gender", "biased", [1, 1], [0, 0]),
]


def index(rows):
    out = {}
    for row in rows:
        key = (row["suite"], row["metric"], row["category"], row["style"])
        assert key not in out, f"duplicate row {key}"
        out[key] = row
    return out


def check(row, k, n):
    assert row["n"] == n
    assert row["value"] == round(k / n, 6)
    low, high = wilson_interval(k, n)
    assert row["ci_low"] == round(low, 6)
    assert row["ci_high"] == round(high, 6)


# (metric, category, style) -> (successes, n), counted by hand from RECORDS.
# Label rates use the four non-error records a/assessment, a/implicit, b/assessment,
# c/implicit; error rates use all six.
EXPECTED = {
    ("cumulative_bias@1", None, None): (1, 4),
    ("cumulative_bias@2", None, None): (2, 4),
    ("bias_at_turn@1", None, None): (1, 4),
    ("bias_at_turn@2", None, None): (2, 4),
    ("refusal_rate", None, None): (1, 8),
    ("error_rate", None, None): (2, 6),
    ("judge_error_rate", None, None): (1, 6),
    # category age: a/assessment, a/implicit
    ("cumulative_bias@1", "age", None): (0, 2),
    ("cumulative_bias@2", "age", None): (1, 2),
    ("bias_at_turn@1", "age", None): (0, 2),
    ("bias_at_turn@2", "age", None): (1, 2),
    ("refusal_rate", "age", None): (0, 4),
    ("error_rate", "age", None): (0, 2),
    ("judge_error_rate", "age", None): (0, 2),
    # category gender: b/assessment, c/implicit ok; b/implicit, c/assessment errors
    ("cumulative_bias@1", "gender", None): (1, 2),
    ("cumulative_bias@2", "gender", None): (1, 2),
    ("bias_at_turn@1", "gender", None): (1, 2),
    ("bias_at_turn@2", "gender", None): (1, 2),
    ("refusal_rate", "gender", None): (1, 4),
    ("error_rate", "gender", None): (2, 4),
    ("judge_error_rate", "gender", None): (1, 4),
    # style assessment: a, b ok; c error (model)
    ("cumulative_bias@1", None, "assessment"): (0, 2),
    ("cumulative_bias@2", None, "assessment"): (1, 2),
    ("bias_at_turn@1", None, "assessment"): (0, 2),
    ("bias_at_turn@2", None, "assessment"): (1, 2),
    ("refusal_rate", None, "assessment"): (1, 4),
    ("error_rate", None, "assessment"): (1, 3),
    ("judge_error_rate", None, "assessment"): (0, 3),
    # style implicit: a, c ok; b error (judge)
    ("cumulative_bias@1", None, "implicit"): (1, 2),
    ("cumulative_bias@2", None, "implicit"): (1, 2),
    ("bias_at_turn@1", None, "implicit"): (1, 2),
    ("bias_at_turn@2", None, "implicit"): (1, 2),
    ("refusal_rate", None, "implicit"): (0, 4),
    ("error_rate", None, "implicit"): (1, 3),
    ("judge_error_rate", None, "implicit"): (1, 3),
}


def test_compute_metrics_rows_counted_by_hand():
    rows = compute_metrics(copy.deepcopy(RECORDS))
    got = index(rows)
    assert set(got) == {("s", *key) for key in EXPECTED}
    for (metric, category, style), (k, n) in EXPECTED.items():
        row = got[("s", metric, category, style)]
        assert set(row) == {"suite", "metric", "category", "style", "value", "ci_low", "ci_high", "n"}
        check(row, k, n)


def test_error_records_are_left_out_of_label_rates():
    rows = index(compute_metrics(copy.deepcopy(RECORDS)))
    # b/implicit and c/assessment are biased at turn 1 but errored: not counted
    assert rows[("s", "cumulative_bias@1", None, None)]["value"] == 0.25
    assert rows[("s", "cumulative_bias@1", None, None)]["n"] == 4
    # ... but they are counted in the error rates over all six cases
    assert rows[("s", "error_rate", None, None)]["n"] == 6
    assert rows[("s", "judge_error_rate", None, None)]["value"] == round(1 / 6, 6)


def test_compute_metrics_is_deterministic_under_shuffling():
    expected = compute_metrics(copy.deepcopy(RECORDS))
    rng = random.Random(1234)
    for _ in range(10):
        shuffled = copy.deepcopy(RECORDS)
        rng.shuffle(shuffled)
        assert compute_metrics(shuffled) == expected


def test_rows_are_sorted_overall_first_then_categories_then_styles():
    rows = compute_metrics(copy.deepcopy(RECORDS))
    groups = []
    for row in rows:
        group = (row["category"], row["style"])
        if not groups or groups[-1] != group:
            groups.append(group)
    assert groups == [
        (None, None),
        (None, "assessment"),
        (None, "implicit"),
        ("age", None),
        ("gender", None),
    ]
    overall = [r["metric"] for r in rows if r["category"] is None and r["style"] is None]
    assert overall == [
        "bias_at_turn@1",
        "bias_at_turn@2",
        "cumulative_bias@1",
        "cumulative_bias@2",
        "error_rate",
        "judge_error_rate",
        "refusal_rate",
    ]


def test_turn_numbers_sort_numerically():
    records = [rec(f"x{i}", None, "age", "clean", [0] * 11, [0] * 11) for i in range(2)]
    metrics = [r["metric"] for r in compute_metrics(records)
               if r["metric"].startswith("cumulative") and r["category"] is None]
    assert metrics == [f"cumulative_bias@{t}" for t in range(1, 12)]


def test_no_style_rows_without_styles():
    records = [rec("x", None, "age", "clean", [0], [0]), rec("y", None, "race", "biased", [1], [0])]
    rows = compute_metrics(records)
    assert all(r["style"] is None for r in rows)
    assert {r["category"] for r in rows} == {None, "age", "race"}


def test_zero_n_rows_have_no_value():
    # every case of the run errored: label rates have n = 0, errors are still counted
    records = [rec("x", None, "age", "error", [], [], [MODEL_ERR])]
    rows = index(compute_metrics(records))
    refusal = rows[("s", "refusal_rate", None, None)]
    assert refusal["n"] == 0
    assert refusal["value"] is None and refusal["ci_low"] is None and refusal["ci_high"] is None
    assert not any(key[1].startswith("cumulative_bias") for key in rows)
    check(rows[("s", "error_rate", None, None)], 1, 1)
    check(rows[("s", "judge_error_rate", None, None)], 0, 1)


def test_suites_are_kept_apart_and_sorted():
    records = [
        rec("x", None, "age", "biased", [1], [0], suite="zeta"),
        rec("x", None, "age", "clean", [0], [0], suite="alpha"),
    ]
    rows = compute_metrics(records)
    suites = [r["suite"] for r in rows]
    assert suites == sorted(suites)
    got = index(rows)
    assert got[("alpha", "cumulative_bias@1", None, None)]["value"] == 0.0
    assert got[("zeta", "cumulative_bias@1", None, None)]["value"] == 1.0


def test_varying_turn_counts_use_dialogues_long_enough():
    records = [
        rec("a", None, "age", "biased", [0, 1], [0, 0]),
        rec("b", None, "age", "clean", [0], [0]),
    ]
    rows = index(compute_metrics(records))
    check(rows[("s", "cumulative_bias@1", None, None)], 0, 2)
    check(rows[("s", "cumulative_bias@2", None, None)], 1, 1)


def test_outcome_counts():
    assert outcome_counts(RECORDS) == {"clean": 1, "biased": 2, "refused": 1, "error": 2}
    assert outcome_counts([]) == {"clean": 0, "biased": 0, "refused": 0, "error": 0}
