"""How numbers read, for both human-facing reports (the terminal summary and the HTML
page): rates as percentages and scale means plainly, intervals, signed differences
(percentage points for rates) and p-values, so the two never disagree. Plain text;
the HTML page escapes it like any other text. ``missing`` is what stands for a number
that is not there (the terminal's ``-``, the page's en dash). And how text from models and
servers shows in the terminal and JUnit messages: ``printable``."""

from __future__ import annotations

import re

from ..metrics.catalogue import is_percent

#: Characters a terminal acts on instead of showing: C0 controls (ESC starts the
#: sequences that clear the screen, retitle the window, draw OSC 8 links; CR overwrites a
#: line), DEL, C1 controls (0x9b is a one-byte ESC [), the marks that reorder a line
#: (bidirectional overrides) and lone surrogates. Tabs are kept; newlines as asked.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSHOWABLE = re.compile(f"[{_CONTROLS}]")
_UNSHOWABLE_IN_A_LINE = re.compile(f"[\n{_CONTROLS}]")


def printable(text: str, lines: bool = False) -> str:
    """``text`` from a model or a server as a terminal, a CI log or a JUnit message shows
    it: each control character written as its escape (``\\x1b``, ``\\u202e``), so the
    text cannot clear the screen, retitle the window, draw a link or overwrite a line.
    ``lines``: newlines stay (a transcript; the caller indents what follows them), else
    they are escaped too, so a one-line message cannot forge the line after it."""
    pattern = _UNSHOWABLE if lines else _UNSHOWABLE_IN_A_LINE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


def _escape(match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(value, metric: str, missing: str = "-", width: int = 0) -> str:
    """A rate as ``12.5%``, a scale mean (coherence 1-5) as ``3.42``; ``width`` pads a
    rate's digits to line up in a column."""
    if value is None:
        return missing
    if not is_number(value):
        return str(value)
    return f"{100 * value:{width}.1f}%" if is_percent(str(metric)) else f"{value:.2f}"


def interval(low, high, metric: str, missing: str = "-") -> str:
    """``[8.1, 18.7]`` (percent for rates), or ``missing`` when the interval is not there."""
    if low is None or high is None:
        return missing
    if not (is_number(low) and is_number(high)):
        return f"[{low}, {high}]"
    if is_percent(str(metric)):
        return f"[{100 * low:.1f}, {100 * high:.1f}]"
    return f"[{low:.2f}, {high:.2f}]"


def difference(value, metric: str, missing: str = "-", unit: bool = True) -> str:
    """A signed difference: percentage points for rates (``+1.0 pp``; ``unit=False``
    drops the unit where a column heading names it), plain for scale means."""
    if value is None:
        return missing
    if not is_number(value):
        return str(value)
    if is_percent(str(metric)):
        return f"{100 * value:+.1f}" + (" pp" if unit else "")
    return f"{value:+.2f}"


def p_value(value, missing: str = "-") -> str:
    """``0.012``, or ``<0.001`` below a thousandth."""
    if value is None:
        return missing
    if not is_number(value):
        return str(value)
    return "<0.001" if value < 0.001 else f"{value:.3f}"
