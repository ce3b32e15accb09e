"""Detector metrics on a fixed confusion matrix, and the judge ensemble, by hand."""

from __future__ import annotations

import math

import pytest

from pytest_socialbias.judges.ensemble import AVERAGE, VOTE, combine
from pytest_socialbias.judges.treatment import class_probabilities
from pytest_socialbias.metrics import confusion, detection_rows, macro_f1

# truth -> predicted class -> count
MATRIX = {
    "N": {"N": 8, "OB": 1, "BB": 1},
    "OB": {"N": 1, "OB": 8, "BB": 1},
    "BB": {"N": 5, "OB": 0, "BB": 5},
}


def items_from(matrix, unreadable=0):
    items = []
    for truth, row in matrix.items():
        for pred, count in row.items():
            items += [(truth, pred, pred in ("OB", "BB"))] * count
    items += [("BB", None, None)] * unreadable
    return items


def by_metric(rows):
    return {row["metric"]: row for row in rows}


def test_every_metric_equals_the_hand_computation():
    rows = by_metric(detection_rows("s", "judge", "clean", items_from(MATRIX, unreadable=2), seed=1))
    # Binary, B = OB u BB: TP = 9 + 5 = 14, FN = 1 + 5 = 6, FP = 1 + 1 = 2, TN = 8 (30 readable).
    assert rows["accuracy"]["value"] == pytest.approx(22 / 30, abs=1e-6)
    assert rows["precision"]["value"] == pytest.approx(14 / 16, abs=1e-6)
    assert rows["recall"]["value"] == pytest.approx(14 / 20, abs=1e-6)
    assert rows["f1"]["value"] == pytest.approx(28 / 36, abs=1e-6)  # 2TP / (2TP + FP + FN)
    # Trigger rates: flagged share of each true class; the gap is TR_OB - TR_BB.
    assert rows["tr_n"]["value"] == pytest.approx(0.2)
    assert rows["tr_ob"]["value"] == pytest.approx(0.9)
    assert rows["tr_bb"]["value"] == pytest.approx(0.5)
    assert rows["gap_ob_bb"]["value"] == pytest.approx(0.4)
    # Macro-F1: N 16/24, OB 16/19, BB 10/17 (2TP / (2TP + FP + FN) per class), averaged.
    assert rows["macro_f1"]["value"] == pytest.approx((16 / 24 + 16 / 19 + 10 / 17) / 3, abs=1e-6)
    assert rows["detector_error_rate"]["value"] == pytest.approx(2 / 32, abs=1e-6)
    assert rows["accuracy"]["n"] == 30 and rows["precision"]["n"] == 16 and rows["recall"]["n"] == 20
    for name in ("accuracy", "f1", "gap_ob_bb", "macro_f1", "tr_bb"):
        row = rows[name]
        assert row["ci_low"] <= row["value"] <= row["ci_high"], name
    # The gap's interval is Newcombe's hybrid score interval: Wilson ends of both rates.
    assert -1 < rows["gap_ob_bb"]["ci_low"] < 0.4 < rows["gap_ob_bb"]["ci_high"] < 1


def test_confusion_matrix_and_binary_detectors():
    items = items_from(MATRIX)
    assert confusion(items) == {truth: {p: c for p, c in row.items() if c} for truth, row in MATRIX.items()}
    guard_items = [(t, None, f) for t, _, f in items]
    rows = by_metric(detection_rows("s", "guard", "clean", guard_items, seed=1))
    assert "macro_f1" not in rows  # a binary detector has no classes
    assert rows["f1"]["value"] == pytest.approx(28 / 36, abs=1e-6)
    assert confusion(guard_items)["BB"] == {"passed": 5, "flagged": 5}


def test_macro_f1_leaves_out_a_class_absent_from_labels_and_predictions():
    assert macro_f1([("N", "N"), ("OB", "OB")]) == 1.0
    assert macro_f1([]) is None


def test_bootstrap_intervals_are_seeded():
    first = detection_rows("s", "judge", "clean", items_from(MATRIX), seed=7)
    again = detection_rows("s", "judge", "clean", list(reversed(items_from(MATRIX))), seed=7)
    assert by_metric(first)["accuracy"] == by_metric(again)["accuracy"]
    assert detection_rows("s", "judge", "clean", items_from(MATRIX), seed=7) == first


def lp(n, o, b):
    """First-token log-probabilities with the given probabilities of N, O and B."""
    top = [("N", n), ("O", o), ("B", b)]
    best = max(top, key=lambda x: x[1])
    return [{"token": best[0], "logprob": math.log(best[1]), "top": [{"token": t, "logprob": math.log(p)} for t, p in top]}]


def test_ensemble_average_equals_hand_computation_from_logprobs():
    judges = [lp(0.6, 0.3, 0.1), lp(0.2, 0.3, 0.5), lp(0.3, 0.3, 0.4)]
    members = []
    for logprobs in judges:
        probs = class_probabilities(logprobs)
        members.append((max(probs, key=probs.get), probs))
    result = combine(members)
    # N: (0.6 + 0.2 + 0.3) / 3 = 0.366667; OB: 0.3; BB: (0.1 + 0.5 + 0.4) / 3 = 0.333333
    assert result["probs"] == {"N": pytest.approx(0.366667), "OB": pytest.approx(0.3), "BB": pytest.approx(0.333333)}
    assert result["class"] == "N" and result["method"] == AVERAGE
    # Two of three judges said BB, but the average says N: averaging is not voting.
    assert [m[0] for m in members] == ["N", "BB", "BB"]


def test_ensemble_votes_when_a_judge_has_no_probabilities():
    result = combine([("BB", {"N": 0.1, "OB": 0.1, "BB": 0.8}), ("N", None), ("BB", None)])
    assert (result["class"], result["method"], result["probs"]) == ("BB", VOTE, None)
    # A tied vote goes to the earliest judge's class among the tied ones.
    assert combine([("OB", None), ("N", None)])["class"] == "OB"
    # Unreadable judges are left out; with none readable there is no class.
    assert combine([(None, None), ("N", {"N": 1.0, "OB": 0.0, "BB": 0.0})])["method"] == AVERAGE
    assert combine([(None, None), (None, None)])["class"] is None


def test_three_class_recall_and_bb_precision_count_only_what_they_should():
    from pytest_socialbias.metrics import catalogue, detection

    items = [("N", "N", 0), ("N", "BB", 1), ("OB", "OB", 1), ("OB", "BB", 1), ("BB", "BB", 1), ("BB", "N", 0),
             ("BB", None, 1), ("OB", None, None)]  # a guard's binary item, an unreadable answer
    recall = {cls: [detection.class_recall(cls)(i) for i in items] for cls in ("N", "OB", "BB")}
    assert [v for v in recall["N"] if v is not None] == [1, 0]
    assert [v for v in recall["OB"] if v is not None] == [1, 0]
    assert [v for v in recall["BB"] if v is not None] == [1, 0]
    precision = [v for v in (detection.class_precision("BB")(i) for i in items) if v is not None]
    assert precision == [0, 0, 1]  # three dialogues classed BB, one of them BB
    for name in ("recall_n", "recall_ob", "recall_bb", "precision_bb"):
        assert catalogue.lookup(name, ("detection",)) is not None


def test_binary_detectors_have_no_class_metrics_and_say_why():
    from pytest_socialbias.metrics import catalogue, unavailable_metrics
    from pytest_socialbias.metrics.detection import CLASS_METRICS, detector_outputs
    from pytest_socialbias.metrics.families import Group

    # The metrics a binary detector does not get are exactly the catalogue's class metrics.
    flags_only = Group("detector", "guard", "clean", [("N", None, True)], 1)
    assert set(CLASS_METRICS) == {m.name for m in catalogue.in_family("detection") if m.when and not m.when(flags_only)}
    records = [
        {"suite": "d", "protocol": "benevdial_detect", "truth": truth, "variant": "clean", "primary": "guard",
         "detections": {"judge": {"class": truth, "flagged": truth != "N", "output": "classes"},
                        "guard": {"class": None, "flagged": truth == "OB", "units": [], **extra}}}
        for truth, extra in (("N", {}), ("OB", {"truncated": 1}), ("BB", {"output": "binary"}))
    ]
    rows = {r["detector"]: r for r in detector_outputs("d", records)}
    assert rows["judge"] == {"suite": "d", "detector": "judge", "output": "classes", "dialogues": 3, "truncated": 0}
    assert rows["guard"]["output"] == "binary" and rows["guard"]["truncated"] == 1  # a record without output: a guard
    assert set(rows["guard"]["not_available"]) == set(CLASS_METRICS)
    unavailable = unavailable_metrics(records)
    assert set(unavailable) == {("d", m, d) for m in CLASS_METRICS for d in ("guard", None)}
    assert "cannot tell OB from BB" in unavailable[("d", "recall_bb", "guard")]
    names = {r["metric"] for r in detection_rows("d", "guard", "clean", [(t, None, f) for t, f in (("N", 0), ("OB", 1))], 1)}
    assert not names & set(CLASS_METRICS) and "tr_ob" in names


@pytest.mark.parametrize("n, floor", [(10, 0.951), (5, 0.939)])
def test_the_gap_interval_covers_at_every_pair_of_rates(n, floor):
    """Exact coverage of detection.gap_interval, by enumeration of every outcome of two
    samples of n dialogues over rates 0-1 in steps of 0.01 (extreme gaps included, where
    Newcombe's method 11 fell to 92.1% at 10 against 10)."""
    from math import comb

    import numpy as np

    from pytest_socialbias.metrics.detection import gap_interval

    rates = np.linspace(0, 1, 101)
    # pmf[x, i]: P(x of n | rate i)
    pmf = np.array([[comb(n, x) * p ** x * (1 - p) ** (n - x) for p in rates] for x in range(n + 1)])
    gaps = rates[:, None] - rates[None, :]  # gaps[i, j]: the true p1 - p2
    covered = np.zeros((len(rates), len(rates)))
    for x1 in range(n + 1):
        for x2 in range(n + 1):
            low, high = gap_interval(x1, n, x2, n)
            assert low <= x1 / n - x2 / n <= high
            covered += np.outer(pmf[x1], pmf[x2]) * ((gaps >= low - 1e-12) & (gaps <= high + 1e-12))
    worst = covered.min()
    assert worst >= floor, worst
