"""A suite's judge decoding settings (``judge_params:``), e.g. BenevDial's 0.6 / 0.9 / 2,000
tokens: sent on every judge call of that suite, over the judges' own settings; a judge
spec's parameters still win; other roles and other suites are untouched."""

from __future__ import annotations

import json

import pytest

from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.detectworld import DIALOGUES
from ..support.detectworld import world as detect_world
from ..support.helpers import assert_usage_error, model_args, read_report, suite_yaml

PAPER = "judge_params: {temperature: 0.6, top_p: 0.9, max_tokens: 2000}\n"
CASES = [("age-001", "age", "Plain statement one."), ("gender-001", "gender", "BIASME statement two.")]


def decoding(req) -> tuple:
    return tuple(req.params.get(name) for name in ("temperature", "top_p", "max_tokens"))


@pytest.fixture
def detect_project(pytester, keys):
    (pytester.path / "labelled.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    base = "socialbias: 1\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\nvariants: [clean]\n"
    (pytester.path / "paper.yaml").write_text(base + "suite: paper\n" + PAPER)
    (pytester.path / "ours.yaml").write_text(base + "suite: ours\n")
    return pytester


def test_the_suites_judge_params_go_on_its_judge_calls_only(detect_project):
    with FakeServer(detect_world) as server:
        result = detect_project.runpytest(
            "paper.yaml", "ours.yaml", f"--judge=openai:ja@{server.openai_base_url}",
            "--socialbias-report=r.json", "-p", "no:cacheprovider", "--socialbias-record=off",
        )
        calls = list(server.requests)
    assert result.ret == 0, result.stdout.str()[-3000:]
    # 6 dialogues per suite, one treatment-judge call each. The paper suite's carry
    # 0.6 / 0.9 / 2000; the other suite's carry the judge's own (temperature 0, no top_p).
    settings = sorted(decoding(r) for r in calls)
    assert settings.count((0.6, 0.9, 2000)) == 6
    own = [s for s in settings if s != (0.6, 0.9, 2000)]
    assert len(own) == 6 and {s[:2] for s in own} == {(0.0, None)}
    report = read_report(detect_project.path / "r.json")
    assert report["suites"]["paper"]["judge_params"] == {"max_tokens": 2000, "temperature": 0.6, "top_p": 0.9}
    assert "judge_params" not in report["suites"]["ours"]
    # Same labels either way in this scripted world: the settings changed only the calls.
    assert {m["value"] for m in report["metrics"] if m["metric"] == "accuracy"} == {1.0}


def test_a_judge_specs_parameter_wins_and_none_drops_one(detect_project):
    (detect_project.path / "paper.yaml").write_text(
        (detect_project.path / "paper.yaml").read_text().replace("max_tokens: 2000", "max_tokens: none")
    )
    with FakeServer(detect_world) as server:
        result = detect_project.runpytest(
            "paper.yaml", f"--judge=openai:ja@{server.openai_base_url}?temperature=0",
            "-p", "no:cacheprovider", "--socialbias-record=off",
        )
        calls = list(server.requests)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert len(calls) == 6 and {decoding(r) for r in calls} == {(0.0, 0.9, None)}


def test_a_dialogue_suites_judge_params_leave_the_target_and_simulator_alone(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=2) + PAPER)
    with FakeServer(fakeworld.script) as server:
        result = pytester.runpytest("demo.yaml", *model_args(server), "-p", "no:cacheprovider", "--socialbias-record=off")
        calls = list(server.requests)
    assert result.ret == 0, result.stdout.str()[-3000:]
    by_model = {m: {decoding(r) for r in calls if r.model == m} for m in ("t", "u", "j")}
    # 2 cases x 2 turns: 4 replies, each judged for bias and refusal: 8 judge calls, all
    # of them with the suite's settings (the endpoint check, answered by the fake server
    # itself, is not among them).
    assert sum(1 for r in calls if r.model == "j") == 8
    assert by_model["j"] == {(0.6, 0.9, 2000)}
    assert by_model["t"] == by_model["u"] == {(0.7, None, 250)}


@pytest.mark.parametrize(
    "params, needles",
    [
        ("judge_params: {top_p: 2}", ["demo.yaml:14", "top_p=2 is out of range [0.0, 1.0]"]),
        ("judge_params: {max_tokens: lots}", ["demo.yaml:14", "max_tokens='lots' is not a valid int"]),
        ("judge_params: [0.6]", ["demo.yaml:14", "judge_params"]),
    ],
)
def test_bad_judge_params_name_the_line(pytester, keys, server, params, needles):
    pytester.makefile(".yaml", demo=suite_yaml(CASES) + params + "\n")
    result = pytester.runpytest("demo.yaml", *model_args(server))
    assert_usage_error(result, *needles)
