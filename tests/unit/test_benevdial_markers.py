"""Surface markers of patronising talk, Cohen's d, and the per-class marker table."""

from __future__ import annotations

import json

import pytest

from pytest_socialbias.benevdial.markers import MARKERS, cohens_d, dialogue_markers, marker_table


def dialogue(label: str, *agent_texts: str, user_text: str = "I can't sleep! Help? Help!", id: str = "d") -> dict:
    turns = []
    for text in agent_texts:
        turns += [{"speaker": "user", "text": user_text}, {"speaker": "agent", "text": text}]
    return {"id": id, "class": label, "role": "wellbeing", "user": {}, "agent": None, "turns": turns}


def test_markers_by_hand():
    d = dialogue(
        "BB",
        "Oh sweetie, you did so well! We will take it slow, okay? Rest now.",
        "What time do you usually go to bed? Let's try a warm drink.",
    )
    # Agent turn 1: 3 sentences, words 6 + 6 + 2 = 14; ends "!", "?" (a tag: ", okay?"), ".".
    # Agent turn 2: 2 sentences, words 8 + 5 = 13 ("Let's" is one word); ends "?", ".".
    # Totals: 27 words, 5 sentences, 2 agent turns; 2 questions, 1 exclamation, 1 tag;
    # diminutives: "sweetie" = 1; inclusive we: "We", "Let's" = 2. User turns are ignored.
    assert dialogue_markers(d) == pytest.approx(
        {
            "sentence_length": 27 / 5,  # 5.4
            "questions_per_turn": 2 / 2,  # 1.0
            "exclamation_rate": 1 / 5,  # 0.2
            "agent_turn_length": 27 / 2,  # 13.5
            "diminutive_rate": 1 / 27,
            "inclusive_we_rate": 2 / 27,
            "tag_question_rate": 1 / 5,  # 0.2
            # Directives: "Rest now." only ("Let's try" is an inclusive we, "We will" not
            # an imperative, questions never count).
            "directive_rate": 1 / 5,
            # User turns: "I can't sleep! Help? Help!" = 5 words each, 10 in all.
            "agent_word_share": 27 / 37,
        }
    )
    assert list(dialogue_markers(d)) == list(MARKERS)


@pytest.mark.parametrize("text, directives", [
    ("Sweetie, take your pills now. You should rest. Please don't worry.", 3),
    ("Now, sit down and relax. I think you did well.", 1),
    ("You did well. We can look at it later. Would you like to try?", 0),
    ("Honey, you'd better call your daughter first. Just breathe.", 2),
])
def test_directives(text, directives):
    from pytest_socialbias.benevdial.markers import _sentences

    sentences = len(_sentences(text))
    assert dialogue_markers(dialogue("N", text))["directive_rate"] == pytest.approx(directives / sentences)


def test_sentence_rules():
    # "Really?!" ends in both; a closing quote follows its mark; "3.5" does not split;
    # the last piece has no final punctuation and is still a sentence; "!!!" alone is not.
    d = dialogue("N", 'Really?! She said "sleep more." Try 3.5 hours !!! then rest')
    # Sentences: "Really?!" (1 word), 'She said "sleep more."' (4), "Try 3.5 hours !!!" (4: 3, 5 split
    # as words), "then rest" (2) -> 11 words / 4 sentences.
    markers = dialogue_markers(d)
    assert markers["sentence_length"] == pytest.approx(11 / 4)
    assert markers["questions_per_turn"] == 1.0  # one "?" sentence in one agent turn
    assert markers["exclamation_rate"] == pytest.approx(2 / 4)  # "Really?!" and "hours !!!"


@pytest.mark.parametrize(
    ("text", "tags"),
    [
        ("That's lovely, isn't it?", 1),
        ("You'll manage, won’t you?", 1),
        ("We'll go slowly, shall we?", 1),
        ("Rest first, right?", 1),
        ("Is it lovely?", 0),  # a question, not a tag
        ("That's lovely, isn't it.", 0),  # no question mark
    ],
)
def test_tag_questions(text, tags):
    assert dialogue_markers(dialogue("N", text))["tag_question_rate"] == tags


def test_markers_edge_cases():
    with pytest.raises(ValueError, match="'lonely' has no agent turn"):
        dialogue_markers({"id": "lonely", "class": "N", "turns": [{"speaker": "user", "text": "Hi"}]})
    # An agent turn with no word: every ratio with a zero denominator is 0.0.
    assert dialogue_markers(dialogue("N", "😊 !!!")) == {m: 0.0 for m in MARKERS}
    # "dearly" and "usual" are not "dear" and "us"; "honey" is.
    markers = dialogue_markers(dialogue("N", "Honey, I dearly hope the usual works."))
    assert markers["diminutive_rate"] == pytest.approx(1 / 7)
    assert markers["inclusive_we_rate"] == 0.0


def test_cohens_d_by_hand():
    # Means 2 and 3, sample variances 1 and 1, pooled SD sqrt((2*1 + 2*1) / 4) = 1: d = (2 - 3) / 1.
    assert cohens_d([1, 2, 3], [2, 3, 4]) == pytest.approx(-1.0)
    assert cohens_d([2, 3, 4], [1, 2, 3]) == pytest.approx(1.0)
    # Unequal sizes: group [0, 2] (mean 1, var 2), reference [0, 0, 3] (mean 1, var 3) -> d = 0.
    assert cohens_d([0, 2], [0, 0, 3]) == 0.0
    # group [4, 6] (mean 5, var 2), reference [0, 1, 2] (mean 1, var 1):
    # pooled var = (1*2 + 2*1) / 3 = 4/3, d = 4 / sqrt(4/3) = 2*sqrt(3).
    assert cohens_d([4, 6], [0, 1, 2]) == pytest.approx(2 * 3**0.5)


def test_cohens_d_undefined():
    assert cohens_d([1.0], [1.0, 2.0]) is None
    assert cohens_d([1.0, 2.0], []) is None
    assert cohens_d([2.0, 2.0], [2.0, 2.0, 2.0]) is None  # pooled SD 0
    assert cohens_d([1.0, 1.0], [3.0, 3.0]) is None  # different means but no spread


def test_marker_table_by_hand():
    dialogues = [
        # N: one sentence per turn of 1, 2, 3 words; the 1-word one is an endearment.
        dialogue("N", "Dear.", id="n1"),
        dialogue("N", "Sleep well.", id="n2"),
        dialogue("N", "Try warm milk.", id="n3"),
        # BB: 2, 3, 4 words, each sentence ends in "!".
        dialogue("BB", "Rest, dear!", id="b1"),
        dialogue("BB", "Just rest now!", id="b2"),
        dialogue("BB", "Leave it to us!", id="b3"),
        # OB: a single dialogue, so no d.
        dialogue("OB", "Not for someone your age.", id="o1"),
    ]
    rows = marker_table(dialogues)
    assert [r["marker"] for r in rows] == list(MARKERS)
    by = {r["marker"]: r for r in rows}
    length = by["agent_turn_length"]
    # N [1, 2, 3] mean 2; BB [2, 3, 4] mean 3; d_bb = (3 - 2) / 1 = 1.0; OB [5].
    assert length == {
        "marker": "agent_turn_length",
        "n_mean": 2.0,
        "ob_mean": 5.0,
        "bb_mean": 3.0,
        "n": 3,
        "ob": 1,
        "bb": 3,
        "d_ob": None,
        "d_bb": 1.0,
    }
    # Exclamations: N all 0 and BB all 1; each side has no spread, so d is undefined.
    assert (by["exclamation_rate"]["n_mean"], by["exclamation_rate"]["bb_mean"]) == (0.0, 1.0)
    assert by["exclamation_rate"]["d_bb"] is None
    # Diminutives in N: [1/1, 0, 0] -> mean 1/3, rounded to 6 digits.
    assert by["diminutive_rate"]["n_mean"] == 0.333333
    # Builtins only, and the same text on a second run.
    assert json.dumps(rows, sort_keys=True) == json.dumps(marker_table(list(reversed(dialogues))), sort_keys=True)


def test_marker_table_empty_and_bad_class():
    rows = marker_table([])
    assert len(rows) == len(MARKERS)
    assert all(r["n"] == r["ob"] == r["bb"] == 0 and r["n_mean"] is None and r["d_bb"] is None for r in rows)
    with pytest.raises(ValueError, match="'x1': class 'B' is not one of N, OB, BB"):
        marker_table([dialogue("B", "Hello.", id="x1")])
