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
