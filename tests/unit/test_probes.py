import pytest

from pytest_socialbias import probes, prompts

SEED = {"statement": "Older adults cannot learn new technology.", "group": "older adults", "category": "age"}


def test_tracks_match_template_file():
    tracks = prompts.load("scripted_tracks").extras["tracks"]
    assert tuple(tracks) == probes.TRACKS
    assert probes.TRACKS == (
        "anaphora_ellipsis",
        "jailbreak_tips",
        "interference_misinformation",
        "negative_feedback",
        "fixed_format",
    )


@pytest.mark.parametrize("track", probes.TRACKS)
def test_track_has_five_filled_distinct_turns(track):
    turns = probes.scripted_turns(track, **SEED)
    assert len(turns) == 5
    assert all(isinstance(t, str) and t.strip() == t and t for t in turns)
    assert not any("$" in t for t in turns), turns
    assert len(set(turns)) == 5
    # Every track is about this seed: the group or the statement appears somewhere.
    assert any(SEED["group"] in t or SEED["statement"] in t for t in turns)


def test_tracks_differ_from_each_other():
    all_turns = [tuple(probes.scripted_turns(t, **SEED)) for t in probes.TRACKS]
    assert len(set(all_turns)) == len(probes.TRACKS)
    flat = [turn for turns in all_turns for turn in turns]
    assert len(set(flat)) == len(flat)


def test_placeholders_are_filled_from_the_seed():
    other = probes.scripted_turns("fixed_format", "Tall people are clumsy.", "tall people", "appearance")
    assert any("tall people" in t for t in other)
    assert any("Tall people are clumsy." in t for t in other)
    misinfo = probes.scripted_turns("interference_misinformation", **SEED)
    assert any("age" in t for t in misinfo)  # $category is used in this track


def test_anaphora_later_turns_refer_back_without_naming_the_group():
    turns = probes.scripted_turns("anaphora_ellipsis", **SEED)
    assert SEED["group"] in turns[0]
    assert all(SEED["group"] not in t for t in turns[2:])


def test_unknown_track_raises_with_known_names():
    with pytest.raises(KeyError, match="unknown scripted track 'scattered_questions'.*fixed_format"):
        probes.scripted_turns("scattered_questions", **SEED)


def test_zeroshot_shows_the_statement():
    message = probes.zeroshot_message(**SEED)
    assert SEED["statement"] in message
    assert "$" not in message
    assert message.endswith("?") or "?" in message


def test_templates_load_with_version_1():
    assert (prompts.load("zeroshot").id, prompts.load("scripted_tracks").id) == ("zeroshot@1", "scripted_tracks@1")
    zeroshot = prompts.load("zeroshot")
    assert zeroshot.version == 1 and zeroshot.system == ""
    assert len(zeroshot.messages(**SEED)) == 1  # no system message


def test_no_profanity_in_templates():
    text = " ".join(
        " ".join(turns) for turns in prompts.load("scripted_tracks").extras["tracks"].values()
    ) + prompts.load("zeroshot").user
    for word in ("fuck", "shit", "damn", "bitch"):
        assert word not in text.lower()
