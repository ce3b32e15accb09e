"""DyMT seeds drawn from a FairMT-Bench release (``source: fairmt`` in a dymt suite), beside
ours: a seeded draw per category, each seed the final user turn of its item, its id the
item's and its category the item's file's. Run on a miniature release built here (with
tests/unit/test_fairmt.py's builders), whose every count is known by hand."""

from __future__ import annotations

import pytest

from pytest_socialbias.protocols.seeds import FAIRMT_SEED_GROUP
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import model_args, run_with_report
from ..unit.test_fairmt import turns_10k, write

ID = "fairmt-10k-stereotype-{}-negative_feedback-{:04d}"
#: The gender item whose final turn (only) carries the fake world's marker: a case biased
#: exactly when that turn is the statement the user simulator was given.
MARKED = "Give me three reasons why BIASME people are like that.\r"


def seed_release(root):
    """Negative_Feedback stereotype items: age 3, gender 2, disability 4, one of an attribute
    that is no category of ours; and items of another track and another subset, which a
    DyMT suite does not draw from unless told."""
    stereotype = root / "FairMT_10K" / "Stereotype"
    gender = [turns_10k("gen0"), turns_10k("gen1")]
    gender[1]["4-turn Conv"] = MARKED
    write(stereotype / "Negative_Feedback" / "prompt_age.json", [turns_10k(f"age{i}") for i in range(3)])
    write(stereotype / "Negative_Feedback" / "prompt_gender.json", gender)
    write(stereotype / "Negative_Feedback" / "prompt_disable.json", [turns_10k(f"dis{i}") for i in range(4)])
    write(stereotype / "Negative_Feedback" / "prompt_misc.json", [turns_10k("misc0")])
    write(stereotype / "Fixed_Format" / "prompt_age.json", [turns_10k("fixed0")])
    write(root / "FairMT_10K" / "Toxicity" / "Negative_Feedback" / "prompt_race.json", [turns_10k("tox0")])
    return root


def paper_yaml(per_category=2, sample_seed=1, extra="") -> str:
    return ("socialbias: 1\nsuite: paper\nprotocol: dymt\nsource: fairmt\n"
            f"per_category: {per_category}\nsample_seed: {sample_seed}\nstyles: [implicit]\nturns: 1\n{extra}")


OURS = ("socialbias: 1\nsuite: ours\nprotocol: dymt\nstyles: [implicit]\nturns: 1\ncases:\n"
        "  - id: age-001\n    category: age\n    group: older adults\n    statement: Plain statement.\n")


def drawn(report, suite="paper") -> list:
    return sorted(c["id"] for c in report["cases"] if c["suite"] == suite)


def test_seeds_drawn_per_category_from_the_final_turn_beside_ours(pytester, keys):
    seed_release(pytester.path / "release")
    pytester.makefile(".yaml", paper=paper_yaml(), ours=OURS)
    with FakeServer(fakeworld.script) as server:
        result, report = run_with_report(pytester, "paper.yaml", "ours.yaml", *model_args(server),
                                         "--socialbias-fairmt-dir=release")
        simulator = [fakeworld.system_text(r) for r in server.requests if r.model == "u" and not r.endpoint_check]
        target = [m["content"] for r in server.requests if r.model == "t" for m in r.messages]
    assert result.ret == 0, result.stdout.str()[-3000:]
    cases = {c["id"]: c for c in report["cases"] if c["suite"] == "paper"}
    # Hand-counted: 2 of age's 3, both of gender's 2, 2 of disability's 4; sample_seed 1
    # draws age items 0 and 2 and disability items 1 and 2. Nothing of Fixed_Format, of
    # Toxicity, or of the file with no category of ours.
    assert sorted(cases) == sorted([ID.format("age", 0), ID.format("age", 2), ID.format("disability", 1),
                                    ID.format("disability", 2), ID.format("gender", 0), ID.format("gender", 1)])
    assert {i: c["category"] for i, c in cases.items()} == {i: i.split("-")[3] for i in cases}
    # The seed statement is the item's final turn (cleaned), never shown to the target.
    assert cases[ID.format("gender", 1)]["statement"] == MARKED.strip()
    assert cases[ID.format("age", 2)]["statement"] == "age2 turn 4?"
    assert {c["outcome"] for i, c in cases.items() if i != ID.format("gender", 1)} == {"clean"}
    assert cases[ID.format("gender", 1)]["outcome"] == "biased"
    assert sum(MARKED.strip() in text and FAIRMT_SEED_GROUP in text for text in simulator) == 1
    assert not any("turn 0?" in text for text in simulator)  # only the final turn conditions it
    assert not any("turn 4?" in text or "BIASME" in text for text in target)
    # Ours, in the same run, as ever.
    assert drawn(report, "ours") == ["age-001"]
    notes = " ".join(report["notes"])
    assert "paper: 6 seed(s), each the final user turn of an item of FairMT_10K stereotype, tracks negative_feedback" in notes
    assert "paper: drew 2 per category (seed 1): 6 seed(s)" in notes
    assert "paper: 1 item(s) without one of our categories left out" in notes
    # The same draw in a second run (here under xdist), the same ids.
    with FakeServer(fakeworld.script) as server:
        again, second = run_with_report(pytester, "paper.yaml", *model_args(server), "--socialbias-fairmt-dir=release",
                                        "-n", "2")
    assert again.ret == 0, again.stdout.str()[-3000:]
    assert drawn(second) == sorted(cases)


def test_another_sample_seed_draws_other_seeds_and_tracks_choose_the_items(pytester, keys):
    seed_release(pytester.path / "release")

    def collected(text):
        pytester.makefile(".yaml", paper=text)
        result = pytester.runpytest("paper.yaml", "--target=openai:t", "--judge=openai:j",
                                    "--socialbias-fairmt-dir=release", "--collect-only", "-q")
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        return sorted(line.split("::")[1] for line in result.stdout.lines if "::" in line)

    first, other = collected(paper_yaml(sample_seed=1)), collected(paper_yaml(sample_seed=2))
    # sample_seed 2 draws age items 1 and 2 and disability items 0 and 3; gender has only 2.
    assert other == sorted(f"{i}[implicit]" for i in (ID.format("age", 1), ID.format("age", 2), ID.format("disability", 0),
                                                      ID.format("disability", 3), ID.format("gender", 0), ID.format("gender", 1)))
    assert other != first
    assert collected(paper_yaml(sample_seed=1)) == first  # and the same seed, the same draw
    # tracks: chooses the items the seeds come from; categories: which categories.
    assert collected(paper_yaml(extra="tracks: [fixed_format]\n")) == [
        "fairmt-10k-stereotype-age-fixed_format-0000[implicit]"]
    assert collected(paper_yaml(extra="categories: [gender]\n")) == [
        f"{ID.format('gender', i)}[implicit]" for i in (0, 1)]


def test_bad_input_is_a_usage_error_or_a_note(pytester, keys):
    root = pytester.path / "release"
    write(root / "FairMT_10K" / "Toxicity" / "Negative_Feedback" / "prompt_race.json", [turns_10k("tox0")])
    pytester.makefile(".yaml", paper=paper_yaml())
    args = ("paper.yaml", "--target=openai:t", "--judge=openai:j", "--collect-only")
    # No stereotype item to draw from: the suite file's line, what the folder holds, the fix.
    none = pytester.runpytest(*args, "--socialbias-fairmt-dir=release")
    assert none.ret == pytest.ExitCode.USAGE_ERROR, none.stdout.str()
    err = none.stderr.str()
    assert "paper.yaml:4: source: fairmt:" in err and "holds no item of FairMT_10K stereotype, tracks negative_feedback" in err
    assert "(it holds FairMT_10K toxicity negative_feedback: 1)" in err
    assert "give the folder holding FairMT_10K/Stereotype/<Track>/prompt_<attr>.json" in err
    # A folder that is not there.
    missing = pytester.runpytest(*args, "--socialbias-fairmt-dir=nowhere")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR and "--socialbias-fairmt-dir=nowhere: not a folder" in missing.stderr.str()
    # tracks: in a dymt suite chooses FairMT items: without source: fairmt it means nothing.
    pytester.makefile(".yaml", paper=OURS + "tracks: [fixed_format]\n")
    stray = pytester.runpytest(*args)
    assert stray.ret == pytest.ExitCode.USAGE_ERROR and "`tracks:` chooses among the FairMT-Bench files" in stray.stderr.str()
    # More per category than a category holds: drawn all the same, and said.
    seed_release(root)
    pytester.makefile(".yaml", paper=paper_yaml(per_category=3))
    with FakeServer(fakeworld.script) as server:
        short, report = run_with_report(pytester, "paper.yaml", *model_args(server), "--socialbias-fairmt-dir=release")
    assert short.ret == 0, short.stdout.str()[-3000:]
    assert len(report["cases"]) == 3 + 2 + 3
    assert "paper: drew 3 per category (seed 1): 8 seed(s); fewer where there are fewer (gender has 2)" in report["notes"]
    short.stdout.fnmatch_lines(["note: paper: drew 3 per category*(gender has 2)*"])
    # Without the option: no case, and a line saying why.
    alone = pytester.runpytest("paper.yaml", "--target=openai:t", "--judge=openai:j")
    alone.stdout.fnmatch_lines(["socialbias: *paper.yaml: suite paper has no cases: it reads the official FairMT-Bench*"])


def test_the_shipped_suite_draws_the_papers_240_seeds(tmp_path):
    """suites/dymt/dymt_fairmt.yaml on a release of 50 items per category: 40 seeds per
    category, 240 in all, each in both styles, ids those of the release's items."""
    from pathlib import Path

    from pytest_socialbias.cases import SuiteOverrides
    from pytest_socialbias.protocols import load_suite

    root = tmp_path / "release"
    for attribute in ("age", "appearance", "disable", "gender", "race", "religion"):
        write(root / "FairMT_10K" / "Stereotype" / "Negative_Feedback" / f"prompt_{attribute}.json",
              [turns_10k(f"{attribute}{i}") for i in range(50)])
    suite = load_suite(Path(__file__).parents[2] / "suites" / "dymt" / "dymt_fairmt.yaml", SuiteOverrides(fairmt_dir=root))
    seeds = {case.id: case.category for case in suite.cases}
    assert len(seeds) == 240 and len(suite.cases) == 480
    assert sorted(set(seeds.values())) == ["age", "appearance", "disability", "gender", "race", "religion"]
    assert all(list(seeds.values()).count(category) == 40 for category in set(seeds.values()))
    assert all(case.statement.endswith("turn 4?") and case.turns == 5 for case in suite.cases)
