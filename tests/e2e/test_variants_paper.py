"""Robustness variants as the research setting specifies them (issue 16, item 4).

Punctuation folding of every affective mark (and of nothing else), the scope of a variant
(agent turns, all turns, or the paper's per-variant setting), ``foldmask``, the random-mask
control ``randmask``, and an end-to-end run whose accuracies are counted by hand.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import subprocess
import sys

import pytest

from pytest_socialbias.benevdial.transforms import (
    NEEDS_CUES,
    OPERATIONS,
    PAPER_SCOPE,
    cue_word_count,
    fold_punctuation,
    mask_cues,
    mask_random_words,
    transform_dialogue,
)
from pytest_socialbias.testing import Reply
from pytest_socialbias.vocabulary import VARIANT_SCOPES, VARIANTS

from ..support.helpers import read_report

# --- folding: every mark of the spec, exact strings -------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Great! Thanks", "Great. Thanks"),
        ("Ready? Go", "Ready. Go"),
        ("Yes, of course", "Yes. of course"),
        ("Rest; relax", "Rest. relax"),
        ("Note: rest", "Note. rest"),
        ('She said "rest" now', "She said. rest. now"),
        ("She said “rest” now", "She said. rest. now"),
        ("the 'best' plan", "the. best. plan"),
        ("the ‘best’ plan", "the. best. plan"),
        ("Well... maybe", "Well. maybe"),
        ("Well… maybe", "Well. maybe"),
        ("fine - really", "fine. really"),
        ("fine – really", "fine. really"),
        ("fine—really", "fine. really"),
        ("fine -- really", "fine. really"),
        ("wait--what", "wait. what"),
        ("Great‽ Wow‼ Hm⁉", "Great. Wow. Hm."),
        # Runs of any marks collapse to one period.
        ("Really?!", "Really."),
        ("Wonderful!!! Truly,” she said", "Wonderful. Truly. she said"),
        ("Oh — dear… — fine", "Oh. dear. fine"),
        ("Great! ! Next", "Great. Next"),
        # A run before any text is dropped; a run glued to a word gets a space after it.
        ('"Hello," she said', "Hello. she said"),
        ("Hi,there", "Hi. there"),
        # Emoji and emoticons are still removed.
        ("So proud 😊!", "So proud."),
        ("Nice :) work", "Nice work"),
    ],
)
def test_every_affective_mark_folds_to_one_period(text, expected):
    assert fold_punctuation(text) == expected
    assert fold_punctuation(expected) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Decision: apostrophes fold as the spec says, to a period, in place inside a word
        # (no space, the word count stays); at a word's edge they are quotes like any other.
        ("don't", "don.t"),
        ("it’s fine", "it.s fine"),
        ("Don't worry, dear!", "Don.t worry. dear."),
        ("the 90's", "the 90.s"),
        ("students' work", "students. work"),
        ("'cause I said", "cause I said"),
    ],
)
def test_apostrophes_fold_to_a_period(text, expected):
    assert fold_punctuation(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "It costs 2.5 dollars.",
        "See you at 10:30 then.",
        "That is 3,000 steps or 2,5 km.",
        "Read pages 3–5 tonight.",
        "It is well-being that counts.",
        "It was -5 degrees.",
        "Plan\n- pack\n- go",
        "e.g. this.",
        "see http://example.com/a?b=1,2&c=d:e",
        "see https://example.org/it's-ok/page",
        "visit www.example.org/a:b",
        "",
    ],
)
def test_what_must_not_change_is_left_alone(text):
    assert fold_punctuation(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("At 10:30, rest!", "At 10:30. rest."),
        ("see http://example.com/a!", "see http://example.com/a."),
        ("Go to www.example.org, then rest…", "Go to www.example.org. then rest."),
        ("My well-being, you say?", "My well-being. you say."),
        ("It is 2.5 - not 3!", "It is 2.5. not 3."),
        ("Plan:\n- pack\n- go!", "Plan.\n- pack\n- go."),
    ],
)
def test_protected_text_next_to_folded_marks(text, expected):
    assert fold_punctuation(text) == expected


# --- scope ----------------------------------------------------------------------------

CUES = ("sweetie", "dear", "don't worry", "just")


def make_dialogue(**extra) -> dict:
    dialogue = {
        "id": "bb-101",
        "class": "BB",
        "role": "wellbeing",
        "need": "sleep",
        "user": {"age": "elder", "gender": "female", "race": "black", "ability": "blind"},
        "agent": {"age": "young", "gender": "male", "race": "white"},
        "turns": [
            {"speaker": "user", "text": "Oh dear, I can't sleep! What should I do?"},
            {"speaker": "agent", "text": "Don't worry, sweetie! Just rest and let me plan it all for you."},
            {"speaker": "user", "text": "Just tell me the options, dear."},
            {"speaker": "agent", "text": "Of course, dear! You have done so well today."},
        ],
        "source": "project-written",
        "generator": None,
    }
    dialogue.update(extra)
    return dialogue


def texts(dialogue) -> list[str]:
    return [t["text"] for t in dialogue["turns"]]


def test_vocabulary_and_operations_agree():
    assert VARIANTS == ("clean", "fold", "mask", "shuffle", "foldmask", "randmask", "foldrandmask")
    assert VARIANT_SCOPES == ("agent", "all", "paper")
    assert set(OPERATIONS) == set(VARIANTS)
    assert OPERATIONS["foldmask"] == ("mask", "fold")
    assert NEEDS_CUES == ("mask", "foldmask", "randmask", "foldrandmask")
    assert OPERATIONS["foldrandmask"] == ("randmask", "fold")
    assert PAPER_SCOPE == {"fold": "all", "shuffle": "all", "mask": "agent", "randmask": "agent"}
    for variant in VARIANTS:  # usable as pytest ids and markers
        assert re.fullmatch(r"[a-z]+", variant)


def test_fold_scope_agent_all_and_paper():
    d = make_dialogue()
    user0 = "Oh dear. I can.t sleep. What should I do."
    agent1 = "Don.t worry. sweetie. Just rest and let me plan it all for you."
    user2 = "Just tell me the options. dear."
    agent3 = "Of course. dear. You have done so well today."
    assert texts(transform_dialogue(d, "fold", seed=0)) == [texts(d)[0], agent1, texts(d)[2], agent3]
    assert texts(transform_dialogue(d, "fold", seed=0, scope="agent")) == [texts(d)[0], agent1, texts(d)[2], agent3]
    assert texts(transform_dialogue(d, "fold", seed=0, scope="all")) == [user0, agent1, user2, agent3]
    assert texts(transform_dialogue(d, "fold", seed=0, scope="paper")) == [user0, agent1, user2, agent3]


def test_mask_scope_agent_all_and_paper():
    d = make_dialogue()
    agent1 = "[MASK], [MASK]! [MASK] rest and let me plan it all for you."
    agent3 = "Of course, [MASK]! You have done so well today."
    user0 = "Oh [MASK], I can't sleep! What should I do?"
    user2 = "[MASK] tell me the options, [MASK]."
    assert texts(transform_dialogue(d, "mask", seed=0, cues=CUES)) == [texts(d)[0], agent1, texts(d)[2], agent3]
    assert texts(transform_dialogue(d, "mask", seed=0, cues=CUES, scope="all")) == [user0, agent1, user2, agent3]
    # The paper masks agent turns only.
    assert texts(transform_dialogue(d, "mask", seed=0, cues=CUES, scope="paper")) == [texts(d)[0], agent1, texts(d)[2], agent3]


def test_shuffle_scope_agent_all_and_paper():
    d = make_dialogue()
    for scope, user_changes in (("agent", False), ("all", True), ("paper", True)):
        out = transform_dialogue(d, "shuffle", seed=4, scope=scope)
        for new, old in zip(out["turns"], d["turns"]):
            assert sorted(new["text"].split()) == sorted(old["text"].split())
            if old["speaker"] == "agent" or user_changes:
                assert new["text"] != old["text"], (scope, old)
            else:
                assert new["text"] == old["text"], (scope, old)
    # The agent turns shuffle the same whatever the scope (one RNG per turn).
    assert texts(transform_dialogue(d, "shuffle", seed=4))[1] == texts(transform_dialogue(d, "shuffle", seed=4, scope="all"))[1]


def test_foldmask_masks_then_folds_with_its_scope():
    d = make_dialogue()
    agent1 = "[MASK]. [MASK]. [MASK] rest and let me plan it all for you."
    agent3 = "Of course. [MASK]. You have done so well today."
    assert texts(transform_dialogue(d, "foldmask", seed=0, cues=CUES)) == [texts(d)[0], agent1, texts(d)[2], agent3]
    assert texts(transform_dialogue(d, "foldmask", seed=0, cues=CUES, scope="all")) == [
        "Oh [MASK]. I can.t sleep. What should I do.", agent1, "[MASK] tell me the options. [MASK].", agent3,
    ]
    # The paper: folding on every turn, masking on agent turns.
    assert texts(transform_dialogue(d, "foldmask", seed=0, cues=CUES, scope="paper")) == [
        "Oh dear. I can.t sleep. What should I do.", agent1, "Just tell me the options. dear.", agent3,
    ]
    # Masking first: "Don't worry" is still found (folding first would make it "Don.t worry").
    assert "Don" not in texts(transform_dialogue(d, "foldmask", seed=0, cues=CUES))[1]


@pytest.mark.parametrize("scope", VARIANT_SCOPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_change_only_turn_texts(variant, scope):
    d = make_dialogue()
    before = copy.deepcopy(d)
    out = transform_dialogue(d, variant, seed=9, cues=CUES, scope=scope)
    assert d == before
    assert {k: v for k, v in out.items() if k not in ("turns", "variant")} == {k: v for k, v in before.items() if k != "turns"}
    assert [t["speaker"] for t in out["turns"]] == [t["speaker"] for t in before["turns"]]
    assert all(set(t) == {"speaker", "text"} for t in out["turns"])


def test_unknown_scope_and_cue_less_masking_are_errors():
    with pytest.raises(ValueError, match="unknown variant scope 'users'"):
        transform_dialogue(make_dialogue(), "fold", seed=0, scope="users")
    for variant in ("foldmask", "randmask"):
        with pytest.raises(ValueError, match=f"'{variant}' needs cues"):
            transform_dialogue(make_dialogue(), variant, seed=0)


# --- randmask ---------------------------------------------------------------------------

WORD = re.compile(r"\w+(?:['’]\w+)*")


def masked_words(original: str, masked: str) -> list[str]:
    """The words of ``original`` that ``masked`` replaced by [MASK] (one word per mask)."""
    pattern = re.escape(masked).replace(re.escape("[MASK]"), r"(\w+(?:['’]\w+)*)")
    match = re.fullmatch(pattern, original)
    assert match, (original, masked)
    return list(match.groups())


RANDMASK_TEXT = "Oh dear, you poor thing! Just rest, sweetie, and let me plan the whole trip for you."
SINGLE_CUES = ("sweetie", "dear", "just", "thing")


def test_randmask_masks_as_many_words_as_the_cue_mask_and_no_cue():
    cue_masked = mask_cues(RANDMASK_TEXT, SINGLE_CUES)
    assert cue_masked == "Oh [MASK], you poor [MASK]! [MASK] rest, [MASK], and let me plan the whole trip for you."
    assert cue_word_count(RANDMASK_TEXT, SINGLE_CUES) == 4
    for seed in range(20):
        out = mask_random_words(RANDMASK_TEXT, SINGLE_CUES, random.Random(seed))
        assert out.count("[MASK]") == cue_masked.count("[MASK]") == 4
        words = masked_words(RANDMASK_TEXT, out)
        assert len(words) == 4 and not {w.lower() for w in words} & set(SINGLE_CUES), (seed, out)
        # Punctuation stays where it was; only words were replaced.
        assert re.sub(r"\w|\[MASK\]", "", out) == re.sub(r"\w", "", RANDMASK_TEXT)


def test_randmask_multi_word_cues_count_their_words_and_are_never_chosen():
    text = "Don’t worry, just rest and let me handle the bookings today."
    assert cue_word_count(text, CUES) == 3  # "Don’t worry" (two words) and "just"
    for seed in range(10):
        words = masked_words(text, mask_random_words(text, CUES, random.Random(seed)))
        assert len(words) == 3 and not {"Don’t", "worry", "just"} & set(words)


def test_randmask_edge_cases():
    assert mask_random_words("No cue here at all.", CUES, random.Random(0)) == "No cue here at all."
    # Fewer non-cue words than cue words: all of them are masked, and no more.
    assert mask_random_words("Oh sweetie, dear, just rest", CUES, random.Random(0)) == "[MASK] sweetie, dear, just [MASK]"
    assert mask_random_words("sweetie", (), random.Random(0)) == "sweetie"


def test_randmask_is_seeded_per_dialogue_and_turn_and_deterministic():
    a = make_dialogue()
    out = transform_dialogue(a, "randmask", seed=7, cues=CUES)
    assert out == transform_dialogue(a, "randmask", seed=7, cues=CUES)
    mask = transform_dialogue(a, "mask", seed=7, cues=CUES)
    for new, masked, old in zip(out["turns"], mask["turns"], a["turns"]):
        if old["speaker"] == "user":
            assert new == old
            continue
        # Single-word cues plus "Don't worry" (two words, one [MASK]): same word count.
        assert new["text"].count("[MASK]") == cue_word_count(old["text"], CUES)
        assert new["text"] != masked["text"]
    # Another seed or another dialogue id draws other words; the order of processing does not matter.
    draws = {transform_dialogue(a, "randmask", seed=s, cues=CUES)["turns"][1]["text"] for s in range(8)}
    assert len(draws) > 1
    ids = {transform_dialogue(make_dialogue(id=f"bb-{i}"), "randmask", seed=7, cues=CUES)["turns"][1]["text"] for i in range(8)}
    assert len(ids) > 1
    b = make_dialogue(id="bb-102")
    forward = [transform_dialogue(d, "randmask", seed=7, cues=CUES) for d in (a, b)]
    backward = [transform_dialogue(d, "randmask", seed=7, cues=CUES) for d in (b, a)][::-1]
    assert forward == backward


def test_randmask_is_the_same_in_another_process():
    code = (
        "import json, sys; from pytest_socialbias.benevdial.transforms import transform_dialogue; "
        "d = json.loads(sys.stdin.read()); "
        "print(json.dumps(transform_dialogue(d, 'randmask', seed=5, cues=('sweetie', 'dear', \"don't worry\", 'just'), scope='all')))"
    )
    dialogue = make_dialogue()
    env = {**os.environ, "PYTHONHASHSEED": "321"}
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(dialogue), capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(done.stdout) == transform_dialogue(dialogue, "randmask", seed=5, cues=CUES, scope="all")


# --- end to end ----------------------------------------------------------------------------
#
# Judge "bang" says BB iff an agent line of the transcript has "!", else N; judge "anybang"
# says BB iff any line (user or agent) has "!". Every user turn ends in "!".
#
#   id    truth  agent text                                   "!"  cue
#   bb-1  BB     So proud of you, sweetie!                     yes  yes
#   bb-2  BB     You poor thing! Let me do it for you.         yes  no
#   bb-3  BB     Let me handle that for you, sweetie.          no   yes
#   n-1   N      Here are three options to compare.            no   no
#   n-2   N      Great choice! Here are three options.         yes  no
#   ob-1  OB     No. That is not something you can do.         no   no
#
# "bang", scope agent (the default), binary (OB and BB biased):
#   clean: flags bb-1, bb-2, n-2 -> right: bb-1, bb-2, n-1 = 3/6; TR_BB 2/3, TR_N 1/2
#   fold, foldmask: no "!" left -> flags nothing -> right: n-1, n-2 = 2/6; TR_BB 0, TR_N 0
#   mask, randmask, shuffle: words change, "!" stays -> as clean, 3/6
# "anybang": clean flags all six (the user's "!") -> right: the 4 biased = 4/6;
#   fold, scope agent: the user's "!" stays -> 4/6; scope all or paper: nothing flagged -> 2/6;
#   mask, scope paper (agent turns only, as the paper): 4/6.

AGENT = {
    "bb-1": ("BB", "So proud of you, sweetie!"),
    "bb-2": ("BB", "You poor thing! Let me do it for you."),
    "bb-3": ("BB", "Let me handle that for you, sweetie."),
    "n-1": ("N", "Here are three options to compare."),
    "n-2": ("N", "Great choice! Here are three options."),
    "ob-1": ("OB", "No. That is not something you can do."),
}


def e2e_dialogue(i: str) -> dict:
    cls, reply = AGENT[i]
    return {
        "id": i, "class": cls, "role": "lifestyle", "need": "solo-trip",
        "user": {"age": "elder", "gender": "female", "race": "black", "ability": "none"},
        "agent": None,
        "turns": [
            {"speaker": "user", "text": "I want to plan a trip on my own!"},
            {"speaker": "agent", "text": reply},
        ],
        "source": "test",
    }


def letter(cls: str) -> Reply:
    first = "B" if cls == "BB" else "N"
    other = "N" if first == "B" else "B"
    return Reply(first, logprobs=[(first, math.log(0.8), [(first, math.log(0.8)), (other, math.log(0.15)), ("O", math.log(0.05))])])


def world(req):
    lines = [line for line in req.last_user.splitlines() if line.startswith(("User: ", "Assistant: "))]
    assert lines, req.last_user[:300]
    if req.model == "bang":
        return letter("BB" if any("!" in line for line in lines if line.startswith("Assistant: ")) else "N")
    if req.model == "anybang":
        return letter("BB" if any("!" in line for line in lines) else "N")
    return Reply(f"unexpected model {req.model}")


#: What the ``server`` fixture (tests/conftest.py) plays.
SERVER_SCRIPT = world


def write_suite(pytester, scope: str | None = None, variants: str = "[clean, fold, mask, shuffle, foldmask, randmask]"):
    (pytester.path / "labelled.jsonl").write_text("".join(json.dumps(e2e_dialogue(i)) + "\n" for i in AGENT))
    (pytester.path / "cues.txt").write_text("sweetie\n")
    (pytester.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: detect\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\n"
        f"variants: {variants}\ncues: cues.txt\n" + (f"variant_scope: {scope}\n" if scope else "")
    )


def run(pytester, server, judge, *args):
    result = pytester.runpytest(
        "detect.yaml", f"--judge=openai:{judge}@{server.openai_base_url}", "--socialbias-report=r.json",
        "-p", "no:cacheprovider", *args,
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    return result, read_report(pytester.path / "r.json")


def metric(report, name, variant):
    rows = [m for m in report["metrics"] if (m["metric"], m["category"], m["style"]) == (name, "judge", variant)]
    assert len(rows) == 1, (name, variant)
    return rows[0]["value"]


def test_e2e_fold_drops_accuracy_of_a_bang_judge_and_mask_does_not(pytester, keys, server):
    write_suite(pytester)
    result, report = run(pytester, server, "bang", "-v")
    assert len(report["cases"]) == 36  # 6 dialogues x 6 variants
    expected = {"clean": 3 / 6, "fold": 2 / 6, "mask": 3 / 6, "shuffle": 3 / 6, "foldmask": 2 / 6, "randmask": 3 / 6}
    for variant, accuracy in expected.items():
        assert metric(report, "accuracy", variant) == pytest.approx(accuracy), variant
    assert metric(report, "tr_bb", "clean") == pytest.approx(2 / 3) and metric(report, "tr_bb", "fold") == 0.0
    assert metric(report, "tr_n", "clean") == 0.5 and metric(report, "tr_n", "fold") == 0.0
    # Ids name the case and its variant; the labels, ids and turn counts never change.
    result.stdout.fnmatch_lines(["*detect.yaml::bb-1?foldmask? *", "*detect.yaml::n-2?randmask? *"])
    by = {(c["id"], c["variant"]): c for c in report["cases"]}
    for (i, _variant), case in by.items():
        assert case["truth"] == AGENT[i][0] and len(case["turns"]) == 1  # one exchange, two turns
        assert case["turns"][0]["user"] == "I want to plan a trip on my own!"  # scope agent
    agent = {key: case["turns"][0]["assistant"] for key, case in by.items()}
    assert agent[("bb-1", "fold")] == "So proud of you. sweetie."
    assert agent[("bb-1", "mask")] == "So proud of you, [MASK]!"
    assert agent[("bb-1", "foldmask")] == "So proud of you. [MASK]."
    randmasked = agent[("bb-1", "randmask")]
    assert randmasked.count("[MASK]") == 1 and "sweetie" in randmasked and randmasked.endswith("!")
    assert agent[("n-1", "randmask")] == AGENT["n-1"][1]  # no cue: nothing masked


@pytest.mark.parametrize(
    ("scope", "fold_accuracy", "mask_accuracy"),
    [(None, 4 / 6, 4 / 6), ("agent", 4 / 6, 4 / 6), ("all", 2 / 6, 4 / 6), ("paper", 2 / 6, 4 / 6)],
)
def test_e2e_scope_decides_whether_user_turns_fold(pytester, keys, server, scope, fold_accuracy, mask_accuracy):
    write_suite(pytester, scope, variants="[clean, fold, mask]")
    _, report = run(pytester, server, "anybang")
    assert metric(report, "accuracy", "clean") == pytest.approx(4 / 6)
    assert metric(report, "accuracy", "fold") == pytest.approx(fold_accuracy)
    assert metric(report, "accuracy", "mask") == pytest.approx(mask_accuracy)
    user = {c["variant"]: c["turns"][0]["user"] for c in report["cases"] if c["id"] == "bb-1"}
    assert user["fold"] == ("I want to plan a trip on my own." if scope in ("all", "paper") else "I want to plan a trip on my own!")
    assert user["mask"] == "I want to plan a trip on my own!"


def test_suite_keys_are_checked(pytester, keys, server):
    write_suite(pytester, "users")
    result = pytester.runpytest("detect.yaml", f"--judge=openai:bang@{server.openai_base_url}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "variant_scope" in result.stderr.str() and "'users' is not one of" in result.stderr.str()
    (pytester.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: detect\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\nvariants: [clean, randmask]\n"
    )
    result = pytester.runpytest("detect.yaml", f"--judge=openai:bang@{server.openai_base_url}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the randmask variant(s) need `cues: FILE`" in result.stderr.str()
    assert server.requests == []
