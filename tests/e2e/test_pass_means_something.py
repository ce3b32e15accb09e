"""A PASS must mean something: no pass from a suite no gate names, from part of a suite's
cases, or from an error metric of a role that was never asked. End to end through the fake
server and the real openai client."""

from __future__ import annotations

import hashlib

import pytest

from pytest_socialbias.testing import FakeServer, Fault

from ..support import fakeworld
from ..support.helpers import model_args, run_with_report, suite_yaml, thresholds_yaml

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


def _regression_project(pytester, n_cases: int, **gate):
    cases = [(f"age-{i:03d}", "age", f"FLIPME statement {i}.") for i in range(n_cases)]
    pytester.makefile(".yaml", demo=suite_yaml(cases))
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "no-worse", "suite": "demo", "metric": "cumulative_bias@1", "no_regression": "true", **gate}))


def flip_world(req):
    """fakeworld, plus target t2 biased on every FLIPME seed and t3 that fails on them."""
    if req.model == "u" and "FLIPME" in fakeworld.system_text(req):
        ref = hashlib.sha256(fakeworld.system_text(req).encode()).hexdigest()[:6]
        return f"What do you really think, marker-flip? (ref {ref})"
    if req.model in ("t", "t2", "t3"):
        flipped = "marker-flip" in req.last_user
        if flipped and req.model == "t3":
            return Fault("bad_request")
        return fakeworld.BIASED_REPLY if flipped and req.model == "t2" else fakeworld.FAIR_REPLY
    return fakeworld.script(req)


def test_a_no_regression_gate_that_could_never_fail_cannot_decide(pytester, keys):
    """The issue's case: baseline 0 of 4 biased, candidate 4 of 4: `+75.0 [...] no
    regression PASS`, exit 0, though 4 pairs can never give p below 0.0625."""
    _regression_project(pytester, 4)
    with FakeServer(flip_world) as server:
        first, old = run_with_report(pytester, "demo.yaml", *model_args(server), "--socialbias-baseline=none",
                                     report="old.json")
        assert first.ret == 0 and {c["outcome"] for c in old["cases"]} == {"clean"}
        planned = pytester.runpytest("demo.yaml", *model_args(server, target="t2"), "--socialbias-baseline=old.json",
                                     "--socialbias-dry-run", "-p", "no:cacheprovider")
        result, report = run_with_report(pytester, "demo.yaml", *model_args(server, target="t2"),
                                         "--socialbias-baseline=old.json")
    assert {c["outcome"] for c in report["cases"]} == {"biased"}
    (row,) = report["comparison"]["rows"]
    assert row["min_p"] == 0.0625 and row["pairs_needed"] == 5
    gate = report["gates"][0]
    assert result.ret == 1 and gate["verdict"] == "fail"
    assert gate["detail"].startswith("cannot decide: overall: with 4 pair(s) the smallest p its test could give is "
                                     "0.0625, above its level")
    assert "it needs about 5 pairs" in gate["detail"]
    result.stdout.fnmatch_lines(["*demo:cumulative_bias@1: cannot decide: with 4 pair(s)*"])
    from pytest_socialbias.report.html_report import render_html

    page = render_html(report)
    assert "cannot decide" in page and "it needs about 5 pairs" in page and 'class="verdict fail"' in page
    # The dry run said so before anything was paid for.
    assert planned.ret == 0
    planned.stdout.fnmatch_lines(["WARNING: gate no-worse would not decide with the cases planned*smallest p its "
                                  "test could give is 0.0625*needs about 5 pairs*"])


def test_a_no_regression_gate_with_enough_pairs_decides_and_names_the_regression(pytester, keys):
    _regression_project(pytester, 8)
    with FakeServer(flip_world) as server:
        run_with_report(pytester, "demo.yaml", *model_args(server), "--socialbias-baseline=none", report="old.json")
        planned = pytester.runpytest("demo.yaml", *model_args(server, target="t2"), "--socialbias-baseline=old.json",
                                     "--socialbias-dry-run", "-p", "no:cacheprovider")
        result, report = run_with_report(pytester, "demo.yaml", *model_args(server, target="t2"),
                                         "--socialbias-baseline=old.json")
    assert "would not decide" not in planned.stdout.str()
    gate = report["gates"][0]
    assert result.ret == 1 and gate["verdict"] == "fail" and gate["detail"].startswith("regressed: overall (p=0.00391)")


def test_errors_in_one_run_count_as_the_worse_outcome_in_a_paired_comparison(pytester, keys):
    """A candidate that errors on the cases it would have failed: the plain comparison
    drops those pairs (and passed); counted as worse, they are a regression."""
    cases = ([(f"age-{i:03d}", "age", f"Plain statement {i}.") for i in range(14)]
             + [(f"race-{i:03d}", "race", f"FLIPME statement {i}.") for i in range(6)])
    pytester.makefile(".yaml", demo=suite_yaml(cases))
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "no-worse", "suite": "demo", "metric": "cumulative_bias@1", "no_regression": "true"},
        {"name": "errors", "suite": "demo", "metric": "error_rate", "max": 1.0}))
    with FakeServer(flip_world) as server:
        run_with_report(pytester, "demo.yaml", *model_args(server), "--socialbias-baseline=none", report="old.json")
        result, report = run_with_report(pytester, "demo.yaml", *model_args(server, target="t3"),
                                         "--socialbias-baseline=old.json", "--socialbias-record=off")
    assert sum(c["outcome"] == "error" for c in report["cases"]) == 6
    (row,) = [r for r in report["comparison"]["rows"] if r["metric"] == "cumulative_bias@1"]
    assert row["n_pairs"] == 14 and row["verdict"] == "no significant change" and row["cannot_decide"] is None
    worst = row["worst_case"]
    assert worst["imputed"] == 6 and worst["n_pairs"] == 20 and worst["p_value"] == pytest.approx(1 / 64)
    assert worst["verdict"] == "regressed"
    gate = next(g for g in report["gates"] if g["gate"] == "no-worse")
    assert result.ret == 1 and gate["verdict"] == "fail"
    assert "overall counting the 6 case(s) that errored in one run as worse (p=0.0156)" in gate["detail"]
    result.stdout.fnmatch_lines(["*counting the 6 case(s) that errored in one run as worse*"])
