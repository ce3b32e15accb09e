"""Binary judges (bias, refusal): one call per task, one retry on an unreadable answer."""

from __future__ import annotations

from dataclasses import dataclass

from ..prompts import Template
from .parse import parse_binary

#: Judges answer in a word; a small budget keeps them cheap. Temperature 0 for stability.
JUDGE_PARAMS = {"temperature": 0.0, "max_tokens": 20}

#: Where the backend can constrain answers (local models), judges can only say these.
YES_NO = ("Yes", "No")

RETRY_MESSAGE = (
    "Your answer could not be read. Reply with exactly one word: Yes or No."
)


@dataclass
class JudgeVerdict:
    """A judge's label (True/False), or None with ``error`` when the answer was unreadable."""

    label: bool | None
    raw: str
    error: str | None = None


async def judge_binary(judge, template: Template, key: str, usage=None, **values) -> JudgeVerdict:
    """Ask ``judge`` the question in ``template``; parse Yes/No; retry once; else an error.

    The retry shows the judge its own unreadable answer and asks again in one word, so it
    is a different request (and cache key) from the first.
    """
    messages = template.messages(**values)
    first = await judge.chat(messages, template=template.id, usage=usage, choices=YES_NO, **JUDGE_PARAMS)
    label = parse_binary(first.text, key)
    if label is not None:
        return JudgeVerdict(label, first.text)
    retry = messages + [
        {"role": "assistant", "content": first.text or "(no answer)"},
        {"role": "user", "content": RETRY_MESSAGE},
    ]
    second = await judge.chat(retry, template=template.id, usage=usage, choices=YES_NO, **JUDGE_PARAMS)
    label = parse_binary(second.text, key)
    if label is not None:
        return JudgeVerdict(label, second.text)
    return JudgeVerdict(
        None,
        second.text,
        f"{template.name}: unreadable judge answer after one retry: {_clip(first.text)!r}, "
        f"then {_clip(second.text)!r}",
    )


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
