"""The suites, seeds and thresholds the project ships: valid, complete, as documented."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pytest_socialbias.cases import SuiteOverrides
from pytest_socialbias.gates import load_gates
from pytest_socialbias.metrics import is_known_metric
from pytest_socialbias.protocols import load_suite
from pytest_socialbias.vocabulary import CATEGORIES, STYLES, TRACKS

ROOT = Path(__file__).resolve().parents[2]
DYMT = ROOT / "suites" / "dymt"


def seeds():
    return yaml.safe_load((DYMT / "seeds.yaml").read_text())["seeds"]


def test_240_seeds_40_per_category_unique():
    items = seeds()
    assert len(items) == 240
    assert Counter(s["category"] for s in items) == {c: 40 for c in CATEGORIES}
    assert len({s["id"] for s in items}) == 240
    normalised = {re.sub(r"[^a-z ]", "", s["statement"].lower()) for s in items}
    assert len(normalised) == 240
    for seed in items:
        assert seed["id"].startswith(seed["category"] + "-")
        assert seed["statement"].endswith(".") and seed["group"].strip()


def test_seeds_file_is_labelled_as_test_data():
    head = (DYMT / "seeds.yaml").read_text().split("seeds:")[0]
    assert "TEST DATA" in head.upper()


def test_shipped_suites_load_with_the_documented_sizes():
    dymt = load_suite(DYMT / "dymt.yaml")
    assert (len(dymt.cases), dymt.turns, dymt.styles) == (480, 5, STYLES)
    assert load_suite(DYMT / "dymt.yaml", SuiteOverrides(turns=10)).turns == 10
    zeroshot = load_suite(DYMT / "zeroshot.yaml")
    assert (len(zeroshot.cases), zeroshot.turns) == (240, 1)
    scripted = load_suite(DYMT / "scripted.yaml")
    assert (len(scripted.cases), scripted.styles) == (1200, TRACKS)
    assert load_suite(DYMT / "fairmt.yaml").cases == []  # nothing without --socialbias-fairmt-dir
    paper_seeds = load_suite(DYMT / "dymt_fairmt.yaml")
    assert (paper_seeds.cases, paper_seeds.turns, paper_seeds.styles) == ([], 5, STYLES)  # the same
    smoke = load_suite(ROOT / "suites" / "smoke.yaml")
    assert len(smoke.cases) == 6


def test_shipped_thresholds_load_and_every_gate_has_a_reason():
    gates = load_gates(ROOT / "thresholds.yaml")
    assert {g.suite for g in gates} >= {"smoke", "dymt", "zeroshot", "scripted"}
    assert all(is_known_metric(g.metric) for g in gates)
    judge_gate = next(g for g in gates if g.name == "dymt-judge-errors")
    assert (judge_gate.metric, judge_gate.kind, judge_gate.bound) == ("judge_error_rate", "max", 0.05)
    raw = yaml.safe_load((ROOT / "thresholds.yaml").read_text())["gates"]
    assert all(g.get("description") for g in raw)


def test_shipped_benevdial_suites_load_balanced_and_stable():
    from pytest_socialbias.protocols import load_suite

    agent = load_suite(ROOT / "suites" / "benevdial" / "agent.yaml")
    assert agent.name == "benevdial-agent" and len(agent.cases) == 84 and agent.turns == 3
    roles = [c.extra["condition"].role for c in agent.cases]
    assert roles.count("wellbeing") == roles.count("lifestyle") == 42
    again = load_suite(ROOT / "suites" / "benevdial" / "agent.yaml")
    assert [c.id for c in agent.cases] == [c.id for c in again.cases]
    everything = load_suite(ROOT / "suites" / "benevdial" / "agent.yaml", SuiteOverrides(sample="all"))
    assert len(everything.cases) == 630 and len({c.id for c in everything.cases}) == 630
    pairs = load_suite(ROOT / "suites" / "benevdial" / "pairs.yaml")
    assert len(pairs.cases) == 49
    hand = next(c for c in pairs.cases if c.id == "staffing-return-from-leave")
    spec = hand.extra["pair"]
    assert len(spec["a"]) == len(spec["b"]) == hand.turns == 3
    # Only the name and pronouns differ between the members' turns.
    for a, b in zip(spec["a"], spec["b"]):
        swapped = a.replace("James", "Emily").replace(" He ", " She ").replace(" his ", " her ").replace(" him ", " her ").replace("him?", "her?").replace("him right", "her right")
        assert swapped == b


def test_shipped_detector_suite_and_sample_dialogues():
    from collections import Counter

    from pytest_socialbias.benevdial.dialogues import load_dialogues
    from pytest_socialbias.protocols import load_suite

    dialogues = load_dialogues(ROOT / "suites" / "benevdial" / "dialogues.jsonl")
    assert Counter(d["class"] for d in dialogues) == {"N": 10, "OB": 10, "BB": 10}
    assert {d["source"] for d in dialogues} == {"project-written, not human-annotated"}
    # The same user profiles in every class: demographics say nothing about the label.
    profiles = {cls: sorted(json_key(d["user"]) for d in dialogues if d["class"] == cls) for cls in ("N", "OB", "BB")}
    assert profiles["N"] == profiles["OB"] == profiles["BB"]
    suite = load_suite(ROOT / "suites" / "benevdial-detect" / "detect.yaml")
    assert suite.name == "benevdial-detect" and len(suite.cases) == 120
    assert Counter(c.style for c in suite.cases) == {"clean": 30, "fold": 30, "mask": 30, "shuffle": 30}


def shipped_suite_names() -> dict:
    """Every shipped suite file (a YAML file with ``socialbias: 1``) by its ``suite:`` name."""
    out = {}
    for path in sorted((ROOT / "suites").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("socialbias") == 1:
            out[data["suite"]] = path.relative_to(ROOT).as_posix()
    return out


def test_every_shipped_suite_is_gated_or_declared_ungated():
    """A suite that runs with no gate naming it fails the run, unless the thresholds file
    declares it ungated: every shipped suite is one or the other."""
    from pytest_socialbias.gates import load_ungated

    names = shipped_suite_names()
    assert len(names) == 11 and {"dymt-fairmt", "zeroshot-fairmt", "scripted-fairmt", "fairmt"} <= set(names)
    gated = {g.suite for g in load_gates(ROOT / "thresholds.yaml")}
    declared = load_ungated(ROOT / "thresholds.yaml")
    assert {name: path for name, path in names.items() if name not in gated and name not in declared} == {}


def gate_shapes(gates, suite: str) -> set:
    return {(g.metric, g.kind, g.bound, g.compare, g.category, g.style, g.by, g.allow_empty)
            for g in gates if g.suite == suite}


@pytest.mark.parametrize("fairmt, ours", [("dymt-fairmt", "dymt"), ("zeroshot-fairmt", "zeroshot"),
                                          ("scripted-fairmt", "scripted"), ("fairmt", "scripted")])
def test_the_fairmt_suites_have_the_gates_of_their_counterparts_on_our_seeds(fairmt, ours):
    gates = load_gates(ROOT / "thresholds.yaml")
    assert gate_shapes(gates, fairmt) == gate_shapes(gates, ours) != set()


def json_key(value: dict) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def test_every_shipped_suite_collects_with_registered_markers_and_thresholds(tmp_path):
    """All shipped suites collect together, every gate of thresholds.yaml names a suite
    that exists, and no marker is unknown (a warning turned into an error here)."""
    import subprocess
    import sys

    # Model options of a server that is never called (collection calls nothing): without
    # them the run would default to the embedded model and need the `local` extra.
    # The embedded model's runtime is hidden, as where the `local` extra is not installed.
    url = "http://127.0.0.1:9/v1"
    args = ["suites", "--collect-only", "-q", "-p", "no:cacheprovider", "-W", "error::pytest.PytestUnknownMarkWarning",
            f"--basetemp={tmp_path / 'bt'}", f"--target=openai:t@{url}", f"--judge=openai:j@{url}"]
    hide_runtime = (
        "import sys, pytest; from pytest_socialbias.models import local_backend; "
        "local_backend.RUNTIME_MODULE = 'llama_cpp_not_installed'; sys.exit(pytest.main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide_runtime, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests collected" in done.stdout
