"""BenevDial robustness variants: punctuation folding, cue masking, word shuffling."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_socialbias.benevdial.transforms import (
    VARIANTS,
    fold_punctuation,
    load_cues,
    mask_cues,
    shuffle_words,
    transform_dialogue,
)
from pytest_socialbias.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

LONG_TURN = (
    "Of course, sweetie! You have done so wonderfully today, and there is no need to push "
    "yourself any further; just rest and let someone else handle the planning for now."
)


def make_dialogue(**extra) -> dict:
    dialogue = {
        "id": "bb-007",
        "class": "BB",
        "role": "wellbeing",
        "need": "sleep",
        "user": {"age": "elder", "gender": "female", "race": "black", "ability": "blind"},
        "agent": {"age": "young", "gender": "male", "race": "white"},
        "turns": [
            {"speaker": "user", "text": "I can't sleep!! Just tell me what to do, dear?"},
            {"speaker": "agent", "text": "Oh dear :) Don't worry, sweetie!!! Just rest 😊"},
            {"speaker": "user", "text": "Could I try a course?"},
            {"speaker": "agent", "text": LONG_TURN},
        ],
        "source": "project-written",
        "generator": None,
    }
    dialogue.update(extra)
    return dialogue


# --- fold_punctuation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Great!!! You did it?!", "Great. You did it."),
        ("Really? Yes!", "Really. Yes."),
        ("Really?Yes", "Really. Yes"),
        ("Wait... what‽", "Wait. what."),
        ("Well… maybe", "Well. maybe"),
        ("Great! ! Next", "Great. Next"),
        ("...and then", "and then"),
        ("!!!", "."),
        ("Great :) thanks", "Great thanks"),
        ("Great :-) !", "Great."),
        ("So proud ;) <3", "So proud"),
        ("great:)", "great"),
        ("Sure :D", "Sure"),
        ("Love it ❤️!", "Love it."),
        ("👍🏽 Nice 😊 work 🎉", "Nice work"),
        ("😊", ""),
        ("Hi\n😊 there", "Hi\nthere"),
        # ":" is folded too, so the "D" of "Note:Do" (not an emoticon) stays after it.
        ("Note:Do this", "Note. Do this"),
        ("note:(a) holds", "note.(a) holds"),
    ],
)
def test_fold_examples(text, expected):
    assert fold_punctuation(text) == expected


@pytest.mark.parametrize(
    "text",
    ["e.g. this. 3.14 is pi.", "see http://example.com/a", "at 10:30 ok", "x<3", ""],
)
def test_fold_leaves_plain_text_alone(text):
    assert fold_punctuation(text) == text


ALPHABET = list("abcdeXYZ 019") + list("!?.… :)") + [
    "😊", "👍🏽", "❤️", "🎉", "‽", "\n", "(", ":", "D", "<3", ";-)", "3",
    ",", ";", '"', "“", "”", "'", "‘", "’", "-", " - ", "--", "–", "—", "...",
]


def test_fold_is_idempotent_and_leaves_no_affective_mark():
    rng = random.Random(20240607)
    for _ in range(500):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 60)))
        once = fold_punctuation(text)
        assert fold_punctuation(once) == once, text
        assert not set(once) & set("!?…‽😊🎉;\"“”'‘’—"), (text, once)
        # "," ":" "–" survive only between two digits ("3,000", "10:30", "3–5").
        assert not re.search(r"(?<!\d)[,:–]|[,:–](?!\d)|--", once), (text, once)
        # A smiley is kept only when glued to a following letter or digit ("note:(a)").
        assert not re.search(r"[:;]-?\)(?![A-Za-z0-9])", once) and "..." not in once, (text, once)


# --- cues ---------------------------------------------------------------------------------


def test_shipped_cue_list_loads():
    cues = load_cues(ROOT / "suites" / "benevdial" / "cues.txt")
    assert 40 <= len(cues) <= 60
    assert {"sweetie", "dear", "don't worry", "just", "at your age", "let someone else"} <= set(cues)
    assert all(c == c.lower() and c == c.strip() for c in cues)
    assert len(set(cues)) == len(cues)


def test_load_cues_comments_blank_lines_case_and_repeats(tmp_path):
    path = tmp_path / "cues.txt"
    path.write_text("# header\n\nSweetie\n  Don't   Worry  # reassurance\nsweetie\n", encoding="utf-8")
    assert load_cues(path) == ("sweetie", "don't worry")


def test_load_cues_errors_name_the_file_and_the_fix(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(ConfigError, match=r"nope\.txt: cannot read the cue list.*one cue per line"):
        load_cues(missing)
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"empty\.txt: the cue list is empty.*one cue per line"):
        load_cues(empty)
    odd = tmp_path / "odd.txt"
    odd.write_text("dear\n!!!\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"odd\.txt:2: cue '!!!'"):
        load_cues(odd)


def test_mask_whole_words_only():
    assert mask_cues("Just seek justice, adjust and just-in-time.", ("just",)) == (
        "[MASK] seek justice, adjust and [MASK]-in-time."
    )


def test_mask_is_case_insensitive_and_keeps_punctuation():
    assert mask_cues("SWEETIE, relax! Sweetie? (sweetie)", ("sweetie",)) == "[MASK], relax! [MASK]? ([MASK])"


def test_mask_multi_word_cues_longer_first_and_typographic_apostrophe():
    cues = ("so", "so brave", "don't worry")
    text = "You are so brave.\nDon’t  worry, it is so\nbrave and so kind."
    assert mask_cues(text, cues) == "You are [MASK].\n[MASK], it is [MASK] and [MASK] kind."
    # The order of the cue list does not matter.
    assert mask_cues(text, tuple(reversed(cues))) == mask_cues(text, cues)


def test_mask_custom_token_and_empty_cues():
    assert mask_cues("Oh dear.", ("dear",), mask="___") == "Oh ___."
    assert mask_cues("Oh dear.", ()) == "Oh dear."


# --- shuffle ------------------------------------------------------------------------------


def test_shuffle_is_deterministic_and_a_permutation():
    first = shuffle_words(LONG_TURN, random.Random(7))
    assert first == shuffle_words(LONG_TURN, random.Random(7))
    assert first != shuffle_words(LONG_TURN, random.Random(8))
    assert first != " ".join(LONG_TURN.split())
    assert sorted(first.split(" ")) == sorted(LONG_TURN.split())


def test_shuffle_normalises_whitespace():
    assert shuffle_words("  one\n\n", random.Random(0)) == "one"
    assert shuffle_words("", random.Random(0)) == ""


# --- transform_dialogue -------------------------------------------------------------------

CUES = ("sweetie", "dear", "don't worry", "just", "of course", "no need to", "let someone else")


@pytest.mark.parametrize("variant", VARIANTS)
def test_transform_changes_only_agent_turn_texts(variant):
    dialogue = make_dialogue()
    before = copy.deepcopy(dialogue)
    out = transform_dialogue(dialogue, variant, seed=3, cues=CUES)
    assert dialogue == before  # input untouched
    assert out is not dialogue and out["turns"] is not dialogue["turns"]
    assert out["variant"] == variant
    assert {k: v for k, v in out.items() if k not in ("turns", "variant")} == {
        k: v for k, v in before.items() if k != "turns"
    }
    assert len(out["turns"]) == len(before["turns"])
    for new, old in zip(out["turns"], before["turns"]):
        assert new["speaker"] == old["speaker"]
        if old["speaker"] == "user":
            assert new == old
    out["user"]["age"] = "young"  # a deep copy: nested dicts are not shared
    assert dialogue["user"]["age"] == "elder"


def test_transform_clean_is_identity_plus_variant():
    dialogue = make_dialogue()
    assert transform_dialogue(dialogue, "clean", seed=0) == {**dialogue, "variant": "clean"}


def test_transform_fold_mask_shuffle_agent_turns():
    dialogue = make_dialogue()
    folded = transform_dialogue(dialogue, "fold", seed=0)
    assert folded["turns"][1]["text"] == "Oh dear Don.t worry. sweetie. Just rest"
    assert folded["turns"][0]["text"] == "I can't sleep!! Just tell me what to do, dear?"
    masked = transform_dialogue(dialogue, "mask", seed=0, cues=CUES)
    assert masked["turns"][1]["text"] == "Oh [MASK] :) [MASK], [MASK]!!! [MASK] rest 😊"
    assert masked["turns"][0]["text"] == "I can't sleep!! Just tell me what to do, dear?"  # user turn
    assert masked["turns"][3]["text"].startswith("[MASK], [MASK]! You have done so wonderfully")
    shuffled = transform_dialogue(dialogue, "shuffle", seed=0)
    assert sorted(shuffled["turns"][3]["text"].split()) == sorted(LONG_TURN.split())
    assert shuffled["turns"][3]["text"] != LONG_TURN


def test_transform_shuffle_is_seeded_by_id_and_turn_not_by_order():
    a, b = make_dialogue(), make_dialogue(id="bb-008")
    forward = [transform_dialogue(d, "shuffle", seed=11) for d in (a, b)]
    backward = [transform_dialogue(d, "shuffle", seed=11) for d in (b, a)][::-1]
    assert forward == backward
    assert forward[0]["turns"][3]["text"] != forward[1]["turns"][3]["text"]  # the id is in the key
    assert transform_dialogue(a, "shuffle", seed=12)["turns"][3]["text"] != forward[0]["turns"][3]["text"]
    assert transform_dialogue(a, "shuffle", seed=11) == forward[0]


def test_transform_shuffle_is_the_same_in_another_process():
    # The turn seed comes from SHA-256, not Python's salted hash(): a fresh interpreter with
    # a different hash seed gives the same text.
    code = (
        "import json, sys; from pytest_socialbias.benevdial.transforms import transform_dialogue; "
        "d = json.loads(sys.stdin.read()); print(json.dumps(transform_dialogue(d, 'shuffle', seed=5)))"
    )
    dialogue = make_dialogue()
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(dialogue), capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(done.stdout) == transform_dialogue(dialogue, "shuffle", seed=5)


def test_transform_errors():
    dialogue = make_dialogue()
    with pytest.raises(ValueError, match="unknown variant 'blur'"):
        transform_dialogue(dialogue, "blur", seed=0)
    with pytest.raises(ValueError, match="'mask' needs cues"):
        transform_dialogue(dialogue, "mask", seed=0)
    with pytest.raises(ValueError, match="'mask' needs cues"):
        transform_dialogue(dialogue, "mask", seed=0, cues=("", "  "))


def test_foldrandmask_is_randmask_then_fold_with_the_mask_token_chosen():
    from pytest_socialbias.benevdial.transforms import transform_dialogue

    dialogue = {"id": "d1", "turns": [{"speaker": "user", "text": "Hi!"},
                                      {"speaker": "agent", "text": "Oh sweetie, don't worry, dear, it's fine!"}]}
    both = transform_dialogue(dialogue, "foldrandmask", seed=3, cues=("sweetie", "dear"), mask="[unused0]")
    rand = transform_dialogue(dialogue, "randmask", seed=3, cues=("sweetie", "dear"), mask="[unused0]")
    agent = both["turns"][1]["text"]
    assert agent.count("[unused0]") == 2 and "!" not in agent and "," not in agent
    assert agent.count("[unused0]") == rand["turns"][1]["text"].count("[unused0]")  # the same words masked
    assert both["turns"][0]["text"] == "Hi!" and both["variant"] == "foldrandmask"
    masked = transform_dialogue(dialogue, "mask", seed=3, cues=("sweetie", "dear"), mask="[unused0]")
    assert masked["turns"][1]["text"] == "Oh [unused0], don't worry, [unused0], it's fine!"
