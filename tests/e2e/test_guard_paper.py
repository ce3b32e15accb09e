"""Guards as BenevDial ran them: Granite Guardian asked about its social-bias criterion
through the chat-template arguments, and each guard judging the unit its authors use
(context for Llama Guard, Granite Guardian and Qwen3Guard; exchange for WildGuard), with
the unit and the criterion settable per guard."""

from __future__ import annotations

import json

import pytest

from ..support.detectworld import write_detect_suite
from ..support.helpers import assert_usage_error, run_with_report

GRANITE = "ibm-granite/granite-guardian-3.3-8b"
LLAMA = "meta-llama/Llama-Guard-3-8B"
WILD = "allenai/wildguard"


def risk_of(req) -> str | None:
    config = (req.body.get("chat_template_kwargs") or {}).get("guardian_config") or {}
    return config.get("criteria_id")


def world(req):
    text = " ".join(m["content"] for m in req.messages)
    if req.model == GRANITE:
        # Under social_bias it sees the overt narrowing; under harm it sees neither kind
        # (so a run shows which criterion the template was given).
        return "Yes" if risk_of(req) == "social_bias" and "COLDNARROW" in text else "No"
    if req.model == LLAMA:
        return "unsafe\nS10" if "COLDNARROW" in text else "safe"
    if req.model == WILD:
        verdict = "yes" if "COLDNARROW" in text else "no"
        return f"Harmful request: no\nResponse refusal: no\nHarmful response: {verdict}"
    return f"unexpected request for {req.model}"


#: What the ``server`` fixture (tests/conftest.py) plays.
SERVER_SCRIPT = world


@pytest.fixture
def project(pytester, keys):
    # Six labelled dialogues (2 N, 2 OB, 2 BB), two agent turns each, clean only.
    write_detect_suite(pytester.path, "[clean]", cues=False)
    return pytester


def run(pytester, spec, *args):
    return run_with_report(pytester, "detect.yaml", f"--socialbias-guard={spec}", *args)


def rates(report) -> tuple:
    row = {m["metric"]: m["value"] for m in report["metrics"] if m["category"] == "guard" and m["style"] == "clean"}
    return row["tr_n"], row["tr_ob"], row["tr_bb"]


def units(report) -> set:
    return {c["detections"]["guard"]["unit"] for c in report["cases"]}


def test_granite_guardian_is_asked_about_social_bias_in_context_by_default(project, server):
    result, report = run(project, f"openai:{GRANITE}@{server.openai_base_url}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    calls = [r for r in server.requests if r.model == GRANITE]
    # 6 dialogues x 2 agent turns; the dialogues come in pairs with the same words, and a
    # question asked twice is sent once.
    assert len(calls) == 6
    assert all(r.body["chat_template_kwargs"] == {"guardian_config": {"risk_name": "social_bias", "criteria_id": "social_bias"}} for r in calls)
    # Context: the first agent turn with its user turn (2 messages), the second with all 4.
    assert sorted(len(r.messages) for r in calls) == [2] * 3 + [4] * 3
    assert units(report) == {"context"}
    assert rates(report) == (0.0, 1.0, 0.0)
    guard = report["models"]["guard"]
    assert (guard["kind"], guard["risk"]) == ("granite-guardian", "social_bias")


@pytest.mark.parametrize("how", ["option", "spec"])
def test_the_risk_criterion_is_chosen_per_run_or_in_the_spec(project, server, how):
    spec = f"openai:{GRANITE}@{server.openai_base_url}"
    args = ["--socialbias-guard-risk=harm"] if how == "option" else []
    result, report = run(project, spec + ("?risk=harm" if how == "spec" else ""), *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert {risk_of(r) for r in server.requests} == {"harm"}
    assert rates(report) == (0.0, 0.0, 0.0)
    assert report["models"]["guard"]["risk"] == "harm"


def test_a_guardian_config_written_in_the_spec_stands(project, server):
    config = json.dumps({"guardian_config": {"criteria_id": "social_bias"}, "think": False}, separators=(",", ":"))
    result, report = run(project, f"openai:{GRANITE}@{server.openai_base_url}?chat_template_kwargs={config}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert {json.dumps(r.body["chat_template_kwargs"], sort_keys=True) for r in server.requests} == {
        json.dumps({"guardian_config": {"criteria_id": "social_bias"}, "think": False}, sort_keys=True)
    }
    assert report["models"]["guard"]["risk"] == "social_bias"


def test_each_guard_judges_its_own_unit_unless_told(project, server):
    url = server.openai_base_url
    result, report = run(project, f"openai:{LLAMA}@{url}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert units(report) == {"context"}
    assert sorted(len(r.messages) for r in server.requests) == [2] * 3 + [4] * 3  # pairs share their words
    assert "chat_template_kwargs" not in server.requests[0].body  # no criterion for a fixed policy
    assert not [t for t in report["prompt_templates"] if t.startswith("guard")]  # its policy is the server's
    server.clear()
    result, report = run(project, f"openai:{WILD}@{url}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert units(report) == {"exchange"}
    assert len(server.requests) == 6 and all(len(r.messages) == 1 for r in server.requests)
    assert rates(report) == (0.0, 1.0, 0.0)
    assert "guard_wildguard@1" in report["prompt_templates"]  # the prompt file it was sent


def test_the_guard_specs_unit_wins_over_the_run_option(project, server):
    result, report = run(project, f"openai:{LLAMA}@{server.openai_base_url}?unit=turn", "--socialbias-guard-unit=context")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert units(report) == {"turn"}
    assert report["models"]["guard"]["unit"] == "turn"
    assert "unit" not in server.requests[0].body  # a setting of ours, never sent
    # The run option still sets the unit where the spec does not.
    server.clear()
    result, report = run(project, f"openai:{LLAMA}@{server.openai_base_url}", "--socialbias-guard-unit=exchange")
    assert units(report) == {"exchange"}


@pytest.mark.parametrize(
    "spec, args, needles",
    [
        (f"openai:{LLAMA}@URL", ["--socialbias-guard-risk=social_bias"], ["llama-guard-3", "takes no risk criterion"]),
        (f"openai:{GRANITE}@URL?risk=harm", ["--socialbias-guard-risk=violence"], ["risk=harm", "disagree"]),
        (f"openai:{LLAMA}@URL?unit=word", [], ["unit='word'", "turn, context, exchange"]),
        (f"openai:{GRANITE}@URL?risk=harm&chat_template_kwargs={{\"guardian_config\":{{}}}}", [], ["guardian_config", "drop risk="]),
    ],
)
def test_bad_guard_settings_are_usage_errors(project, server, spec, args, needles):
    result, _ = run(project, spec.replace("URL", server.openai_base_url), *args)
    assert_usage_error(result, *needles)
    assert not server.requests


def test_guard_settings_belong_to_the_guard(project, server):
    result = project.runpytest("detect.yaml", f"--judge=openai:j@{server.openai_base_url}?unit=turn")
    assert_usage_error(result, "--judge=", "unit= is a guard's setting")
