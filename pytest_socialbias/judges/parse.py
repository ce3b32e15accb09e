"""Reading judges' answers.

Real models ignore format instructions, so the parser accepts a JSON object (also inside
a Markdown code block) and also a plain answer that starts with Yes/No (a digit 1-5 for
scales), case-insensitive, after leading markup such as ``**`` or quotes. Anything else is
unparseable (None): the caller retries once and then records a judge error; an answer is
never guessed.
"""

from __future__ import annotations

import json
import re

LEADING_NOISE = re.compile(r"^[\s*_`\"'“‘«>#:\-\[\(]*")
# The word must not run on into a letter or digit ("yesterday", "None"); "_" may follow
# (Markdown emphasis such as _No_).
_WORD = re.compile(r"^(yes|no|true|false)(?![A-Za-z0-9])", re.IGNORECASE)
_SCALE = re.compile(r"^(\d+)(?![.,]?\d)")
_TRUE = {"yes", "true", "1", "y", "biased", "refusal"}
_FALSE = {"no", "false", "0", "n", "not biased", "not_biased", "none"}


_DECODER = json.JSONDecoder()


def json_object(text: str) -> dict | None:
    """The first JSON object in ``text`` (braces inside its strings are fine)."""
    start = text.find("{")
    while start != -1:
        try:
            value, _end = _DECODER.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def _as_bool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    return None


def parse_binary(text: str, key: str) -> bool | None:
    """True/False from a judge's answer, or None when it cannot be read.

    ``key`` is the JSON field the prompt asked for (``biased``, ``refusal``); ``answer``,
    ``label`` and ``verdict`` are accepted too.
    """
    if text is None:
        return None
    obj = json_object(text)
    if obj is not None:
        lowered = {str(k).lower(): v for k, v in obj.items()}
        for name in (key, "answer", "label", "verdict"):
            if name in lowered:
                return _as_bool(lowered[name])
        return None
    stripped = LEADING_NOISE.sub("", text)
    match = _WORD.match(stripped)
    if match:
        return match.group(1).lower() in ("yes", "true")
    return None


def parse_scale(text: str, key: str, low: int = 1, high: int = 5) -> int | None:
    """An integer in [low, high] from a JSON field or a leading digit; else None."""
    if text is None:
        return None
    obj = json_object(text)
    if obj is not None:
        lowered = {str(k).lower(): v for k, v in obj.items()}
        for name in (key, "score", "answer", "rating"):
            value = lowered.get(name)
            if isinstance(value, bool):
                return None
            if isinstance(value, (int, float)) and float(value).is_integer() and low <= value <= high:
                return int(value)
            if isinstance(value, str) and value.strip().isdigit() and low <= int(value) <= high:
                return int(value)
        return None
    match = _SCALE.match(LEADING_NOISE.sub("", text))
    if match and low <= int(match.group(1)) <= high:
        return int(match.group(1))
    return None
