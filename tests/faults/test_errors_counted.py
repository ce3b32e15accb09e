"""Every error of every role and protocol is counted in a metric a gate reads: each kind
of call is made to fail in turn (target, user simulator, each DyMT judge, the guard, the
pairwise judge, the treatment judge, a detector), and the run fails its shipped gates,
the ones in this repository's thresholds.yaml, saying which."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pytest_socialbias.testing import FakeServer, Fault

from ..e2e.test_dymt_e2e import dymt_yaml, plan_statement
from ..support import benevworld
from ..support.detectworld import DIALOGUES
from ..support.dymtworld import UNREADABLE, DymtWorld, is_user_sim, judge_kind

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def shipped_gates(pytester, *suites: str) -> None:
    """The repository's thresholds.yaml, kept to the gates of ``suites`` (the others name
    suites this project does not define)."""
    data = yaml.safe_load((ROOT / "thresholds.yaml").read_text(encoding="utf-8"))
    data["gates"] = [g for g in data["gates"] if g["suite"] in suites]
    (pytester.path / "thresholds.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def failed_gates(report) -> set:
    return {g["gate"] for g in report["gates"] if g["verdict"] == "fail"}


def run(pytester, server, suite, *extra, judge="j", target="t"):
    url = server.openai_base_url
    result = pytester.runpytest(
        suite, f"--target=openai:{target}@{url}", f"--judge=openai:{judge}@{url}", f"--user-model=openai:u@{url}",
        "--socialbias-report=r.json", "--socialbias-record=off", "-p", "no:cacheprovider", *extra,
    )
    return result, json.loads((pytester.path / "r.json").read_text())


# --------------------------------------------------------------------------- DyMT

DYMT_CASES = [(f"{cat}-{i}", cat, plan_statement(f"{cat}-{i}", "00000")) for cat in ("age", "religion") for i in (1, 2)]


def failing(kind: str):
    """The DyMT world with one kind of call failing for good."""
    world = DymtWorld()

    def script(req):
        if kind == "target" and req.model == "t":
            return Fault("bad_request", message="the target is down")
        if kind == "simulator" and is_user_sim(req):
            return Fault("bad_request", message="the simulator is down")
        if req.model == "j" and judge_kind(req) == kind:
            return UNREADABLE
        return world(req)

    return script


@pytest.mark.parametrize(
    "kind, gate",
    [
        ("target", "dymt-errors"),
        ("simulator", "dymt-errors"),
        ("bias", "dymt-judge-errors"),
        ("refusal", "dymt-judge-errors"),
        ("coherence", "dymt-judge-errors"),
    ],
)
def test_a_dymt_role_that_fails_fails_the_shipped_gates(pytester, keys, kind, gate):
    pytester.makefile(".yaml", dymt=dymt_yaml(DYMT_CASES, turns=5, styles=("assessment", "implicit"), suite="dymt"))
    shipped_gates(pytester, "dymt")
    with FakeServer(failing(kind)) as server:
        result, report = run(pytester, server, "dymt.yaml")
    assert result.ret == 1
    assert gate in failed_gates(report), failed_gates(report)
    result.stdout.fnmatch_lines([f"*{gate}*FAIL*"])


def test_an_unreadable_guard_fails_the_shipped_guard_gate(pytester, keys):
    pytester.makefile(".yaml", dymt=dymt_yaml(DYMT_CASES, turns=5, styles=("assessment", "implicit"), suite="dymt"))
    shipped_gates(pytester, "dymt")
    world = DymtWorld()

    def script(req):
        return "I cannot say." if req.model == "meta-llama/Llama-Guard-3-8B" else world(req)

    with FakeServer(script) as server:
        result, report = run(pytester, server, "dymt.yaml",
                             f"--socialbias-guard=openai:meta-llama/Llama-Guard-3-8B@{server.openai_base_url}")
    assert "dymt-guard-errors" in failed_gates(report)
    assert result.ret == 1


# --------------------------------------------------------------------------- BenevDial


@pytest.fixture
def benevdial(pytester, keys):
    for name in ("conditions.yaml", "agent.yaml", "pairs.yaml"):
        shutil.copy(ROOT / "suites" / "benevdial" / name, pytester.path / name)
    shipped_gates(pytester, "benevdial-agent", "benevdial-pairs")
    return pytester


def unreadable_judge(task: str):
    def script(req):
        system = benevworld.system_text(req)
        if req.model == "j" and task == "pair" and "compare two conversations" in system:
            return "Hard to say."
        if req.model == "j" and task == "treatment" and "classify how the agent treated" in system:
            return "Hard to say."
        return benevworld.script(req)

    return script


def test_an_unreadable_pairwise_judge_fails_the_shipped_pairs_gates(benevdial):
    with FakeServer(unreadable_judge("pair")) as server:
        result, report = run(benevdial, server, "pairs.yaml", "--socialbias-sample=4", target="tb")
    assert result.ret == 1
    failed = failed_gates(report)
    assert {"benevdial-pairs-errors", "benevdial-pairs-disparity"} <= failed, failed
    rows = {(m["metric"], m["category"], m["style"]): m for m in report["metrics"]}
    assert rows[("pair_error_rate", None, None)]["value"] == 1.0  # counted, never "no disparity"
    assert rows[("disparity_rate", None, None)]["n"] == 0


@pytest.mark.parametrize("suite, gate", [("agent.yaml", "benevdial-agent-errors"), ("pairs.yaml", "benevdial-pairs-judge-errors")])
def test_an_unreadable_treatment_judge_fails_the_shipped_gates(benevdial, suite, gate):
    with FakeServer(unreadable_judge("treatment")) as server:
        result, report = run(benevdial, server, suite, "--socialbias-sample=4", target="tb")
    assert result.ret == 1
    assert gate in failed_gates(report), failed_gates(report)


def test_an_unreadable_detector_fails_the_shipped_detector_gate(pytester, keys):
    (pytester.path / "labelled.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    (pytester.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: benevdial-detect\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\nvariants: [clean]\n"
    )
    shipped_gates(pytester, "benevdial-detect")
    with FakeServer(lambda req: "Hard to say.") as server:
        result = pytester.runpytest(
            "detect.yaml", f"--judge=openai:ja@{server.openai_base_url}", "--socialbias-report=r.json",
            "--socialbias-record=off", "-p", "no:cacheprovider",
        )
    report = json.loads((pytester.path / "r.json").read_text())
    assert result.ret == 1
    assert "benevdial-detect-errors" in failed_gates(report), failed_gates(report)


@pytest.mark.parametrize("task", ["coherence", "refusal"])
def test_an_unreadable_coherence_or_refusal_answer_leaves_the_bias_labels_standing(pytester, keys, task):
    """One judge's unreadable answer voids only what it was asked: the case's readable
    bias labels still count, and the judge error is counted too."""
    cases = [(f"age-{i}", "age", plan_statement(f"age-{i}", "10000" if i == 1 else "00000")) for i in (1, 2)]
    pytester.makefile(".yaml", demo=dymt_yaml(cases, turns=5))
    with FakeServer(failing(task)) as server:
        result, report = run(pytester, server, "demo.yaml")
    rows = {(m["metric"], m["category"], m["style"]): m for m in report["metrics"]}
    assert rows[("cumulative_bias@5", None, None)]["n"] == 2 and rows[("cumulative_bias@5", None, None)]["value"] == 0.5
    assert rows[("judge_error_rate", None, None)]["value"] == 1.0
    assert rows[("error_rate", None, None)]["value"] == 0.0
    assert {c["outcome"] for c in report["cases"]} == {"biased", "clean"}
    assert all(e["task"] == task for c in report["cases"] for e in c["errors"])
    if task == "refusal":
        assert rows[("refusal_rate", None, None)]["n"] == 0  # no readable refusal label: none counted


def test_an_unreadable_bias_answer_voids_the_case(pytester, keys):
    """A turn without a bias label cannot count as "not biased" in a cumulative rate."""
    cases = [(f"age-{i}", "age", plan_statement(f"age-{i}", "00000")) for i in (1, 2)]
    pytester.makefile(".yaml", demo=dymt_yaml(cases, turns=5))
    with FakeServer(failing("bias")) as server:
        result, report = run(pytester, server, "demo.yaml")
    rows = {(m["metric"], m["category"], m["style"]): m for m in report["metrics"]}
    assert rows[("cumulative_bias@5", None, None)]["n"] == 0
    assert rows[("error_rate", None, None)]["value"] == 1.0


def test_an_unreadable_answer_is_asked_again_by_the_next_recording_run(pytester, keys):
    """The judge was broken when the cache was recorded: a replay shows the same errors and
    says they came from the cache; the next recording run asks those questions again (and
    only those), and with the judge fixed the errors are gone."""
    cases = [(f"age-{i}", "age", plan_statement(f"age-{i}", "10")) for i in (1, 2)]
    pytester.makefile(".yaml", demo=dymt_yaml(cases, turns=2))
    broken = {"now": True}
    world = DymtWorld()

    def script(req):
        if broken["now"] and req.model == "j" and judge_kind(req) == "bias":
            return UNREADABLE
        return world(req)

    url_args = lambda server: [f"--target=openai:t@{server.openai_base_url}", f"--judge=openai:j@{server.openai_base_url}",  # noqa: E731
                               f"--user-model=openai:u@{server.openai_base_url}", "-p", "no:cacheprovider",
                               "--socialbias-report=r.json"]
    with FakeServer(script) as server:
        first = pytester.runpytest("demo.yaml", *url_args(server))
        assert first.ret == 1
        replay = pytester.runpytest("demo.yaml", *url_args(server), "--socialbias-record=none")
        replay.stdout.fnmatch_lines(["errors (*; counted, never folded into a rate; * from answers replayed from the cache, "
                                     "which a recording run asks again):"])
        broken["now"] = False
        server.clear()
        fixed = pytester.runpytest("demo.yaml", *url_args(server))
        assert fixed.ret == 0, fixed.stdout.str()[-2000:]
        asked = server.requests
    # Only the bias judge's questions went out again (the rest replayed).
    assert asked and all(r.model == "j" and judge_kind(r) == "bias" for r in asked)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["summary"]["outcomes"]["error"] == 0
