"""Robustness variants of a labelled BenevDial dialogue (docs/benevdial.md).

A detector that leans on surface cues (exclamation marks, emoji, "sweetie", "don't worry")
rather than on treatment loses accuracy when those cues are folded, masked or scrambled.
A variant rewrites turn texts only; the label (``class``), the ids, the demographics and
the number, order and speakers of the turns never change. Every variant is deterministic
for a given seed, in any process and any processing order.

Variants (``VARIANTS``), each an ordered list of operations (``OPERATIONS``):

- ``clean``: an unchanged copy.
- ``fold``: :func:`fold_punctuation`.
- ``mask``: :func:`mask_cues` with a cue list (``suites/benevdial/cues.txt`` or your own,
  read with :func:`load_cues`).
- ``shuffle``: :func:`shuffle_words`, one RNG per turn seeded from SHA-256 of (seed,
  dialogue id, turn index).
- ``foldmask``: ``mask`` then ``fold`` (masking first, so a cue with an apostrophe,
  "don't worry", is still found before folding turns it into "don.t worry").
- ``foldrandmask``: ``randmask`` then ``fold``, the control of ``foldmask``.
- ``randmask``: the control of ``mask``: :func:`mask_random_words` masks, in each turn,
  as many words as the cue list would, none of them inside a cue, chosen by an RNG seeded
  from SHA-256 of (seed, dialogue id, turn index, "randmask"). A drop under ``mask`` that
  ``randmask`` also shows is the cost of losing words, not of losing cues.

Which turns an operation rewrites is the scope (``VARIANT_SCOPES``, the suite key
``variant_scope``): ``agent`` (the default: agent turns only), ``all`` (user and agent
turns), or ``paper``: the research setting, per operation (``PAPER_SCOPE``: folding and
shuffling on all turns, masking and its random control on agent turns).
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
from ..vocabulary import VARIANT_SCOPES, VARIANTS

#: The operations of each variant, in the order they are applied.
OPERATIONS = {
    "clean": (),
    "fold": ("fold",),
    "mask": ("mask",),
    "shuffle": ("shuffle",),
    "foldmask": ("mask", "fold"),
    "randmask": ("randmask",),
    "foldrandmask": ("randmask", "fold"),  # randmask's control for foldmask
}
#: Variants that need a cue list.
NEEDS_CUES = tuple(v for v in VARIANTS if {"mask", "randmask"} & set(OPERATIONS[v]))
DEFAULT_VARIANT_SCOPE = "agent"
#: Scope ``paper``: the turns each operation rewrites in the research setting.
PAPER_SCOPE = {"fold": "all", "shuffle": "all", "mask": "agent", "randmask": "agent"}

# --- punctuation folding -------------------------------------------------------------

# Punctuation that can carry affect, folded to "." (the research setting): sentence marks
# ("!", "?", "…" and their combined forms), ";", straight and curly double quotes,
# straight and curly single quotes (apostrophes too), the em dash, and "." itself, which
# joins a run ("...", "?.") but is left alone on its own (a full stop, "e.g.", "2.5").
# Question marks are folded as well as exclamation marks: a question is not always
# affective, but a detector that reads "How are you feeling today?" as warmth is exactly
# what this variant probes (questions per turn is one of the BB markers).
_SENTENCE = "!?‽…‼⁇⁈⁉"
_ALWAYS = _SENTENCE + ";\"“”'‘’—."
_APOSTROPHES = "'‘’"
# ",", ":" and the en dash fold unless they stand between two digits ("3,000", "2,5",
# "10:30", "pages 3–5"); "-" folds only as a dash: alone between spaces ("fine - really",
# also after another mark, "Great!- really") or doubled ("wait--what"), never inside a
# word ("well-being"), before a number ("-5") or as a list bullet at the start of a line.
_MARK = (
    rf"(?:[{re.escape(_ALWAYS)}]|(?<!\d)[,:–]|[,:–](?!\d)"
    rf"|(?<=[ \t{re.escape(_ALWAYS)}])-(?=[ \t\r\n]|\Z)|-{{2,}})"
)
# A run of marks, possibly with spaces inside ("Great! !", "wait . . .", 'so," she').
_RUN = re.compile(rf"[ \t]*({_MARK}(?:[ \t]*{_MARK})*)([ \t]*)")
# URLs are left whole (their ":", "?", "," and "'" are not punctuation); marks at the end
# of one ("see http://x.org/a!") are the sentence's, not the URL's.
_URL = re.compile(r"(?:\b[A-Za-z][A-Za-z0-9+.-]*://|\bwww\.)[^\s<>\"“”]*", re.IGNORECASE)
_URL_TAIL = ".,;:!?'‘’…—–-"

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
_ATTACHES_LEFT = set(_ALWAYS + ",:–)]}")


def _drop_face(match: re.Match) -> str:
    text = match.string
    before = text[: match.start()]
    after = text[match.end() :]
    if not before.strip() or not after or after[0] in "\r\n" or after[0] in _ATTACHES_LEFT:
        return ""
    if before[-1] in "\r\n":
        return ""
    return " "


def _url_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(_URL_TAIL)
        if "://" in url or url.lower().startswith("www."):
            spans.append((match.start(), match.start() + len(url)))
    return spans


def _fold_run(match: re.Match, urls: list[tuple[int, int]]) -> str:
    start, end = match.span(1)
    if any(s < end and start < e for s, e in urls):
        return match.group(0)  # inside a URL: untouched
    run = match.group(1)
    marks = run.replace(" ", "").replace("\t", "")
    if marks == ".":
        return match.group(0)  # an ordinary full stop (or decimal point): untouched
    text = match.string
    before = text[: match.start()]
    after = text[match.end() :]
    if (
        marks in _APOSTROPHES
        and match.group(0) == marks
        and before[-1:].isalnum()
        and after[:1].isalnum()
    ):
        return "."  # an apostrophe inside a word, in place: "don't" -> "don.t"
    if not before.strip() and after.strip():
        return ""  # a leading "..." or quote before any text: dropped, with its spaces
    if not match.group(2) and after and (after[0].isalnum() or after[0] == "_"):
        return ". "  # "Really?Yes" -> "Really. Yes"
    return "." + match.group(2)


def _fold_once(text: str) -> str:
    text = _FACES.sub(_drop_face, text)
    urls = _url_spans(text)
    return _RUN.sub(functools.partial(_fold_run, urls=urls), text)


def fold_punctuation(text: str) -> str:
    """Fold affective punctuation to "." and remove emoticons and emoji.

    - Folded marks: "!", "?", "‽", "‼", "⁇", "⁈", "⁉", "…", "...", ",", ";", ":",
      straight and curly double quotes, straight and curly single quotes (apostrophes
      too), the em dash "—", the en dash "–", "-" standing as a dash (between spaces, or
      doubled: "--"). A run of them (with spaces inside or not: "?!", "!!!", "Great! !",
      '," she') becomes one ".". Spaces before the run go; a letter or digit right after
      it gets one space ("Really?Yes" -> "Really. Yes"). A run before any text is
      dropped ("...and then" -> "and then", a leading quote).
    - Apostrophes are folded as the research setting folds them, in place: an apostrophe
      between two letters or digits becomes "." with no space ("don't" -> "don.t",
      "it’s" -> "it.s"), so the word count does not change.
    - Left alone: a single "." (full stop, "e.g.", "2.5"), ",", ":" and "–" between two
      digits ("3,000", "10:30", "3–5"), a hyphen inside a word ("well-being"), before a
      number ("-5") or as a bullet at the start of a line, and URLs ("http://...",
      "www...."), whose trailing marks are folded as the sentence's.
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


@functools.lru_cache(maxsize=64)  # process-wide: a pure function of its arguments
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


def _turn_rng(seed: int, dialogue_id: str, index: int, *tag: str) -> random.Random:
    # SHA-256, never Python's salted hash(), so every process derives the same seed; the
    # turn index is part of the key so the order dialogues are processed in does not matter.
    # ``tag`` keeps one operation's draws apart from another's (shuffle has none).
    key = json.dumps([seed, dialogue_id, index, *tag]).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


# --- random-mask control ---------------------------------------------------------------

# A word of the random mask: letters and digits, with apostrophes inside ("don't" is one
# word); a hyphen splits words, as it does for the cue mask ("just" in "just-in-time").
_WORD = re.compile(r"\w+(?:['’]\w+)*")


def cue_word_count(text: str, cues) -> int:
    """How many words :func:`mask_cues` would mask in ``text``: the words (split on
    whitespace) of every cue occurrence, so "don't worry" counts two."""
    regex = _cue_regex(tuple(cues))
    return 0 if regex is None else sum(len(m.group(0).split()) for m in regex.finditer(text))


def mask_random_words(text: str, cues, rng: random.Random, mask: str = "[MASK]") -> str:
    """The control of :func:`mask_cues`: replace with ``mask`` as many words as the cue
    mask would (:func:`cue_word_count`), drawn with ``rng`` among the words that are not
    part of a cue occurrence; each chosen word becomes one ``mask``, the punctuation
    around it stays. A text with fewer non-cue words than that has all of them masked.
    Deterministic for a given ``rng`` state; no cue in the text leaves it unchanged.
    """
    regex = _cue_regex(tuple(cues))
    if regex is None:
        return text
    spans = [m.span() for m in regex.finditer(text)]
    wanted = cue_word_count(text, cues)
    if not wanted:
        return text
    words = [m.span() for m in _WORD.finditer(text) if not any(s < m.end() and m.start() < e for s, e in spans)]
    chosen = sorted(rng.sample(words, min(wanted, len(words))))
    out, last = [], 0
    for start, end in chosen:
        out.append(text[last:start])
        out.append(mask)
        last = end
    out.append(text[last:])
    return "".join(out)


# --- dialogues -------------------------------------------------------------------------


def operation_applies(operation: str, speaker: str, scope: str = DEFAULT_VARIANT_SCOPE) -> bool:
    """Whether ``operation`` rewrites a turn of ``speaker`` under ``scope``."""
    turns = PAPER_SCOPE[operation] if scope == "paper" else scope
    return turns == "all" or speaker == "agent"


def transform_dialogue(
    dialogue: dict, variant: str, *, seed: int, cues: tuple[str, ...] = (), scope: str = DEFAULT_VARIANT_SCOPE,
    mask: str = "[MASK]",
) -> dict:
    """Return a new dialogue (deep copy) with its turns rewritten by ``variant``.

    Only the ``text`` of the turns in ``scope`` changes (``agent``: agent turns, the
    default; ``all``: every turn; ``paper``: per operation, ``PAPER_SCOPE``); ``"variant"``
    is added (or overwritten). ``clean`` returns an unchanged copy. ``seed`` matters for
    ``shuffle`` and ``randmask``. ValueError for an unknown variant or scope, and for a
    variant that masks without cues.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    if scope not in VARIANT_SCOPES:
        raise ValueError(f"unknown variant scope {scope!r}; expected one of {', '.join(VARIANT_SCOPES)}")
    if variant in NEEDS_CUES and not any(c and str(c).strip() for c in cues):
        raise ValueError(
            f"variant {variant!r} needs cues; read them with load_cues('suites/benevdial/cues.txt')"
        )
    out = copy.deepcopy(dialogue)
    dialogue_id = str(out.get("id", ""))
    cues = tuple(cues)
    for index, turn in enumerate(out.get("turns", [])):
        for operation in OPERATIONS[variant]:
            if not operation_applies(operation, turn.get("speaker"), scope):
                continue
            if operation == "fold":
                turn["text"] = fold_punctuation(turn["text"])
            elif operation == "mask":
                turn["text"] = mask_cues(turn["text"], cues, mask)
            elif operation == "randmask":
                turn["text"] = mask_random_words(turn["text"], cues, _turn_rng(seed, dialogue_id, index, "randmask"), mask)
            elif operation == "shuffle":
                turn["text"] = shuffle_words(turn["text"], _turn_rng(seed, dialogue_id, index))
    out["variant"] = variant
    return out
