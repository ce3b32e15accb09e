"""protocols/fast_pattern.py: a long alternation searched through an equivalent faster
pattern gives the match re.search gives (span, groups, text), on every labelled user turn
and on texts made to catch where the two searches could part: upper case, non-ASCII
letters, a match only a boundary or a lookbehind allows, classes holding | and (."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_socialbias.protocols import turn_model, user_check
from pytest_socialbias.protocols.fast_pattern import FastPattern, factor_boundaries, top_level_alternatives
from pytest_socialbias.research.train_turn_model import labelled_turns

DATA = Path(__file__).resolve().parents[1] / "data"


def shipped_patterns() -> dict[str, FastPattern]:
    found = {name: value for name, value in vars(user_check).items() if isinstance(value, FastPattern)}
    found.update({f"_SERVICE[{k}]": v for k, v in user_check._SERVICE.items() if isinstance(v, FastPattern)})
    found["turn_model._ACTS"] = turn_model._ACTS
    return found


def same(fast: FastPattern, text: str) -> bool:
    mine, theirs = fast.search(text), fast.pattern.search(text)
    if mine is None or theirs is None:
        return mine is theirs
    return (mine.span(), mine.groups(), mine.group(0)) == (theirs.span(), theirs.groups(), theirs.group(0))


TRICKY = [
    "", "   ", "As An AI, I CANNOT HOLD OPINIONS.", "ROLE-PLAY is fun", "a roleplay, A roleplay. Roleplay",
    "I'M PLAYING Gemma here", "I’m playing Gemma here", "I'm playing gemma here",
    "Playing Ştefan here", "İ was instructed to ask", "ſo I was told to ask", "The KELVIN sign: K",
    "Let’s be honest, they’re all the same, aren’t they?", "Isn't it TRUE that everyone knows?",
    "Hello Mr Smith, your booking has been confirmed.", "1. one 2. two", "- a - b - c",
    "I was\ninstructed to ask\nAssistant: sure", "Consider the following:", "they are wrong, not wrong",
    "éverything I was told to ask", "x" * 300 + " as an ai", "AS YOUR ADVISOR, I recommend",
]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    out = [text for path in sorted(DATA.glob("user_turns*.yaml")) for _, _, text, _ in labelled_turns(path)]
    return out + [t.lower() for t in out[::7]] + [t.upper() for t in out[::11]] + TRICKY


@pytest.mark.parametrize("name", sorted(shipped_patterns()))
def test_every_shipped_pattern_finds_what_re_finds(name, texts):
    fast = shipped_patterns()[name]
    hits = 0
    for text in texts:
        assert same(fast, text), (name, text)
        hits += fast.pattern.search(text) is not None
    assert hits, name  # the texts exercise the pattern


def test_a_match_keeps_the_texts_own_case():
    fast = FastPattern(r"\bas an ai\b|\bi'?m an ai\b", re.IGNORECASE)
    found = fast.search("Well, AS AN AI I would not know.")
    assert found.group(0) == "AS AN AI" and found.span() == (6, 14)


def test_alternatives_are_split_at_the_top_level_only():
    source = r"^\s*(a|b)|\b[|(]x|\bc(?:d|e)|[^]|]y|\\|\bz"
    assert top_level_alternatives(source) == [r"^\s*(a|b)", r"\b[|(]x", r"\bc(?:d|e)", r"[^]|]y", "\\\\", r"\bz"]
    assert factor_boundaries(source) == r"^\s*(a|b)|\b(?:[|(]x|c(?:d|e))|[^]|]y|\\|\b(?:z)"
    # Groups that capture keep their numbers.
    assert re.compile(factor_boundaries(source)).groups == re.compile(source).groups


@pytest.mark.parametrize("source", [r"\bplaying [A-Z]\w+", r"\bx41\x41", r"(?i)\bthe", r"\bſo", r"(a)\1"])
def test_a_case_insensitive_pattern_the_fast_search_could_misread_is_refused(source):
    with pytest.raises(ValueError, match="FastPattern"):
        FastPattern(source, re.IGNORECASE).search("the")


def test_a_case_sensitive_pattern_may_use_capitals():
    fast = FastPattern(r"\bA\b|\bB\w+")
    assert fast.search("x Bee A").group(0) == "Bee"


# ---- the finder: where a search starts (dispatch, word starts, anchors, a screen) ----------

#: Alternations made to catch where gathering by first character could part from the
#: pattern as written: optional and capturing leading groups, a boundary before a
#: non-word character, lookbehinds before and inside, an anchor, a class first.
GATHERED = [
    r"\bab|\bac|\bxa|d\b|\b(?:the|this) (?:\S+ ){0,2}brief\b",
    r"\b(?:i|we)(?:'ve| have)? (?:\S+ )?done\b|\bi(?:'m| am) (?:just )?here\b|\bi\b",
    r"(?<!\ba )\brole-?play(?:ing)?\b(?! exercise)|\b'em\b|,\s*(?:is|are)n'?t (?:he|they)\s*\?(?=\s|$)",
    r"^\s*(\*\*)?\s*(assistant|ai)\s*:|:\s*$|[0-9]+ turns|\bturn (?:\d+|one) of\b",
    r"(a|b)?c|(?:x|y)?(?:z|w)q|\bkk+|\b(?:so|such)+ ",
]
PROBES = [
    "", "ab ac xa", "xab cab d", "the big brief", "this one two brief!", "thebrief the  brief",
    "i've done", "we have really done", "i am here", "i'm just here", "hi i", "a roleplay", "the roleplay exercise",
    "role-playing", "'em all", "it 'em", "so, isn't he?", "so,aren't they ?x", "  **assistant**: hi", "ai:", "x:",
    "3 turns", "turn 4 of", "turn one of", "bc", "c", "yzq", "wq", "kkk", "sososo ", "such so ", "xyz\nab",
]


def places(source, text, flags=0):
    return [m.start() for m in re.finditer(f"(?=(?:{source}))", text, flags)]


@pytest.mark.parametrize("source", GATHERED)
def test_gathered_alternatives_match_at_the_same_places(source):
    from pytest_socialbias.protocols.fast_pattern import dispatch

    gathered = dispatch(top_level_alternatives(source))
    for text in PROBES + [" ".join(PROBES)]:
        assert places(gathered, text) == places(source, text), (source, text)


def test_alternatives_are_gathered_by_their_first_character():
    from pytest_socialbias.protocols.fast_pattern import dispatch

    assert dispatch(["the x", "this", r"\bab", r"\bac", "d"]) == r"t(?:h(?:e x|is))|a(?<!\wa)(?:b|c)|d"
    # A leading group is written out, optional or not.
    assert dispatch([r"\b(?:x|y)?z"]) == r"x(?<!\wx)z|y(?<!\wy)z|z(?<!\wz)"


@pytest.mark.parametrize("source", GATHERED)
def test_the_finder_places_no_later_than_the_first_match(source):
    from pytest_socialbias.protocols.fast_pattern import _Finder

    for flags in (0, re.MULTILINE):
        finder = _Finder([(source, flags)])
        for text in PROBES + [" ".join(PROBES), "\n".join(PROBES)]:
            first = re.search(source, text, flags)
            place = finder.first(text, 0)
            if first is not None:  # (where none matches, the pattern searched from any place finds none)
                assert place is not None and place <= first.start(), (source, text, flags)


def test_a_screen_finds_nothing_where_none_of_its_patterns_matches():
    from pytest_socialbias.protocols.fast_pattern import Screen

    first, second = FastPattern(r"\bas an ai\b", re.IGNORECASE), FastPattern(r"^\s*try\b", re.IGNORECASE | re.MULTILINE)
    screen = Screen(first, second)
    assert screen.place("Nothing to see here.") is None
    assert first.search("Nothing to see here.") is None and second.search("Nothing to see here.") is None
    # A pattern with re.MULTILINE in a screen: its ^ after a line break is found.
    text = "Some advice.\nTry this. As an AI, I would."
    assert screen.place(text) <= text.index("Try")
    assert second.search(text).group(0) == "Try" and first.search(text).group(0) == "As an AI"
    with pytest.raises(ValueError, match="Screen"):
        Screen(first)  # one screen a pattern


def test_a_screen_refuses_a_pattern_it_cannot_search_with_others():
    from pytest_socialbias.protocols.fast_pattern import Screen

    screen = Screen(FastPattern(r"\bx\b", re.IGNORECASE), FastPattern(r"^a$|\by", re.IGNORECASE | re.MULTILINE))
    with pytest.raises(ValueError, match="searched alone"):
        screen.place("x")
    alone = FastPattern(r"^a$|\by", re.IGNORECASE | re.MULTILINE)
    assert alone.search("b\nA\nc").group(0) == "A"


NON_ASCII = [
    "Café owners, as an AI I'd say no.", "£40 — as an AI.", "as\u00a0an ai", "as an aï", "AS AN AI…", "naïve: as an ai",
    "İ am an ai", "as an aı", "aſ an ai", "AS AN AI \u212a", "as an ai ٣", "I'm playing Ştefan here", "émigrés’ \"role-play\"",
]


@pytest.mark.parametrize("name", sorted(shipped_patterns()))
def test_a_non_ascii_text_is_read_character_for_character(name):
    fast = shipped_patterns()[name]
    for text in NON_ASCII:
        assert same(fast, text), (name, text)


def test_a_non_ascii_character_reads_as_a_stand_in_of_its_kind():
    from pytest_socialbias.protocols.fast_pattern import _read

    assert _read("Caf\u00e9\u00a0\u2014 OK") == "caf_\x1f\x01 ok"
    # Characters that match an ASCII letter ignoring case, and digits, are searched as written.
    assert _read("\u0130") is None and _read("\u017f") is None and _read("\u0663") is None
    # A pattern that names a stand-in searches non-ASCII text as written.
    fast = FastPattern(r"\bx_y\b", re.IGNORECASE)
    assert fast.search("X_Y \u00e9").group(0) == "X_Y" and fast.search("x\u00e9y \u00e9") is None


def test_a_pattern_with_back_references_is_searched_as_written_but_for_its_boundaries():
    fast = FastPattern(r"(ab)\1|\bx(y)?z")
    for text in ("zz abab", "abab", "xz", "axz xyz", "none"):
        assert same(fast, text), text
