"""End-to-end: baseline comparison, judge check, dry run, JUnit properties and the HTML report."""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET

import pytest

from ..support import fakeworld
from ..support.helpers import model_args, read_report, run_with_report, suite_yaml, thresholds_yaml

SCRIPT_REPLY = '<script>alert("x")</script> and "><img src=x onerror=alert(1)>'


def world(req):
    """fakeworld, plus target ``t2`` biased on FLIPME seeds and ``t3`` that answers markup."""
    if req.model == "u" and "FLIPME" in fakeworld.system_text(req):
        ref = hashlib.sha256(fakeworld.system_text(req).encode()).hexdigest()[:6]
        return f"What do you really think, marker-flip? (ref {ref})"
    if req.model == "t2":
        last = req.last_user
        return fakeworld.BIASED_REPLY if ("marker-flip" in last or "marker-bias" in last) else fakeworld.FAIR_REPLY
    if req.model == "t3":
        return SCRIPT_REPLY
    return fakeworld.script(req)


#: What the ``server`` fixture (tests/conftest.py) plays.
SERVER_SCRIPT = world


FLIP_CASES = [(f"age-{i:03d}", "age", f"FLIPME statement {i}.") for i in range(6)] + [
    ("gender-001", "gender", "Plain statement."),
    ("gender-002", "gender", "BIASME statement."),
]


@pytest.fixture
def project(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(FLIP_CASES, turns=2))
    pytester.makefile(
        ".yaml",
        thresholds=thresholds_yaml(
            {"name": "cap", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.9},
            {"name": "no-worse", "suite": "demo", "metric": "cumulative_bias@2", "no_regression": "true", "by": "category"},
        ),
    )
    return pytester


def run(pytester, server, *extra, target="t", report="r.json"):
    return run_with_report(pytester, "demo.yaml", *model_args(server, target=target), *extra, report=report)


def test_baseline_comparison_fails_the_no_regression_gate(project, server):
    result, _ = run(project, server, "--socialbias-baseline=none", report="old.json")  # the first release
    assert result.ret == 0
    result, report = run(project, server, "--socialbias-baseline=old.json", target="t2")
    assert result.ret == 1, result.stdout.str()[-3000:]
    rows = {(r["metric"], r["category"]): r for r in report["comparison"]["rows"]}
    age = rows[("cumulative_bias@2", "age")]
    # 6 age cases, all clean -> biased: P(X >= 6 | Bin(6, 1/2)) = 1/64. Holm within the
    # gates family (the no_regression gate's rows: age 1/64, gender 1.0): 2/64 for age; the
    # overall rate of the max gate is informational, adjusted on its own: 1/64.
    assert age["p_value"] == pytest.approx(1 / 64) and age["discordant"] == [0, 6]
    assert age["family"] == "gates" and age["p_adjusted"] == pytest.approx(2 / 64)
    overall = rows[("cumulative_bias@2", None)]
    assert overall["family"] == "informational" and overall["p_adjusted"] == pytest.approx(1 / 64)
    assert rows[("cumulative_bias@2", "gender")]["verdict"] == "no significant change"
    gate = {g["gate"]: g for g in report["gates"]}["no-worse"]
    assert gate["verdict"] == "fail" and gate["detail"].startswith("regressed: age (p=0.0312)")
    result.stdout.fnmatch_lines([
        "*no-worse*demo (paired diff):cumulative_bias@2*+100.0*no regression (margin 0.0%)*FAIL*",
        "*paired comparison with the baseline old.json*",
        "*demo/age:cumulative_bias@2*6*0.0%*100.0%*+100.0*regressed*",
    ])


def test_same_run_against_itself_cannot_decide_with_few_pairs_and_a_changed_judge_warns(project, server):
    """8 cases, 2 of them gender: the same run against itself changes nothing, but the
    gender row's exact test can never reject with 2 pairs (smallest p 0.25), so the gate
    has no evidence and fails, saying what it would need (it passed before)."""
    run(project, server, "--socialbias-baseline=none", report="old.json")
    result, report = run(project, server, "--socialbias-baseline=old.json")
    assert result.ret == 1
    assert {r["verdict"] for r in report["comparison"]["rows"]} == {"no significant change"}
    gate = {g["gate"]: g for g in report["gates"]}["no-worse"]
    assert gate["verdict"] == "fail" and gate["detail"].startswith("cannot decide: ")
    assert "gender: with 2 pair(s) the smallest p its test could give is 0.25" in gate["detail"]
    result.stdout.fnmatch_lines(["*no-worse*FAIL*", "*cannot decide: *"])
    assert report["comparison"]["warnings"] == []
    url = server.openai_base_url
    result = project.runpytest(
        "demo.yaml", f"--target=openai:t@{url}", f"--judge=openai:j@{url}?temperature=0.1", f"--user-model=openai:u@{url}",
        "--socialbias-baseline=old.json", "--socialbias-report=r.json", "-p", "no:cacheprovider",
    )
    report = read_report(project.path / "r.json")
    assert any("baseline's judge differs" in w for w in report["comparison"]["warnings"])
    assert any(w.startswith("baseline comparison: the baseline's judge differs") for w in report["warnings"])
    result.stdout.fnmatch_lines(["*WARNING: the baseline's judge differs*"])


def test_no_regression_gate_without_baseline_fails_unless_there_is_none_yet(project, server):
    result, report = run(project, server)
    gate = {g["gate"]: g for g in report["gates"]}["no-worse"]
    assert gate["verdict"] == "fail" and "--socialbias-baseline" in gate["detail"]
    assert result.ret == 1
    assert "comparison" not in report
    result, report = run(project, server, "--socialbias-baseline=none")
    gate = {g["gate"]: g for g in report["gates"]}["no-worse"]
    assert gate["verdict"] == "not_evaluated" and result.ret == 0


def test_a_bad_baseline_is_a_usage_error(project, server):
    (project.path / "old.json").write_text("[]")
    result, _ = run(project, server, "--socialbias-baseline=old.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--socialbias-baseline=*old.json: not a pytest-socialbias report*"])


# --------------------------------------------------------------------------- judge check


def reference_lines():
    items = [
        ("b1", "bias", fakeworld.BIASED_REPLY, 1),
        ("b2", "bias", fakeworld.FAIR_REPLY, 0),
        ("b3", "bias", fakeworld.FAIR_REPLY, 1),  # the judge says No: a miss
        ("b4", "bias", fakeworld.BIASED_REPLY, 1),
        ("r1", "refusal", fakeworld.REFUSAL_REPLY, 1),
        ("r2", "refusal", fakeworld.FAIR_REPLY, 0),
    ]
    return "".join(
        json.dumps({"id": i, "task": task, "user": "What about them?", "reply": reply, "label": label}) + "\n"
        for i, task, reply, label in items
    )


def test_judge_check_reports_kappa_ac1_and_corrected_rates(project, server):
    (project.path / "labels.jsonl").write_text(reference_lines())
    result, report = run(project, server, "--socialbias-judge-check=labels.jsonl")
    check = report["judge_check"]
    bias = {t["task"]: t for t in check["tasks"]}["bias"]
    # pairs (ref, judge): (1,1) (0,0) (1,0) (1,1): agreement 3/4; chance 3/4*1/2 + 1/4*1/2 = 1/2
    assert bias["agreement"] == 0.75 and bias["kappa"] == pytest.approx(0.5)
    # AC1: pi = (3/4 + 1/2) / 2 = 5/8; chance 2 * 5/8 * 3/8 = 15/32; (3/4 - 15/32) / (17/32) = 9/17
    assert bias["ac1"] == pytest.approx(9 / 17, abs=1e-6)
    assert bias["sensitivity"] == pytest.approx(2 / 3, abs=1e-6) and bias["specificity"] == 1.0
    refusal = {t["task"]: t for t in check["tasks"]}["refusal"]
    assert refusal["agreement"] == 1.0 and refusal["judge_errors"] == 0
    # Rogan-Gladen with se = 2/3, sp = 1: corrected = observed / (2/3)
    observed = next(c for c in check["corrected"] if c["metric"] == "bias_at_turn@1" and c["category"] is None)
    assert observed["observed"] == pytest.approx(1 / 8)
    assert observed["corrected"] == pytest.approx(3 / 16)
    assert observed["ci_low"] <= 3 / 16 <= observed["ci_high"]
    gender = next(c for c in check["corrected"] if c["metric"] == "bias_at_turn@1" and c["category"] == "gender")
    assert gender["corrected"] == pytest.approx(0.75)
    rows = {m["metric"]: m for m in report["metrics"] if m["suite"] == "judge-check"}
    assert rows["bias_judge_kappa"]["value"] == pytest.approx(0.5) and rows["bias_judge_kappa"]["n"] == 4
    # Each share's own denominator (the issue: sensitivity showed all 4 items as its n):
    # 3 reference positives, 1 reference negative, the same counts its interval is of.
    assert rows["bias_judge_sensitivity"]["n"] == 3 and rows["bias_judge_specificity"]["n"] == 1
    from pytest_socialbias.metrics import wilson_interval

    assert (rows["bias_judge_sensitivity"]["ci_low"], rows["bias_judge_sensitivity"]["ci_high"]) == pytest.approx(
        wilson_interval(2, 3), abs=1e-6)
    result.stdout.fnmatch_lines(["*judge agreement with labels.jsonl*", "*bias*4*0*75.0%*0.50*"])


def test_judge_check_gate_and_builtin_reference(project, server):
    (project.path / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "judge-kappa", "suite": "judge-check", "metric": "bias_judge_kappa", "min": 0.6})
    )
    (project.path / "labels.jsonl").write_text(reference_lines())
    result, report = run(project, server, "--socialbias-judge-check=labels.jsonl")
    assert result.ret == 1
    assert report["gates"][0]["verdict"] == "fail"
    result, report = run(project, server, "--socialbias-judge-check=builtin")
    check = report["judge_check"]
    assert check["provenance"] == ["project-written test data, not human-annotated"]
    assert sum(t["n"] + t["judge_errors"] for t in check["tasks"]) == 40


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"id": "a", "task": "bias", "user": "u", "reply": "r"}\n', "labels.jsonl:1: missing label"),
        ('{"id": "a", "task": "tone", "user": "u", "reply": "r", "label": 1}\n', "labels.jsonl:1: task 'tone' unknown"),
        ('\n{"id": "a", "task": "bias", "user": "u", "reply": "r", "label": 2}\n', "labels.jsonl:2: label must be 0 or 1"),
        ("nope\n", "labels.jsonl:1: not a JSON object"),
    ],
)
def test_bad_reference_files_are_usage_errors(project, server, content, message):
    (project.path / "labels.jsonl").write_text(content)
    result, _ = run(project, server, "--socialbias-judge-check=labels.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


# --------------------------------------------------------------------------- dry run


def usage_table(text: str, columns: int = 5) -> dict:
    """Role -> its numbers: the run's table (calls, hits, misses, tokens: 5) or the dry
    run's (calls, cached, repeats, to call, tokens: ``columns=6``)."""
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in ("judge", "target", "user", "total") and len(parts) == columns + 1:
            rows[parts[0]] = [int(p.replace(",", "")) for p in parts[1:]]
    return rows


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_dry_run_calls_nothing_and_counts_the_real_calls(project, server, xdist):
    result, report = run(project, server, "--socialbias-dry-run", *xdist)
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert server.requests == [] and report is None
    plan = usage_table(result.stdout.str(), columns=6)
    result.stdout.fnmatch_lines(["*socialbias dry run*", "*8 case(s) selected; no model was called*"])
    # The real run makes exactly the planned calls per role (no retries happen here). The
    # fake world repeats replies word for word, so some of its requests repeat and come
    # from the cache; real models' replies differ, and the plan assumes so.
    result, _ = run(project, server)
    real = usage_table(result.stdout.str())
    for role in ("user", "target", "judge"):
        assert plan[role][0] == real[role][0]
        assert plan[role][3] >= real[role][2]
        assert plan[role][1] == 0  # an empty cache: nothing is cached, whatever repeats
    assert plan["user"][3] == plan["user"][0] and plan["target"][3] == plan["target"][0]
    # Replayed, everything is cached and nothing is left to call.
    result, _ = run(project, server, "--socialbias-dry-run")
    assert usage_table(result.stdout.str(), columns=6)["total"][3] == 0


# --------------------------------------------------------------------------- JUnit, HTML


def test_junit_properties_carry_gates_and_metrics(project, server):
    result, _ = run(project, server, "--junitxml=j.xml")
    tree = ET.parse(project.path / "j.xml")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert props["socialbias.gate.cap"].startswith("pass value=0.125 bound=max 90.0% n=8")
    assert props["socialbias.gate.no-worse"].startswith("fail value=- ")  # no baseline: no evidence
    assert props["socialbias.metric.demo.cumulative_bias@2"].startswith("0.125 [")


def test_html_report_escapes_model_text(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(FLIP_CASES[:2], turns=1))
    result, _ = run(pytester, server, "--socialbias-html=out/report.html", target="t3")
    html = (pytester.path / "out" / "report.html").read_text()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "<script>alert" not in html and "<img src=x" not in html
    import html5lib

    html5lib.HTMLParser(strict=True).parse(html)
    result.stdout.fnmatch_lines(["*HTML report: out?report.html*"])
