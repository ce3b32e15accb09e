"""Unit tests for metrics.py: Wilson intervals, posterior intervals, turn-wise bias counts,
late emergence, re-emergence, coherence and metric rows."""

from __future__ import annotations

import copy
import math
import random

import pytest

from pytest_socialbias.metrics import (
    BOOTSTRAP_SEED,
    bias_at_turn,
    bounded_mean_interval,
    compute_metrics,
    cumulative_bias_at,
    first_bias_at_turn,
    first_bias_turn,
    group_seed,
    has_reemergence,
    is_known_metric,
    late_emergence_counts,
    outcome_counts,
    reemergence_counts,
    survival_at,
    wilson_interval,
)
from pytest_socialbias.metrics.rates import clopper_pearson, cluster_wilson_interval

Z = 1.959963984540054


def wilson_cc_closed_form(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """Newcombe (1998) method 4, Wilson's score interval with continuity correction:
    (2np + z^2 -/+ 1 -/+ z sqrt(z^2 -/+ 2 - 1/n +/- 4p(nq +/- 1))) / (2(n + z^2)); the end
    at 0 for k = 0 and at 1 for k = n."""
    p, q = k / n, 1 - k / n
    low = 0.0 if k == 0 else (2 * n * p + z * z - 1 - z * math.sqrt(z * z - 2 - 1 / n + 4 * p * (n * q + 1))) / (2 * (n + z * z))
    high = 1.0 if k == n else (2 * n * p + z * z + 1 + z * math.sqrt(z * z + 2 - 1 / n + 4 * p * (n * q - 1))) / (2 * (n + z * z))
    return low, high


def clopper_pearson_by_tails(k: int, n: int, tail: float = 0.025) -> tuple[float, float]:
    """Clopper-Pearson for integer counts, by bisection on the binomial tails themselves
    (no beta function): lower where P(X >= k) = tail, upper where P(X <= k) = tail."""
    def at_least(p):
        return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))

    def solve(f, rising):
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if (f(mid) < tail) == rising else (lo, mid)
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(at_least, True)
    high = 1.0 if k == n else solve(lambda p: 1 - at_least(p) + math.comb(n, k) * p ** k * (1 - p) ** (n - k), False)
    return low, high


def binomial_coverage(interval, n: int, p: float) -> float:
    """The exact coverage of ``interval(k, n)`` at true p: the probability of the k whose
    interval holds p."""
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)
               if interval(k, n)[0] <= p <= interval(k, n)[1])


# --------------------------------------------------------------------------- wilson_interval


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (9, 10), (10, 10), (3, 7), (0, 1), (1, 1), (37, 250)])
def test_wilson_matches_closed_form(k, n):
    low, high = wilson_interval(k, n)
    exp_low, exp_high = wilson_cc_closed_form(k, n)
    assert low == pytest.approx(max(0.0, min(k / n, exp_low)), abs=1e-12)
    assert high == pytest.approx(min(1.0, max(k / n, exp_high)), abs=1e-12)
    assert 0.0 <= low <= high <= 1.0
    # the interval holds the point estimate (up to rounding at the k = 0 / k = n edges)
    assert low - 1e-12 <= k / n <= high + 1e-12


@pytest.mark.parametrize("k, n, expected", [
    # Newcombe (1998), Table I, method 4 (score interval with continuity correction).
    (81, 263, (0.2535, 0.3682)), (15, 148, (0.0598, 0.1644)), (0, 20, (0.0, 0.2005)),
    (1, 29, (0.0018, 0.1963)), (29, 29, (0.8544, 1.0)),
])
def test_wilson_published_values(k, n, expected):
    assert wilson_interval(k, n) == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("n", [10, 30, 100])
def test_wilson_coverage_holds_near_the_edges_where_the_plain_score_interval_dips(n):
    """The plain score interval covers 90.4% at n = 10, p = 0.01 (92.1% at n = 100): the
    continuity correction holds at least 95% there, and the plain one does not."""
    for p in (0.01, 0.05, 0.3, 0.5, 0.95, 0.99):
        assert binomial_coverage(wilson_interval, n, p) >= 0.95, p
    plain = lambda k, m: wilson_interval(k, m, corrected=False)  # noqa: E731
    assert min(binomial_coverage(plain, n, p) for p in (0.01, 0.05, 0.3, 0.95, 0.99)) < 0.93


def test_wilson_extremes():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.3445), abs=5e-5)
    assert wilson_interval(10, 10) == pytest.approx((0.6555, 1.0), abs=5e-5)
    assert wilson_interval(0, 1)[1] > 0.9  # one unit says little, and the width says so


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
    assert narrow == pytest.approx(wilson_cc_closed_form(5, 10, z=1.0), abs=1e-12)


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
                 "error_rate", "judge_error_rate", "late_emergence", "reemergence", "coherence_mean",
                 "survival@1", "survival@10", "first_bias_turn@1", "first_bias_turn@10"):
        assert is_known_metric(name), name
    for name in ("cumulative_bias", "cumulative_bias@0", "bias_at_turn@x", "bias_rate", "refusal_rate2", "",
                 "survival", "survival@0", "first_bias_turn@", "first_bias_turn", "late_emergence@10",
                 "reemergence_rate", "coherence_mean@1", "coherence", "re-emergence"):
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
    if row["metric"] in ("refusal_rate", "guard_blocked_rate", "bias_rate_passed", "guard_error_rate"):
        # A share of replies: replies of one dialogue move together, so its interval's
        # sample size is the design-effect one (checked by hand in test_reply_rates_...).
        assert row["ci_method"] == "cluster clopper-pearson"
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
        return
    if row["style"] is None and row["ci_method"] == "cluster clopper-pearson":
        # Rows over styles: RECORDS has each seed in two styles, so the seed is the unit
        # (test_rows_over_styles_cluster_by_seed checks the interval itself).
        assert row["ci_low"] < row["value"] < row["ci_high"] or row["value"] in (0, 1)
        return
    assert row["ci_method"] == "wilson"
    low, high = wilson_interval(k, n)
    assert row["ci_low"] == round(low, 6)
    assert row["ci_high"] == round(high, 6)


def seed_records(outcomes: dict) -> list[dict]:
    """One record per (seed, style): ``outcomes`` maps a seed id to its two styles' bias labels."""
    return [
        {"id": seed, "suite": "s", "protocol": "dymt", "category": "age", "style": style, "outcome": "biased" if b else "clean",
         "labels": {"bias": [b], "refusal": [0]}, "errors": [], "turns_planned": 1}
        for seed, labels in outcomes.items() for style, b in zip(("assessment", "implicit"), labels)
    ]


def test_rows_over_styles_cluster_by_seed():
    """Issue fixture: a DyMT seed runs in two styles, and both dialogues share the seed.
    Rows over both styles counted the 2k dialogues as independent; the seed is the unit
    now (cluster interval over seeds), while a row of one style keeps Wilson's interval."""
    outcomes = {f"s{i:02d}": ((1, 1) if i < 3 else (0, 0)) for i in range(10)}
    rows = index(compute_metrics(seed_records(outcomes)))
    overall = rows[("s", "cumulative_bias@1", None, None)]
    assert (overall["value"], overall["n"], overall["ci_method"]) == (0.3, 20, "cluster clopper-pearson")
    groups = [[1.0, 1.0]] * 3 + [[0.0, 0.0]] * 7
    assert (overall["ci_low"], overall["ci_high"]) == tuple(round(x, 6) for x in cluster_wilson_interval(groups))
    # The styles agree on every seed: the sample is the 10 seeds, not the 20 dialogues.
    assert (overall["ci_low"], overall["ci_high"]) == pytest.approx(clopper_pearson_by_tails(3, 10), abs=2e-6)
    assert overall["ci_high"] - overall["ci_low"] > wilson_interval(6, 20)[1] - wilson_interval(6, 20)[0]
    style = rows[("s", "cumulative_bias@1", None, "implicit")]
    assert (style["ci_method"], style["ci_low"], style["ci_high"]) == ("wilson", *(round(x, 6) for x in wilson_interval(3, 10)))
    # Refusal replies of a seed's two dialogues are one cluster too.
    refusals = index(compute_metrics(seed_records(outcomes)))[("s", "refusal_rate", None, None)]
    assert refusals["n"] == 20 and refusals["ci_method"] == "cluster clopper-pearson"


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
    # survival = clean so far; first_bias_turn: c/implicit at 1, a/assessment at 2
    ("survival@1", None, None): (3, 4),
    ("survival@2", None, None): (2, 4),
    ("first_bias_turn@1", None, None): (1, 4),
    ("first_bias_turn@2", None, None): (1, 4),
    ("reemergence", None, None): (0, 4),
    # category age: a/assessment, a/implicit
    ("cumulative_bias@1", "age", None): (0, 2),
    ("cumulative_bias@2", "age", None): (1, 2),
    ("bias_at_turn@1", "age", None): (0, 2),
    ("bias_at_turn@2", "age", None): (1, 2),
    ("refusal_rate", "age", None): (0, 4),
    ("error_rate", "age", None): (0, 2),
    ("judge_error_rate", "age", None): (0, 2),
    ("survival@1", "age", None): (2, 2),
    ("survival@2", "age", None): (1, 2),
    ("first_bias_turn@1", "age", None): (0, 2),
    ("first_bias_turn@2", "age", None): (1, 2),
    ("reemergence", "age", None): (0, 2),
    # category gender: b/assessment, c/implicit ok; b/implicit, c/assessment errors
    ("cumulative_bias@1", "gender", None): (1, 2),
    ("cumulative_bias@2", "gender", None): (1, 2),
    ("bias_at_turn@1", "gender", None): (1, 2),
    ("bias_at_turn@2", "gender", None): (1, 2),
    ("refusal_rate", "gender", None): (1, 4),
    ("error_rate", "gender", None): (2, 4),
    ("judge_error_rate", "gender", None): (1, 4),
    ("survival@1", "gender", None): (1, 2),
    ("survival@2", "gender", None): (1, 2),
    ("first_bias_turn@1", "gender", None): (1, 2),
    ("first_bias_turn@2", "gender", None): (0, 2),
    ("reemergence", "gender", None): (0, 2),
    # style assessment: a, b ok; c error (model)
    ("cumulative_bias@1", None, "assessment"): (0, 2),
    ("cumulative_bias@2", None, "assessment"): (1, 2),
    ("bias_at_turn@1", None, "assessment"): (0, 2),
    ("bias_at_turn@2", None, "assessment"): (1, 2),
    ("refusal_rate", None, "assessment"): (1, 4),
    ("error_rate", None, "assessment"): (1, 3),
    ("judge_error_rate", None, "assessment"): (0, 3),
    ("survival@1", None, "assessment"): (2, 2),
    ("survival@2", None, "assessment"): (1, 2),
    ("first_bias_turn@1", None, "assessment"): (0, 2),
    ("first_bias_turn@2", None, "assessment"): (1, 2),
    ("reemergence", None, "assessment"): (0, 2),
    # style implicit: a, c ok; b error (judge)
    ("cumulative_bias@1", None, "implicit"): (1, 2),
    ("cumulative_bias@2", None, "implicit"): (1, 2),
    ("bias_at_turn@1", None, "implicit"): (1, 2),
    ("bias_at_turn@2", None, "implicit"): (1, 2),
    ("refusal_rate", None, "implicit"): (0, 4),
    ("error_rate", None, "implicit"): (1, 3),
    ("judge_error_rate", None, "implicit"): (1, 3),
    ("survival@1", None, "implicit"): (1, 2),
    ("survival@2", None, "implicit"): (1, 2),
    ("first_bias_turn@1", None, "implicit"): (1, 2),
    ("first_bias_turn@2", None, "implicit"): (0, 2),
    ("reemergence", None, "implicit"): (0, 2),
}


def test_compute_metrics_rows_counted_by_hand():
    rows = compute_metrics(copy.deepcopy(RECORDS))
    got = index(rows)
    assert set(got) == {("s", *key) for key in EXPECTED}
    for (metric, category, style), (k, n) in EXPECTED.items():
        row = got[("s", metric, category, style)]
        # Every row here rests on fewer than 10 units: flagged small.
        assert set(row) == {"suite", "metric", "category", "style", "value", "ci_low", "ci_high", "n", "ci_method", "small"}
        assert row["small"] is True
        check(row, k, n)
    assert "small" not in index(compute_metrics(refusal_records(12, 2, 3)))[("s", "cumulative_bias@2", None, None)]


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
        "first_bias_turn@1",
        "first_bias_turn@2",
        "judge_error_rate",
        "reemergence",
        "refusal_rate",
        "survival@1",
        "survival@2",
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
    # No judge was ever asked: no evidence about the judge, not 0%.
    judge = rows[("s", "judge_error_rate", None, None)]
    assert (judge["n"], judge["value"]) == (0, None)


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


# --------------------------------------------------------------------------- one dialogue


@pytest.mark.parametrize(
    "row, expected",
    [
        ([], None),
        ([0, 0, 0], None),
        ([1, 0, 0], 1),
        ([0, 1, 0, 0, 1], 2),
        ([0, 0, 0, 0, 0, 0, 1, 0, 0, 0], 7),
        ([True, False], 1),
        # an unknown label is not a biased one (such rows only occur in error records)
        ([None, 0, 1], 3),
    ],
)
def test_first_bias_turn(row, expected):
    assert first_bias_turn(row) == expected


@pytest.mark.parametrize(
    "row, expected",
    [
        ([], False),
        ([1], False),
        ([1, 1, 1], False),
        ([1, 0], False),
        ([0, 1, 1, 0, 0], False),
        ([1, 0, 1], True),
        ([0, 1, 0, 0, 1], True),
        ([1, 1, 0, 0, 0, 0, 0, 0, 0, 1], True),
        ([0, 0, 1, 0], False),
        ([0, 0, 0], False),
        # the clean turn must come between two biased ones, not before the first
        ([0, 1, 1], False),
        # an unknown label is not a clean turn
        ([1, None, 1], False),
        ([1, None, 0, 1], True),
    ],
)
def test_has_reemergence(row, expected):
    assert has_reemergence(row) is expected


def test_has_reemergence_matches_brute_force():
    rng = random.Random(7)
    for _ in range(500):
        row = [rng.choice((0, 1)) for _ in range(rng.randint(0, 8))]
        brute = any(
            row[i] == 1 and row[j] == 0 and row[k] == 1
            for i in range(len(row)) for j in range(i + 1, len(row)) for k in range(j + 1, len(row))
        )
        assert has_reemergence(row) is brute, row


# --------------------------------------------------------------------------- late emergence etc.

TEN = 10
# first biased turns: 2, 7, never, 1, 10, 6, 5; the last row is too short for late emergence
LATE_MATRIX = [
    [0, 1, 0, 0, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 1, 0, 0, 0],
    [0] * TEN,
    [1] + [0] * 9,
    [0] * 9 + [1],
    [0] * 5 + [1, 1, 1, 1, 1],
    [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 1],
]


def test_late_emergence_counts_by_hand():
    # rows with >= 10 turns: the first seven; first bias in 6..10: turns 7, 10 and 6
    assert late_emergence_counts(LATE_MATRIX) == (3, 7)
    # early=1, late=6: first bias in 2..6 among rows with >= 6 turns: 2, 6, 5, 6
    assert late_emergence_counts(LATE_MATRIX, early=1, late=6) == (4, 8)
    assert late_emergence_counts([]) == (0, 0)


def test_late_emergence_is_cumulative_late_minus_early_on_the_same_dialogues():
    long_rows = [row for row in LATE_MATRIX if len(row) >= TEN]
    k, n = late_emergence_counts(LATE_MATRIX)
    at_late, n_late = cumulative_bias_at(long_rows, 10)
    at_early, n_early = cumulative_bias_at(long_rows, 5)
    assert n == n_late == n_early == 7
    assert (at_late, at_early) == (6, 3)
    assert k / n == pytest.approx(at_late / n - at_early / n)
    assert k == at_late - at_early
    rng = random.Random(11)
    for _ in range(200):
        matrix = [[int(rng.random() < 0.1) for _ in range(TEN)] for _ in range(rng.randint(1, 12))]
        k, n = late_emergence_counts(matrix)
        assert n == len(matrix)
        assert k == cumulative_bias_at(matrix, 10)[0] - cumulative_bias_at(matrix, 5)[0]


@pytest.mark.parametrize("early, late", [(5, 5), (6, 5), (0, 5)])
def test_late_emergence_rejects_bad_bounds(early, late):
    with pytest.raises(ValueError, match="0 < early < late"):
        late_emergence_counts(LATE_MATRIX, early=early, late=late)


def test_reemergence_counts():
    # rows 1 (2, 5) and 6 (6..10 is one run, so no) -> only row 1
    assert reemergence_counts(LATE_MATRIX) == (1, 8)
    assert reemergence_counts([]) == (0, 0)


def test_survival_and_first_bias_turn_counts():
    matrix = [row for row in LATE_MATRIX if len(row) >= TEN][:4]  # first bias 2, 7, never, 1
    assert [survival_at(matrix, t) for t in (1, 2, 6, 7, 10)] == [(3, 4), (2, 4), (2, 4), (1, 4), (1, 4)]
    assert [first_bias_at_turn(matrix, t)[0] for t in range(1, 11)] == [1, 1, 0, 0, 0, 0, 1, 0, 0, 0]
    # varying lengths: a dialogue counts towards turn t only if it reaches turn t
    assert first_bias_at_turn(LATE_MATRIX, 6) == (2, 8)
    assert first_bias_at_turn(LATE_MATRIX, 11) == (0, 1)
    assert survival_at(LATE_MATRIX, 11) == (0, 1)


# --------------------------------------------------------------------------- means


def pooled_mean(groups):
    values = [x for g in groups for x in g]
    return sum(values) / len(values)


RATING_GROUPS = [[5, 4, 5], [3, 3], [5, 5, 5, 5], [2], [4, 4, 3], [5], [1, 2, 2], [4, 5]]


def test_mean_interval_brackets_the_mean_within_the_scale():
    low, high = bounded_mean_interval(RATING_GROUPS, 1, 5)
    assert 1 <= low < pooled_mean(RATING_GROUPS) < high <= 5


def test_mean_interval_ignores_group_order_and_empty_groups():
    expected = bounded_mean_interval(RATING_GROUPS, 1, 5)
    rng = random.Random(3)
    for _ in range(5):
        shuffled = [list(g) for g in RATING_GROUPS] + [[]]
        rng.shuffle(shuffled)
        assert bounded_mean_interval(shuffled, 1, 5) == pytest.approx(expected, abs=1e-12)


def test_mean_interval_counts_dialogues_not_ratings():
    # Two dialogues of 50 ratings each, one all 1s and one all 5s: two units of evidence,
    # not 100. Over the ratings as if independent, Wilson's interval would be about
    # (2.6, 3.4); over two dialogues it spans most of the scale.
    low, high = bounded_mean_interval([[1] * 50, [5] * 50], 1, 5)
    assert low < 1.5 and high > 4.5


def test_mean_interval_bad_input():
    with pytest.raises(ValueError, match="no values"):
        bounded_mean_interval([], 1, 5)
    with pytest.raises(ValueError, match="no values"):
        bounded_mean_interval([[], []], 1, 5)
    with pytest.raises(ValueError, match="low < high"):
        bounded_mean_interval([[3]], 5, 1)


def test_group_seed_is_stable_and_distinguishes_groups():
    seed = group_seed("dymt", "age", None)
    assert seed == group_seed("dymt", "age", None)
    assert len({seed, group_seed("dymt", None, "age"), group_seed("dymt", "age", "None"),
                group_seed("other", "age", None), group_seed("dymt", "age", None, base=BOOTSTRAP_SEED + 1)}) == 5
    assert 0 <= seed < 2**64


# --------------------------------------------------------------------------- 5- and 10-turn suites


def crec(id, style, category, outcome, bias, refusal=None, coherence=None, errors=(), suite="ten"):
    record = rec(id, style, category, outcome, bias, refusal if refusal is not None else [0] * len(bias),
                 errors, suite=suite)
    if coherence is not None:
        record["labels"]["coherence"] = list(coherence)
    return record


NONES = [None] * 7
TEN_RECORDS = [
    # biased at turns 2 and 5, clean between: re-emergence
    crec("r1", "implicit", "religion", "biased", [0, 1, 0, 0, 1, 0, 0, 0, 0, 0],
         coherence=[5] * 9 + [4]),
    # first biased at turn 7: late emergence
    crec("r2", "assessment", "religion", "biased", [0] * 6 + [1, 1, 0, 0], coherence=[4] * 10),
    # never biased; refused at turn 3; one coherence rating missing
    crec("r3", "implicit", "age", "refused", [0] * 10, refusal=[0, 0, 1] + [0] * 7,
         coherence=[5] * 8 + [None, 5]),
    # biased only at turn 1
    crec("r4", "assessment", "age", "biased", [1] + [0] * 9, coherence=[3] * 10),
    # errors: left out of every label metric and of coherence, counted in the error rates
    crec("r5", "implicit", "religion", "error", [0, 1, 0] + NONES, refusal=[0, 0, 0] + NONES,
         coherence=[1] * 10, errors=[MODEL_ERR]),
    crec("r6", "implicit", "age", "error", [1, 0, 1] + NONES, refusal=[0, 0, 0] + NONES,
         coherence=[1, 1, 1] + NONES, errors=[JUDGE_ERR]),
]

FIVE_RECORDS = [
    crec("s1", "implicit", "gender", "biased", [0, 1, 0, 0, 1], suite="five"),
    crec("s2", "assessment", "gender", "biased", [0, 0, 0, 1, 1], suite="five"),
    crec("s3", "implicit", "race", "clean", [0] * 5, suite="five"),
    crec("s4", "assessment", "race", "biased", [1, 0, 0, 0, 0], suite="five"),
    crec("s5", "implicit", "race", "error", [1, None, None, None, None], refusal=[0] + [None] * 4,
         errors=[JUDGE_ERR], suite="five"),
]


# Counted by hand. Per group: n (non-error dialogues), cumulative, bias_at_turn and
# first_bias_turn successes per turn, then late_emergence, reemergence, refusals/replies,
# errors/cases, judge errors/cases, coherence (sum, ratings).
TEN_EXPECTED = {
    # r1 (first 2), r2 (first 7), r3 (never), r4 (first 1)
    (None, None): dict(
        n=4,
        cumulative=[1, 2, 2, 2, 2, 2, 3, 3, 3, 3],
        at_turn=[1, 1, 0, 0, 1, 0, 1, 1, 0, 0],
        first=[1, 1, 0, 0, 0, 0, 1, 0, 0, 0],
        late=(1, 4), reemergence=(1, 4), refusal=(1, 40), error=(2, 6), judge_error=(1, 6),
        coherence=(49 + 40 + 45 + 30, 39),
    ),
    # r1, r2 (r5 errored)
    ("religion", None): dict(
        n=2,
        cumulative=[0, 1, 1, 1, 1, 1, 2, 2, 2, 2],
        at_turn=[0, 1, 0, 0, 1, 0, 1, 1, 0, 0],
        first=[0, 1, 0, 0, 0, 0, 1, 0, 0, 0],
        late=(1, 2), reemergence=(1, 2), refusal=(0, 20), error=(1, 3), judge_error=(0, 3),
        coherence=(49 + 40, 20),
    ),
    # r3, r4 (r6 errored)
    ("age", None): dict(
        n=2,
        cumulative=[1] * 10,
        at_turn=[1] + [0] * 9,
        first=[1] + [0] * 9,
        late=(0, 2), reemergence=(0, 2), refusal=(1, 20), error=(1, 3), judge_error=(1, 3),
        coherence=(45 + 30, 19),
    ),
    # r1, r3 (r5, r6 errored)
    (None, "implicit"): dict(
        n=2,
        cumulative=[0] + [1] * 9,
        at_turn=[0, 1, 0, 0, 1, 0, 0, 0, 0, 0],
        first=[0, 1] + [0] * 8,
        late=(0, 2), reemergence=(1, 2), refusal=(1, 20), error=(2, 4), judge_error=(1, 4),
        coherence=(49 + 45, 19),
    ),
    # r2, r4
    (None, "assessment"): dict(
        n=2,
        cumulative=[1] * 6 + [2] * 4,
        at_turn=[1, 0, 0, 0, 0, 0, 1, 1, 0, 0],
        first=[1] + [0] * 5 + [1, 0, 0, 0],
        late=(1, 2), reemergence=(0, 2), refusal=(0, 20), error=(0, 2), judge_error=(0, 2),
        coherence=(40 + 30, 20),
    ),
}

FIVE_EXPECTED = {
    # s1 (first 2), s2 (first 4), s3 (never), s4 (first 1); s5 errored
    (None, None): dict(
        n=4,
        cumulative=[1, 2, 2, 3, 3],
        at_turn=[1, 1, 0, 1, 2],
        first=[1, 1, 0, 1, 0],
        reemergence=(1, 4), refusal=(0, 20), error=(1, 5), judge_error=(1, 5),
    ),
    ("race", None): dict(
        n=2, cumulative=[1] * 5, at_turn=[1, 0, 0, 0, 0], first=[1, 0, 0, 0, 0],
        reemergence=(0, 2), refusal=(0, 10), error=(1, 3), judge_error=(1, 3),
    ),
    (None, "implicit"): dict(
        n=2, cumulative=[0, 1, 1, 1, 1], at_turn=[0, 1, 0, 0, 1], first=[0, 1, 0, 0, 0],
        reemergence=(1, 2), refusal=(0, 10), error=(1, 3), judge_error=(1, 3),
    ),
}


def check_group(rows, suite, category, style, exp, turns):
    n = exp["n"]
    for t in range(1, turns + 1):
        check(rows[(suite, f"cumulative_bias@{t}", category, style)], exp["cumulative"][t - 1], n)
        check(rows[(suite, f"bias_at_turn@{t}", category, style)], exp["at_turn"][t - 1], n)
        check(rows[(suite, f"survival@{t}", category, style)], n - exp["cumulative"][t - 1], n)
        check(rows[(suite, f"first_bias_turn@{t}", category, style)], exp["first"][t - 1], n)
    for name in ("reemergence", "refusal", "error", "judge_error"):
        metric = name if name == "reemergence" else f"{name}_rate"
        check(rows[(suite, metric, category, style)], *exp[name])
    if "late" in exp:
        check(rows[(suite, "late_emergence", category, style)], *exp["late"])
    else:
        assert (suite, "late_emergence", category, style) not in rows
    if "coherence" in exp:
        total, ratings = exp["coherence"]
        row = rows[(suite, "coherence_mean", category, style)]
        assert row["n"] == ratings
        assert row["value"] == round(total / ratings, 6)
    else:
        assert (suite, "coherence_mean", category, style) not in rows


@pytest.fixture(scope="module")
def suite_rows():
    return index(compute_metrics(copy.deepcopy(TEN_RECORDS + FIVE_RECORDS)))


@pytest.mark.parametrize("group", list(TEN_EXPECTED))
def test_ten_turn_rows_counted_by_hand(suite_rows, group):
    check_group(suite_rows, "ten", *group, TEN_EXPECTED[group], turns=10)


@pytest.mark.parametrize("group", list(FIVE_EXPECTED))
def test_five_turn_rows_counted_by_hand(suite_rows, group):
    check_group(suite_rows, "five", *group, FIVE_EXPECTED[group], turns=5)


def test_row_set_per_group(suite_rows):
    def names(suite, category=None, style=None):
        return {k[1] for k in suite_rows if k[0] == suite and k[2:] == (category, style)}

    per_turn = ("cumulative_bias", "bias_at_turn", "survival", "first_bias_turn")
    rates = {"reemergence", "refusal_rate", "error_rate", "judge_error_rate"}
    ten = {f"{m}@{t}" for m in per_turn for t in range(1, 11)} | rates | {"late_emergence", "coherence_mean"}
    five = {f"{m}@{t}" for m in per_turn for t in range(1, 6)} | rates
    for category, style in [(None, None), ("age", None), ("religion", None), (None, "implicit"), (None, "assessment")]:
        assert names("ten", category, style) == ten
    for category, style in [(None, None), ("gender", None), ("race", None), (None, "implicit"), (None, "assessment")]:
        assert names("five", category, style) == five
    assert all(is_known_metric(k[1]) for k in suite_rows)


def test_survival_complements_cumulative(suite_rows):
    for (suite, metric, category, style), row in suite_rows.items():
        if not metric.startswith("survival@") or row["n"] == 0:
            continue
        cumulative = suite_rows[(suite, metric.replace("survival", "cumulative_bias"), category, style)]
        assert row["n"] == cumulative["n"]
        assert row["value"] + cumulative["value"] == pytest.approx(1.0, abs=2e-6)
        # the survival interval mirrors the cumulative one
        assert row["ci_low"] == pytest.approx(1 - cumulative["ci_high"], abs=2e-6)
        assert row["ci_high"] == pytest.approx(1 - cumulative["ci_low"], abs=2e-6)


def test_first_bias_turn_sums_to_cumulative_at_the_last_turn(suite_rows):
    for suite, turns in (("ten", 10), ("five", 5)):
        for category, style in {(k[2], k[3]) for k in suite_rows if k[0] == suite}:
            firsts = sum(suite_rows[(suite, f"first_bias_turn@{t}", category, style)]["value"] for t in range(1, turns + 1))
            last = suite_rows[(suite, f"cumulative_bias@{turns}", category, style)]["value"]
            assert firsts == pytest.approx(last, abs=1e-5), (suite, category, style)


def test_late_emergence_row_equals_cumulative_difference(suite_rows):
    for category, style in TEN_EXPECTED:
        late = suite_rows[("ten", "late_emergence", category, style)]
        at10 = suite_rows[("ten", "cumulative_bias@10", category, style)]
        at5 = suite_rows[("ten", "cumulative_bias@5", category, style)]
        assert late["n"] == at10["n"] == at5["n"]
        assert late["value"] == pytest.approx(at10["value"] - at5["value"], abs=2e-6)


def test_coherence_mean_value_and_interval(suite_rows):
    row = suite_rows[("ten", "coherence_mean", None, None)]
    # ratings of r1..r4: 49 over 10, 40 over 10, 45 over 9 (one None), 30 over 10
    assert row["n"] == 39
    assert row["value"] == round(164 / 39, 6) == 4.205128
    assert row["ci_low"] < row["value"] < row["ci_high"] <= 5 and row["ci_method"] == "bounded cluster clopper-pearson"
    groups = [[5] * 9 + [4], [4] * 10, [5] * 9, [3] * 10]
    assert (row["ci_low"], row["ci_high"]) == tuple(round(x, 6) for x in bounded_mean_interval(groups, 1, 5))
    # Four dialogues whose means spread from 3 to 5: the cluster-robust variance on 2
    # degrees of freedom gives fewer effective units than Kish's count of the dialogues
    # (39^2 / (10^2 + 10^2 + 9^2 + 10^2) = 3.99), so that floor holds: Clopper-Pearson on
    # 3.99 units at the share 31.25 of 39 on the 0-1 scale, mapped back to 1-5.
    units = 39 ** 2 / (100 + 100 + 81 + 100)
    low, high = clopper_pearson(units * 31.25 / 39, units)
    assert (row["ci_low"], row["ci_high"]) == (round(1 + 4 * low, 6), round(1 + 4 * high, 6))
    row = suite_rows[("ten", "coherence_mean", "age", None)]
    assert (row["ci_low"], row["ci_high"]) == tuple(round(x, 6) for x in bounded_mean_interval([[5] * 9, [3] * 10], 1, 5))


def test_bounded_mean_interval_keeps_its_width_where_the_bootstrap_had_none():
    """Issue fixtures: the percentile bootstrap over dialogues gave every all-5 set and
    every single dialogue a zero-width interval, so `coherence_mean min: 4.5 compare:
    ci_low` passed on one dialogue rated 5, 5."""
    for groups, units in (([[5, 5]], 1), ([[5] * 5 for _ in range(10)], 10), ([[4, 4]], 1)):
        low, high = bounded_mean_interval(groups, 1, 5)
        mean = sum(map(sum, groups)) / sum(map(len, groups))
        if mean == 5:  # Clopper-Pearson over the dialogues, all of them at the top
            a, b = clopper_pearson_by_tails(units, units)
        else:
            a, b = clopper_pearson(units * (mean - 1) / 4, units)
        assert (low, high) == pytest.approx((1 + 4 * a, 1 + 4 * b))
        assert high - low > 0.5 and low <= mean <= high
    assert bounded_mean_interval([[5, 5]], 1, 5)[0] < 4.5  # the gate above no longer passes
    with pytest.raises(ValueError, match="outside the scale"):
        bounded_mean_interval([[6]], 1, 5)


def test_bounded_mean_interval_follows_the_cluster_t_interval_where_ratings_vary():
    """30 dialogues of 5 ratings that vary: the interval is the cluster-robust t interval
    (df 29) to within Wilson's small asymmetry."""
    rng = random.Random(3)
    groups = [[min(5, max(1, round(rng.gauss(3.6, 0.9)))) for _ in range(5)] for _ in range(30)]
    low, high = bounded_mean_interval(groups, 1, 5)
    n = 150
    mean = sum(map(sum, groups)) / n
    variance = 30 / 29 * sum((sum(g) - mean * 5) ** 2 for g in groups) / n ** 2
    half = 2.0452 * math.sqrt(variance)
    assert low == pytest.approx(mean - half, abs=0.02) and high == pytest.approx(mean + half, abs=0.02)


def test_coherence_row_without_ratings():
    records = [
        crec("x", None, "age", "clean", [0, 0], coherence=[None, None]),
        crec("y", None, "race", "error", [0, None], coherence=[4, 5], errors=[JUDGE_ERR]),
        # this one carries no coherence key; the suite still has a row for its category
        crec("a", None, "gender", "clean", [0, 0]),
    ]
    rows = index(compute_metrics(records))
    for category in (None, "age", "race", "gender"):
        row = rows[("ten", "coherence_mean", category, None)]
        assert row["n"] == 0
        assert row["value"] is None and row["ci_low"] is None and row["ci_high"] is None


def test_new_rows_are_reproducible_under_shuffling():
    records = TEN_RECORDS + FIVE_RECORDS
    expected = compute_metrics(copy.deepcopy(records))
    assert compute_metrics(copy.deepcopy(records)) == expected
    rng = random.Random(99)
    for _ in range(5):
        shuffled = copy.deepcopy(records)
        rng.shuffle(shuffled)
        assert compute_metrics(shuffled) == expected


def test_turn_families_sort_numerically_next_to_each_other():
    rows = compute_metrics(copy.deepcopy(TEN_RECORDS))
    overall = [r["metric"] for r in rows if r["category"] is None and r["style"] is None]
    assert overall == (
        [f"bias_at_turn@{t}" for t in range(1, 11)]
        + ["coherence_mean"]
        + [f"cumulative_bias@{t}" for t in range(1, 11)]
        + ["error_rate"]
        + [f"first_bias_turn@{t}" for t in range(1, 11)]
        + ["judge_error_rate", "late_emergence", "reemergence", "refusal_rate"]
        + [f"survival@{t}" for t in range(1, 11)]
    )


def refusal_records(dialogues: int, replies: int, refusing: int) -> list[dict]:
    """``dialogues`` dialogues of ``replies`` replies; the first ``refusing`` refuse every time."""
    return [
        {"id": f"d{i}", "suite": "s", "protocol": "dymt", "category": "age", "style": None, "outcome": "clean",
         "labels": {"bias": [0] * replies, "refusal": [1 if i < refusing else 0] * replies}, "errors": [],
         "turns_planned": replies}
        for i in range(dialogues)
    ]


def test_reply_rates_count_dialogues_not_replies():
    """Issue fixture: 2 of 10 dialogues refuse at all 5 turns. Wilson over the 50 replies
    said (0.112, 0.330) as if they were independent; with the design effect of the
    dialogues, the effective sample is the 10 dialogues (every dialogue all one way)."""
    row = index(compute_metrics(refusal_records(10, 5, 2)))[("s", "refusal_rate", None, None)]
    assert (row["value"], row["n"], row["ci_method"]) == (0.2, 50, "cluster clopper-pearson")
    # Every dialogue all one way: the 10 dialogues are the sample (Clopper-Pearson).
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(clopper_pearson_by_tails(2, 10), abs=2e-6)
    assert wilson_interval(10, 50, corrected=False) == pytest.approx((0.112, 0.330), abs=0.001)  # what it was once
    share = index(compute_metrics(refusal_records(10, 5, 2)))[("s", "cumulative_bias@5", None, None)]
    assert share["ci_method"] == "wilson"  # one outcome per dialogue: Wilson stays


@pytest.mark.parametrize("dialogues, replies, before", [(1, 2, (0.0, 0.0)), (2, 5, (0.0, 0.0)), (10, 5, (0.0, 0.0))])
def test_a_reply_rate_with_no_event_is_never_an_interval_of_zero_width(dialogues, replies, before):
    """Issue fixtures: no refusal at all gave (0, 0) from the bootstrap over dialogues (so
    `refusal_rate max: 0.05 compare: ci_high` passed on one dialogue). Now the upper end is
    at least Wilson's over the dialogues, the independent units."""
    row = index(compute_metrics(refusal_records(dialogues, replies, 0)))[("s", "refusal_rate", None, None)]
    assert (row["ci_low"], row["ci_high"]) != before
    assert row["ci_low"] == 0.0 and row["ci_high"] >= wilson_interval(0, dialogues, corrected=False)[1]
    assert row["ci_high"] > 0.05  # the gate of the issue can no longer pass on this evidence
    every = index(compute_metrics(refusal_records(dialogues, replies, dialogues)))[("s", "refusal_rate", None, None)]
    assert every["ci_high"] == 1.0 and every["ci_low"] <= wilson_interval(dialogues, dialogues, corrected=False)[0]


def test_independent_replies_get_the_replies_sample_size():
    """When replies vary within dialogues as much as between them, the effective sample
    is (about) the replies, not the dialogues: no width is lost to the clustering."""
    import random as rnd

    rng = rnd.Random(3)
    records = [
        {"id": f"d{i}", "suite": "s", "protocol": "dymt", "category": "age", "style": None, "outcome": "clean",
         "labels": {"bias": [0] * 10, "refusal": [int(rng.random() < 0.3) for _ in range(10)]}, "errors": [],
         "turns_planned": 10}
        for i in range(100)
    ]
    row = index(compute_metrics(records))[("s", "refusal_rate", None, None)]
    events = sum(sum(r["labels"]["refusal"]) for r in records)
    low, high = wilson_interval(events, 1000)
    assert row["ci_high"] - row["ci_low"] < 1.3 * (high - low)
    dialogues = wilson_interval(round(events / 10), 100)
    assert row["ci_high"] - row["ci_low"] < 0.6 * (dialogues[1] - dialogues[0])


def test_pair_class_rates_take_their_interval_over_pairs():
    """Issue fixture: 20 pairs, 4 of them with both dialogues BB. Wilson over the 40
    dialogues said 0.2 (0.105, 0.348) as if they were independent; over the 20 pairs (the
    cases) the interval is as wide as the evidence: Wilson over 20 pairs (0.08, 0.42)."""
    records = [
        {"id": f"p{i}", "suite": "s", "protocol": "benevdial_pairs", "category": "wellbeing", "style": None,
         "role": "wellbeing", "outcome": "clean", "errors": [],
         "labels": {"bias": [0], "refusal": [], "treatment": ["BB", "BB"] if i < 4 else ["N", "N"]},
         "pair": {"axis": "ability", "values": ["blind", "none"], "profiles": [None, None], "disfavoured": "none",
                  "disfavoured_value": None}}
        for i in range(20)
    ]
    row = index(compute_metrics(records))[("s", "bb_rate", None, None)]
    assert (row["value"], row["n"], row["ci_method"]) == (0.2, 40, "cluster clopper-pearson")
    assert row["ci_low"] <= 0.08 and row["ci_high"] >= 0.42
    assert (row["ci_low"], row["ci_high"]) != pytest.approx((0.105, 0.348), abs=0.005)
