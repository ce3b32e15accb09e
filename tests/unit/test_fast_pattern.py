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
