"""Records keep to their type (record.py): every shipped protocol, run end to end against
the loopback fake server, gives records whose keys CaseRecord declares, with error
entries and turns whose keys ErrorEntry and Turn declare, and error kinds from the
vocabulary."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_socialbias.plugin import RECORD_ATTR
from pytest_socialbias.record import RECORD_KEYS, ErrorEntry, Turn
from pytest_socialbias.testing import FakeServer
from pytest_socialbias.vocabulary import ERROR_KINDS

from ..unit.test_fake_server import _readme_script

SUITES = Path(__file__).resolve().parents[2] / "suites"


def _flaky_script(script):
    """The docs' script, with every coherence answer unreadable, so records with error
    entries (judge errors that leave the bias labels standing) are checked too."""

    def answer(req):
        if req.model == "judge" and "rate how naturally" in req.system_text:
            return "no idea"
        return script(req)

    return answer


@pytest.mark.slow
def test_every_protocols_records_keep_to_their_type(pytester, keys):
    for name in ("smoke.yaml", "dymt/dymt.yaml", "dymt/seeds.yaml", "dymt/zeroshot.yaml", "dymt/scripted.yaml",
                 "benevdial/agent.yaml", "benevdial/pairs.yaml", "benevdial/conditions.yaml", "benevdial/cues.txt",
                 "benevdial/dialogues.jsonl", "benevdial-detect/detect.yaml"):
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SUITES / name, pytester.path / name)
    with FakeServer(_flaky_script(_readme_script())) as server:
        url = server.openai_base_url
        recorder = pytester.inline_run(
            "smoke.yaml", "dymt", "benevdial", "benevdial-detect", "-k", "age-001 or wellbeing or n-001 or ob-001",
            f"--target=openai:t@{url}", f"--judge=openai:judge@{url}", f"--user-model=openai:user@{url}",
            "--socialbias-sample=1", "--socialbias-record=off", "-p", "no:cacheprovider",
        )
    records = [getattr(r, RECORD_ATTR) for r in recorder.getreports("pytest_runtest_logreport")
               if getattr(r, RECORD_ATTR, None) is not None]
    protocols = {record["protocol"] for record in records}
    assert protocols == {"smoke", "dymt", "zeroshot", "scripted", "benevdial_agent", "benevdial_pairs",
                         "benevdial_detect"}, protocols
    for record in records:
        assert set(record) <= RECORD_KEYS, (record["protocol"], set(record) - RECORD_KEYS)
        for error in record["errors"]:
            assert set(error) <= set(ErrorEntry.__annotations__) and error["kind"] in ERROR_KINDS, error
        for turn in record.get("turns") or []:
            assert set(turn) <= set(Turn.__annotations__), (record["protocol"], set(turn))
    assert any(record["errors"] for record in records)  # the unreadable coherence answers


# ---- the constructors: a wrong kind, an unknown key or a missing field fails loudly ----


def test_an_error_entry_of_an_unknown_kind_fails_loudly():
    from pytest_socialbias.record import error_entry

    with pytest.raises(ValueError, match="'model_eror' is not one of vocabulary.ERROR_KINDS"):
        error_entry("model_eror", "target model 't': timed out", role="target")
    with pytest.raises(TypeError, match="message is text"):
        error_entry("model_error", None, role="target")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        error_entry("model_error")  # type: ignore[call-arg]  # no message


def test_an_error_entry_keeps_to_its_type_and_says_its_turn():
    from pytest_socialbias.record import error_entry

    entry = error_entry("judge_error", "unreadable: 'maybe'", role="judge", task="coherence", turn=2)
    assert entry == {"kind": "judge_error", "role": "judge", "task": "coherence", "message": "turn 2: unreadable: 'maybe'"}
    assert set(error_entry("user_simulator_error", "m", role="user", rejected_user_drafts=[], dialogue="a")) <= set(
        ErrorEntry.__annotations__)


def test_exceptions_map_to_error_kinds_in_one_place():
    from pytest_socialbias.errors import CacheMiss, EmptyReply, ModelCallError, UserSimulatorFailure
    from pytest_socialbias.record import error_from

    assert error_from(ModelCallError("judge", "openai:j", "HTTP 500")) == {
        "kind": "model_error", "role": "judge", "message": "judge model 'openai:j': HTTP 500"}
    assert error_from(CacheMiss("target", "openai:t", "0" * 64))["kind"] == "model_error"
    assert error_from(EmptyReply("turn 1: empty reply")) == {
        "kind": "empty_reply", "role": "target", "message": "turn 1: empty reply"}
    drafts = [{"kind": "assistant_voice", "reason": "r", "text": "As an AI"}]
    assert error_from(UserSimulatorFailure("turn 2: broke role", drafts)) == {
        "kind": "user_simulator_error", "role": "user", "message": "turn 2: broke role", "rejected_user_drafts": drafts}
    secondary = error_from(ModelCallError("judge-2", "openai:j2", "HTTP 500"), where="judge-2", secondary=True)
    assert secondary == {"kind": "detector_error", "role": "judge-2", "message": "judge-2: judge-2 model 'openai:j2': HTTP 500"}
    try:
        {}["missing"]
    except KeyError as exc:
        internal = error_from(exc)
    assert internal["kind"] == "internal_error" and internal["role"] is None
    assert internal["message"].startswith("KeyError: 'missing' (test_records.py:")


def test_a_protocol_result_with_a_missing_field_or_an_unknown_key_fails_loudly():
    from pytest_socialbias.record import case_record, case_result

    with pytest.raises(TypeError, match="errors"):
        case_result(labels={"bias": [0], "refusal": [0]}, turns=[], templates=[])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="a protocol's result has no key verdict"):
        case_result(labels={}, turns=[], errors=[], templates=[], verdict="biased")
    with pytest.raises(TypeError, match="outcome"):  # the worker's part, not the protocol's
        case_result(labels={}, turns=[], errors=[], templates=[], outcome="clean")
    result = case_result(labels={"bias": [1], "refusal": [0]}, turns=[], errors=[], templates=["b@1", "a@1"],
                         role_breaks=0)
    assert result["templates"] == ["a@1", "b@1"] and set(result) <= RECORD_KEYS
    with pytest.raises(ValueError, match="outcome 'bias' is not one of vocabulary.OUTCOMES"):
        case_record({"id": "x"}, result, outcome="bias", usage={})
    record = case_record({"id": "x"}, result, outcome="biased", usage={}, adapted={})
    assert record["outcome"] == "biased" and "adapted" not in record


def test_a_turn_keeps_to_its_type():
    from pytest_socialbias.record import turn_entry

    assert turn_entry("hi", "hello", "stop") == {"user": "hi", "assistant": "hello", "finish_reason": "stop"}
    turn = turn_entry("hi", "hello", "length", reasoning="thinking", rejected_user_drafts=[{"kind": "k"}])
    assert set(turn) == set(Turn.__annotations__)
    with pytest.raises(TypeError):
        turn_entry("hi", "hello")  # type: ignore[call-arg]  # no finish reason
