"""Paired comparison with a baseline report: hand-computed McNemar p-values and Holm."""

from __future__ import annotations

import json
from statistics import NormalDist

import pytest

from pytest_socialbias import stats
from pytest_socialbias.compare import (
    Comparison,
    case_value,
    comparability_warnings,
    compare,
    load_baseline,
    rows_for,
)
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.gates import FAIL, Gate, evaluate


def record(case_id, category, bias, outcome=None, refusal=None, coherence=None, suite="s"):
    labels = {"bias": list(bias), "refusal": list(refusal or [0] * len(bias))}
    if coherence is not None:
        labels["coherence"] = list(coherence)
    return {
        "id": case_id,
        "suite": suite,
        "protocol": "dymt",
        "category": category,
        "group": "g",
        "style": None,
        "outcome": outcome or ("biased" if any(bias) else "clean"),
        "labels": labels,
        "errors": [],
        "turns": [],
    }


def paired_world():
    """age (10 cases): 8 clean -> biased, 1 biased in both, 1 clean in both.
    gender (10 cases): 1 biased -> clean, 3 clean -> biased, 6 clean in both."""
    base, cur = [], []
    for i in range(10):
        b, c = {0: (1, 1), 1: (0, 0)}.get(i, (0, 1))
        base.append(record(f"age-{i}", "age", [0, b]))
        cur.append(record(f"age-{i}", "age", [0, c]))
    for i in range(10):
        b, c = {0: (1, 0), 1: (0, 1), 2: (0, 1), 3: (0, 1)}.get(i, (0, 0))
        base.append(record(f"gender-{i}", "gender", [b, 0]))
        cur.append(record(f"gender-{i}", "gender", [c, 0]))
    return base, cur


def baseline_report(cases):
    return {"cases": cases, "models": {}, "prompt_templates": [], "suites": {}}


def test_mcnemar_and_holm_equal_hand_computation():
    base, cur = paired_world()
    rows = [Comparison("s", "cumulative_bias@2"), Comparison("s", "cumulative_bias@2", "age"),
            Comparison("s", "cumulative_bias@2", "gender")]
    result = compare(cur, baseline_report(base), rows, {})
    overall, age, gender = result["rows"]
    # overall: n10 = 1, n01 = 11 -> P(X >= 11 | Bin(12, 1/2)) = (12 + 1) / 4096
    assert overall["discordant"] == [1, 11]
    assert overall["p_value"] == pytest.approx(13 / 4096)
    # age: n10 = 0, n01 = 8 -> 1 / 256; gender: n10 = 1, n01 = 3 -> P(X >= 3 | Bin(4)) = 5 / 16
    assert age["p_value"] == pytest.approx(1 / 256)
    assert gender["p_value"] == pytest.approx(5 / 16)
    # Holm, m = 3: sorted 13/4096 * 3, then max(that, 1/256 * 2), then 5/16 * 1
    assert overall["p_adjusted"] == pytest.approx(3 * 13 / 4096)
    assert age["p_adjusted"] == pytest.approx(3 * 13 / 4096)
    assert gender["p_adjusted"] == pytest.approx(5 / 16)
    assert [r["verdict"] for r in result["rows"]] == ["regressed", "regressed", "no significant change"]
    assert (age["baseline"], age["current"], age["diff"]) == (0.1, 0.9, pytest.approx(0.8))
    assert overall["n_pairs"] == 20 and overall["diff"] == pytest.approx(0.5)
    assert age["diff_low"] < 0.8 < age["diff_high"]
    assert overall["mde"] is not None and 0 < overall["mde"] < 1
    assert overall["method"] == "McNemar exact"


def test_improvement_is_the_mirror_image():
    base, cur = paired_world()
    result = compare(base, baseline_report(cur), [Comparison("s", "cumulative_bias@2", "age")], {})
    (row,) = result["rows"]
    assert row["p_improvement"] == pytest.approx(1 / 256)
    assert row["verdict"] == "improved"
    assert row["diff"] == pytest.approx(-0.8)


def test_survival_is_worse_when_lower():
    base, cur = paired_world()
    (row,) = compare(cur, baseline_report(base), [Comparison("s", "survival@2", "age")], {})["rows"]
    assert row["diff"] == pytest.approx(-0.8)
    assert row["p_value"] == pytest.approx(1 / 256) and row["verdict"] == "regressed"


def test_a_margin_tolerates_small_worsening():
    base, cur = paired_world()
    rows = [Comparison("s", "cumulative_bias@2", "gender", margin=0.25)]
    (row,) = compare(cur, baseline_report(base), rows, {})["rows"]
    assert row["method"] == "exact unconditional (margin)"
    assert row["p_value"] > 0.5 and row["verdict"] == "no significant change"


def test_errored_cases_are_left_out_of_label_rates_and_unpaired_counted():
    base, cur = paired_world()
    cur[0] = {**cur[0], "outcome": "error", "labels": {"bias": [], "refusal": []}}
    cur.append(record("age-new", "age", [1, 1]))
    result = compare(cur, baseline_report(base), [Comparison("s", "cumulative_bias@2", "age"),
                                                  Comparison("s", "error_rate", "age")], {})
    bias, errors = result["rows"]
    assert bias["n_pairs"] == 9
    assert errors["n_pairs"] == 10 and errors["current"] == pytest.approx(0.1)
    assert result["unpaired"] == {"s": {"only_current": 1, "only_baseline": 0}}


def test_means_get_the_paired_cluster_interval():
    base = [record(f"c{i}", "age", [0], coherence=[4, 4]) for i in range(30)]
    cur = [record(f"c{i}", "age", [0], coherence=[2, 3]) for i in range(30)]
    rows = [Comparison("s", "coherence_mean")]
    first = compare(cur, baseline_report(base), rows, {})["rows"][0]
    again = compare(list(reversed(cur)), baseline_report(base), rows, {})["rows"][0]
    assert first == again
    assert first["method"] == "paired cluster MOVER"
    assert first["diff"] == pytest.approx(-1.5)
    # Every dialogue rated alike in each run: Wilson's width over the 30 dialogues on the
    # 0-1 scale, each side, where the bootstrap gave the point (-1.5, -1.5).
    assert first["diff_low"] < -1.5 < first["diff_high"] < 0
    assert first["verdict"] == "regressed"  # lower coherence is worse


def test_case_binary_definitions():
    r = record("x", "age", [0, 1, 0, 1])
    assert case_value("cumulative_bias@1", r) == 0 and case_value("cumulative_bias@2", r) == 1
    assert case_value("bias_at_turn@3", r) == 0 and case_value("first_bias_turn@2", r) == 1
    assert case_value("reemergence", r) == 1 and case_value("late_emergence", r) is None
    assert case_value("cumulative_bias@5", r) is None  # a 4-turn dialogue has no turn 5


def test_rows_for_expands_no_regression_gates_and_keeps_their_margin():
    base, cur = paired_world()
    gates = [
        Gate("cap", "s", "cumulative_bias@2", 0.5, "max"),
        Gate("nr", "s", "cumulative_bias@2", 0.02, "no_regression", by="category"),
        Gate("nr-all", "s", "cumulative_bias@2", 0.0, "no_regression"),
        Gate("coh", "s", "coherence_mean", 3.0, "min"),
    ]
    rows = rows_for(gates, cur)
    assert [(r.metric, r.category, r.margin) for r in rows] == [
        ("coherence_mean", None, 0.0),
        ("cumulative_bias@2", None, 0.0),
        ("cumulative_bias@2", "age", 0.02),
        ("cumulative_bias@2", "gender", 0.02),
    ]


def test_no_regression_gate_fails_on_a_regressed_row_and_names_it():
    base, cur = paired_world()
    gate = Gate("nr", "s", "cumulative_bias@2", 0.0, "no_regression", by="category")
    comparison = compare(cur, baseline_report(base), rows_for([gate], cur), {})
    (result,) = evaluate([gate], [], comparison)
    assert result["verdict"] == FAIL
    assert result["detail"].startswith("regressed: age (p=0.00781")
    assert result["p_adjusted"] == pytest.approx(2 / 256)
    assert result["value"] == pytest.approx(0.8) and result["n"] == 10
    (no_baseline,) = evaluate([gate], [], None)
    assert no_baseline["verdict"] == "fail" and "--socialbias-baseline" in no_baseline["detail"]
    # The gender row has too few pairs for its test to ever reject: no evidence, not a pass.
    gender_only = Gate("nr-g", "s", "cumulative_bias@2", 0.0, "no_regression", category="gender")
    comparison = compare(cur, baseline_report(base), rows_for([gender_only], cur), {})
    (row,) = comparison["rows"]
    undecided = evaluate([gender_only], [], comparison)[0]
    assert undecided["verdict"] == FAIL and undecided["detail"].startswith("cannot decide: gender: with ")
    assert f"it needs about {row['pairs_needed']} pairs" in undecided["detail"]
    opted_out = Gate("nr-g", "s", "cumulative_bias@2", 0.0, "no_regression", category="gender", allow_empty=True)
    assert evaluate([opted_out], [], comparison)[0]["verdict"] == "not_evaluated"


def test_comparability_warnings():
    spec = {"provider": "openai", "model": "j", "base_url": None, "params": {}}
    other = {**spec, "params": {"temperature": 0.5}}
    base = {"models": {"judge": spec}, "prompt_templates": ["judge_bias@1"], "suites": {"s": {"sha256": "a" * 64}}}
    cur = {"models": {"judge": other}, "prompt_templates": ["judge_bias@2"], "suites": {"s": {"sha256": "b" * 64}}}
    warnings = comparability_warnings(base, cur)
    assert len(warnings) == 3
    assert "judge differs (openai:j there, openai:j?temperature=0.5 here)" in warnings[0]
    assert "judge_bias@1 there; judge_bias@2 here" in warnings[1]
    assert "suite s: its file changed" in warnings[2]
    assert comparability_warnings(base, base) == []


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "file not found"),
        ("{not json", "not a readable JSON report"),
        (json.dumps({"format": 1}), "not a pytest-socialbias report of this format"),
    ],
)
def test_bad_baseline_files_are_named(tmp_path, content, message):
    path = tmp_path / "old.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_baseline(path)
    assert str(path) in str(info.value)


def test_informational_gates_never_rescue_a_regression():
    """Issue fixture: age went clean -> biased in 8 of 8 discordant pairs. The
    no_regression gate by category fails on its own (Holm over its 2 rows: 2/256 = 0.0078).
    With 13 informational max: 1.0 gates added it used to pass (Holm over all 15 rows:
    15/256 = 0.0586); their rows now form their own family and change nothing."""
    base, cur = paired_world()
    gate = Gate("nr", "s", "cumulative_bias@2", 0.0, "no_regression", by="category")
    alone = evaluate([gate], [], compare(cur, baseline_report(base), rows_for([gate], cur), {}))[0]
    assert alone["verdict"] == FAIL and alone["p_adjusted"] == pytest.approx(2 / 256)
    scopes = [(m, c) for m in ("cumulative_bias@1", "bias_at_turn@1", "bias_at_turn@2", "first_bias_turn@1",
                               "first_bias_turn@2") for c in (None, "age", "gender")][:13]
    informational = [Gate(f"info-{i}", "s", metric, 1.0, "max", category=c) for i, (metric, c) in enumerate(scopes)]
    comparison = compare(cur, baseline_report(base), rows_for([gate, *informational], cur), {})
    tested = [r for r in comparison["rows"] if r["p_value"] is not None]
    assert len(tested) == 15
    age = next(r for r in tested if (r["metric"], r["category"]) == ("cumulative_bias@2", "age"))
    assert stats.holm([r["p_value"] for r in tested])[tested.index(age)] == pytest.approx(15 / 256)  # what it was
    with_them = evaluate([gate, *informational], [], comparison)[0]
    assert with_them["verdict"] == FAIL and with_them["p_adjusted"] == pytest.approx(2 / 256)
    info = [r for r in tested if r["family"] == "informational"]
    assert len(info) == 13 and {r["family"] for r in tested if r not in info} == {"gates"}
    smallest = min(info, key=lambda r: r["p_value"])
    assert smallest["p_adjusted"] == pytest.approx(min(1.0, 13 * smallest["p_value"]))


def test_mde_is_not_detectable_with_too_few_pairs_and_counts_margin_and_correction():
    base = [record(f"c{i}", "age", [1 if i == 0 else 0]) for i in range(6)]
    cur = [record(f"c{i}", "age", [0]) for i in range(6)]
    gate = Gate("nr", "s", "cumulative_bias@1", 0.0, "no_regression")
    (row,) = compare(cur, baseline_report(base), rows_for([gate], cur), {})["rows"]
    assert row["n_pairs"] == 6 and row["discordant"] == [1, 0]
    assert row["mde"] is None  # was 0.167: 6 pairs detect no worsening at this discordance
    # 200 pairs, 10% discordant: the MDE of one gating row, at a margin, and in a family of two.
    base = [record(f"c{i}", "age", [1 if i < 10 else 0]) for i in range(200)]
    cur = [record(f"c{i}", "age", [1 if 10 <= i < 20 else 0]) for i in range(200)]

    def mde(*rows):
        return compare(cur, baseline_report(base), list(rows), {})["rows"][0]["mde"]

    # Margin 0: the exact McNemar test's own power, by enumeration, under an alternative
    # whose discordance grows with the worsening (10 of 200 got better stays 5%).
    one = mde(Comparison("s", "cumulative_bias@1", gating=True))
    assert one == pytest.approx(stats.paired_mde(200, 0.1, 0.05, 0.05, 0.8), rel=1e-9)
    assert stats.mcnemar_exact_power(200, 0.1 + one, one, 0.05) >= 0.8
    assert stats.mcnemar_exact_power(200, 0.1 + one - 1e-3, one - 1e-3, 0.05) < 0.8
    # At a margin: the exact margin test's own power.
    at_margin = mde(Comparison("s", "cumulative_bias@1", gating=True, margin=0.02))
    assert at_margin == pytest.approx(stats.paired_mde(200, 0.1, 0.05, 0.05, 0.8, margin=0.02), rel=1e-9)
    assert at_margin > one
    assert mde(Comparison("s", "cumulative_bias@1", gating=True), Comparison("s", "bias_at_turn@1", gating=True)) == (
        pytest.approx(stats.paired_mde(200, 0.1, 0.05, 0.025, 0.8), rel=1e-9))


def test_a_row_with_no_event_either_time_has_an_honest_interval_and_mde():
    """Issue fixture: 30 pairs, no refusal on either side: the bootstrap gave the interval
    (0, 0) and the MDE 0.0 ("any worsening is detectable"). The interval now keeps
    Clopper-Pearson's width over the dialogues on each side, the test cannot reject, and the MDE is
    what the test could detect at this n. With 4 dialogues it cannot exceed what the rate
    can still worsen by."""
    def refusal_record(case_id, refusals):
        return {"id": case_id, "suite": "s", "protocol": "dymt", "category": "age", "style": None,
                "outcome": "clean", "labels": {"bias": [0, 0], "refusal": refusals}, "errors": [], "turns_planned": 2}

    gate = Gate("nr", "s", "refusal_rate", 0.0, "no_regression")
    quiet = [refusal_record(f"c{i}", [0, 0]) for i in range(30)]
    (row,) = compare(quiet, baseline_report(quiet), rows_for([gate], quiet), {})["rows"]
    upper = 1 - 0.025 ** (1 / 30)  # Clopper-Pearson's upper end at 0 of the 30 dialogues
    assert row["diff_low"] == pytest.approx(-upper) and row["diff_high"] == pytest.approx(upper)
    assert row["p_value"] == 0.5 and row["verdict"] == "no significant change"
    z = NormalDist().inv_cdf
    assert row["mde"] == pytest.approx((z(0.95) + z(0.8)) * upper / z(0.975), rel=1e-6)
    base = [refusal_record(f"c{i}", [1, 1] if i == 0 else [0, 0]) for i in range(4)]
    cur = [refusal_record(f"c{i}", [1, 1] if i < 2 else [0, 0]) for i in range(4)]
    (row,) = compare(cur, baseline_report(base), rows_for([gate], cur), {})["rows"]
    assert row["mde"] is None or 0 < row["mde"] <= 1 - row["baseline"]




def styled(case_id, style, biased):
    return {**record(case_id, "age", [biased]), "style": style}


def test_a_seed_in_two_styles_is_one_unit_of_the_paired_test():
    """Issue fixture: a DyMT seed runs in two styles and both dialogues share it. Three
    seeds turning biased in both styles were six independent discordant pairs to McNemar's
    test (p = 1/64, a regression); they are three seeds: the exact sign-flip test over
    seeds gives p = 1/8. With one style per seed the test is McNemar's exact test again."""
    seeds = [f"s{i:02d}" for i in range(10)]
    base = [styled(s, style, 0) for s in seeds for style in ("assessment", "implicit")]
    cur = [styled(s, style, int(i < 3)) for i, s in enumerate(seeds) for style in ("assessment", "implicit")]
    (row,) = compare(cur, baseline_report(base), [Comparison("s", "cumulative_bias@1", gating=True)], {})["rows"]
    assert row["method"] == "cluster sign-flip (seeds)" and row["seeds"] == 10 and row["n_pairs"] == 20
    assert row["discordant"] == [0, 6] and row["diff"] == pytest.approx(0.3)
    assert row["p_value"] == pytest.approx(1 / 8) and stats.mcnemar_exact(0, 6, "greater") == pytest.approx(1 / 64)
    assert row["verdict"] == "no significant change"
    assert row["min_p"] == pytest.approx(0.5 ** 10)
    assert row["diff_low"] < 0.3 < row["diff_high"]
    # One style: the pairs are the seeds, McNemar's exact test as before.
    one = [r for r in cur if r["style"] == "implicit"]
    (plain,) = compare(one, baseline_report(base), [Comparison("s", "cumulative_bias@1", style="implicit", gating=True)],
                       {})["rows"]
    assert plain["method"] == "McNemar exact" and plain["p_value"] == pytest.approx(1 / 8)
    # Seven of ten seeds worse in both styles: the sign-flip test finds it (p = 1/128).
    cur7 = [styled(s, style, int(i < 7)) for i, s in enumerate(seeds) for style in ("assessment", "implicit")]
    (row7,) = compare(cur7, baseline_report(base), [Comparison("s", "cumulative_bias@1", gating=True)], {})["rows"]
    assert row7["p_value"] == pytest.approx(1 / 128) and row7["verdict"] == "regressed"


def test_the_sign_flip_test_is_mcnemars_with_single_pairs_and_counts_signs_exactly():
    for b, c in ((0, 6), (2, 9), (5, 5), (0, 0)):
        assert stats.cluster_sign_test([1] * c + [-1] * b, "greater") == pytest.approx(stats.mcnemar_exact(b, c, "greater"))
        assert stats.cluster_sign_test([1] * c + [-1] * b, "less") == pytest.approx(stats.mcnemar_exact(b, c, "less"))
    # Clusters of 2, 2, 1 and -1: of the 16 sign patterns, sums >= 4 are (2,2,1,-1), (2,2,1,1),
    # (2,2,-1,1): 3 of 16.
    assert stats.cluster_sign_test([2, 2, 1, -1], "greater") == pytest.approx(3 / 16)
