"""A PASS must mean something: no pass from a suite no gate names, from part of a suite's
cases, or from an error metric of a role that was never asked. End to end through the fake
server and the real openai client."""

from __future__ import annotations

import pytest

from pytest_socialbias.testing import FakeServer, Fault

from . import fakeworld
from .conftest import model_args, run_with_report, suite_yaml, thresholds_yaml

BIASED_CASES = [(f"{c}-001", c, "BIASME statement.") for c in ("age", "gender", "race", "religion")]
CLEAN_CASES = [(f"{c}-001", c, "Plain statement.") for c in ("age", "gender", "race", "religion")]
GATE = {"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@1", "max": 0.5}


def test_a_suite_no_gate_names_fails_the_run_and_says_how_to_gate_it(pytester, keys, server):
    """The issue's case: suites/mine/hiring.yaml, 4 biased cases, a thresholds file with gates of
    other suites only. Before: `gates: 0 failed`, verdict pass, exit 0."""
    pytester.mkdir("suites")
    (pytester.path / "suites" / "hiring.yaml").write_text(suite_yaml(BIASED_CASES, suite="hiring"))
    (pytester.path / "suites" / "other.yaml").write_text(suite_yaml(CLEAN_CASES, suite="other"))
    pytester.makefile(".yaml", thresholds=thresholds_yaml({**GATE, "suite": "other", "name": "other-bias"}))
    result, report = run_with_report(pytester, "suites/hiring.yaml", *model_args(server))
    assert result.ret == 1
    assert report["summary"]["verdict"] == "fail"
    assert report["summary"]["ungated_suites"] == ["hiring"]
    result.stdout.fnmatch_lines([
        "UNGATED: suite(s) hiring ran but no gate of thresholds.yaml names them*add a gate naming it*"
        "or declare it ungated on purpose there: `ungated: {hiring: *",
        "1 suite(s) decided by no gate (hiring): exit status 1",
    ])
    html = pytester.path / "r.html"
    run_with_report(pytester, "suites/hiring.yaml", *model_args(server), f"--socialbias-html={html}")
    page = html.read_text(encoding="utf-8")
    assert 'class="verdict fail"' in page and "no gate decides suite(s) hiring" in page


def test_a_suite_declared_ungated_passes_and_says_so_everywhere(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(CLEAN_CASES))
    pytester.makefile(".yaml", thresholds="ungated:\n  demo: exploratory, numbers only\ngates: []\n")
    result, report = run_with_report(pytester, "demo.yaml", *model_args(server))
    assert result.ret == 0
    assert report["summary"]["declared_ungated"] == {"demo": "exploratory, numbers only"}
    result.stdout.fnmatch_lines(["socialbias: suite demo is UNGATED on purpose (thresholds.yaml): exploratory*"])


def test_a_suite_both_ungated_and_gated_is_a_usage_error(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(CLEAN_CASES))
    pytester.makefile(".yaml", thresholds="ungated:\n  demo: why\n" + thresholds_yaml(GATE))
    result = pytester.runpytest("demo.yaml", *model_args(server))
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*ungated: names suite(s) that gates name too: demo*"])


@pytest.mark.parametrize("selection, shown", [
    (["-k", "age"], "-k 'age'"),
    (["-m", "age or gender"], "-m 'age or gender'"),
    (["demo.yaml::race-001"], "demo.yaml::race-001"),
    (["--deselect", "demo.yaml::age-001"], "--deselect demo.yaml::age-001"),
])
def test_a_subset_of_a_suites_cases_never_passes(pytester, keys, server, selection, shown):
    """-k age on a 4-case suite decided its gates on n = 1, verdict pass, partial false."""
    pytester.makefile(".yaml", demo=suite_yaml(CLEAN_CASES))
    pytester.makefile(".yaml", thresholds=thresholds_yaml(GATE))
    args = [a for a in selection if a != "demo.yaml::race-001"]
    target = ["demo.yaml::race-001"] if "demo.yaml::race-001" in selection else ["demo.yaml"]
    result, report = run_with_report(pytester, *target, *model_args(server), *args)
    assert result.ret == 1
    summary = report["summary"]
    assert summary["partial"] is True and summary["verdict"] == "fail" and not summary["partial_allowed"]
    assert shown in summary["partial_reasons"][0] and "demo: " in summary["partial_reasons"][0]
    result.stdout.fnmatch_lines([f"socialbias: selection {shown}: *PARTIAL and never passes*", "PARTIAL RUN: *",
                                 "partial run (only part of the cases): exit status 1"])
    allowed, report = run_with_report(pytester, *target, *model_args(server), *args, "--socialbias-allow-partial")
    assert allowed.ret == 0
    assert report["summary"]["partial"] is True and report["summary"]["partial_allowed"] is True
    allowed.stdout.fnmatch_lines(["PARTIAL RUN (ALLOWED by --socialbias-allow-partial): *"])


def test_a_suite_file_named_in_full_or_a_whole_suite_selected_is_not_partial(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(CLEAN_CASES))
    pytester.makefile(".yaml", other=suite_yaml(CLEAN_CASES, suite="other"))
    pytester.makefile(".yaml", thresholds=thresholds_yaml(GATE, {**GATE, "name": "o", "suite": "other"}))
    result, report = run_with_report(pytester, "demo.yaml", *model_args(server))
    assert (result.ret, report["summary"]["partial"], report["summary"]["partial_reasons"]) == (0, False, [])
    # -k that keeps one suite file whole and drops the other: the other is simply not run.
    result, report = run_with_report(pytester, "demo.yaml", "other.yaml", "-k", "demo", *model_args(server))
    assert (result.ret, report["summary"]["partial"]) == (0, False)


def test_judge_error_rate_of_a_judge_never_asked_is_no_evidence_not_zero(pytester, keys):
    """Every case errored because the target was unreachable: judge-errors showed
    `0.0% [0.0, 60.4] PASS` though no judge was ever asked."""

    def world(req):
        if req.model == "t":
            return Fault("bad_request")
        return fakeworld.script(req)

    pytester.makefile(".yaml", demo=suite_yaml(CLEAN_CASES))
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "judge-errors", "suite": "demo", "metric": "judge_error_rate", "max": 0.1}))
    with FakeServer(world) as server:
        result, report = run_with_report(pytester, "demo.yaml", *model_args(server), "--socialbias-record=off")
    assert result.ret == 1
    gate = report["gates"][0]
    assert gate["verdict"] == "fail" and gate["n"] == 0 and gate["value"] is None
    assert "0 of 4 case(s) labelled" in gate["detail"] and "model_error" in gate["detail"]
    row = next(m for m in report["metrics"] if m["metric"] == "judge_error_rate" and m["category"] is None)
    assert row["n"] == 0


def test_a_gate_of_a_turn_the_suite_does_not_reach_names_that_cause(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(CLEAN_CASES, turns=2))
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        GATE, {"name": "late", "suite": "demo", "metric": "late_emergence", "max": 0.1, "allow_empty": "true"}))
    result, report = run_with_report(pytester, "demo.yaml", *model_args(server))
    late = next(g for g in report["gates"] if g["gate"] == "late")
    assert late["verdict"] == "not_evaluated"
    assert "late_emergence needs dialogues of 10 turns, and this run's demo dialogues have 2" in late["detail"]
    assert "labelled" not in late["detail"]
