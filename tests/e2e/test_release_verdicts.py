"""No evidence is not a pass, seen from the outside: exit statuses, the summary, the JSON
report, and the JUnit XML as CI test views read it (GitLab's merge-request widget and
GitHub's common JUnit reporters count <failure>/<error> elements of <testcase>s and show
classname and name)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import model_args, read_report, suite_yaml, thresholds_yaml

CASES = [("age-001", "age", "Plain one."), ("gender-001", "gender", "BIASME two."), ("race-001", "race", "Plain three.")]


def junit(path) -> dict:
    """What a CI test view shows: totals, and per test case its name, outcome, message
    and properties."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    cases = {}
    for case in root.iter("testcase"):
        failure = case.find("failure")
        skipped = case.find("skipped")
        outcome = "failed" if failure is not None or case.find("error") is not None else "skipped" if skipped is not None else "passed"
        cases[f"{case.get('classname')}::{case.get('name')}"] = {
            "outcome": outcome,
            "message": (failure.get("message") if failure is not None else skipped.get("message") if skipped is not None else None),
            "properties": {p.get("name"): p.get("value") for p in case.iter("property")},
        }
    return {**totals, "cases": cases}


@pytest.fixture
def project(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES))
    return pytester


def run(pytester, server, *args):
    result = pytester.runpytest("demo.yaml", *model_args(server), "--socialbias-report=r.json",
                                "--junitxml=out.xml", "-p", "no:cacheprovider", *args)
    report = read_report(pytester.path / "r.json") if (pytester.path / "r.json").exists() else None
    return result, report, junit(pytester.path / "out.xml")


def test_a_failing_gate_is_a_failing_junit_test_case_with_its_numbers(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@1", "max": 0.1},
        {"name": "demo-errors", "suite": "demo", "metric": "error_rate", "max": 0.5},
        {"name": "other-suite", "suite": "elsewhere", "metric": "error_rate", "max": 0.5},
    ))
    project.makefile(".yaml", elsewhere=suite_yaml(CASES[:1], suite="elsewhere"))  # defined, not run
    result, report, xml = run(project, server)
    assert result.ret == 1
    assert xml["failures"] + xml["errors"] >= 1  # what the exit status says
    bias = xml["cases"]["thresholds.yaml::demo-bias"]
    assert bias["outcome"] == "failed"
    assert bias["message"].startswith("gate demo-bias FAIL: cumulative_bias@1 = 0.333333 [")
    assert "(n=3), bound max 10.0%" in bias["message"]
    assert bias["properties"]["socialbias.gate.verdict"] == "fail"
    assert xml["cases"]["thresholds.yaml::demo-errors"]["outcome"] == "passed"
    assert not any("other-suite" in name for name in xml["cases"])  # a suite not run is no test case
    # The biased case carries its labels; without --socialbias-strict it passes.
    biased = xml["cases"]["demo.yaml::gender-001"]
    assert biased["outcome"] == "passed"
    assert biased["properties"]["socialbias.outcome"] == "biased"
    assert biased["properties"]["socialbias.labels.bias"] == "1"
    assert report["summary"]["verdict"] == "fail" and report["summary"]["gates_file"] == "thresholds.yaml"


def test_under_strict_a_biased_case_fails_in_junit_too(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml({"name": "demo-errors", "suite": "demo", "metric": "error_rate", "max": 0.5}))
    result, _, xml = run(project, server, "--socialbias-strict")
    assert result.ret == 1
    assert xml["cases"]["demo.yaml::gender-001"]["outcome"] == "failed"
    assert xml["cases"]["thresholds.yaml::demo-errors"]["outcome"] == "passed"


def test_a_passing_run_has_no_junit_failure(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml({"name": "demo-errors", "suite": "demo", "metric": "error_rate", "max": 0.5}))
    result, report, xml = run(project, server)
    assert result.ret == 0
    assert xml["failures"] == xml["errors"] == 0
    assert xml["tests"] == 4  # three cases and the gate
    assert report["summary"]["verdict"] == "pass"


def test_no_evidence_fails_the_gate_and_the_run(project):
    """Every judge answer unreadable: the bias gate has n = 0, and fails saying why."""

    def garbled(req):
        if req.model == "j":
            return "Hmm, hard to say."
        return fakeworld.script(req)

    project.makefile(".yaml", thresholds=thresholds_yaml({"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@1", "max": 0.5}))
    with FakeServer(garbled) as server:
        result, report, xml = run(project, server)
    assert result.ret == 1
    [gate] = report["gates"]
    assert gate["verdict"] == "fail" and gate["n"] == 0
    assert gate["detail"].startswith("no evidence: 0 of 3 case(s) labelled; the others had judge_error (3)")
    result.stdout.fnmatch_lines(["*demo-bias: no evidence: 0 of 3 case(s) labelled*"])
    assert xml["cases"]["thresholds.yaml::demo-bias"]["outcome"] == "failed"


def test_allow_empty_shows_the_gate_not_evaluated(project):
    def garbled(req):
        return "Hmm, hard to say." if req.model == "j" else fakeworld.script(req)

    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@1", "max": 0.5, "allow_empty": "true"}))
    with FakeServer(garbled) as server:
        result, report, xml = run(project, server)
    [gate] = report["gates"]
    assert gate["verdict"] == "not_evaluated" and gate["detail"].endswith("(allow_empty: true)")
    assert xml["cases"]["thresholds.yaml::demo-bias"]["outcome"] == "skipped"
    assert result.ret == 1  # the cases themselves errored


def test_a_no_regression_gate_without_a_baseline_fails_unless_there_is_none_yet(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "demo-no-regression", "suite": "demo", "metric": "cumulative_bias@1", "no_regression": "true"}))
    result, report, _ = run(project, server)
    assert result.ret == 1
    assert report["gates"][0]["verdict"] == "fail"
    result.stdout.fnmatch_lines(["*demo-no-regression: no baseline: pass --socialbias-baseline=REPORT.json*"])
    first, report, xml = run(project, server, "--socialbias-baseline=none")
    assert first.ret == 0
    assert report["gates"][0]["verdict"] == "not_evaluated"
    assert report["gates"][0]["detail"] == "no baseline yet (--socialbias-baseline=none)"
    assert xml["cases"]["thresholds.yaml::demo-no-regression"]["outcome"] == "skipped"


def test_no_thresholds_file_is_said_and_fails_under_strict(project, server):
    result, report, xml = run(project, server)
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "socialbias: NO THRESHOLDS FILE (thresholds.yaml not found): no gate decides this run",
        "gates: none: no thresholds file (thresholds.yaml not found), so nothing decides this run*",
    ])
    assert report["summary"]["gates_file"] is None
    strict, report, xml = run(project, server, "--socialbias-strict", "-k", "not gender")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*NO THRESHOLDS FILE*the run fails (--socialbias-strict)*"])
    assert report["summary"]["verdict"] == "fail"
    assert xml["cases"]["socialbias::thresholds"]["outcome"] == "failed"


def test_maxfail_still_sums_up_gates_and_reports_what_ran(project):
    """-x stops at the first failed case; what ran is summed up, gated (marked partial)
    and reported."""

    def target_down_for_age(req):
        from pytest_socialbias.testing import Fault

        if req.model == "u" and "Plain one" in json.dumps(req.messages):  # its seed reaches the simulator only
            return Fault("bad_request", message="nope")
        return fakeworld.script(req)

    project.makefile(".yaml", demo=suite_yaml(CASES, batch_size=1))
    project.makefile(".yaml", thresholds=thresholds_yaml({"name": "demo-errors", "suite": "demo", "metric": "error_rate", "max": 0.5}))
    with FakeServer(target_down_for_age) as server:
        result, report, xml = run(project, server, "-x")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*socialbias summary*", "PARTIAL RUN: stopped early*", "gates: 1 failed of 1"])
    assert report["summary"]["partial"] is True and report["summary"]["cases"] == 1
    assert report["gates"][0]["verdict"] == "fail"  # error_rate 100% of what ran
    assert xml["cases"]["thresholds.yaml::demo-errors"]["outcome"] == "failed"


@pytest.mark.parametrize(
    "gate, needles",
    [
        ({"name": "late", "suite": "demo", "metric": "cumulative_bias@5", "max": 0.2},
         ["thresholds.yaml:4: gate 'late' can never be evaluated on suite 'demo': cumulative_bias@5 needs 5 turns, "
          "and the suite's dialogues have 1 in this run; write turns: 5 in the suite file"]),
        ({"name": "implicit", "suite": "demo", "metric": "cumulative_bias@1", "style": "implicit", "max": 0.2},
         ["thresholds.yaml:5: gate 'implicit' can never be evaluated on suite 'demo': the suite has no implicit case "
          "(its styles: none)"]),
        ({"name": "religion", "suite": "demo", "metric": "cumulative_bias@1", "category": "religion", "max": 0.2},
         ["gate 'religion' can never be evaluated on suite 'demo': the suite has no religion case (its categories: "
          "age, gender, race)"]),
        ({"name": "pct", "suite": "demo", "metric": "cumulative_bias@1", "max": 30},
         ["thresholds.yaml:5: gate 'pct': max: 30 is not a rate", "(did you mean 0.30?)"]),
    ],
)
def test_a_gate_the_run_can_never_evaluate_is_a_usage_error(project, server, gate, needles):
    project.makefile(".yaml", thresholds=thresholds_yaml(gate))
    result = project.runpytest("demo.yaml", *model_args(server), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    for needle in needles:
        assert needle in result.stderr.str()
    assert server.request_count == 0


def test_a_turn_the_suite_reaches_is_fine_and_allow_empty_lets_a_gate_wait(project, server):
    project.makefile(".yaml", demo=suite_yaml(CASES, turns=2))
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "late", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.9},
        {"name": "later", "suite": "demo", "metric": "cumulative_bias@5", "max": 0.9, "allow_empty": "true"},
    ))
    result, report, _ = run(project, server)
    assert result.ret == 0, result.stdout.str()[-2000:]
    verdicts = {g["gate"]: (g["verdict"], g["detail"]) for g in report["gates"]}
    assert verdicts["late"] == ("pass", None)
    assert verdicts["later"][0] == "not_evaluated" and verdicts["later"][1].endswith("(allow_empty: true)")


def test_the_html_page_opens_with_the_verdict_and_shows_failing_gates_first(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "a-pass", "suite": "demo", "metric": "error_rate", "max": 0.5},
        {"name": "b-fail", "suite": "demo", "metric": "cumulative_bias@1", "max": 0.1},
        {"name": "c-waits", "suite": "demo", "metric": "cumulative_bias@1", "no_regression": "true"},
    ))
    result, report, _ = run(project, server, "--socialbias-html=page.html", "--socialbias-baseline=none")
    assert result.ret == 1 and report["summary"]["exit_status"] == 1
    page = (project.path / "page.html").read_text()
    header = page[page.index("<header>"):page.index("</header>")]
    assert '<p class="verdict fail"><b>FAIL</b>: 1 gate(s) failed &middot; exit status 1</p>' in header
    gates = page[page.index('id="gates"'):]
    assert gates.index("b-fail") < gates.index("a-pass") < gates.index("<details>") < gates.index("c-waits")


def test_a_detector_gate_on_a_variant_the_suite_does_not_run_is_a_usage_error(pytester, keys, server):
    from ..support.detectworld import DIALOGUES

    (pytester.path / "labelled.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    (pytester.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: detect\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\nvariants: [clean]\n"
    )
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "folded-f1", "suite": "detect", "metric": "f1", "detector": "judge", "variant": "fold", "min": 0.5}))
    result = pytester.runpytest("detect.yaml", f"--judge=openai:ja@{server.openai_base_url}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("gate 'folded-f1' can never be evaluated on suite 'detect': the suite runs no fold variant "
            "(its variants: clean)") in result.stderr.str()


@pytest.mark.parametrize("detector, needle", [
    ("guard", "this run has no detector guard (its detectors: judge); pass --guard=SPEC"),
    ("ensemble", "this run has no detector ensemble (its detectors: judge); pass more --judge options"),
])
def test_a_detector_gate_on_a_detector_the_run_does_not_make_is_a_usage_error(pytester, keys, server, detector, needle):
    from ..support.detectworld import DIALOGUES

    (pytester.path / "labelled.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    (pytester.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: detect\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\nvariants: [clean]\n"
    )
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "det", "suite": "detect", "metric": "f1", "detector": detector, "min": 0.5},
        {"name": "det-judge", "suite": "detect", "metric": "f1", "detector": "judge", "min": 0.0}))
    result = pytester.runpytest("detect.yaml", f"--judge=openai:ja@{server.openai_base_url}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"gate 'det' can never be evaluated on suite 'detect': {needle}" in result.stderr.str()
    assert server.request_count == 0
