"""The simulated-user checks (protocols/user_check.py) on labelled user turns written by us
(tests/data/user_turns*.yaml; benchmarks/user_check.py prints the full table).

On the three sets the checks were tuned on (the third was held out until the generalising
claim patterns were added): recall at least 0.95 on set-up leaks, copies of the assistant
and the assistant's voice, at most 2% of clean turns flagged, every check precise; seed
leaks (paraphrased claims) 0.98, 0.90 and 0.96 there. On the held-out set, written
afterwards by someone who never saw the checks, the floors are its measured figures less
a margin, so that a check that breaks fails here; the closing note and docs/limits.md
give the figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "user_check.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("user_check_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measured(bench, file):
    return bench.scores(bench.classify(bench.DATA / file))


def test_tuning_sets_meet_the_targets(bench):
    for file, seed_floor, precision in (("user_turns.yaml", 0.95, 1.0), ("user_turns_2.yaml", 0.85, 1.0),
                                        ("user_turns_3.yaml", 0.95, 0.95)):
        result = measured(bench, file)
        assert result["clean"]["rate"] <= 0.02, (file, result["clean"])
        for label in ("setup_leak", "copy", "assistant_voice"):
            assert result["labels"][label]["recall"] >= 0.95, (file, label, result["labels"][label])
        assert result["labels"]["seed_leak"]["recall"] >= seed_floor, (file, result["labels"]["seed_leak"])
        for kind, check in result["checks"].items():
            assert check["precision"] >= precision, (file, kind, check)


def test_held_out_set_keeps_its_measured_figures(bench):
    """Written after the checks were set, by someone who never saw them, never tuned on:
    0.9% of clean turns flagged; recall 0.38 seed leaks, 0.66 set-up leaks, 1.0 copies,
    0.62 the assistant's voice."""
    result = measured(bench, "user_turns_fresh.yaml")
    assert result["clean"]["rate"] <= 0.02
    floors = {"seed_leak": 0.3, "setup_leak": 0.6, "copy": 0.95, "assistant_voice": 0.55}
    for label, floor in floors.items():
        assert result["labels"][label]["recall"] >= floor, (label, result["labels"][label])


def test_every_label_is_known_and_every_copy_has_a_reply_to_copy(bench):
    import yaml

    for file in bench.SETS.values():
        for entry in yaml.safe_load((bench.DATA / file).read_text())["contexts"]:
            for turn in entry["turns"]:
                assert turn["label"] in bench.LABELS, (file, entry["id"], turn)
                if turn["label"] == "copy":
                    assert entry.get("previous_reply"), (file, entry["id"])
                if turn["label"] == "seed_leak":
                    assert entry["protocol"] == "dymt", (file, entry["id"])
