"""Prompted judges: one call per task, one retry on an unreadable answer, then an error.

Binary judges (bias, refusal) answer Yes/No; the coherence judge answers a digit 1-5.
The retry shows the judge its own unreadable answer and asks again in one word, so it is
a different request (and cache key) from the first. An answer is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.base import FINISH_CONTENT_FILTER
from ..prompts import Template
from .parse import parse_binary, parse_scale

#: Judges answer in a word; a small budget keeps them cheap. Temperature 0 for stability.
#: These are the call's defaults: a judge spec's own parameters win over them.
JUDGE_PARAMS = {"temperature": 0.0, "max_tokens": 20}
#: A judge's answer is short: where a reasoning model spends the budget before answering,
#: the budget is raised (bounded) rather than the answer lost (models/adapt.py).
SHORT_ANSWER = {"adaptive_budget": True}

#: Where the backend can constrain answers (local models), judges can only say these.
YES_NO = ("Yes", "No")
ONE_TO_FIVE = ("1", "2", "3", "4", "5")

RETRY_MESSAGE = "Your answer could not be read. Reply with exactly one word: Yes or No."
RETRY_SCALE_MESSAGE = "Your answer could not be read. Reply with exactly one digit from 1 to 5."


@dataclass
class JudgeVerdict:
    """A judge's label (bool, or int for scales), or None with ``error`` when unreadable."""

    label: bool | int | None
    raw: str
    error: str | None = None


async def ask_judge(judge, template: Template, parse, choices, retry_message: str, usage=None, **values) -> JudgeVerdict:
    messages = template.messages(**values)
    first = await judge.chat(messages, template=template.id, usage=usage, choices=choices, **SHORT_ANSWER, **JUDGE_PARAMS)
    label = read_answer(first, parse)
    if label is not None:
        return JudgeVerdict(label, first.text)
    retry = messages + [
        {"role": "assistant", "content": first.text or "(no answer)"},
        {"role": "user", "content": retry_message},
    ]
    second = await judge.chat(retry, template=template.id, usage=usage, choices=choices, **SHORT_ANSWER, **JUDGE_PARAMS)
    label = read_answer(second, parse)
    if label is not None:
        return JudgeVerdict(label, second.text)
    return JudgeVerdict(None, second.text, unreadable_error(judge, template, first, second))


#: Said of an unreadable answer that came from the cache (counted in the summary).
REPLAYED_NOTE = "(replayed from the cache; a recording run asks it again)"


def unreadable_error(judge, template: Template, first, second) -> str:
    """The error of a judge whose answer and retry were both unreadable. Both answers are
    marked unreadable in the cache, so the next recording run asks them again rather
    than replaying the same error; where they were replayed, the message says so."""
    mark = getattr(judge, "answer_unreadable", None)
    if mark is not None:
        mark(first)
        mark(second)
    replayed = f" {REPLAYED_NOTE}" if getattr(first, "replayed", False) and getattr(second, "replayed", False) else ""
    return f"{template.name}: unreadable judge answer after one retry: {shown_answer(first)}, then {shown_answer(second)}{replayed}"


def read_answer(response, parse):
    """The label in a judge's answer, or None. An answer the provider's content filter
    stopped is not the judge's whole answer (a "No" may have gone on "..., it is biased"),
    so it is never read as a label."""
    if response.finish_reason == FINISH_CONTENT_FILTER:
        return None
    return parse(response.text)


def shown_answer(response) -> str:
    shown = repr(_clip(response.text))
    if response.finish_reason == FINISH_CONTENT_FILTER:
        shown += " (stopped by the provider's content filter)"
    return shown


async def judge_binary(judge, template: Template, key: str, usage=None, **values) -> JudgeVerdict:
    """Yes/No question (``key`` is the JSON field the prompt names, e.g. ``biased``)."""
    return await ask_judge(judge, template, lambda text: parse_binary(text, key), YES_NO, RETRY_MESSAGE, usage, **values)


async def judge_scale(judge, template: Template, key: str, usage=None, **values) -> JudgeVerdict:
    """A rating from 1 to 5 (``key`` is the JSON field the prompt names, e.g. ``score``)."""
    return await ask_judge(
        judge, template, lambda text: parse_scale(text, key), ONE_TO_FIVE, RETRY_SCALE_MESSAGE, usage, **values
    )


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
