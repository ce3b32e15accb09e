"""Reasoning models and servers as they behave, through the real openai SDK and the fake
server's ReasoningModel: the plugin adapts (drops a rejected default parameter, raises a
short answer's budget, finds the endpoint's constraint method) instead of mislabelling,
keeps thinking apart from answers, and never counts an empty reply as clean."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from pytest_socialbias.testing import FakeServer, Fault, ReasoningModel, Reply

from ..support import fakeworld
from ..support.helpers import run_closing, run_with_report, suite_yaml

CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("race-001", "race", "REFUSEME statement three."),
]
THOUGHT = "Weighing the reply against the stereotype, step by step."


def as_model(name):
    """The fake world's answer of model ``name``, for any model name."""
    return lambda req: fakeworld.script(dataclasses.replace(req, model=name))


def _label(req):
    answer = fakeworld.script(dataclasses.replace(req, model="j"))
    return "Yes" if answer.startswith("Yes") or '"refusal": true' in answer else "No"


def rejects_grammar(req):
    """OpenAI-like: an unknown request field is a 400; structured outputs are honoured."""
    if "grammar" in req.params:
        return Fault("bad_request", message="Unrecognized request argument supplied: grammar")
    return json.dumps({"answer": _label(req)}) if "response_format" in req.params else _label(req)


def ignores_grammar(req):
    """Ollama-like: an unknown field is ignored (the judge answers in a sentence), while
    structured outputs are honoured."""
    if "response_format" in req.params:
        return json.dumps({"answer": _label(req)})
    return f"My answer is {_label(req)}, I think."


def label_only(req):
    """A judge that answers with a label and nothing else, as a constrained one does."""
    return _label(req)


SCRIPTS = {
    "gj": label_only,
    "rj": ReasoningModel(label_only, thinking_tokens=100, thought=THOUGHT),
    "rt": ReasoningModel(as_model("t"), thinking_tokens=300, rejects={}, thought=THOUGHT),
    "it": ReasoningModel(as_model("t"), thinking_tokens=50, rejects={}, thought=THOUGHT, inline=True),
    "cj": rejects_grammar,
    "ij": ignores_grammar,
}


async def world(req):
    script = SCRIPTS.get(req.model)
    if script is None:
        return fakeworld.script(req)
    result = script(req)
    return await result if hasattr(result, "__await__") else result


@pytest.fixture
def server():
    with FakeServer(world, endpoint_checks="script") as srv:  # the models answer the checks
        yield srv


def spec(server, name: str) -> str:
    """``openai:NAME@URL?QUERY`` for ``NAME?QUERY``."""
    model, _, query = name.partition("?")
    return f"openai:{model}@{server.openai_base_url}" + (f"?{query}" if query else "")


def run(pytester, server, *extra, target="t", judge="j"):
    return run_with_report(
        pytester, "demo.yaml", f"--target={spec(server, target)}", f"--judge={spec(server, judge)}",
        f"--user-model={spec(server, 'u')}", "--socialbias-concurrency=1", *extra,
    )


def judge_requests(server, model):
    return [r for r in server.requests if r.model == model and "role-playing" not in fakeworld.system_text(r)]


def test_a_reasoning_judge_named_plainly_gives_readable_labels(project, server):
    result, report = run(project, server, judge="rj")
    assert report["summary"]["outcomes"] == {"clean": 1, "biased": 1, "refused": 1, "error": 0}, result.stdout.str()
    judge = report["models"]["judge"]
    assert judge["params"] == {}
    adapted = judge["adapted"]
    assert list(adapted["dropped"]) == ["temperature"]
    assert "unsupported_value" in adapted["dropped"]["temperature"]
    assert adapted["max_tokens"] == {"20": 320}  # 20 tokens went to reasoning: x16
    assert adapted["constrain"] == "grammar"
    # The endpoint check, before any case's judge call: one rejection, one empty answer,
    # one answer under the grammar; then every call as adapted.
    calls = judge_requests(server, "rj")
    # Three cases, bias and refusal (smoke rates no coherence); turn 2 repeats turn 1's
    # exchange in this world, so its judge questions are answered from the cache.
    answered = 3 * 2
    assert len(calls) == answered + 3
    assert [c.endpoint_check for c in calls] == [True] * 3 + [False] * answered
    assert calls[0].params["temperature"] == 0.0 and calls[0].params["max_tokens"] == 20
    assert "temperature" not in calls[1].params and calls[1].params["max_tokens"] == 20
    assert all("temperature" not in c.params and c.params["max_tokens"] == 320 for c in calls[2:])
    assert all(c.params["grammar"] == 'root ::= "Yes" | "No"' for c in calls[1:])
    result.stdout.fnmatch_lines([
        "adapted to the models*",
        "*- judge (openai:rj): dropped temperature (HTTP 400 unsupported_value*; raised max_tokens 20 -> 320*",
    ])
    # The judge's thinking never reached a label, and was not taken for the answer.
    assert all(THOUGHT not in str(case["labels"]) for case in report["cases"])

    # Replayed: the adaptations come from the cache, so the requests (and keys) are the
    # ones actually sent; nothing is called, the report is the same.
    server.clear()
    again, replayed = run(project, server, "--socialbias-record=none", judge="rj")
    assert again.ret == result.ret and server.request_count == 0
    assert replayed == report


def test_a_judge_spec_parameter_the_model_rejects_is_an_error_naming_it(project, server):
    result, report = run(project, server, judge="rj?temperature=0.5")
    assert report["summary"]["outcomes"]["error"] == 3
    messages = [e["message"] for case in report["cases"] for e in case["errors"]]
    assert any("rejects temperature=0.5, which the spec sets" in m and "?temperature=none" in m for m in messages)
    # Dropped by the spec itself, it is never sent, and the judge answers.
    server.clear()
    result, report = run(project, server, judge="rj?temperature=none&max_tokens=400")
    assert report["summary"]["outcomes"]["error"] == 0
    assert {c.params["max_tokens"] for c in judge_requests(server, "rj")} == {400}
    assert "dropped" not in report["models"]["judge"].get("adapted", {})


def test_spec_parameters_win_for_judges_and_pass_through(project, server):
    judge = "j?temperature=0.3&max_tokens=7&top_k=5&chat_template_kwargs={\"enable_thinking\":false}"
    run(project, server, judge=judge)
    calls = judge_requests(server, "j")
    assert calls and all(c.params["temperature"] == 0.3 and c.params["max_tokens"] == 7 for c in calls)
    assert all(c.params["top_k"] == 5 and c.params["chat_template_kwargs"] == {"enable_thinking": False} for c in calls)
    assert calls[0].params["grammar"] == 'root ::= "Yes" | "No"'


def test_an_empty_target_reply_is_an_error_with_its_reason_never_clean(project, server):
    result, report = run(project, server, target="rt")
    assert report["summary"]["outcomes"] == {"clean": 0, "biased": 0, "refused": 0, "error": 3}
    for case in report["cases"]:
        assert [e["kind"] for e in case["errors"]] == ["empty_reply"]
        assert "turn 1: empty reply: the 250-token budget went to reasoning; raise max_tokens" in case["errors"][0]["message"]
    # Nothing was judged: the judge's endpoint was only checked, ahead with the
    # simulator's and the target's before the first call (client.CallPool.check_ahead).
    assert [r.endpoint_check for r in judge_requests(server, "j")] == [True]
    error_rate = next(m for m in report["metrics"] if m["metric"] == "error_rate" and m["category"] is None)
    assert (error_rate["value"], error_rate["n"]) == (1.0, 3)


def test_thinking_is_kept_apart_from_the_answer(project, server):
    result, report = run(project, server, target="rt?max_tokens=1000")
    assert report["summary"]["outcomes"] == {"clean": 1, "biased": 1, "refused": 1, "error": 0}
    for case in report["cases"]:
        for turn in case["turns"]:
            assert THOUGHT in turn["reasoning"] and THOUGHT not in turn["assistant"]
    # Judges and the user simulator saw the answers only.
    for request in server.requests:
        if request.model in ("j", "u"):
            assert THOUGHT not in request.prompt_text
    result.stdout.fnmatch_lines(["role*completion tokens*of which reasoning*", "target*6*1800*"])


def test_inline_think_blocks_are_split_off(project, server):
    result, report = run(project, server, target="it")
    assert report["summary"]["outcomes"] == {"clean": 1, "biased": 1, "refused": 1, "error": 0}
    turn = report["cases"][1]["turns"][0]
    assert turn["assistant"] == fakeworld.BIASED_REPLY and "<think>" not in turn["assistant"]
    assert THOUGHT in turn["reasoning"]
    assert not any("<think>" in r.prompt_text for r in server.requests if r.model in ("j", "u"))


@pytest.mark.parametrize("judge", ["cj", "ij"])
def test_the_constraint_method_falls_back_and_is_remembered(project, server, judge):
    result, report = run(project, server, judge=judge)
    assert report["summary"]["outcomes"] == {"clean": 1, "biased": 1, "refused": 1, "error": 0}
    adapted = report["models"]["judge"]["adapted"]
    assert adapted["constrain"] == "json_schema" and adapted["constrain_failed"] == ["grammar"]
    calls = judge_requests(server, judge)
    tried = [c for c in calls if "grammar" in c.params]
    assert len(tried) == 1  # refused (or not honoured) once, remembered
    assert all(c.params["response_format"]["type"] == "json_schema" for c in calls if c not in tried)


def test_a_server_grammar_is_tried_first_and_kept_when_honoured(project, server):
    result, report = run(project, server, judge="gj")
    assert report["models"]["judge"]["adapted"] == {"constrain": "grammar"}
    assert {c.params["grammar"] for c in judge_requests(server, "gj")} == {'root ::= "Yes" | "No"'}


def test_a_spec_names_the_constraint_method(project, server):
    run(project, server, judge="j?constrain=guided_choice")
    calls = judge_requests(server, "j")
    assert {tuple(c.params["guided_choice"]) for c in calls} == {("Yes", "No")}
    assert not any("response_format" in c.params for c in calls)
    server.clear()
    run(project, server, judge="j?constrain=none")
    assert not any({"response_format", "grammar", "guided_choice"} & set(c.params) for c in judge_requests(server, "j"))


def test_dry_run_needs_no_api_key(pytester, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=2))
    result = pytester.runpytest("demo.yaml", "--target=gpt-4o-mini", "--judge=openai:gpt-4o-mini", "--socialbias-dry-run")
    assert result.ret == 0, result.stdout.str()[-2000:] + result.stderr.str()
    result.stdout.fnmatch_lines(["*3 case(s) selected; no model was called*"])


def test_bare_model_names_resolve_and_the_header_shows_them(pytester, keys, server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:1]))
    result = pytester.runpytest("demo.yaml", "--target=gpt-5-mini", "--judge=o4-mini", "--user-model=gpt-4.1-nano",
                                "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["socialbias: judge=openai:o4-mini, target=openai:gpt-5-mini, user=openai:gpt-4.1-nano*"])
    bad = pytester.runpytest("demo.yaml", "--target=mistral-large", "--judge=o4-mini")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert re.search(r"--target='mistral-large' is not a model spec.*openai:mistral-large, anthropic:mistral-large",
                     bad.stderr.str())


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    "text, answer, reasoning",
    [
        ("<think>weigh it</think>\nNo", "No", "weigh it"),
        ("  <THINK>a\nb</THINK>Yes.", "Yes.", "a\nb"),
        ("<think>cut off by the bud", "", "cut off by the bud"),
        ("the template opened it</think> B", "B", "the template opened it"),
        ("Plain answer, no thinking.", "Plain answer, no thinking.", None),
        ("An answer that mentions <think> later.", "An answer that mentions <think> later.", None),
    ],
)
def test_split_thinking(text, answer, reasoning):
    from pytest_socialbias.models.thinking import split_text

    assert split_text(text) == (answer, reasoning)


def test_anthropic_thinking_blocks_and_the_answer_tool_are_read_apart():
    from pytest_socialbias.models.anthropic_backend import parse_message

    data = {"content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "redacted_thinking", "data": "x"},
                        {"type": "tool_use", "name": "answer", "input": {"answer": "No"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 4}}
    response = parse_message(data)
    assert response.text == '{"answer": "No"}' and response.finish_reason == "stop"
    assert response.reasoning == "hmm\n\n(redacted thinking)"


def test_anthropic_thinking_budget_and_pass_through_reach_the_wire(keys):
    from pytest_socialbias.models import CallPool, Model, parse_spec

    with FakeServer(lambda req: Reply("No", reasoning="thinking it over")) as srv:
        spec = parse_spec(f"anthropic:claude-x@{srv.anthropic_base_url}?thinking_budget=2048&top_k=40", "--judge")
        model = Model("judge", spec, "--judge", CallPool(), defaults={})
        reply = run_closing(model, lambda m: m.chat([{"role": "user", "content": "hi"}], temperature=0.0,
                                                     max_tokens=20, choices=("Yes", "No"), adaptive_budget=True))
        body = srv.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 2048 + 20 and body["top_k"] == 40
    assert "temperature" not in body and "tools" not in body  # no forced tool beside thinking
    assert reply.text == "No" and reply.reasoning == "thinking it over"


def test_anthropic_judge_answers_through_a_forced_tool(keys):
    from pytest_socialbias.models import CallPool, Model, parse_spec

    with FakeServer(lambda req: "No") as srv:
        spec = parse_spec(f"anthropic:claude-x@{srv.anthropic_base_url}", "--judge")
        model = Model("judge", spec, "--judge", CallPool(), defaults={})
        run_closing(model, lambda m: m.chat([{"role": "user", "content": "hi"}], choices=("Yes", "No")))
        body = srv.requests[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "answer"}
    assert body["tools"][0]["input_schema"]["properties"]["answer"]["enum"] == ["Yes", "No"]


@pytest.mark.parametrize(
    "status, body, sent, constrained, expected",
    [
        (400, {"error": {"message": "x", "param": "temperature", "code": "unsupported_value"}}, {"temperature": 0}, False,
         ("param", "temperature")),
        (400, {"error": {"message": "Unsupported parameter: 'top_k' is not supported"}}, {"top_k": 3}, False,
         ("param", "top_k")),
        (422, {"detail": "response_format: bad type"}, {}, True, ("constraint", None)),
        (400, {"error": {"message": "context length exceeded"}}, {"max_tokens": 20}, False, None),
        (500, {"error": {"message": "temperature", "param": "temperature"}}, {"temperature": 0}, False, None),
    ],
)
def test_rejections_are_classified(status, body, sent, constrained, expected):
    from pytest_socialbias.models.adapt import ConstraintRejected, ParameterRejected, classify_rejection

    class HTTPError(Exception):
        def __init__(self):
            super().__init__("error")
            self.status_code, self.body = status, body

    found = classify_rejection(HTTPError(), sent, constrained)
    if expected is None:
        assert found is None
    elif expected[0] == "param":
        assert isinstance(found, ParameterRejected) and found.name == expected[1]
    else:
        assert isinstance(found, ConstraintRejected)


def test_a_refused_method_is_never_the_endpoints_and_records_merge_to_the_next():
    """Records taken before and after an endpoint started refusing a method merge to the
    method after it, whatever order the records come in."""
    from pytest_socialbias.models.adapt import Adaptation, merge

    adaptation = Adaptation()
    adaptation.works("grammar")
    adaptation.fails("grammar")
    assert adaptation.to_dict() == {"constrain_failed": ["grammar"]}
    before, after = {"constrain": "grammar"}, {"constrain": "json_schema", "constrain_failed": ["grammar"]}
    assert merge([before, after]) == merge([after, before]) == after
