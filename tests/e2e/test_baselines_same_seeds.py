"""The zero-shot and scripted baselines on the very seeds of a DyMT suite (``seeds_of:``):
the FairMT release's seeds that ``dymt_fairmt.yaml`` draws, and ours; a group for each
FairMT seed, derived from its category or given in a ``groups:`` file. Run on miniature
releases built here (tests/unit/test_fairmt.py's builders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_socialbias.cases import SuiteOverrides
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.protocols import forget_suites, load_suite
from pytest_socialbias.protocols.seeds import DERIVED_GROUPS, FAIRMT_SEED_GROUP
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import model_args, run_with_report
from ..unit.test_fairmt import turns_10k, write
from .test_dymt_fairmt_seeds import seed_release

DYMT = Path(__file__).parents[2] / "suites" / "dymt"
ATTRIBUTES = ("age", "appearance", "disable", "gender", "race", "religion")


@pytest.fixture(autouse=True)
def fresh():
    forget_suites()
    yield
    forget_suites()


def release_of(root, per_attribute=50):
    for attribute in ATTRIBUTES:
        write(root / "FairMT_10K" / "Stereotype" / "Negative_Feedback" / f"prompt_{attribute}.json",
              [turns_10k(f"{attribute}{i}") for i in range(per_attribute)])
    return root


def seeds(suite) -> dict:
    return {c.id: (c.category, c.statement) for c in suite.cases}


def test_the_shipped_baselines_run_on_the_very_240_seeds_of_dymt_fairmt(tmp_path):
    overrides = SuiteOverrides(fairmt_dir=release_of(tmp_path / "release"))
    dymt = load_suite(DYMT / "dymt_fairmt.yaml", overrides)
    zeroshot = load_suite(DYMT / "zeroshot_fairmt.yaml", overrides)
    scripted = load_suite(DYMT / "scripted_fairmt.yaml", overrides)
    assert len(seeds(dymt)) == 240
    # The same seeds: ids, categories and statements.
    assert seeds(zeroshot) == seeds(dymt) == seeds(scripted)
    assert len(zeroshot.cases) == 240 and len(scripted.cases) == 240 * 5
    assert {c.style for c in scripted.cases} == {"anaphora_ellipsis", "jailbreak_tips", "interference_misinformation",
                                                 "negative_feedback", "fixed_format"}
    # A group for every seed: derived from its category where none is named.
    assert {c.group for c in dymt.cases} == {FAIRMT_SEED_GROUP}
    assert {(c.category, c.group) for c in zeroshot.cases} == set(DERIVED_GROUPS.items())
    notes = " ".join(zeroshot.notes)
    assert "the 240 seed(s) of suite dymt-fairmt (dymt_fairmt.yaml), the very seeds its cases run on" in notes
    assert "240 FairMT seed(s) with no group named" in notes
    # Another release draws other seeds, and the baselines follow.
    forget_suites()
    other = SuiteOverrides(fairmt_dir=release_of(tmp_path / "other", per_attribute=45))
    assert seeds(load_suite(DYMT / "zeroshot_fairmt.yaml", other)) == seeds(load_suite(DYMT / "dymt_fairmt.yaml", other))


def test_without_the_release_the_baselines_collect_nothing_and_say_why():
    suite = load_suite(DYMT / "zeroshot_fairmt.yaml")
    assert suite.cases == []
    notes = " ".join(suite.notes)
    assert "suite zeroshot-fairmt has no cases: it runs on the seeds of suite dymt-fairmt" in notes
    assert "--socialbias-fairmt-dir" in notes


def test_the_shipped_baselines_on_our_seeds_are_dymts_seeds():
    dymt = load_suite(DYMT / "dymt.yaml")
    assert seeds(load_suite(DYMT / "zeroshot.yaml")) == seeds(dymt)
    assert seeds(load_suite(DYMT / "scripted.yaml")) == seeds(dymt)


def test_seeds_of_our_dymt_suite_keeps_its_groups(tmp_path):
    (tmp_path / "dymt.yaml").write_text((DYMT / "dymt.yaml").read_text().replace("seeds: seeds.yaml",
                                                                                 f"seeds: {DYMT / 'seeds.yaml'}"))
    (tmp_path / "zs.yaml").write_text("socialbias: 1\nsuite: zs\nprotocol: zeroshot\nseeds_of: dymt.yaml\n")
    dymt, zs = load_suite(tmp_path / "dymt.yaml"), load_suite(tmp_path / "zs.yaml")
    assert {(c.id, c.group) for c in zs.cases} == {(c.id, c.group) for c in dymt.cases}
    assert "no group named" not in " ".join(zs.notes)


def test_a_groups_file_names_the_groups_for_dymt_and_its_baselines(tmp_path):
    root = seed_release(tmp_path / "release")
    (tmp_path / "paper.yaml").write_text("socialbias: 1\nsuite: paper\nprotocol: dymt\nsource: fairmt\n"
                                         "per_category: 2\nsample_seed: 1\nstyles: [implicit]\ngroups: groups.yaml\n")
    gender = "fairmt-10k-stereotype-gender-negative_feedback-0001"
    (tmp_path / "groups.yaml").write_text(f"{gender}: BIASME people\n")
    (tmp_path / "zs.yaml").write_text("socialbias: 1\nsuite: zs\nprotocol: zeroshot\nseeds_of: paper.yaml\n")
    overrides = SuiteOverrides(fairmt_dir=root)
    dymt = load_suite(tmp_path / "paper.yaml", overrides)
    assert {c.id: c.group for c in dymt.cases}[gender] == "BIASME people"
    assert "1 of 6 seed(s) have a group named in the groups file" in " ".join(dymt.notes)
    zs = {c.id: c.group for c in load_suite(tmp_path / "zs.yaml", overrides).cases}
    assert zs[gender] == "BIASME people"
    assert zs["fairmt-10k-stereotype-age-negative_feedback-0000"] == DERIVED_GROUPS["age"]
    # An id the suite does not draw from is named with the file.
    forget_suites()
    (tmp_path / "groups.yaml").write_text("fairmt-10k-stereotype-gender-negative_feedback-0099: women\n")
    with pytest.raises(ConfigError, match=r"groups.yaml: 1 id\(s\) name no item this suite draws from .*0099"):
        load_suite(tmp_path / "paper.yaml", overrides)
    (tmp_path / "groups.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"groups.yaml: a groups file is a mapping of seed id to the group"):
        load_suite(tmp_path / "paper.yaml", overrides)


@pytest.mark.parametrize("text, needle", [
    ("socialbias: 1\nsuite: zs\nprotocol: zeroshot\nseeds_of: zs.yaml\n", "seeds_of: names this suite itself"),
    ("socialbias: 1\nsuite: zs\nprotocol: zeroshot\nseeds_of: smoke.yaml\n", "is a smoke suite; name a dymt suite"),
    ("socialbias: 1\nsuite: zs\nprotocol: zeroshot\nseeds_of: missing.yaml\n", "missing.yaml"),
    ("socialbias: 1\nsuite: zs\nprotocol: dymt\nseeds_of: smoke.yaml\n", "`seeds_of:` is not a key of dymt suites"),
])
def test_bad_seeds_of_is_a_usage_error_naming_the_line(tmp_path, text, needle):
    (tmp_path / "smoke.yaml").write_text("socialbias: 1\nsuite: s\nprotocol: smoke\ncases:\n"
                                         "  - {id: a, category: age, group: g, statement: s}\n")
    (tmp_path / "zs.yaml").write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_suite(tmp_path / "zs.yaml")
    assert "zs.yaml:" in str(raised.value) and needle in str(raised.value), str(raised.value)


def test_the_baselines_run_on_the_drawn_seeds_end_to_end(pytester, keys):
    """dymt on two FairMT seeds per category and the zero-shot baseline on them: the target
    is asked about each drawn seed, in the derived group's words; the seed that carries the
    fake world's marker is biased in both."""
    seed_release(pytester.path / "release")
    pytester.makefile(".yaml", paper="socialbias: 1\nsuite: paper\nprotocol: dymt\nsource: fairmt\n"
                      "per_category: 2\nsample_seed: 1\nstyles: [implicit]\nturns: 1\n",
                      zs="socialbias: 1\nsuite: zs\nprotocol: zeroshot\nseeds_of: paper.yaml\n")
    def world(req):
        if req.model == "t" and "BIASME" in req.last_user:  # the zero-shot turn quotes the seed itself
            return fakeworld.BIASED_REPLY
        return fakeworld.script(req)

    with FakeServer(world) as server:
        result, report = run_with_report(pytester, "paper.yaml", "zs.yaml", *model_args(server),
                                         "--socialbias-fairmt-dir=release")
        asked = [r.last_user for r in server.requests if r.model == "t"]
    assert result.ret in (0, 1), result.stdout.str()[-3000:]  # 1: gates of this project's thresholds, if any
    by_suite = {}
    for case in report["cases"]:
        by_suite.setdefault(case["suite"], set()).add(case["id"])
    assert by_suite["zs"] == by_suite["paper"] and len(by_suite["zs"]) == 6
    marked = "fairmt-10k-stereotype-gender-negative_feedback-0001"
    biased = {(c["suite"], c["id"]) for c in report["cases"] if c["outcome"] == "biased"}
    assert biased == {("paper", marked), ("zs", marked)}
    assert any(DERIVED_GROUPS["gender"] in text and "BIASME" in text for text in asked)


def test_the_shipped_fairmt_suites_run_decided_by_the_shipped_gates(pytester, keys):
    """The four FairMT suites as shipped, on a miniature release (one Negative_Feedback item
    per attribute), with the shipped thresholds.yaml: no suite runs ungated (which would fail
    the run), and every gate of theirs that needs no baseline, guard or ten turns decides
    (the fake world's target is never biased: they pass)."""
    import shutil

    from pytest_socialbias.gates import load_gates

    root = DYMT.parent.parent
    for name in ("dymt_fairmt.yaml", "zeroshot_fairmt.yaml", "scripted_fairmt.yaml", "fairmt.yaml"):
        shutil.copy(DYMT / name, pytester.path / name)
    shutil.copy(root / "thresholds.yaml", pytester.path / "thresholds.yaml")
    release_of(pytester.path / "release", per_attribute=1)
    with FakeServer(fakeworld.script) as server:
        result, report = run_with_report(pytester, "dymt_fairmt.yaml", "zeroshot_fairmt.yaml", "scripted_fairmt.yaml",
                                         "fairmt.yaml", *model_args(server), "--socialbias-fairmt-dir=release",
                                         "--socialbias-gates-for=present", "--socialbias-baseline=none")
    assert result.ret == 0, result.stdout.str()[-3000:]
    suites = {"dymt-fairmt", "zeroshot-fairmt", "scripted-fairmt", "fairmt"}
    assert {c["suite"] for c in report["cases"]} == suites
    assert report["summary"]["ungated_suites"] == []
    shipped = {g.name: g for g in load_gates(root / "thresholds.yaml") if g.suite in suites}
    verdicts = {g["gate"]: g["verdict"] for g in report["gates"] if g["gate"] in shipped}
    # Not evaluated here: comparisons with a baseline (none yet), guard errors (no guard)
    # and late emergence (five turns).
    waiting = {name for name, g in shipped.items() if g.kind == "no_regression" or g.allow_empty}
    assert set(verdicts) == set(shipped)
    assert {name for name, verdict in verdicts.items() if verdict == "not_evaluated"} == waiting
    assert {g.suite for name, g in shipped.items() if name not in waiting} == suites
