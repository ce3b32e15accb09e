"""Unit tests for aggregate.py: records in, one RunResult out (metrics, gate verdicts,
exit status, notes, partial runs and ungated suites), and its small helpers. The models
are a stand-in (nothing is called); records are smoke-protocol records written here."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pytest_socialbias.aggregate import (
    Aggregator,
    _adaptations,
    evidence_by_suite,
    shown_path,
    turns_by_suite,
)
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.gates import Gate
from pytest_socialbias.judgecheck import BUILTIN_REFERENCE_PATH
from pytest_socialbias.options import Settings

from ..support.helpers import thresholds_yaml


def record(case_id, bias=(0, 0), suite="demo", errors=(), outcome=None, **extra) -> dict:
    outcome = outcome or ("error" if errors else "biased" if any(bias) else "clean")
    return {"suite": suite, "id": case_id, "protocol": "smoke", "category": case_id.split("-")[0], "style": None,
            "turns_planned": 2, "outcome": outcome, "labels": {"bias": list(bias), "refusal": [0] * len(bias)},
            "errors": [dict(e) for e in errors], "turns": [], "usage": {}, **extra}


MODEL_ERROR = {"kind": "model_error", "role": "target", "message": "HTTP 500"}

#: 1 biased of 3 labelled dialogues (the 4th errored): cumulative_bias@2 = 1/3.
RECORDS = [record("gender-002", errors=[MODEL_ERROR], bias=()), record("age-002", bias=(0, 1)),
           record("age-001"), record("gender-001")]


class Models:
    """The part of modelset.ModelSet the aggregator reads."""

    def __init__(self, specs=("target", "judge"), warnings=()):
        self.specs = {role: f"openai:{role[0]}" for role in specs}
        self.uses_local_default = False
        self.warnings = list(warnings)

    def spec_dicts(self) -> dict:
        return {role: {"spec": spec} for role, spec in self.specs.items()}


def gate(bound, suite="demo", name="bias", metric="cumulative_bias@2") -> Gate:
    return Gate(name=name, suite=suite, metric=metric, bound=bound, kind="max")


def aggregate(records=RECORDS, gates=(), settings=None, models=None, gates_file=None, **kwargs):
    aggregator = Aggregator(settings or Settings(), models or Models(), list(gates), gates_file)
    for r in records:
        aggregator.add(dict(r))
    return aggregator, aggregator.aggregate(**kwargs)


def row(result, metric, category=None):
    (found,) = [m for m in result.metrics if (m["metric"], m["category"], m["style"]) == (metric, category, None)]
    return found


# ---- aggregate() -----------------------------------------------------------------------


def test_metrics_come_from_the_records_sorted_whatever_order_they_arrived_in():
    _, result = aggregate()
    assert [r["id"] for r in result.records] == ["age-001", "age-002", "gender-001", "gender-002"]
    bias = row(result, "cumulative_bias@2")
    assert (bias["value"], bias["n"]) == (pytest.approx(1 / 3), 3)  # the errored case is not in n
    assert row(result, "cumulative_bias@2", "age")["value"] == 0.5
    _, again = aggregate(records=list(reversed(RECORDS)))
    assert again.metrics == result.metrics and again.records == result.records


def test_a_gate_the_numbers_pass_exits_0_and_one_they_fail_exits_1():
    _, passed = aggregate(gates=[gate(0.5)])
    assert [(g["gate"], g["verdict"]) for g in passed.gates] == [("bias", "pass")]
    assert not passed.failed and passed.exit_status == 0
    _, failed = aggregate(gates=[gate(0.2)])
    assert [(g["gate"], g["verdict"]) for g in failed.gates] == [("bias", "fail")]
    assert failed.failed and failed.exit_status == 1


def test_failed_items_before_the_aggregation_fail_a_run_whose_gates_pass():
    _, result = aggregate(gates=[gate(0.5)], failures_before=2)
    assert not result.failed and result.exit_status == 1


def test_a_gate_of_a_suite_that_gave_no_labels_fails_with_the_evidence_in_words():
    errored = [record("age-001", errors=[MODEL_ERROR], bias=()), record("age-002", errors=[MODEL_ERROR], bias=())]
    _, result = aggregate(records=errored, gates=[gate(0.5)])
    (verdict,) = result.gates
    assert verdict["verdict"] == "fail" and result.exit_status == 1
    assert "0 of 2 case(s) labelled; the others had model_error (2)" in verdict["detail"]


def test_a_measured_suite_no_gate_names_fails_the_run_unless_declared_ungated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    records = RECORDS + [record("age-001", suite="other")]
    path = tmp_path / "thresholds.yaml"
    path.write_text(thresholds_yaml({"name": "bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.5}))
    _, result = aggregate(records=records, gates=[gate(0.5)], gates_file=path)
    assert result.ungated == ("other",) and result.failed and result.exit_status == 1
    assert result.gates_file == "thresholds.yaml"  # shown relative to the working directory
    assert result.gates_file_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()

    path.write_text(path.read_text() + "ungated:\n  other: measured for the record only\n")
    _, declared = aggregate(records=records, gates=[gate(0.5)], gates_file=path)
    assert declared.ungated == () and declared.declared_ungated == {"other": "measured for the record only"}
    assert declared.exit_status == 0


def test_a_suite_both_gated_and_declared_ungated_is_a_usage_error(tmp_path):
    path = tmp_path / "thresholds.yaml"
    path.write_text("gates: []\nungated:\n  demo: why not\n")
    with pytest.raises(ConfigError, match="ungated: names suite\\(s\\) that gates name too: demo"):
        Aggregator(Settings(), Models(), [gate(0.5)], path)


def test_skipped_gates_are_noted_once_and_do_not_leave_their_suite_ungated(tmp_path):
    path = tmp_path / "thresholds.yaml"
    path.write_text("gates: []\n")
    aggregator = Aggregator(Settings(), Models(), [], path)
    aggregator.skip_gates([gate(0.5, name="demo-cap")])
    aggregator.note(aggregator.notes[0])  # said twice, kept once
    for r in RECORDS:
        aggregator.add(r)
    result = aggregator.aggregate()
    assert result.notes == ("1 gate(s) of suites this project does not have were skipped "
                            "(--socialbias-gates-for=present): demo-cap",)
    assert result.ungated == ()


def test_a_run_stopped_early_or_given_part_of_a_suite_says_why_it_is_partial():
    aggregator = Aggregator(Settings(), Models(), [])
    aggregator.suite_files = {"demo": {"path": "demo.yaml", "cases": 6}, "whole": {"path": "w.yaml", "cases": 1},
                              "unrun": {"path": "u.yaml", "cases": 3}}
    aggregator.selection_filters = ["-k", "age"]
    records = RECORDS + [record("age-001", suite="whole")]
    assert aggregator.partial_reasons(records) == [
        "selected only part of the collected suites' cases (selected with -k age): demo: 4 of 6 case(s)"]
    aggregator.partial = True
    assert aggregator.partial_reasons(records)[0] == "stopped early (-x / --maxfail)"
    for r in records:
        aggregator.add(r)
    result = aggregator.aggregate()
    assert result.partial and len(result.partial_reasons) == 2 and result.failed  # unless --socialbias-allow-partial


def test_warnings_and_what_each_endpoint_was_adapted_to_reach_the_result():
    records = [record("age-001", adapted={"target": {"dropped": {"temperature": "HTTP 400"}}}),
               record("age-002", adapted={"target": {"max_tokens": {"8": 64}}, "guard": {"dropped": {"x": "y"}}})]
    _, result = aggregate(records=records, models=Models(warnings=["the judge is the target model"]))
    assert result.models["target"]["adapted"] == {"dropped": {"temperature": "HTTP 400"}, "max_tokens": {"8": 64}}
    assert "guard" not in result.models  # a role the run has no model for is not invented
    assert result.warnings == ("the judge is the target model",)


def test_a_judge_check_without_a_judge_is_a_usage_error_before_any_case_runs():
    with pytest.raises(ConfigError, match="--socialbias-judge-check needs a judge"):
        Aggregator(Settings(judge_check=BUILTIN_REFERENCE_PATH), Models(specs=("target",)), [])
    Aggregator(Settings(judge_check=BUILTIN_REFERENCE_PATH), Models(), [])  # with one: fine


# ---- helpers ---------------------------------------------------------------------------


def test_shown_path_is_normalised_and_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "a" / ".." / "b" / "r.json") == os.path.join("b", "r.json")
    outside = tmp_path.parent / "elsewhere.json"
    assert shown_path(outside) == str(outside)
    assert shown_path(Path("x/../y.json")) == "y.json"


def test_turns_by_suite_takes_the_most_planned_else_the_turns_run():
    records = [{"suite": "a", "turns_planned": 3}, {"suite": "a", "turns_planned": 5},
               {"suite": "b", "turns": [{}, {}]}, {"suite": "c"}]
    assert turns_by_suite(records) == {"a": 5, "b": 2, "c": 0}


def test_evidence_by_suite_counts_labelled_cases_and_the_others_errors_by_kind():
    judge = {"kind": "judge_error", "role": "judge", "message": "unreadable"}
    records = [record("age-001"), record("age-002", errors=[MODEL_ERROR, judge], bias=()),
               record("age-003", errors=[MODEL_ERROR, MODEL_ERROR], bias=()), record("age-001", suite="clean")]
    assert evidence_by_suite(records) == {
        "demo": "1 of 3 case(s) labelled; the others had judge_error (1), model_error (2)",
        "clean": "1 of 1 case(s) labelled",
    }


def test_adaptations_are_merged_over_every_record():
    records = [{"adapted": {"judge": {"dropped": {"top_p": "rejected"}, "max_tokens": {"8": 32}}}},
               {"adapted": {"judge": {"max_tokens": {"8": 128}}}}, {}]
    assert _adaptations(records) == {"judge": {"dropped": {"top_p": "rejected"}, "max_tokens": {"8": 128}}}
