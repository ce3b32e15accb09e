"""Guard filtering end to end: a Llama Guard 3 style guard screens every target reply."""

from __future__ import annotations


from pytest_socialbias.testing import FakeServer

from . import fakeworld
from .conftest import model_args, suite_yaml, read_report

GUARD = "meta-llama/Llama-Guard-3-8B"
CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("race-001", "race", "Plain statement three."),
]


def guarded_world(garble: bool = False):
    def script(req):
        if req.model == GUARD:
            if garble:
                return "I am not sure about this one."
            reply = req.messages[-1]["content"]
            return "unsafe\nS10" if reply == fakeworld.BIASED_REPLY else "safe"
        return fakeworld.script(req)

    return script


def rows(report, metric):
    return {(m["category"], m["style"]): m for m in report["metrics"] if m["metric"] == metric}


def test_guard_blocked_share_by_turn_and_bias_among_passed(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=2))
    with FakeServer(guarded_world()) as server:
        result = pytester.runpytest(
            "demo.yaml", *model_args(server), f"--socialbias-guard=openai:{GUARD}@{server.openai_base_url}",
            "--socialbias-report=r.json", "-p", "no:cacheprovider", "--socialbias-record=off",
        )
        guard_requests = [r for r in server.requests if r.model == GUARD]
    assert result.ret == 0, result.stdout.str()
    # One screening per target reply (no cache, so identical screenings are not shared),
    # of the reply in its user/assistant context.
    assert len(guard_requests) == 6
    assert all([m["role"] for m in r.messages] == ["user", "assistant"] for r in guard_requests)
    report = read_report(pytester.path / "r.json")
    blocked = rows(report, "guard_blocked@1")[(None, None)]
    assert (blocked["value"], blocked["n"]) == (round(1 / 3, 6), 3)
    assert rows(report, "guard_blocked_rate")[(None, None)]["value"] == round(2 / 6, 6)
    # The guard blocked exactly the biased replies: none of those it passed is biased.
    passed = rows(report, "bias_rate_passed")[(None, None)]
    assert (passed["value"], passed["n"]) == (0.0, 4)
    assert rows(report, "guard_blocked_rate")[("gender", None)]["value"] == 1.0
    case = next(c for c in report["cases"] if c["id"] == "gender-001")
    assert [g["flagged"] for g in case["guard"]] == [True, True]
    assert case["guard"][0]["categories"] == ["S10"]


def test_unreadable_guard_output_is_counted_without_voiding_bias_labels(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=1))
    with FakeServer(guarded_world(garble=True)) as server:
        result = pytester.runpytest(
            "demo.yaml", *model_args(server), f"--socialbias-guard=openai:{GUARD}@{server.openai_base_url}",
            "--socialbias-report=r.json", "-p", "no:cacheprovider",
        )
    report = read_report(pytester.path / "r.json")
    assert {c["outcome"] for c in report["cases"]} == {"clean", "biased"}
    assert rows(report, "guard_error_rate")[(None, None)]["value"] == 1.0
    assert rows(report, "guard_blocked_rate")[(None, None)]["n"] == 0
    assert rows(report, "cumulative_bias@1")[(None, None)]["value"] == round(1 / 3, 6)
    assert all(e["kind"] == "guard_error" for c in report["cases"] for e in c["errors"])
    assert result.ret == 0


def test_unknown_guard_format_is_a_usage_error(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:1]))
    result = pytester.runpytest("demo.yaml", *model_args(server), f"--socialbias-guard=openai:my-guard@{server.openai_base_url}")
    assert result.ret == 4
    assert "--socialbias-guard-kind" in result.stderr.str()
