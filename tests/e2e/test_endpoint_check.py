"""Endpoint checks: what a run adapts to is decided once, before the first case's call,
from one fixed request per role, so the same command sends the same requests whatever
order answers come back in, and a replay finds every recorded answer."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter

from pytest_socialbias.testing import FakeServer, Fault, ReasoningModel, Reply, honoured

from ..support import fakeworld
from ..support.helpers import read_report

CASES = [(f"age-{i:03d}", "age", ("BIASME " if i % 3 == 0 else "") + f"statement {i}.") for i in range(6)]


def request_key(request) -> str:
    return json.dumps([request.model, request.messages, request.params], sort_keys=True)


def is_refusal_judge(req) -> bool:
    return req.model == "j" and "refused" in fakeworld.system_text(req)


class Delayed:
    """The fake world, whose judge answers JSON to the refusal question whatever it is
    asked (constrained or not), with answers delayed in a given order: ``refusal-first``,
    ``bias-first`` or ``random:SEED``."""

    def __init__(self, order: str):
        self.order = order

    def __call__(self, req):
        answer = fakeworld.script(req)
        if req.endpoint_check or req.model != "j":
            return answer
        refusal = is_refusal_judge(req)
        if self.order == "refusal-first":
            latency = 0.0 if refusal else 0.05
        elif self.order == "bias-first":
            latency = 0.05 if refusal else 0.0
        else:
            seed = int(self.order.split(":")[1])
            latency = random.Random(f"{seed}:{request_key(req)}").uniform(0, 0.05)
        return Reply(answer if isinstance(answer, str) else answer.text, latency=latency)


def run(pytester, server, cache: str, *extra, judge: str = "j"):
    url = server.openai_base_url
    report = f"{cache}.json"
    judge, _, query = judge.partition("?")
    result = pytester.runpytest(
        "demo.yaml", f"--target=openai:t@{url}", f"--judge=openai:{judge}@{url}" + (f"?{query}" if query else ""),
        f"--user-model=openai:u@{url}",
        f"--socialbias-cache-dir={cache}", f"--socialbias-report={report}", "-p", "no:cacheprovider", *extra,
    )
    path = pytester.path / report
    return result, (read_report(path) if path.exists() else None)


def test_the_same_run_sends_the_same_requests_whatever_order_answers_come_back_in(project):
    """The refusal judge's answers never conform to the labels, the bias judge's do: when
    the method was learnt from the first answer checked, the order decided it (and the
    keys); the endpoint check decides it before any case's call."""
    sent, reports = [], []
    for i, order in enumerate(["refusal-first", "bias-first", "random:1", "random:2"]):
        with FakeServer(Delayed(order), endpoint_checks="script") as server:
            result, report = run(project, server, f"cache-{i}")
            assert result.ret == 0, result.stdout.str()
            sent.append(Counter(request_key(r) for r in server.requests))
            checks = [r for r in server.requests if r.endpoint_check]
        reports.append(report)
    for one in sent[1:]:
        assert one == sent[0], sorted((set(one) ^ set(sent[0])))[:3]
    # One check per role, each before that endpoint's first other call (one endpoint here).
    assert sorted(r.model for r in checks) == ["j", "t", "u"]
    assert all(r["models"]["judge"]["adapted"] == {"constrain": "grammar"} for r in reports)
    assert all(r["cases"] == reports[0]["cases"] for r in reports)


class RefusesGrammarLater:
    """A judge endpoint that honours the grammar for its first ``honoured`` judge calls,
    then starts refusing it (HTTP 400), while structured outputs keep working."""

    def __init__(self, honoured_calls: int):
        self.honoured_calls = honoured_calls
        self.judge_calls = 0

    def __call__(self, req):
        if req.endpoint_check:
            return honoured(req)
        if req.model != "j":
            return fakeworld.script(req)
        label = fakeworld.script(req)
        label = "Yes" if label.startswith("Yes") or '"refusal": true' in label else "No"
        if "grammar" in req.params:
            self.judge_calls += 1
            if self.judge_calls > self.honoured_calls:
                return Fault("bad_request", message="Unrecognized request argument supplied: grammar")
            return label
        return json.dumps({"answer": label}) if "response_format" in req.params else label


def test_a_method_change_part_way_replays_with_zero_misses(project):
    with FakeServer(RefusesGrammarLater(honoured_calls=5), endpoint_checks="script") as server:
        recorded, report = run(project, server, "cache", "--socialbias-concurrency=4")
        assert recorded.ret == 0, recorded.stdout.str()
        judged = [r for r in server.requests if r.model == "j" and not r.endpoint_check and r.fault is None]
        methods = Counter("grammar" if "grammar" in r.params else r.params["response_format"]["type"] for r in judged)
        assert methods["grammar"] == 5 and methods["json_schema"] > 0  # the change did happen part-way
        assert report["models"]["judge"]["adapted"] == {"constrain": "json_schema", "constrain_failed": ["grammar"]}
        assert report["summary"]["outcomes"]["error"] == 0

        server.clear()
        replayed, again = run(project, server, "cache", "--socialbias-record=none")
        assert replayed.ret == 0, replayed.stdout.str()
        assert server.request_count == 0
    assert again["cases"] == report["cases"]
    assert again["metrics"] == report["metrics"]


def slow_thinker(req):
    """A reasoning judge that thinks 10 tokens, or 100 about a reply that endorses a
    stereotype: the checked budget (20) fits most calls, not those."""
    long = fakeworld.BIASED_REPLY in req.prompt_text and not req.endpoint_check

    def answer(r):
        if r.endpoint_check:
            return honoured(r)
        label = fakeworld.script(dataclasses.replace(r, model="j"))
        return honoured(r, "Yes" if label.startswith("Yes") or '"refusal": true' in label else "No")

    return ReasoningModel(answer, thinking_tokens=100 if long else 10, rejects={})(req)


def test_a_budget_raised_for_one_call_stays_that_calls(project):
    def world(req):
        if req.model == "rj":
            return slow_thinker(req)
        return fakeworld.script(req)

    with FakeServer(world, endpoint_checks="script") as server:
        result, report = run(project, server, "cache", judge="rj")
        assert report["summary"]["outcomes"]["error"] == 0, result.stdout.str()
        calls = [r for r in server.requests if r.model == "rj" and not r.endpoint_check]
    long = [c for c in calls if fakeworld.BIASED_REPLY in c.prompt_text]
    short = [c for c in calls if c not in long]
    assert long and short
    # Each long call went out at 20, came back empty, and was asked again at 320.
    assert sorted(c.params["max_tokens"] for c in long) == [20] * (len(long) // 2) + [320] * (len(long) // 2)
    assert {c.params["max_tokens"] for c in short} == {20}
    assert "max_tokens" not in report["models"]["judge"].get("adapted", {})


def test_xdist_workers_take_the_check_from_the_cache(project):
    """Two workers, one cache: each role of the endpoint is checked once in the run; a
    rerun with the same cache checks nothing; --socialbias-record=all checks once more."""
    with FakeServer(fakeworld.script) as server:  # the server answers the checks itself
        result, report = run(project, server, "cache", "-n", "2")
        assert result.ret == 0, result.stdout.str()
        assert sorted(r.model for r in server.endpoint_checks) == ["j", "t", "u"]
        assert not any(r.endpoint_check for r in server.requests)

        server.clear()
        again, _ = run(project, server, "cache", "-n", "2")
        assert again.ret == 0 and server.request_count == 0 and server.endpoint_checks == []

        rerecord, _ = run(project, server, "cache", "-n", "2", "--socialbias-record=all")
        assert rerecord.ret == 0, rerecord.stdout.str()
        assert sorted(r.model for r in server.endpoint_checks) == ["j", "t", "u"]


def test_an_endpoint_that_honours_no_method_is_asked_plainly_and_says_so(project):
    """An endpoint that ignores every constraint field: the check finds no method, judge
    calls carry none, the parser reads the plain answers, the summary says so."""

    def ignores_everything(req):
        if req.endpoint_check:
            return "It is cool and bright, with dew on the grass."
        return fakeworld.script(req)

    with FakeServer(ignores_everything, endpoint_checks="script") as server:
        result, report = run(project, server, "cache")
        assert result.ret == 0, result.stdout.str()
        judged = [r for r in server.requests if r.model == "j" and not r.endpoint_check]
        checks = [r for r in server.requests if r.model == "j" and r.endpoint_check]
    adapted = report["models"]["judge"]["adapted"]
    assert adapted == {"constrain": "none", "constrain_failed": ["grammar", "json_object", "json_schema"]}
    assert len(checks) == 3  # grammar, json_schema, json_object: each taken, none honoured
    assert not any({"grammar", "response_format", "guided_choice"} & set(r.params) for r in judged)
    result.stdout.fnmatch_lines(["*judge (openai:j): answers not constrained*"])


def test_a_failed_check_is_each_waiting_calls_error_never_a_label(project):
    def down_judge(req):
        if req.model == "j":
            return Fault("server_error")
        return fakeworld.script(req)

    with FakeServer(down_judge, endpoint_checks="script") as server:
        result, report = run(project, server, "cache", judge="j?max_retries=0")
    assert report["summary"]["outcomes"] == {"clean": 0, "biased": 0, "refused": 0, "error": 6}
    assert all("endpoint check failed" in e["message"] for c in report["cases"] for e in c["errors"])
    errors = sum(len(c["errors"]) for c in report["cases"])
    assert errors == 12  # a turn's judging fails as one error (its first failed call's)
    # No judge call went past its failed check: nothing was asked, nothing labelled.
    assert not [r for r in server.requests if r.model == "j" and not r.endpoint_check]
    # Each judge call that waits sends at most one check of its own (a turn makes at most
    # three: refusal, bias, coherence), and the check sent ahead is the first waiting
    # call's attempt: never more checks than that plus one. How many exactly depends on
    # timing (calls asking the same check at once share one attempt; a turn's other judge
    # calls still check after its first one failed), so it is bounded here and counted
    # exactly in tests/unit/test_check_ahead.py.
    checks = [r for r in server.requests if r.model == "j" and r.endpoint_check]
    assert 1 <= len(checks) <= 3 * errors + 1


def test_the_endpoints_a_run_needs_are_checked_at_once_before_its_first_call(project):
    """The simulator's, the target's and the judge's endpoints are checked together when the
    first call is about to be sent, so the dialogues wait one check's latency, not one per
    role; every check still comes before the first ordinary request of its endpoint."""
    with FakeServer(fakeworld.script, latency=0.2, endpoint_checks="script") as server:
        _, report = run(project, server, "cache")
    assert report["summary"]["outcomes"]["error"] == 0
    requests = sorted(server.requests, key=lambda r: r.index)
    first_call = next(r.index for r in requests if not r.endpoint_check)
    assert {r.model for r in requests if r.endpoint_check and r.index < first_call} == {"u", "t", "j"}
    assert sorted(r.model for r in requests if r.endpoint_check) == ["j", "t", "u"]  # each once


def test_record_all_checks_the_endpoint_again_from_scratch(project):
    """An endpoint that refused the grammar when the cache was recorded and takes it now:
    re-recording finds the grammar, not what the old run found."""
    takes_grammar = {"now": False}

    def world(req):
        if req.endpoint_check and req.model == "j" and "grammar" in req.params and not takes_grammar["now"]:
            return Fault("bad_request", message="Unrecognized request argument supplied: grammar")
        return fakeworld.script(req)

    with FakeServer(world, endpoint_checks="script") as server:
        _, report = run(project, server, "cache")
        assert report["models"]["judge"]["adapted"] == {"constrain": "json_schema", "constrain_failed": ["grammar"]}
        takes_grammar["now"] = True
        _, again = run(project, server, "cache")
        assert again["models"]["judge"]["adapted"] == report["models"]["judge"]["adapted"]  # kept from the cache
        _, rerecorded = run(project, server, "cache", "--socialbias-record=all")
    assert rerecorded["models"]["judge"]["adapted"] == {"constrain": "grammar"}


def test_the_constraint_method_is_reported_only_under_roles_whose_answers_it_holds():
    """Issue 26 fixture: one endpoint for every role (the embedded model on a llama.cpp
    server) listed "answers constrained with grammar" under the target and the user
    simulator too, though only judge calls carry a constraint. What the endpoint dropped
    still shows under every role that sends to it."""
    from pytest_socialbias.models.adapt import Adaptation
    from pytest_socialbias.protocols.base import Roles

    shared = Adaptation(dropped={"seed": "rejected by the endpoint"}, constrain="grammar", failed=["json_schema"])

    class Stub:
        def __init__(self, constrained):
            self.adaptation, self.asks_constrained = shared, constrained

    adapted = Roles(target=Stub(False), judge=Stub(True), user=Stub(False)).adaptations()
    assert adapted["judge"] == {"dropped": {"seed": "rejected by the endpoint"}, "constrain": "grammar",
                                "constrain_failed": ["json_schema"]}
    assert adapted["target"] == adapted["user"] == {"dropped": {"seed": "rejected by the endpoint"}}
    shared.dropped.clear()
    assert set(Roles(target=Stub(False), judge=Stub(True), user=Stub(False)).adaptations()) == {"judge"}


def test_a_call_held_to_labels_marks_its_role(project):
    """Model.chat with choices marks the role as one whose answers are held to labels; a
    free-text call does not (the endpoint check, which every role makes, neither)."""
    import asyncio

    from pytest_socialbias.models import CallPool, Model, parse_spec

    with FakeServer(fakeworld.script) as server:
        judge = Model("judge", parse_spec(f"openai:j@{server.openai_base_url}", "--judge"), "--judge", CallPool())
        target = Model("target", parse_spec(f"openai:t@{server.openai_base_url}", "--target"), "--target", CallPool())

        async def calls():
            try:
                await target.chat([{"role": "user", "content": "Hello."}])
                await judge.chat([{"role": "system", "content": "Answer Yes or No."}, {"role": "user", "content": "Biased?"}],
                                 choices=("Yes", "No"))
            finally:
                await judge.aclose() if hasattr(judge, "aclose") else None
                await target.aclose() if hasattr(target, "aclose") else None

        asyncio.run(calls())
    assert judge.asks_constrained and not target.asks_constrained
