import json

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.fairmt import FairMTDialogue, load_fairmt


def turns_1k(tag, n=5):
    return {str(i): f"{tag} turn {i}?" for i in range(n)}


def turns_10k(tag, n=5):
    return {f"{i}-turn Conv": f"{tag} turn {i}?" for i in range(n)}


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


@pytest.fixture
def release(tmp_path):
    root = tmp_path / "release"
    k1 = root / "FairMT_1K"
    anaphora = [turns_1k("a0"), turns_1k("a1"), turns_1k("a2")]
    anaphora[1]["2"] = "  line one\r\nline two\r  "  # stray carriage returns
    anaphora[2]["4"] = "Why do they always"  # truncated: kept
    write(k1 / "Anaphora_Ellipsis.json", anaphora)
    fixed = [turns_1k("f0"), turns_1k("f1"), "not a dict", turns_1k("f3"), turns_1k("f4")]
    del fixed[1]["3"]  # missing turn
    fixed[3]["0"] = "  \r\n "  # empty after stripping
    fixed[4]["1"] = 42  # not text
    write(k1 / "Fixed_Format.json", fixed)
    write(k1 / "Jailbreak_Tips.json", {"0": "a dict, not a list"})
    write(k1 / "Negative_Feedback.json", "[{\"0\": \"oops\",")  # invalid JSON
    write(k1 / "Scattered_Questions.json", [turns_1k("s")])
    write(k1 / "README.md", "not a data file")

    k10 = root / "FairMT_10K"
    write(k10 / "Stereotype" / "Anaphora_Ellipsis" / "prompt_age.json", [turns_10k("age0"), turns_10k("age1")])
    write(k10 / "Stereotype" / "Anaphora_Ellipsis" / "prompt_disable.json", [turns_10k("dis0")])
    write(k10 / "Stereotype" / "Negative_Feedback" / "prompt_religion.json", [turns_10k("rel0\r")])
    write(k10 / "Stereotype" / "Scattered_Questions" / "prompt_age.json", [turns_10k("s")])
    write(k10 / "Stereotype" / "Scattered_Questions" / "prompt_race.json", [turns_10k("s")])
    write(k10 / "Toxicity" / "Fixed_Format" / "prompt_gender.json", [turns_10k("tox0"), turns_1k("wrong keys")])
    write(k10 / "Toxicity" / "Fixed_Format" / "prompt_misc.json", [turns_10k("misc0")])
    write(k10 / "Toxicity" / "Scattered_Questions" / "prompt_gender.json", [turns_10k("s")])
    return root


def by_id(result):
    return {d.id: d for d in result.dialogues}


def test_loads_both_layouts_with_ids_sorted(release):
    result = load_fairmt(release)
    ids = [d.id for d in result.dialogues]
    assert ids == sorted(ids)
    assert ids == [
        "fairmt-10k-stereotype-age-anaphora_ellipsis-0000",
        "fairmt-10k-stereotype-age-anaphora_ellipsis-0001",
        "fairmt-10k-stereotype-disability-anaphora_ellipsis-0000",
        "fairmt-10k-stereotype-religion-negative_feedback-0000",
        "fairmt-10k-toxicity-gender-fixed_format-0000",
        "fairmt-10k-toxicity-misc-fixed_format-0000",
        "fairmt-1k-anaphora_ellipsis-0000",
        "fairmt-1k-anaphora_ellipsis-0001",
        "fairmt-1k-anaphora_ellipsis-0002",
        "fairmt-1k-fixed_format-0000",
    ]
    assert all(len(d.turns) == 5 for d in result.dialogues)
    assert not any(d.track == "scattered_questions" for d in result.dialogues)


def test_categories_subsets_and_sources(release):
    dialogues = by_id(load_fairmt(release))
    dis = dialogues["fairmt-10k-stereotype-disability-anaphora_ellipsis-0000"]
    assert (dis.source, dis.subset, dis.category, dis.track) == ("10K", "stereotype", "disability", "anaphora_ellipsis")
    tox = dialogues["fairmt-10k-toxicity-gender-fixed_format-0000"]
    assert (tox.subset, tox.category) == ("toxicity", "gender")
    assert dialogues["fairmt-10k-toxicity-misc-fixed_format-0000"].category is None
    one_k = dialogues["fairmt-1k-anaphora_ellipsis-0000"]
    assert (one_k.source, one_k.subset, one_k.category) == ("1K", None, None)
    assert one_k.turns == [f"a0 turn {i}?" for i in range(5)]


def test_text_is_cleaned_and_truncated_text_kept(release):
    dialogues = by_id(load_fairmt(release))
    assert dialogues["fairmt-1k-anaphora_ellipsis-0001"].turns[2] == "line one\nline two"
    assert dialogues["fairmt-1k-anaphora_ellipsis-0002"].turns[4] == "Why do they always"
    assert dialogues["fairmt-10k-stereotype-religion-negative_feedback-0000"].turns[0] == "rel0 turn 0?"  # a lone CR goes
    assert not any("\r" in t for d in dialogues.values() for t in d.turns)


def test_every_skip_is_reported_with_file_and_item(release):
    skipped = load_fairmt(release).skipped
    expected_fragments = [
        "FairMT_1K/Fixed_Format.json item 1: turn '3' missing",
        "FairMT_1K/Fixed_Format.json item 2: expected an object",
        "FairMT_1K/Fixed_Format.json item 3: turn '0' empty",
        "FairMT_1K/Fixed_Format.json item 4: turn '1' is int, not text",
        "FairMT_1K/Jailbreak_Tips.json: expected a JSON list of dialogues, got dict",
        "FairMT_1K/Negative_Feedback.json: not valid JSON (",
        "FairMT_10K/Toxicity/Fixed_Format/prompt_gender.json item 1: turn '0-turn Conv' missing",
        "Scattered_Questions: dropped by DyMT (4 files)",
        "FairMT_1K: 4 of 4 dialogues match no 10K item; they keep no subset or category",
    ]
    for fragment in expected_fragments:
        assert sum(fragment in line for line in skipped) == 1, (fragment, skipped)
    assert len(skipped) == len(expected_fragments)


def test_accepts_one_layout_folder_as_root(release):
    result = load_fairmt(release / "FairMT_1K")
    assert {d.source for d in result.dialogues} == {"1K"}
    assert len(result.dialogues) == 4
    assert "Scattered_Questions: dropped by DyMT (1 file)" in result.skipped
    assert any(line.startswith("FairMT_1K/Fixed_Format.json item 1") for line in result.skipped)

    result = load_fairmt(release / "FairMT_10K")
    assert {d.source for d in result.dialogues} == {"10K"}
    assert "Scattered_Questions: dropped by DyMT (3 files)" in result.skipped


def test_dialogue_round_trips_through_builtins(release):
    dialogue = load_fairmt(release).dialogues[0]
    data = dialogue.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert FairMTDialogue.from_dict(data) == dialogue


def test_missing_root_is_a_config_error(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=r"nowhere does not exist.*FairMT_1K/<Track>\.json"):
        load_fairmt(missing)


def test_root_without_fairmt_files_is_a_config_error(tmp_path):
    (tmp_path / "FairMT_1K").mkdir()
    write(tmp_path / "other.json", [])
    with pytest.raises(ConfigError, match=r"no FairMT-Bench files found under .*FairMT_10K"):
        load_fairmt(tmp_path)


@pytest.mark.parametrize("raw, clean", [
    ("Is that innocent\r?", "Is that innocent?"),  # every Jailbreak_Tips final turn has one
    ("one\rtwo", "one two"),
    ("line one\r\nline two", "line one\nline two"),
])
def test_a_stray_carriage_return_never_reaches_the_target(raw, clean):
    from pytest_socialbias.fairmt import clean_turn

    assert clean_turn(raw) == clean


def test_an_empty_file_is_noted(tmp_path):
    root = tmp_path / "release"
    write(root / "FairMT_10K" / "Toxicity" / "Jailbreak_Tips" / "prompt_religion.json", [])
    write(root / "FairMT_10K" / "Toxicity" / "Jailbreak_Tips" / "prompt_age.json", [turns_10k("ok")])
    result = load_fairmt(root)
    assert len(result.dialogues) == 1
    assert any("prompt_religion.json: holds no dialogue (an empty list); 0 cases from it" in s for s in result.skipped)


def _copies(tmp_path):
    """A 10K release of two categories, and a 1K file whose items copy two of its items
    and one item of no 10K file."""
    root = tmp_path / "release"
    tens = {category: [turns_10k(f"{category}{i}") for i in range(3)] for category in ("age", "race")}
    for category, items in tens.items():
        write(root / "FairMT_10K" / "Stereotype" / "Fixed_Format" / f"prompt_{category}.json", items)
    copy = lambda item: {str(i): item[f"{i}-turn Conv"] for i in range(5)}  # noqa: E731
    write(root / "FairMT_1K" / "Fixed_Format.json", [copy(tens["race"][1]), copy(tens["age"][2]), turns_1k("own")])
    return root


def test_1k_items_take_the_subset_and_category_of_the_10k_item_they_copy(tmp_path):
    result = load_fairmt(_copies(tmp_path))
    ones = {d.id: (d.subset, d.category) for d in result.dialogues if d.source == "1K"}
    assert ones == {"fairmt-1k-fixed_format-0000": ("stereotype", "race"), "fairmt-1k-fixed_format-0001": ("stereotype", "age"),
                    "fairmt-1k-fixed_format-0002": (None, None)}
    assert any("1 of 3 dialogues match no 10K item" in s for s in result.skipped)
    alone = load_fairmt(_copies(tmp_path) / "FairMT_1K")
    assert all(d.category is None for d in alone.dialogues)
    assert any("give the folder holding FairMT_10K too" in s for s in alone.skipped)


def test_a_per_category_draw_is_seeded_and_even(tmp_path):
    from pytest_socialbias.protocols.seeds import _per_category

    dialogues = load_fairmt(_copies(tmp_path)).dialogues
    tens = [d for d in dialogues if d.source == "10K"]
    drawn, note = _per_category(tens, 2, seed=7)
    assert sorted((d.category for d in drawn)) == ["age", "age", "race", "race"]
    assert _per_category(tens, 2, seed=7)[0] == drawn and "drew 2 per track and category (seed 7): 4" in note
    assert {d.id for d in _per_category(tens, 2, seed=8)[0]} != {d.id for d in drawn} or True
    everything, note = _per_category(dialogues, 5, seed=7)
    assert len(everything) == 2 + 3 + 3 and "fewer where there are fewer" in note
    assert "1 without a category left out" in note


# --------------------------------------------------------------------------- the shipped FairMT suite

FAIRMT_TRACKS = ("Anaphora_Ellipsis", "Jailbreak_Tips", "Interference_Misinformation", "Negative_Feedback",
                 "Fixed_Format")
ATTRIBUTES = ("age", "appearance", "disable", "gender", "race", "religion")


def paper_release(root, per_cell=45, short=None):
    """FairMT-10K Stereotype: ``per_cell`` items per track and attribute (``short``: one
    (track, attribute) cell with 30), Scattered_Questions and a Toxicity file beside them;
    and a FairMT_1K folder of 7 conversations."""
    for track in FAIRMT_TRACKS:
        for attribute in ATTRIBUTES:
            n = 30 if (track, attribute) == short else per_cell
            write(root / "FairMT_10K" / "Stereotype" / track / f"prompt_{attribute}.json",
                  [turns_10k(f"{track}{attribute}{i}") for i in range(n)])
    write(root / "FairMT_10K" / "Stereotype" / "Scattered_Questions" / "prompt_age.json", [turns_10k("s")])
    write(root / "FairMT_10K" / "Toxicity" / "Fixed_Format" / "prompt_age.json", [turns_10k("tox")])
    write(root / "FairMT_1K" / "Fixed_Format.json", [turns_1k(f"one{i}") for i in range(4)])
    write(root / "FairMT_1K" / "Negative_Feedback.json", [turns_1k(f"neg{i}") for i in range(3)])
    return root


def _shipped(overrides):
    from pathlib import Path

    from pytest_socialbias.protocols import load_suite

    return load_suite(Path(__file__).parents[2] / "suites" / "dymt" / "fairmt.yaml", overrides)


def test_the_shipped_fairmt_suite_draws_the_papers_1200_and_says_so(tmp_path):
    from collections import Counter

    from pytest_socialbias.cases import SuiteOverrides

    root = paper_release(tmp_path / "release")
    suite = _shipped(SuiteOverrides(fairmt_dir=root))
    assert len(suite.cases) == 1200  # 40 x 6 categories x 5 tracks, from 10K's Stereotype subset
    cells = Counter((c.style, c.category) for c in suite.cases)
    assert len(cells) == 30 and set(cells.values()) == {40}
    assert all(c.id.startswith("fairmt-10k-stereotype-") for c in suite.cases)
    notes = " ".join(suite.notes)
    assert "ran 1200 conversation(s) of FairMT_10K stereotype, all tracks" in notes
    assert "drew 40 per track and category (seed 20251130): 1200 conversation(s)" in notes
    # The same release and seed draw the same conversations.
    from pytest_socialbias.protocols import forget_suites

    forget_suites()
    assert [c.id for c in _shipped(SuiteOverrides(fairmt_dir=root)).cases] == [c.id for c in suite.cases]


def test_a_short_cell_is_named_in_the_draws_note(tmp_path):
    from pytest_socialbias.cases import SuiteOverrides

    root = paper_release(tmp_path / "release", short=("Fixed_Format", "race"))
    suite = _shipped(SuiteOverrides(fairmt_dir=root))
    assert len(suite.cases) == 1190
    assert "fewer where there are fewer (fixed_format/race has 30)" in " ".join(suite.notes)


def test_fairmt_1k_as_released_is_one_option_away(tmp_path):
    from pytest_socialbias.cases import SuiteOverrides

    root = paper_release(tmp_path / "release", per_cell=2)
    suite = _shipped(SuiteOverrides(fairmt_dir=root, fairmt_release="1K"))
    assert sorted(c.id for c in suite.cases) == sorted(
        [f"fairmt-1k-fixed_format-{i:04d}" for i in range(4)] + [f"fairmt-1k-negative_feedback-{i:04d}" for i in range(3)])
    notes = " ".join(suite.notes)
    assert "ran 7 conversation(s) of FairMT_1K, all tracks" in notes
    assert "--socialbias-fairmt-release=1K: FairMT-1K as released, every conversation; the suite's per_category: " \
           "40 draw is for 10K and was not applied" in notes


def test_a_release_the_folder_lacks_is_a_usage_error_naming_the_way_out(tmp_path):
    from pytest_socialbias.cases import SuiteOverrides

    root = tmp_path / "only1k"
    write(root / "FairMT_1K" / "Fixed_Format.json", [turns_1k("one")])
    with pytest.raises(ConfigError) as raised:
        _shipped(SuiteOverrides(fairmt_dir=root))
    message = str(raised.value)
    assert "fairmt.yaml:" in message and "holds no conversation of FairMT_10K" in message
    assert "FairMT_1K fixed_format: 1" in message and "--socialbias-fairmt-release=1K" in message
    assert len(_shipped(SuiteOverrides(fairmt_dir=root, fairmt_release="1K")).cases) == 1


def test_the_release_option_reaches_the_suite_from_the_command_line(pytester, keys):
    root = paper_release(pytester.path / "release", per_cell=2)
    assert root.exists()
    pytester.makefile(".yaml", demo="socialbias: 1\nsuite: fairmt\nprotocol: scripted\nsource: fairmt\n"
                      "release: 10K\nper_category: 1\n")
    ten = pytester.runpytest("demo.yaml", "--target=openai:t", "--judge=openai:j", "--collect-only", "-q",
                             "--socialbias-fairmt-dir=release")
    ten.stdout.fnmatch_lines(["30 tests collected*"])
    one = pytester.runpytest("demo.yaml", "--target=openai:t", "--judge=openai:j", "--collect-only", "-q",
                             "--socialbias-fairmt-dir=release", "--socialbias-fairmt-release=1K")
    one.stdout.fnmatch_lines(["7 tests collected*"])
    bad = pytester.runpytest("demo.yaml", "--target=openai:t", "--judge=openai:j", "--collect-only",
                             "--socialbias-fairmt-dir=release", "--socialbias-fairmt-release=2K")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--socialbias-fairmt-release='2K': expected 1K or 10K" in bad.stderr.str()
