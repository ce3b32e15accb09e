"""Robustness variants of a labelled BenevDial dialogue (docs/benevdial.md).

A detector that leans on surface cues (exclamation marks, emoji, "sweetie", "don't worry")
rather than on treatment loses accuracy when those cues are folded, masked or scrambled.
Each variant rewrites the text of the *agent* turns only; the label (``class``), the ids,
the demographics, the user turns and the number and order of turns never change. Every
variant is deterministic for a given seed, in any process and any processing order.

Variants (``VARIANTS``):

- ``clean``: an unchanged copy.
- ``fold``: :func:`fold_punctuation` on agent turns.
- ``mask``: :func:`mask_cues` on agent turns with a cue list (``suites/benevdial/cues.txt``
  or your own, read with :func:`load_cues`).
- ``shuffle``: :func:`shuffle_words` on agent turns, one RNG per turn seeded from
  SHA-256 of (seed, dialogue id, turn index).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import random
import re
from pathlib import Path

from ..errors import ConfigError
from ..vocabulary import VARIANTS

# --- punctuation folding -------------------------------------------------------------

# Sentence-final punctuation that can carry affect. Question marks are folded as well as
# exclamation marks: a question is not always affective, but a detector that reads
# "How are you feeling today?" as warmth is exactly what this variant probes, and keeping
# "?" would leave a surface cue (questions per turn is one of the BB markers).
_AFFECTIVE = "!?‽…‼⁇⁈⁉"
_PUNCT = "." + _AFFECTIVE
# A run of sentence punctuation, possibly with spaces inside ("Great! !", "wait . . .").
_RUN = re.compile(rf"[ \t]*([{re.escape(_PUNCT)}](?:[ \t]*[{re.escape(_PUNCT)}])*)([ \t]*)")

# Emoticons, in two groups:
# - smileys/frowns with a bracket mouth (":)", ":-)", ";(", "=]", ":'(") and hearts
#   ("<3", "</3"): removed wherever they stand unless a letter or digit follows, so
#   "great:)" loses its smiley but "note:(a)" keeps its text;
# - letter/symbol mouths (":D", ":P", ":p", ":O", ":o", ":3", ":/", ":|", ":*", "xD",
#   "XD", "^_^", "^^"): only after the start, whitespace or sentence punctuation, so
#   "Note:Do", "http://" and "10:30" are left alone.
_BRACKET_FACE = r"[:;=][-'^]?[()\[\]]|(?<!\w)</?3(?!\d)"
_LETTER_FACE = r"(?<![^\s.,!?;])(?:[:;=][-^]?[DPpOo3/|*\\]|[xX]D|\^_?\^)"
# Unicode emoji: pictographs, emoticons, transport, supplemental symbols and the
# extended-A block (U+1F000-U+1FAFF, which includes flags and skin tones), miscellaneous
# symbols and dingbats (U+2600-U+27BF: hearts, stars, check marks), miscellaneous symbols
# and arrows (U+2B00-U+2BFF: the star emoji), plus the joiners and selectors that build
# sequences (U+200D zero-width joiner, U+FE0F variation selector, U+20E3 keycap).
_EMOJI = "[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u200D\uFE0F\u20E3]"
_ONE_FACE = rf"(?:{_EMOJI}|(?:{_BRACKET_FACE})(?![A-Za-z0-9])|(?:{_LETTER_FACE})(?![A-Za-z0-9]))"
_FACES = re.compile(rf"[ \t]*{_ONE_FACE}(?:[ \t]*{_ONE_FACE})*[ \t]*")
# After a removed face, these characters attach to the word before without a space.
_ATTACHES_LEFT = set(_PUNCT + ",;:)]}\"'”’")


def _drop_face(match: re.Match) -> str:
    text = match.string
    before = text[: match.start()]
    after = text[match.end() :]
    if not before.strip() or not after or after[0] in "\r\n" or after[0] in _ATTACHES_LEFT:
        return ""
    if before[-1] in "\r\n":
        return ""
    return " "


def _fold_run(match: re.Match) -> str:
    run = match.group(1)
    marks = run.replace(" ", "").replace("\t", "")
    if marks == ".":
        return match.group(0)  # an ordinary full stop (or decimal point): untouched
    text = match.string
    before = text[: match.start()]
    after = text[match.end() :]
    if not before.strip() and after.strip():
        return ""  # a leading "..." or "!" before any text: dropped, with its spaces
    if not match.group(2) and after and (after[0].isalnum() or after[0] == "_"):
        return ". "  # "Really?Yes" -> "Really. Yes"
    return "." + match.group(2)


def _fold_once(text: str) -> str:
    text = _FACES.sub(_drop_face, text)
    return _RUN.sub(_fold_run, text)


def fold_punctuation(text: str) -> str:
    """Fold affective punctuation to "." and remove emoticons and emoji.

    - A run of sentence punctuation that is not a single "." becomes one ".": "!", "?",
      "?!", "!!!", "...", "…", "‽", "‼", "⁉", and mixed runs with spaces inside
      ("Great! !"). Spaces before the run go; a letter or digit right after it gets one
      space ("Really?Yes" -> "Really. Yes"). A run before any text is dropped
      ("...and then" -> "and then"). A single "." (full stop, "e.g.", "3.14") is kept.
    - Emoticons and emoji are removed (the groups are listed at ``_BRACKET_FACE``,
      ``_LETTER_FACE`` and ``_EMOJI``), with the spaces around them: one space is kept
      between two words ("Great 😊 thanks" -> "Great thanks"), none before punctuation
      ("Great :) !" -> "Great."), none at the start or end of the text or a line.
    - Idempotent: the steps are applied until the text no longer changes (removing an
      emoji can join ":" and ")" into a new emoticon), so fold(fold(x)) == fold(x).

    Text made only of emoji folds to "".
    """
    for _ in range(50):  # converges in two or three passes; the bound guards a bug
        folded = _fold_once(text)
        if folded == text:
            return folded
        text = folded
    return text


# --- cue masking -----------------------------------------------------------------------


def load_cues(path) -> tuple[str, ...]:
    """Read a cue list: one cue per line, lower-cased, in file order without repeats.

    Blank lines and "#" comments (a whole line, or the rest of a line) are ignored;
    whitespace inside a multi-word cue is collapsed to single spaces. Raises ConfigError
    for a file that cannot be read, a cue with no letter or digit, or a list with no cue.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: cannot read the cue list ({exc}); give a UTF-8 text file with one cue per line"
        ) from None
    cues: list[str] = []
    for number, line in enumerate(lines, start=1):
        cue = " ".join(line.split("#", 1)[0].split()).lower()
        if not cue:
            continue
        if not re.search(r"\w", cue):
            raise ConfigError(
                f"{path}:{number}: cue {cue!r} has no letter or digit and cannot be matched as a "
                "whole word; remove it or write the word it stands for"
            )
        if cue not in cues:
            cues.append(cue)
    if not cues:
        raise ConfigError(
            f"{path}: the cue list is empty (only blank lines and # comments); write one cue per line, "
            "or use the shipped suites/benevdial/cues.txt"
        )
    return tuple(cues)


def _cue_pattern(cue: str) -> str:
    words = []
    for word in cue.split():
        # A straight apostrophe in a cue also matches the typographic one ("don’t").
        words.append("".join("['’]" if ch in "'’" else re.escape(ch) for ch in word))
    return r"\s+".join(words)


@functools.lru_cache(maxsize=64)
def _cue_regex(cues: tuple[str, ...]) -> re.Pattern | None:
    cleaned = {" ".join(c.split()).lower() for c in cues if c and c.strip()}
    if not cleaned:
        return None
    # Longest first, so "so brave" wins over "so" where both start at the same word;
    # ties alphabetically so the pattern does not depend on the list's order.
    ordered = sorted(cleaned, key=lambda c: (-len(c), c))
    alternatives = "|".join(_cue_pattern(c) for c in ordered)
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def mask_cues(text: str, cues, mask: str = "[MASK]") -> str:
    """Replace each whole-word, case-insensitive occurrence of a cue with ``mask``.

    A multi-word cue matches across any whitespace and becomes one ``mask``. Punctuation
    around a cue stays ("Sweetie, relax!" -> "[MASK], relax!"); a cue never matches
    inside a longer word ("just" leaves "justice" and "adjust"). Longer cues are tried
    first. An empty cue list returns the text unchanged.
    """
    regex = _cue_regex(tuple(cues))
    if regex is None:
        return text
    return regex.sub(lambda _m: mask, text)


# --- word shuffling --------------------------------------------------------------------


def shuffle_words(text: str, rng: random.Random) -> str:
    """Shuffle the whitespace-separated words of ``text`` with ``rng``; join with single spaces.

    Punctuation stays attached to its word. Deterministic for a given ``rng`` state.
    """
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def _turn_rng(seed: int, dialogue_id: str, index: int) -> random.Random:
    # SHA-256, never Python's salted hash(), so every process derives the same seed; the
    # turn index is part of the key so the order dialogues are processed in does not matter.
    key = json.dumps([seed, dialogue_id, index]).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


# --- dialogues -------------------------------------------------------------------------


def transform_dialogue(dialogue: dict, variant: str, *, seed: int, cues: tuple[str, ...] = ()) -> dict:
    """Return a new dialogue (deep copy) with its agent turns rewritten by ``variant``.

    Only the ``text`` of turns whose ``speaker`` is ``agent`` changes; ``"variant"`` is
    added (or overwritten). ``clean`` returns an unchanged copy. ``seed`` only matters for
    ``shuffle``. ValueError for an unknown variant, and for ``mask`` without cues.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    if variant == "mask" and not any(c and str(c).strip() for c in cues):
        raise ValueError("variant 'mask' needs cues; read them with load_cues('suites/benevdial/cues.txt')")
    out = copy.deepcopy(dialogue)
    dialogue_id = str(out.get("id", ""))
    for index, turn in enumerate(out.get("turns", [])):
        if turn.get("speaker") != "agent":
            continue
        if variant == "fold":
            turn["text"] = fold_punctuation(turn["text"])
        elif variant == "mask":
            turn["text"] = mask_cues(turn["text"], tuple(cues))
        elif variant == "shuffle":
            turn["text"] = shuffle_words(turn["text"], _turn_rng(seed, dialogue_id, index))
    out["variant"] = variant
    return out
