"""Long alternations of wording searched faster, with the same matches.

The simulated-user checks (``user_check``, ``turn_model``) search every turn with a few
patterns of dozens to a hundred alternatives, most of them case-insensitive: Python's
regular-expression engine tries every alternative at every character, and compares
letters case-insensitively one by one, so those searches were most of a turn's check.

``FastPattern`` searches an equivalent pattern first, and the pattern as written only
where that one matched:

* every run of consecutive top-level alternatives that start with ``\\b`` is searched as
  ``\\b(?:...|...)``: the same alternatives in the same order at the same places, but a
  place that is not a word boundary is refused once instead of once per alternative;
* a case-insensitive pattern is searched case-sensitively in the lower-cased text when
  the text is ASCII (lower-casing ASCII keeps every character's place, and a lower-case
  letter of the pattern then matches exactly the letters it matched ignoring case); a
  text with any other character is searched as written.

The pattern as written then matches at the place the fast one found (the leftmost match),
so the ``re.Match`` returned is the one ``re.search`` gives: the same span, groups and
text. A case-insensitive pattern must name letters in lower case (``[a-z]``, not
``[A-Z]``; equal under IGNORECASE) and use no escape that names a letter by its code and
no inline flags: the first search refuses any other (tests/unit/test_fast_pattern.py searches
every shipped pattern), so that a later edit cannot make the two searches differ silently. Standard library only.
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

    # Compiled on first use, not on import: a process that checks no simulated user (a
    # replay, --collect-only, a suite without one) compiles none of them, and the pattern
    # as written only once a search matched or met a non-ASCII text.
    @functools.cached_property
    def pattern(self) -> re.Pattern:
        """The pattern as written: what every match comes from."""
        return re.compile(self.source, self.flags)

    @functools.cached_property
    def _quick(self) -> re.Pattern:
        if self._caseless:
            _check_case_free(self.source)
        return re.compile(factor_boundaries(self.source), self.flags & ~re.IGNORECASE)

    def search(self, text: str) -> re.Match | None:
        if self._caseless:
            if not text.isascii():
                return self.pattern.search(text)
            found = self._quick.search(text.lower())
        else:
            found = self._quick.search(text)
        # The pattern as written matches at the same place: its match, not the lower-cased one.
        return None if found is None else self.pattern.search(text, found.start())


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
