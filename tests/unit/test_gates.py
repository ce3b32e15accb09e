"""Unit tests for gates.py: loading thresholds files and evaluating gates against metric rows."""

from __future__ import annotations

import re
import textwrap

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.gates import FAIL, NOT_EVALUATED, PASS, Gate, evaluate, load_gates


def write(tmp_path, text, name="thresholds.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load_error(path) -> str:
    with pytest.raises(ConfigError) as info:
        load_gates(path)
    return str(info.value)


# --------------------------------------------------------------------------- load_gates: valid

VALID = """
version: 1
gates:
  - name: smoke-cumulative-bias
    suite: smoke
    metric: cumulative_bias@2
    max: 0.5
    compare: ci_high
    description: at most half
  - name: refusals-age
    suite: smoke
    metric: refusal_rate
    category: age
    style: implicit
    min: 0.1
  - name: judge-errors
    suite: smoke
    metric: judge_error_rate
    max: 0
"""


def test_load_valid_file(tmp_path):
    gates = load_gates(write(tmp_path, VALID))
    assert gates == [
        Gate("smoke-cumulative-bias", "smoke", "cumulative_bias@2", 0.5, "max", "ci_high", None, None,
             description="at most half"),
        Gate("refusals-age", "smoke", "refusal_rate", 0.1, "min", "point", "age", "implicit"),
        Gate("judge-errors", "smoke", "judge_error_rate", 0.0, "max", "point", None, None),
    ]
    assert isinstance(gates[2].bound, float)


def test_load_accepts_str_path_and_empty_gate_list(tmp_path):
    path = write(tmp_path, "gates: []\n")
    assert load_gates(str(path)) == []


# --------------------------------------------------------------------------- load_gates: errors


def test_malformed_yaml(tmp_path):
    path = write(
        tmp_path,
        """
        gates:
          - name: a
            suite: [unclosed
            metric: refusal_rate
        """,
    )
    message = load_error(path)
    assert message.startswith(f"{path}:")
    assert re.match(rf"^{re.escape(str(path))}:\d+: ", message)
    assert "not valid YAML" in message


def test_empty_file(tmp_path):
    path = write(tmp_path, "\n# nothing here\n")
    message = load_error(path)
    assert str(path) in message
    assert "empty" in message
    assert "gates: []" in message  # says what to write instead


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    message = load_error(path)
    assert str(path) in message


OK_GATE = "  - name: ok\n    suite: s\n    metric: refusal_rate\n    max: 0.1\n"


def gate(*lines: str) -> str:
    return "  - " + "\n    ".join(lines) + "\n"


def _explanation(message: str, path) -> str:
    # The file name (tmp_path holds the test's name) and jsonschema's quote of the whole gate
    # ({'max': ...}) may mention max/min by accident; the explanation must be outside them.
    return re.sub(r"\{.*\}", "", message.replace(str(path), ""))


@pytest.mark.parametrize("gates, line, needles", [
    pytest.param(OK_GATE + gate("name: no-metric", "suite: s", "max: 0.1"), 6,
                 ["gates[1]", "'metric' is a required property"], id="missing-metric"),
    # At the second bound's line: the key at fault, not the gate's first line.
    pytest.param(gate("name: both", "suite: s", "metric: refusal_rate", "max: 0.5", "min: 0.1"), 6,
                 ["gates[0]", "max", "min"], id="both-max-and-min"),
    pytest.param(gate("name: neither", "suite: s", "metric: refusal_rate"), 2, ["gates[0]", "max", "min"],
                 id="neither-max-nor-min"),
    pytest.param(OK_GATE + gate("name: neither", "suite: s", "metric: refusal_rate"), 6, ["gates[1]", "max", "min"],
                 id="neither-max-nor-min-second-gate"),
    # Lists what is known.
    # At the metric's line, with the spelling it needs.
    pytest.param(OK_GATE + gate("name: typo", "suite: s", "metric: cumulative_bias", "max: 0.1"), 8,
                 ["unknown metric 'cumulative_bias'", "'typo'", "write cumulative_bias@T"], id="unknown-metric"),
    # The second 'same', not the first.
    pytest.param(gate("name: same", "suite: s", "metric: refusal_rate", "max: 0.1")
                 + gate("name: other", "suite: s", "metric: error_rate", "max: 0.1")
                 + gate("name: same", "suite: s", "metric: judge_error_rate", "max: 0.1"), 10,
                 ["duplicate gate name 'same'"], id="duplicate-name"),
    # Says what is allowed.
    pytest.param(gate("name: g", "suite: s", "metric: refusal_rate", "max: 0.1", "compare: median"), 6,
                 ["gates[0].compare", "'median'", "ci_high"], id="bad-compare"),
    pytest.param(gate("name: g", "suite: s", "metric: refusal_rate", "max: high"), 5, ["gates[0].max", "number"],
                 id="bound-not-a-number"),
    pytest.param(gate("name: g", "suite: s", "metric: refusal_rate", "max: .nan"), None, [], id="nan-bound"),
])
def test_a_bad_gate_is_an_error_at_its_line_saying_what_is_wrong(tmp_path, gates, line, needles):
    path = write(tmp_path, "gates:\n" + gates)
    message = load_error(path)
    assert message.startswith(f"{path}:{line}:" if line else f"{path}:")
    explanation = _explanation(message, path)
    for needle in needles:
        assert needle in explanation, (needle, message)


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, "gates: []\ngate: []\n")
    message = load_error(path)
    assert str(path) in message
    assert "'gate'" in message


def test_top_level_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "- name: g\n")
    message = load_error(path)
    assert message.startswith(f"{path}:1:")


# --------------------------------------------------------------------------- evaluate


def row(metric="refusal_rate", value=0.2, low=0.1, high=0.3, n=50, suite="s", category=None, style=None):
    return {
        "suite": suite,
        "metric": metric,
        "category": category,
        "style": style,
        "value": value,
        "ci_low": low,
        "ci_high": high,
        "n": n,
    }


def gate(kind="max", bound=0.25, compare="point", metric="refusal_rate", category=None, style=None, description=None):
    return Gate("g", "s", metric, bound, kind, compare, category, style, description=description)


@pytest.mark.parametrize(
    "kind, bound, compare, verdict",
    [
        # row: value 0.2, ci [0.1, 0.3]
        ("max", 0.25, "point", PASS),
        ("max", 0.15, "point", FAIL),
        ("max", 0.2, "point", PASS),  # equal to the bound is within it
        ("max", 0.25, "ci_high", FAIL),  # strict reading: the CI reaches above the bound
        ("max", 0.35, "ci_high", PASS),
        ("max", 0.15, "ci_low", PASS),  # lenient: not shown to be above the bound
        ("max", 0.05, "ci_low", FAIL),
        ("min", 0.15, "point", PASS),
        ("min", 0.25, "point", FAIL),
        ("min", 0.2, "point", PASS),
        ("min", 0.15, "ci_low", FAIL),
        ("min", 0.05, "ci_low", PASS),
        ("min", 0.25, "ci_high", PASS),
        ("min", 0.35, "ci_high", FAIL),
    ],
)
def test_evaluate_verdicts(kind, bound, compare, verdict):
    [result] = evaluate([gate(kind, bound, compare)], [row()])
    assert result["verdict"] == verdict
    assert result["value"] == 0.2 and result["ci_low"] == 0.1 and result["ci_high"] == 0.3
    assert result["n"] == 50
    assert result["kind"] == kind and result["bound"] == bound and result["compare"] == compare


def test_evaluate_result_fields():
    [result] = evaluate([gate(category="age", style="implicit")], [row(category="age", style="implicit")])
    assert result == {
        "gate": "g",
        "suite": "s",
        "metric": "refusal_rate",
        "category": "age",
        "style": "implicit",
        "kind": "max",
        "bound": 0.25,
        "compare": "point",
        "value": 0.2,
        "ci_low": 0.1,
        "ci_high": 0.3,
        "n": 50,
        "verdict": PASS,
        "detail": None,
        "description": None,
    }
    # The thresholds file's description travels with the verdict (JSON and HTML reports).
    [described] = evaluate([gate(description="why this bound")], [row()])
    assert described["description"] == "why this bound"


def test_a_gate_of_a_suite_that_ran_fails_when_its_metric_is_absent():
    [result] = evaluate([gate(metric="cumulative_bias@3")], [row(metric="cumulative_bias@2", value=1.0)], ran={"s"})
    assert result["verdict"] == FAIL
    assert result["value"] is None and result["n"] == 0
    assert result["detail"].startswith("no evidence: ")


def test_a_gate_of_a_suite_not_run_is_not_evaluated():
    [result] = evaluate([gate()], [row(suite="other", value=1.0)], ran={"other"})
    assert result["verdict"] == NOT_EVALUATED and result["detail"] == "suite not run"


def test_no_evidence_fails_saying_why_and_allow_empty_opts_out():
    evidence = {"s": "0 of 10 case(s) labelled; the others had judge_error (10)"}
    empty = [row(value=None, low=None, high=None, n=0)]
    [result] = evaluate([gate(kind="min", bound=0.5)], empty, ran={"s"}, evidence=evidence)
    assert result["verdict"] == FAIL and result["n"] == 0
    assert result["detail"] == ("no evidence: 0 of 10 case(s) labelled; the others had judge_error (10); a gate "
                                "that cannot decide fails (allow_empty: true opts out)")
    lenient = Gate("g", "s", "refusal_rate", 0.5, "min", allow_empty=True)
    [result] = evaluate([lenient], empty, ran={"s"}, evidence=evidence)
    assert result["verdict"] == NOT_EVALUATED and result["detail"].endswith("(allow_empty: true)")


def test_a_no_regression_gate_needs_a_baseline_or_a_run_that_says_there_is_none():
    regression = Gate("r", "s", "refusal_rate", 0.02, "no_regression")
    [result] = evaluate([regression], [row()], None, ran={"s"})
    assert result["verdict"] == FAIL and "--socialbias-baseline=none for a first release" in result["detail"]
    [result] = evaluate([regression], [row()], None, ran={"s"}, no_baseline_yet=True)
    assert result["verdict"] == NOT_EVALUATED and result["detail"] == "no baseline yet (--socialbias-baseline=none)"
    [result] = evaluate([regression], [row()], {"baseline": "old.json", "rows": []}, ran={"s"})
    assert result["verdict"] == FAIL and "the baseline (old.json) pairs no case of this run" in result["detail"]


def test_evaluate_matches_category_and_style_exactly():
    metrics = [
        row(value=0.9, low=0.8, high=1.0),  # overall: would fail
        row(value=0.1, low=0.0, high=0.2, category="age"),  # age: passes
        row(value=0.9, low=0.8, high=1.0, style="implicit"),
    ]
    [by_category] = evaluate([gate(category="age")], metrics)
    assert by_category["verdict"] == PASS and by_category["value"] == 0.1
    [overall] = evaluate([gate()], metrics)
    assert overall["verdict"] == FAIL and overall["value"] == 0.9
    [missing] = evaluate([gate(category="age", style="implicit")], metrics)
    assert missing["verdict"] == FAIL and missing["detail"].startswith("no evidence")


def test_evaluate_keeps_gate_order_one_row_per_gate():
    gates = [
        Gate("b", "s", "refusal_rate", 0.1, "max"),
        Gate("a", "s", "refusal_rate", 0.5, "max"),
        Gate("c", "s", "error_rate", 0.5, "max"),
    ]
    results = evaluate(gates, [row()])
    assert [r["gate"] for r in results] == ["b", "a", "c"]
    assert [r["verdict"] for r in results] == [FAIL, PASS, FAIL]  # c: no evidence


def test_gate_fails_method():
    assert Gate("g", "s", "m", 0.5, "max").fails(0.51)
    assert not Gate("g", "s", "m", 0.5, "max").fails(0.5)
    assert Gate("g", "s", "m", 0.5, "min").fails(0.49)
    assert not Gate("g", "s", "m", 0.5, "min").fails(0.5)


def test_loaded_gates_evaluate_end_to_end(tmp_path):
    gates = load_gates(write(tmp_path, VALID))
    metrics = [
        row(metric="cumulative_bias@2", suite="smoke", value=0.4, low=0.3, high=0.55),
        row(metric="refusal_rate", suite="smoke", category="age", style="implicit", value=0.2),
        row(metric="judge_error_rate", suite="smoke", value=0.0, low=0.0, high=0.07),
    ]
    verdicts = {r["gate"]: r["verdict"] for r in evaluate(gates, metrics)}
    assert verdicts == {
        "smoke-cumulative-bias": FAIL,  # ci_high 0.55 > 0.5
        "refusals-age": PASS,
        "judge-errors": PASS,
    }


@pytest.mark.parametrize("field, value", [("category", "Age"), ("style", "implicitt")])
def test_unknown_category_or_style_filter_is_an_error(tmp_path, field, value):
    path = tmp_path / "thresholds.yaml"
    path.write_text(
        f"gates:\n  - name: g\n    suite: s\n    metric: refusal_rate\n    {field}: {value}\n    max: 0.1\n"
    )
    with pytest.raises(ConfigError) as info:
        load_gates(path)
    assert f"{path}:5" in str(info.value)  # the line of the key, not of the gate
    assert f"unknown {field} {value!r}" in str(info.value)


# --------------------------------------------------------------------------- no_regression gates


def test_no_regression_gate_loads_margin_alpha_and_by(tmp_path):
    path = write(tmp_path, """
        gates:
          - {name: nr, suite: dymt, metric: cumulative_bias@5, no_regression: true, margin: 0.02, alpha: 0.01, by: category}
          - {name: nr2, suite: dymt, metric: refusal_rate, no_regression: true}
        """)
    first, second = load_gates(path)
    assert (first.kind, first.bound, first.alpha, first.by) == ("no_regression", 0.02, 0.01, "category")
    assert (second.bound, second.alpha, second.by) == (0.0, 0.05, None)


@pytest.mark.parametrize(
    "gate, message",
    [
        ("{name: g, suite: s, metric: refusal_rate, no_regression: true, max: 0.1}", ":2: at gates[0]: gate 'g' needs exactly one bound"),
        ("{name: g, suite: s, metric: refusal_rate, max: 0.1, margin: 0.02}", ":2: at gates[0]: gate 'g': margin only apply to no_regression gates"),
        ("{name: g, suite: s, metric: reemergence, min: 0.1, by: category}", "by only apply to no_regression gates"),
        ("{name: g, suite: judge-check, metric: bias_judge_kappa, no_regression: true}", "'bias_judge_kappa' cannot be compared case by case"),
        ("{name: g, suite: s, metric: refusal_rate, no_regression: true, by: category, category: age}", "by: category compares every category; remove category: 'age'"),
        ("{name: g, suite: s, metric: refusal_rate, no_regression: true, compare: ci_low}", "gates[0]"),
        ("{name: g, suite: s, metric: refusal_rate, no_regression: true, margin: 1.5}", "gates[0]"),
    ],
)
def test_no_regression_gate_errors_name_the_line_and_fix(tmp_path, gate, message):
    path = write(tmp_path, "gates:\n  - " + gate + "\n")
    text = load_error(path)
    assert message in text and str(path) in text


@pytest.mark.parametrize(
    "bound, hint",
    [("30", "(did you mean 0.30?)"), ("-0.3", "(write e.g. 0.30 for 30%)"), ("1.5", "(did you mean 0.015?)")],
)
def test_a_rate_bound_outside_0_1_is_an_error_that_suggests_the_fraction(tmp_path, bound, hint):
    path = write(tmp_path, f"gates:\n  - name: g\n    suite: smoke\n    metric: refusal_rate\n    max: {bound}\n")
    message = load_error(path)
    assert message.startswith(f"{path}:5: gate 'g': max: {bound} is not a rate; refusal_rate is a share between 0 and 1")
    assert message.endswith(hint)


def test_bounds_of_metrics_on_their_own_scale_are_not_rates(tmp_path):
    path = write(tmp_path, "gates:\n  - name: g\n    suite: dymt\n    metric: coherence_mean\n    min: 4.0\n")
    assert load_gates(path)[0].bound == 4.0


def test_a_category_or_style_no_selected_case_has_is_not_evaluated_one_that_failed_is():
    religion = Gate("g", "s", "cumulative_bias@1", 0.3, "max", category="religion")
    implicit = Gate("h", "s", "cumulative_bias@1", 0.3, "max", style="implicit")
    selected = {"s": {"categories": {"age"}, "styles": {"assessment"}}}
    results = evaluate([religion, implicit], [row(metric="cumulative_bias@1")], ran=selected)
    assert [(r["verdict"], r["detail"]) for r in results] == [
        (NOT_EVALUATED, "no religion case selected in this run"),
        (NOT_EVALUATED, "no implicit case selected in this run"),
    ]
    selected = {"s": {"categories": {"age", "religion"}, "styles": {"assessment", "implicit"}}}
    results = evaluate([religion, implicit], [row(metric="cumulative_bias@1")], ran=selected)
    assert [r["verdict"] for r in results] == [FAIL, FAIL]  # selected, but no number: no evidence
