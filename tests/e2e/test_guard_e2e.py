"""Guard filtering end to end: a Llama Guard 3 style guard screens every target reply."""

from __future__ import annotations

from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import model_args, read_report, suite_yaml

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
            "--socialbias-guard-policy=follow",
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


# Three dialogues of three turns: fair throughout; biased from turn 1 ("BIASME"); biased
# from turn 2 ("LATEME"). The guard blocks exactly the biased replies.
POLICY_CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("race-001", "race", "LATEME statement three."),
]


def late_world(req):
    if req.model == "u" and "LATEME" in fakeworld.system_text(req):
        return "And what about them, marker-late?"
    if req.model == "t" and "marker-late" in req.last_user:
        if sum(1 for m in req.messages if m["role"] == "user") >= 2:
            return fakeworld.BIASED_REPLY
        return fakeworld.FAIR_REPLY
    return guarded_world()(req)


def run_policy(pytester, policy):
    pytester.makefile(".yaml", demo=suite_yaml(POLICY_CASES, turns=3))
    args = ["--socialbias-guard-policy=" + policy] if policy else []
    with FakeServer(late_world) as server:
        result = pytester.runpytest(
            "demo.yaml", *model_args(server), f"--socialbias-guard=openai:{GUARD}@{server.openai_base_url}",
            "--socialbias-report=r.json", "-p", "no:cacheprovider", "--socialbias-record=off", *args,
        )
        calls = {m: sum(1 for r in server.requests if r.model == m) for m in ("t", GUARD)}
    assert result.ret == 0, result.stdout.str()
    report = read_report(pytester.path / "r.json")
    overall = {m["metric"]: (m["value"], m["n"]) for m in report["metrics"] if m["category"] is None and m["style"] is None}
    return report, overall, calls


def test_end_stops_a_dialogue_at_its_first_block(pytester, keys):
    report, overall, calls = run_policy(pytester, "end")
    assert report["models"]["guard"]["policy"] == "end"
    # Target replies: 3 (fair) + 1 (blocked at turn 1) + 2 (blocked at turn 2); each screened once.
    assert calls == {"t": 6, GUARD: 6}
    turns = {c["id"]: len(c["turns"]) for c in report["cases"]}
    assert turns == {"age-001": 3, "gender-001": 1, "race-001": 2}
    # Blocked at or before turn t, over all three dialogues: 1/3, 2/3, 2/3.
    assert [overall[f"guard_blocked@{t}"] for t in (1, 2, 3)] == [(round(1 / 3, 6), 3), (round(2 / 3, 6), 3), (round(2 / 3, 6), 3)]
    assert overall["guard_blocked_rate"][0] == round(2 / 6, 6)
    assert overall["bias_rate_passed"] == (0.0, 4)
    # A dialogue biased before its block ended it is biased at every later turn (it was
    # left out before, pulling the rate down: 0.5 of 2 at turn 2, 0 of 1 at turn 3); the
    # clean one that ran on counts where it was measured.
    assert overall["cumulative_bias@1"] == (round(1 / 3, 6), 3)
    assert overall["cumulative_bias@2"] == (round(2 / 3, 6), 3)
    assert overall["cumulative_bias@3"] == (round(2 / 3, 6), 3)
    assert overall["survival@3"] == (round(1 / 3, 6), 3)
    for t in (1, 2, 3):  # under end, the unblocked rate is the cumulative rate itself
        assert overall[f"cumulative_bias_unblocked@{t}"] == overall[f"cumulative_bias@{t}"]


def test_follow_is_the_default_goes_on_past_a_block_and_still_reports_the_end_rate(pytester, keys):
    """Post-hoc filtering, as the DyMT paper screened: every dialogue runs in full; the
    rate a block-ends run measures comes from the turns up to each first block."""
    report, overall, calls = run_policy(pytester, None)
    assert report["models"]["guard"]["policy"] == "follow"
    assert calls == {"t": 9, GUARD: 9}
    case = next(c for c in report["cases"] if c["id"] == "race-001")
    assert [g["flagged"] for g in case["guard"]] == [False, True, True]
    # Cumulative: the same dialogues are blocked by the same turns as under "end".
    assert [overall[f"guard_blocked@{t}"] for t in (1, 2, 3)] == [(round(1 / 3, 6), 3), (round(2 / 3, 6), 3), (round(2 / 3, 6), 3)]
    assert overall["guard_blocked_rate"][0] == round(5 / 9, 6)
    assert overall["bias_rate_passed"] == (0.0, 4)
    assert overall["cumulative_bias@3"] == (round(2 / 3, 6), 3)
    # What the end policy measured in the test above, from this one run.
    assert [overall[f"cumulative_bias_unblocked@{t}"] for t in (1, 2, 3)] == [(round(1 / 3, 6), 3)] + [(round(2 / 3, 6), 3)] * 2


def test_a_guard_specs_unit_sets_what_dymt_filtering_shows_it(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:1], turns=3))
    with FakeServer(guarded_world()) as server:
        result = pytester.runpytest(
            "demo.yaml", *model_args(server), f"--socialbias-guard=openai:{GUARD}@{server.openai_base_url}?unit=context",
            "-p", "no:cacheprovider", "--socialbias-record=off",
        )
        sizes = sorted(len(r.messages) for r in server.requests if r.model == GUARD)
    assert result.ret == 0, result.stdout.str()
    # Turn t is screened with the whole dialogue before it: 2, 4 and 6 messages.
    assert sizes == [2, 4, 6]
