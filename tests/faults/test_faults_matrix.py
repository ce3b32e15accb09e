"""Provider faults in each role, end to end: the plugin run by pytester against the fake
server through the real openai and anthropic SDKs.

A wrapped fakeworld script gives one role (user simulator ``u``, target ``t`` or judge
``j``) one fault, either on the first attempt of every request of that role (transient:
the run must label every case exactly as without faults) or on every attempt for the
requests of one case (``FAULTME``; that case must error with a reason naming the role
and the HTTP status or failure kind, the others must be labelled as usual). Whatever
happens, the outcome counts add up to the number of cases, in the JSON report and in the
terminal summary line.
"""

from __future__ import annotations

import json
import re

import pytest

from pytest_socialbias.models.client import MALFORMED_RETRIES
from pytest_socialbias.testing import FakeServer, Fault, Reply

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml

CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("race-001", "race", "REFUSEME statement three."),
    ("religion-001", "religion", "FAULTME statement four."),
]
AFFECTED = "religion-001"
#: Per case: outcome, bias and refusal label of every turn without faults (fakeworld
#: decides by construction).
BASELINE = {
    "age-001": ("clean", 0, 0),
    "gender-001": ("biased", 1, 0),
    "race-001": ("refused", 0, 1),
    "religion-001": ("clean", 0, 0),
}
#: The fault matrix runs one turn (each retry without Retry-After costs the SDK's backoff,
#: about 0.5 s, per turn); the finish-reason tests run two, so a dialogue goes on after a
#: filtered or cut reply.
TURNS = 2
ROLE_NAMES = {"u": "user", "t": "target", "j": "judge"}
MARKER = "marker-fault"  # the FAULTME case's user messages carry it, so its requests can be told apart

#: Faults a provider may serve on any attempt, the reason a case gives when they never
#: stop, and whether the run is slow (SDK backoff without Retry-After, or a timeout).
TRANSIENT = {
    "429-retry-after": (Fault("rate_limit", retry_after=0.01), "HTTP 429", False),
    "429": (Fault("rate_limit"), "HTTP 429", True),
    "500": (Fault("server_error", status=500), "HTTP 500", True),
    "502": (Fault("server_error", status=502), "HTTP 502", True),
    "503": (Fault("server_error", status=503), "HTTP 503", True),
    # The client gives up after its timeout (3 s, on the faulted role only), however long
    # a loaded machine makes the other calls; the SDK names it one of GAVE_UP.
    "timeout": (Fault("slow", delay=60), "APITimeoutError", True),
    "drop": (Fault("drop_connection"), "(ServerDisconnectedError: Server disconnected)", True),
    "malformed-json": (Fault("malformed_json"), "malformed response", False),
    "empty-choices": (Fault("empty_choices"), "malformed response", False),
}


def world(req):
    """fakeworld, plus a FAULTME case whose user messages carry the marker."""
    if req.model == "u" and "FAULTME" in fakeworld.system_text(req):
        return f"What do you make of people in general, {MARKER}?"
    return fakeworld.script(req)


def is_affected(req) -> bool:
    if req.model == "u":
        return "FAULTME" in fakeworld.system_text(req)
    return MARKER in req.prompt_text


def faulty(role: str, answer, *, every_attempt: bool):
    """``world`` where ``role`` answers ``answer`` (a Fault or Reply, or a function of the
    request giving one): on every attempt of the FAULTME case's requests, or on the first
    attempt of each distinct request of the role (its retries are identical requests)."""
    seen: set[str] = set()  # the script runs on the server's one thread: no lock needed

    def script(req):
        if req.model == role:
            if every_attempt:
                hit = is_affected(req)
            else:
                key = json.dumps([req.api, req.body], sort_keys=True)
                hit = key not in seen
                seen.add(key)
            if hit:
                return answer(req) if callable(answer) else answer
        return world(req)

    return script


def specs(server, *, target_api="openai", transport="?max_retries=1", transports=None):
    """Model options; ``transports`` (role letter -> query) overrides ``transport`` per role."""
    target_url = server.anthropic_base_url if target_api == "anthropic" else server.openai_base_url
    url = server.openai_base_url
    transports = transports or {}
    return [
        f"--target={target_api}:t@{target_url}{transports.get('t', transport)}",
        f"--judge=openai:j@{url}{transports.get('j', transport)}",
        f"--user-model=openai:u@{url}{transports.get('u', transport)}",
    ]


def run(pytester, script, *, target_api="openai", transport="?max_retries=1", turns=TURNS, transports=None):
    """Run the suite against ``script``; the report, the server's requests, the result."""
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=turns))
    with FakeServer(script) as server:
        result = pytester.runpytest(
            "demo.yaml", *specs(server, target_api=target_api, transport=transport, transports=transports),
            "--socialbias-record=off", "--socialbias-report=r.json", "-p", "no:cacheprovider",
        )
        requests = server.requests
        assert server.script_errors == []
    report = read_report(pytester.path / "r.json")
    check_counts_add_up(result, report)
    return report, requests, result


SUMMARY_LINE = re.compile(r"^(\d+) cases: (\d+) clean, (\d+) biased, (\d+) refused, (\d+) errors$")


def check_counts_add_up(result, report):
    summary = report["summary"]
    assert summary["cases"] == len(CASES) == len(report["cases"])
    assert sum(summary["outcomes"].values()) == len(CASES)
    lines = [m for m in map(SUMMARY_LINE.match, result.stdout.lines) if m]
    assert len(lines) == 1, result.stdout.str()[-3000:]
    total, *counts = map(int, lines[0].groups())
    assert total == sum(counts) == len(CASES)
    assert counts == [summary["outcomes"][k] for k in ("clean", "biased", "refused", "error")]
    # Every case is one item, and each item has exactly one outcome.
    items = {k: v for k, v in result.parseoutcomes().items() if k not in ("warnings", "deselected", "socialbias")}  # "1 socialbias failure": a run failure, no item
    assert sum(items.values()) == len(CASES), items


def by_id(report):
    return {c["id"]: c for c in report["cases"]}


def assert_baseline(report, only=None):
    cases = by_id(report)
    for case_id, (outcome, bias, refusal) in BASELINE.items():
        if only is not None and case_id not in only:
            continue
        case = cases[case_id]
        turns = case["turns_planned"]
        labels = {"bias": [bias] * turns, "refusal": [refusal] * turns}
        assert (case["outcome"], case["labels"], case["errors"]) == (outcome, labels, []), case
        assert len(case["turns"]) == turns


def assert_others_labelled(report):
    assert_baseline(report, only=[c for c in BASELINE if c != AFFECTED])


def test_no_faults_gives_the_baseline(pytester, keys):
    report, _, result = run(pytester, world)
    assert_baseline(report)
    assert result.ret == 0


def transient_params():
    for role in ("u", "t", "j"):
        for name, (fault, reason, slow) in TRANSIENT.items():
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(role, name, fault, reason, id=f"{role}-{name}", marks=marks)


#: How a client that gave up waiting is named, whichever layer noticed first: the SDK,
#: or the call's deadline (1.5 x the timeout: 4.5 s, reached in the SDK's second try).
GAVE_UP = ("APITimeoutError", "ReadTimeout", "APIConnectionError", "no answer within the call's deadline of 4.5 s")


def transports_for(role: str, name: str) -> dict:
    """A client timeout on the faulted role only: the other roles' calls never race it."""
    return {role: "?timeout=3&max_retries=1"} if name == "timeout" else {}


@pytest.mark.parametrize("role, name, fault, reason", list(transient_params()))
def test_transient_fault_on_first_attempt_changes_no_label(pytester, keys, role, name, fault, reason):
    report, requests, result = run(
        pytester, faulty(role, fault, every_attempt=False), transports=transports_for(role, name), turns=1
    )
    assert_baseline(report)
    assert result.ret == 0
    faulted = [r for r in requests if r.fault == fault.kind]
    assert faulted and {r.model for r in faulted} == {role}


@pytest.mark.parametrize("role, name, fault, reason", list(transient_params()))
def test_fault_on_every_attempt_errors_only_the_affected_case(pytester, keys, role, name, fault, reason):
    report, requests, result = run(
        pytester, faulty(role, fault, every_attempt=True), transports=transports_for(role, name), turns=1
    )
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert case["outcome"] == "error"
    assert case["errors"] and all(e["kind"] == "model_error" for e in case["errors"])
    reasons = GAVE_UP if name == "timeout" else (reason,)
    for error in case["errors"]:
        assert error["role"] == ROLE_NAMES[role]
        assert error["message"].startswith(f"{ROLE_NAMES[role]} model '")
        assert any(r in error["message"] for r in reasons), error
    result.stdout.fnmatch_lines([f"*::{AFFECTED}: [[]model_error[]] {ROLE_NAMES[role]} model *"])
    assert any(r in result.stdout.str() for r in reasons)
    assert result.ret == 1  # an errored item fails the run
    # Bounded retries: the SDK's one (max_retries=1) for HTTP-level faults, ours (two
    # more) for a 200 whose body is unusable. The judge's two questions of the turn run
    # side by side; the case stops at the first that fails for good.
    attempts = 1 + MALFORMED_RETRIES if fault.kind in ("malformed_json", "empty_choices") else 2
    sent = len([r for r in requests if r.model == role and is_affected(r)])
    if role == "j":
        assert attempts <= sent <= 2 * attempts
    else:
        assert sent == attempts


# -- finish reasons: answers, not faults ------------------------------------------------


def test_target_content_filter_is_a_refusal_never_clean(pytester, keys):
    # The filter stopped the reply after a harmless start: what came before is still judged.
    report, _, _ = run(pytester, faulty("t", Reply("I think", finish_reason="content_filter"), every_attempt=True))
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert case["labels"] == {"bias": [0, 0], "refusal": [1, 1]}
    assert case["outcome"] == "refused"
    assert [t["finish_reason"] for t in case["turns"]] == ["content_filter"] * TURNS


def test_target_content_filter_with_no_text_is_a_refusal(pytester, keys):
    report, requests, _ = run(pytester, faulty("t", Reply("", finish_reason="content_filter"), every_attempt=True))
    case = by_id(report)[AFFECTED]
    assert (case["outcome"], case["labels"]) == ("refused", {"bias": [0, 0], "refusal": [1, 1]})
    # Nothing to judge: an empty filtered reply asks the judge nothing about it.
    assert not [r for r in requests if r.model == "j" and MARKER in r.prompt_text and "label a single reply" in fakeworld.system_text(r)]


def test_target_reply_cut_at_max_tokens_is_still_judged(pytester, keys):
    cut = Reply(fakeworld.BIASED_REPLY, finish_reason="length")
    report, _, _ = run(pytester, faulty("t", cut, every_attempt=True))
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert (case["outcome"], case["labels"]) == ("biased", {"bias": [1, 1], "refusal": [0, 0]})
    assert [t["finish_reason"] for t in case["turns"]] == ["length"] * TURNS


@pytest.mark.parametrize("text", ["", "No", '{"biased": false}'])
def test_judge_content_filter_is_not_a_label(pytester, keys, text):
    # Even a filtered answer that reads as a verdict is not one: retried once, then a judge error.
    report, requests, result = run(pytester, faulty("j", Reply(text, finish_reason="content_filter"), every_attempt=True))
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert case["outcome"] == "error"
    assert case["labels"]["bias"] == [None, None] and case["labels"]["refusal"] == [None, None]
    assert {e["kind"] for e in case["errors"]} == {"judge_error"}
    assert all("content filter" in e["message"] for e in case["errors"])
    # The first answer and exactly one retry per question (2 tasks x 2 turns).
    assert len([r for r in requests if r.model == "j" and MARKER in r.prompt_text]) == 2 * 2 * TURNS


def test_judge_answer_cut_at_max_tokens_is_read_from_its_leading_word(pytester, keys):
    def long_answer(req):
        text = fakeworld.script(req)
        if text.startswith("{"):  # the refusal judge's JSON, as the word it stands for
            text = "Yes" if "true" in text else "No"
        return Reply(text + ", because the reply states that", finish_reason="length")

    report, _, _ = run(pytester, faulty("j", long_answer, every_attempt=True))
    assert_baseline(report)


def test_judge_json_cut_at_max_tokens_after_prose_began_is_a_judge_error(pytester, keys):
    """An object followed by prose is a mixture, cut or not: counted, never read."""
    def long_answer(req):
        text = fakeworld.script(req)
        return Reply(text + ", because the reply states that", finish_reason="length") if text.startswith("{") else text

    report, _, _ = run(pytester, faulty("j", long_answer, every_attempt=True))
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    # The bias judge answered a word: the case keeps its bias labels; its refusal labels
    # are missing, never "not refused", and each unread answer is a counted judge error.
    assert case["labels"] == {"bias": [0] * TURNS, "refusal": [None] * TURNS}
    assert [e["kind"] for e in case["errors"]] == ["judge_error"] * TURNS
    assert all("unreadable judge answer" in e["message"] and e["task"] == "refusal" for e in case["errors"])


def test_judge_json_cut_at_max_tokens_is_a_judge_error(pytester, keys):
    report, _, _ = run(pytester, faulty("j", Reply('{"biased": fal', finish_reason="length"), every_attempt=True))
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert case["outcome"] == "error"
    assert {e["kind"] for e in case["errors"]} == {"judge_error"}


@pytest.mark.parametrize("text", ["", "Tell me what you honestly think about"])
def test_user_simulator_content_filter_is_a_role_break(pytester, keys, text):
    report, requests, _ = run(pytester, faulty("u", Reply(text, finish_reason="content_filter"), every_attempt=True))
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert case["outcome"] == "error"
    assert [e["kind"] for e in case["errors"]] == ["user_simulator_error"]
    assert "3 draws" in case["errors"][0]["message"]
    # The target never saw a filtered user message.
    assert not [r for r in requests if r.model == "t" and MARKER in r.prompt_text]
    assert not [r for r in requests if r.model == "t" and text and text in r.prompt_text]


def test_user_message_cut_at_max_tokens_is_still_used(pytester, keys):
    def cut(req):
        return Reply(world(req), finish_reason="length")

    report, _, _ = run(pytester, faulty("u", cut, every_attempt=True))
    assert_baseline(report)


# -- an Anthropic target ------------------------------------------------------------------

ANTHROPIC = {
    "429-retry-after": (Fault("rate_limit", retry_after=0.01), "HTTP 429", False),
    "500": (Fault("server_error", status=500), "HTTP 500", True),
    "529-overloaded": (Fault("overloaded"), "HTTP 529", True),
    "drop": (Fault("drop_connection"), "(ServerDisconnectedError: Server disconnected)", True),
    "malformed-json": (Fault("malformed_json"), "malformed response", False),
    "empty-content": (Fault("empty_choices"), "malformed response", False),
}


def anthropic_params():
    for name, (fault, reason, slow) in ANTHROPIC.items():
        yield pytest.param(name, fault, reason, id=name, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("name, fault, reason", list(anthropic_params()))
@pytest.mark.parametrize("every_attempt", [False, True], ids=["first-attempt", "every-attempt"])
def test_anthropic_target_faults(pytester, keys, name, fault, reason, every_attempt):
    report, requests, result = run(
        pytester, faulty("t", fault, every_attempt=every_attempt), target_api="anthropic", turns=1
    )
    assert {r.api for r in requests if r.model == "t"} == {"anthropic"}
    if not every_attempt:
        assert_baseline(report)
        return
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert case["outcome"] == "error"
    assert [e["role"] for e in case["errors"]] == ["target"]
    assert reason in case["errors"][0]["message"]


def test_anthropic_target_refusal_stop_is_a_refusal(pytester, keys):
    report, _, _ = run(
        pytester, faulty("t", Reply("", finish_reason="content_filter"), every_attempt=True), target_api="anthropic"
    )
    assert_others_labelled(report)
    case = by_id(report)[AFFECTED]
    assert (case["outcome"], case["labels"]["refusal"]) == ("refused", [1, 1])
    assert [t["finish_reason"] for t in case["turns"]] == ["content_filter"] * TURNS


def test_anthropic_target_max_tokens_stop_is_still_judged(pytester, keys):
    report, _, _ = run(
        pytester, faulty("t", Reply(fakeworld.BIASED_REPLY, finish_reason="length"), every_attempt=True),
        target_api="anthropic",
    )
    case = by_id(report)[AFFECTED]
    assert (case["outcome"], case["labels"]["bias"]) == ("biased", [1, 1])
    assert [t["finish_reason"] for t in case["turns"]] == ["length"] * TURNS
