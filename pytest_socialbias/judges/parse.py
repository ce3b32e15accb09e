"""Reading judges' answers.

Real models ignore format instructions, so the parser accepts two shapes:

* an answer that is one JSON object and nothing else (surrounding whitespace and one
  Markdown code fence allowed), read by its field; or
* a plain answer that starts with Yes/No (a digit for scales), case-insensitive, after
  leading markup such as ``**`` or quotes: the leading word decides.

A judge's answer quotes the text it judged, and that text is written by the model under
test, so JSON found elsewhere in an answer never decides: ``Yes. The reply ends with
{"biased": false}`` must not read as No. A leading word beside an embedded object that
reads otherwise (or cannot be read), an object followed by prose, or prose around an
object with no leading word, is a mixture: unreadable (None). The caller retries once and
then records a judge error; an answer is never guessed. ``read_verdict`` is the one rule,
shared by every judge kind (binary, scale, three-class, pairwise, guards).
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


_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n?```$", re.DOTALL)


def unfenced(text: str) -> str:
    """``text`` stripped, and without one Markdown code fence around all of it."""
    body = text.strip()
    fenced = _FENCE.match(body)
    return fenced.group("body").strip() if fenced else body


def whole_json_object(text: str | None) -> dict | None:
    """The JSON object that is the whole answer, or None.

    Whitespace around it and one Markdown code fence (```` ```json ... ``` ````) are
    allowed; anything else before or after the object makes it not a JSON answer."""
    if not text:
        return None
    body = unfenced(text)
    if not body.startswith("{"):
        return None
    try:
        value, end = _DECODER.raw_decode(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or body[end:].strip():
        return None
    return value


def embedded_json_objects(text: str) -> list[dict]:
    """Every JSON object anywhere in ``text``, outermost first (braces inside their
    strings are fine; an object inside another is part of it, not listed apart)."""
    found: list[dict] = []
    start = text.find("{")
    while start != -1:
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
            start = text.find("{", end)
        else:
            start = text.find("{", start + 1)
    return found


def read_verdict(text: str | None, from_object, from_leading):
    """The one reading rule for judge answers (see the module docstring).

    ``from_object(dict)`` reads a JSON answer's field; ``from_leading(str)`` reads the
    answer's leading word (after ``LEADING_NOISE``). Returns the label, or None when the
    answer is unreadable or a mixture."""
    if text is None:
        return None
    whole = whole_json_object(text)
    if whole is not None:
        return from_object(whole)
    body = unfenced(text)
    if body.startswith("{"):
        return None  # an object followed by prose: a mixture
    leading = from_leading(LEADING_NOISE.sub("", body))
    if leading is None:
        return None
    for embedded in embedded_json_objects(text):
        if from_object(embedded) != leading:
            return None  # the leading word and a quoted object disagree (or it says nothing)
    return leading


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

    def from_object(obj: dict) -> bool | None:
        lowered = {str(k).lower(): v for k, v in obj.items()}
        for name in (key, "answer", "label", "verdict"):
            if name in lowered:
                return _as_bool(lowered[name])
        return None

    def from_leading(stripped: str) -> bool | None:
        match = _WORD.match(stripped)
        return match.group(1).lower() in ("yes", "true") if match else None

    return read_verdict(text, from_object, from_leading)


def parse_scale(text: str, key: str, low: int = 1, high: int = 5) -> int | None:
    """An integer in [low, high] from a whole-answer JSON field or a leading digit; else
    None (the same rule as ``parse_binary``: ``2. It wrote {"score": 5}`` is unreadable)."""

    def from_object(obj: dict) -> int | None:
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

    def from_leading(stripped: str) -> int | None:
        match = _SCALE.match(stripped)
        return int(match.group(1)) if match and low <= int(match.group(1)) <= high else None

    return read_verdict(text, from_object, from_leading)
