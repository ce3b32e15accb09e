"""Long alternations of wording searched faster, with the same matches.

The simulated-user checks (``user_check``, ``turn_model``) search every turn with a few
patterns of dozens to a hundred alternatives, most of them case-insensitive: Python's
regular-expression engine tries every alternative at every character, and compares
letters case-insensitively one by one, so those searches were most of a turn's check.

``FastPattern`` first finds a place no later than the first match (``_Finder``), with
a pattern that matches at the same places or sooner, and the pattern as written searches
from there:

* the top-level alternatives, each leading group written out (``\\b(?:x|y)z`` as
  ``\\bxz|\\byz``), are gathered by their first character, then their second, and so
  on (``dispatch``): a place is tried once per character, not once per alternative;
* those that start a word (``\\b`` then a word character) are searched after a
  non-word character in the text after a space, so that the engine skips to the places
  before a word; those anchored at the start (``^``) are tried there only;
* a case-insensitive pattern is searched case-sensitively in the text lower-cased when
  the text is ASCII (lower-casing ASCII keeps every character's place, and a lower-case
  letter of the pattern then matches exactly the letters it matched ignoring case); in
  other text, each non-ASCII character is read as an ASCII one its pattern's classes take
  alike (``_read``), and a text with a character that matches an ASCII letter ignoring
  case (İ, ı, ſ, the Kelvin sign) or a non-ASCII digit is searched as written;
* patterns searched in the same texts can share a ``Screen``: one search of all their
  alternatives finds where the first of them could match; in most texts none does.

The pattern as written, searched from that place, finds its leftmost match (none lies
before the place), so the ``re.Match`` returned is the one ``re.search`` gives: the same
span, groups and text. A case-insensitive pattern must name letters in lower case
(``[a-z]``, not ``[A-Z]``; equal under IGNORECASE) and use no escape that names a letter
by its code and no inline flags: the first search refuses any other
(tests/unit/test_fast_pattern.py searches every shipped pattern), so that a later edit cannot
make the two searches differ silently. Standard library only.
"""

from __future__ import annotations

import functools
import re

#: Escapes a case-insensitive pattern may use: classes and anchors whose meaning does not
#: depend on case (a letter escaped by its code, ``\\x41``, would).
_CASE_FREE_ESCAPES = frozenset("bBsSwWdDAZ")


class FastPattern:
    """A compiled pattern whose ``search`` gives ``re.search``'s match, faster (module doc)."""

    def __init__(self, source: str, flags: int = 0):
        self.source, self.flags = source, flags
        self._caseless = bool(flags & re.IGNORECASE)
        # A pattern that names none of the characters non-ASCII text is read as (``_read``).
        self._reads_any = not any(char in source for char in _STAND_INS)
        #: The ``Screen`` this pattern is one of, if any.
        self.screen: Screen | None = None

    # Compiled on first use, not on import: a process that checks no simulated user (a
    # replay, --collect-only, a suite without one) compiles none of them, and the pattern
    # as written only once a search matched or met a non-ASCII text.
    @functools.cached_property
    def pattern(self) -> re.Pattern:
        """The pattern as written: what every match comes from."""
        return re.compile(self.source, self.flags)

    @functools.cached_property
    def _finder(self) -> _Finder:
        if self._caseless:
            _check_case_free(self.source)
        return _Finder([(self.source, self.flags)])

    def search(self, text: str) -> re.Match | None:
        if self._caseless:
            start: int | None = 0
            if self.screen is not None:
                # None of the screen's patterns matches before its place.
                start = self.screen.place(text)
                if start is None:
                    return None
            read = _read(text) if self._reads_any or text.isascii() else None
            if read is None:
                return self.pattern.search(text)
            first = self._finder.first(read, start)
        else:
            first = self._finder.first(text, 0)
        # The pattern as written matches no earlier than the place found: its match, not
        # the lower-cased one.
        return None if first is None else self.pattern.search(text, first)


class _Finder:
    """The first place where some patterns could match in a text (``first``): every
    place where one of them matches is found, or one before it.

    Their top-level alternatives, each leading group written out, gathered by their first
    character (``dispatch``). Where a regular-expression search tries a match depends on
    how its pattern starts: a pattern whose every alternative starts with a character is
    tried only where the text holds one of them (one place in five for a space or a
    mark, four in five for the first letters of many words); any other is tried at every
    place. So those are searched apart:

    * those that start a word (``\\b``, a word character) as a character that is no word
      character followed by them, in the text after a space: tried at word starts only;
    * those anchored at the start (``^``) there only, and, where ``^`` also follows a
      line break (``re.MULTILINE``), as that line break;
    * the rest as they are.

    A pattern with a back-reference, a named group, a conditional or the verbose flag is
    searched with ``factor_boundaries`` only."""

    def __init__(self, sources: list[tuple[str, int]]):
        words, searched, anchored = [], [], []
        flags = {f & ~(re.IGNORECASE | re.MULTILINE) for _, f in sources}
        if len(flags) != 1:
            raise ValueError("FastPattern: patterns searched together differ in more than case and lines")
        common = flags.pop()
        for source, own in sources:
            lines = bool(own & re.MULTILINE)
            alternatives = [e for a in top_level_alternatives(source) for e in _expand(a)]
            # Searched as written (but for its case): a pattern with back-references, or
            # verbose, or with re.MULTILINE and ^ or $ elsewhere than starting an alternative.
            if (own & re.VERBOSE or re.search(r"\(\?P|\(\?\(|\\[1-9]", source)
                    or lines and any(_line_anchors(a[1:] if a.startswith("^") else a) for a in alternatives)):
                if len(sources) > 1:
                    raise ValueError(f"FastPattern: {source[:40]!r}... can only be searched alone")
                searched.append(f"(?:{factor_boundaries(source)})")  # one alternative, kept as it is
                common = own & ~re.IGNORECASE
                continue
            for alternative in alternatives:
                head = _head(alternative)
                if head and head[0] == (r"\b",) and _WORD_CHAR.match(head[1]) and "(?<" not in head[2]:
                    # After a space put before the text, nothing it looks at changes.
                    words.append(re.escape(head[1]) + head[2])
                elif alternative.startswith("^"):
                    anchored.append(alternative)
                    if lines:  # ^ after a line break too
                        searched.append("\n" + alternative[1:])
                else:
                    searched.append(alternative)
        self.words = re.compile(r"\W(?:" + dispatch(words, expand=False) + ")", common) if words else None
        self.searched = re.compile(dispatch(searched, expand=False), common) if searched else None
        self.anchored = re.compile("|".join(anchored), common) if anchored else None

    def first(self, text: str, start: int) -> int | None:
        """The first place from ``start`` where one of the patterns could match, or None."""
        if start == 0 and self.anchored is not None and self.anchored.match(text):
            return 0
        places = []
        if self.words is not None:
            # In " " + text, the character before the word at ``place`` is at ``place``.
            found = self.words.search(" " + text, start)
            if found is not None:
                places.append(found.start())
        if self.searched is not None:
            found = self.searched.search(text, start)
            if found is not None:
                places.append(found.start())
        return min(places) if places else None


class Screen:
    """Case-insensitive ``FastPattern``s searched on the same texts, screened together: one
    search of all their alternatives (``dispatch``) finds the first place any of them
    matches in a text; a text where none does costs one search instead of one each, and
    each pattern's own search starts at that place (none of them matches before it).
    The place is kept for the last few texts searched (a turn's), not more."""

    def __init__(self, *patterns: FastPattern):
        if not all(p._caseless for p in patterns) or any(p.screen is not None for p in patterns):
            raise ValueError("Screen: case-insensitive patterns, each in one screen")
        self.patterns = patterns
        self._reads_any = all(p._reads_any for p in patterns)
        for pattern in patterns:
            pattern.screen = self
        self.place = functools.lru_cache(maxsize=8)(self._place)

    @functools.cached_property
    def _finder(self) -> _Finder:
        for pattern in self.patterns:
            _check_case_free(pattern.source)
        return _Finder([(p.source, p.flags) for p in self.patterns])

    def _place(self, text: str) -> int | None:
        """The first place in a text where one of the patterns could match (0 where the
        text must be searched as written), or None where none matches."""
        read = _read(text) if self._reads_any or text.isascii() else None
        if read is None:
            return 0
        return self._finder.first(read, 0)


# How a case-insensitive search reads a text: ASCII lower-cased; a non-ASCII character as
# an ASCII one that the pattern's classes and anchors take as they take it and that no
# pattern names (_STAND_INS): a word character as "_", a space as "\x1f" (a space no
# pattern writes), any other as "\x01". Not the characters that match an ASCII letter
# ignoring case (İ, ı, ſ, the Kelvin sign) nor digits (\d takes them, "_" not): a text
# holding one is searched as written.
_FOLDS_TO_ASCII = frozenset("\u0130\u0131\u017f\u212a")
_STAND_INS = "_\x00\x01\x1f"


class _ReadTable(dict):
    """str.translate's table for ``_read``, filled a character at a time."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if char.isascii():
            read = char.lower()
        elif char in _FOLDS_TO_ASCII or char.isdecimal():
            read = "\x00"
        elif char.isalnum():
            read = "_"
        elif char.isspace():
            read = "\x1f"
        else:
            read = "\x01"
        self[code] = read
        return read


_READ_TABLE = _ReadTable()


def _read(text: str) -> str | None:
    """The text as the case-insensitive searches read it (above), character for character;
    None when it must be searched as written."""
    if text.isascii():
        return text.lower()
    read = text.translate(_READ_TABLE)
    return None if "\x00" in read else read


def top_level_alternatives(source: str) -> list[str]:
    """``source`` split at its top-level ``|`` (not inside a group, a class or an escape)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1
            if source[i:i + 1] == "^":
                i += 1
            if source[i:i + 1] == "]":  # a literal ] first in a class
                i += 1
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            out.append(source[start:i])
            start = i + 1
        i += 1
    out.append(source[start:])
    return out


def factor_boundaries(source: str) -> str:
    """The same pattern with each run of consecutive top-level alternatives that start with
    ``\\b`` written as one ``\\b(?:...)`` (no group added that captures)."""
    parts: list[str] = []
    run: list[str] = []
    for alternative in top_level_alternatives(source):
        if alternative.startswith(r"\b"):
            run.append(alternative[2:])
            continue
        if run:
            parts.append(r"\b(?:" + "|".join(run) + ")")
            run = []
        parts.append(alternative)
    if run:
        parts.append(r"\b(?:" + "|".join(run) + ")")
    return "|".join(parts)


def _check_case_free(source: str) -> None:
    """ValueError unless every letter of a case-insensitive pattern is lower case, every
    escaped letter a case-free class or anchor, and no inline flag changes the matching."""
    i = 0
    while i < len(source):
        char = source[i]
        if char == "\\":
            escaped = source[i + 1:i + 2]
            if escaped.isalpha() and escaped not in _CASE_FREE_ESCAPES or escaped.isdigit():
                raise ValueError(f"FastPattern: escape \\{escaped} at {i} of a case-insensitive pattern")
            i += 2
            continue
        if char == "(" and source[i + 1:i + 2] == "?" and source[i + 2:i + 3] in set("aiLmsux-"):
            raise ValueError(f"FastPattern: inline flags at {i} of a case-insensitive pattern")
        if char.lower() != char or (not char.isascii() and char.upper() != char):
            raise ValueError(f"FastPattern: {char!r} at {i} of a case-insensitive pattern: write letters in lower case")
        i += 1


_SPECIAL = frozenset("\\.^$*+?{}[]()|")
_QUANTIFIERS = frozenset("*+?{")
_WORD_CHAR = re.compile(r"\w")
#: Most alternatives one alternative may be written out as (its leading groups distributed).
_MOST_EXPANDED = 64


def dispatch(alternatives: list[str], expand: bool = True) -> str:
    """The alternation of ``alternatives`` (patterns without a top-level ``|``), matching
    at the same places, with those that start with the same literal character written as
    that character then the alternation of their rests, gathered the same way:
    ``\\bab|\\bac|d`` as ``a(?:(?<!\\wa)(?:b|c))|d``, ``the x|this`` as
    ``t(?:h(?:e(?: x)|is))``.

    A place is tried once per first character instead of once per alternative. A leading
    ``\\b`` or lookbehind is checked just after the first character, by a lookbehind that
    takes that character in (``(?<!\\wa)``: the character before the ``a`` is no word
    character); with ``expand``, a leading group, optional or not, is written out first
    (``\\b(?:x|y)z`` as ``\\bxz|\\byz``). An alternative that starts otherwise (``^``,
    a class, a lookahead) is kept as it is. The alternation matches at a place when one of
    its alternatives does, whatever their order, so the gathered pattern matches at the
    same places (a different alternative may win there: ``FastPattern`` takes only the
    place)."""
    groups: dict[object, list] = {}
    for alternative in (e for a in alternatives for e in (_expand(a) if expand else [a])):
        head = _head(alternative)
        if head is None:
            groups.setdefault(("as is", alternative), []).append(alternative)
        else:
            groups.setdefault(head[1], []).append(head)
    out = []
    for key, members in groups.items():
        if isinstance(key, tuple):
            out.append(key[1])
            continue
        char = re.escape(key)
        by_checks: dict[tuple[str, ...], list[str]] = {}
        for checks, _, rest in members:
            by_checks.setdefault(checks, []).append(rest)
        parts = []
        for checks, rests in by_checks.items():
            inner = dispatch(rests, expand=False) if len(rests) > 1 else rests[0]
            parts.append(_after(checks, key) + (f"(?:{inner})" if "|" in inner else inner))
        out.append(char + (parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"))
    return "|".join(out)


def _after(checks: tuple[str, ...], char: str) -> str:
    """The leading assertions of an alternative (``\\b``, lookbehinds) as lookbehinds
    checked after its first character ``char``."""
    out = []
    escaped = re.escape(char)
    for check in checks:
        if check == r"\b":
            # A boundary before a word character: no word character before it; before any
            # other: a word character before it.
            out.append(("(?<!\\w" if _WORD_CHAR.match(char) else "(?<=\\w") + escaped + ")")
        else:  # (?<=X) or (?<!X): X then the character, before the place after it
            out.append(check[:4] + "(?:" + check[4:-1] + ")" + escaped + ")")
    return "".join(out)


def _head(alternative: str) -> tuple[tuple[str, ...], str, str] | None:
    """(its leading assertions: ``\\b`` and lookbehinds, its first character, the rest) of
    an alternative that starts with a literal character (not one a quantifier follows), or
    None."""
    checks = []
    body = alternative
    while True:
        if body.startswith(r"\b"):
            checks.append(r"\b")
            body = body[2:]
        elif body.startswith(("(?<=", "(?<!")):
            end = _group_end(body)
            checks.append(body[:end + 1])
            body = body[end + 1:]
        else:
            break
    if not body:
        return None
    if body[0] == "\\":
        char, rest = body[1:2], body[2:]
        if not char or char.isalnum() or char == "_":  # a class or an anchor (\s, \b), not a character
            return None
    elif body[0] in _SPECIAL:
        return None
    else:
        char, rest = body[0], body[1:]
    if rest[:1] in _QUANTIFIERS:
        return None
    return tuple(checks), char, rest


def _expand(alternative: str) -> list[str]:
    """Alternatives that together match where ``alternative`` does, its leading group
    (after any ``\\b``), optional or not, written out: ``\\b(?:x|y)?z`` as ``\\bxz``,
    ``\\byz``, ``\\bz``; the alternative itself when it starts otherwise, or would make
    more than _MOST_EXPANDED."""
    lead, body = (r"\b", alternative[2:]) if alternative.startswith(r"\b") else ("", alternative)
    if body.startswith("(?:"):
        opening = 3
    elif body.startswith("(") and not body.startswith("(?"):
        opening = 1
    else:
        return [alternative]
    end = _group_end(body)
    inner, tail = body[opening:end], body[end + 1:]
    options = top_level_alternatives(inner)
    if tail[:1] == "?" and tail[1:2] != "+":  # optional (greedy or lazy; not possessive)
        tail = tail[2:] if tail[1:2] == "?" else tail[1:]
        options.append("")
    elif tail[:1] in _QUANTIFIERS:
        return [alternative]
    out: list[str] = []
    for option in options:
        out.extend(_expand(lead + option + tail))
        if len(out) > _MOST_EXPANDED:
            return [alternative]
    return out


def _line_anchors(source: str) -> bool:
    """Whether a pattern holds ``^`` or ``$`` (not in a class or escaped): what
    ``re.MULTILINE`` changes."""
    i, in_class = 0, False
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1
            if source[i:i + 1] == "^":
                i += 1
            if source[i:i + 1] == "]":
                i += 1
            continue
        elif char in "^$":
            return True
        i += 1
    return False


def _group_end(source: str) -> int:
    """The place of the ``)`` that closes the group ``source`` opens with."""
    depth, i, in_class = 0, 0, False
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1
            if source[i:i + 1] == "^":
                i += 1
            if source[i:i + 1] == "]":
                i += 1
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"FastPattern: an unclosed group in {source!r}")
