"""Thinking is not the answer: a model's reasoning, however it comes back, kept apart.

Reasoning models return their thinking in a field of its own (``reasoning_content`` from
vLLM, SGLang and DeepSeek's API; ``reasoning`` from Ollama and others; thinking blocks
from Anthropic), which the backends read into ``ChatResponse.reasoning``, or inline in the
text as ``<think>...</think>`` (Qwen3, DeepSeek-R1 and others through many servers).
``split_thinking`` moves an inline block out of the answer. Judges, guards and the user
simulator then see the answer only; records keep the reasoning beside it.
"""

from __future__ import annotations

import dataclasses
import re

from .base import ChatResponse

_OPEN, _CLOSE = "<think>", "</think>"
_LEADING = re.compile(r"^\s*<think>", re.IGNORECASE)


def split_text(text: str) -> tuple[str, str | None]:
    """(answer, reasoning) of a text that may carry an inline thinking block.

    ``<think>R</think>A`` -> (A, R); an opened block never closed (cut by the token budget)
    is all reasoning -> ("", R); ``R</think>A`` without the opening tag (a chat template
    that put ``<think>`` in the prompt) -> (A, R). Any other text is all answer.
    """
    lowered = text.lower()
    if _LEADING.match(text):
        start = lowered.index(_OPEN) + len(_OPEN)
        end = lowered.find(_CLOSE, start)
        if end < 0:
            return "", text[start:].strip()
        return text[end + len(_CLOSE):].strip(), text[start:end].strip()
    end = lowered.find(_CLOSE)
    if end >= 0 and _OPEN not in lowered:
        return text[end + len(_CLOSE):].strip(), text[:end].strip()
    return text, None


def split_thinking(response: ChatResponse) -> ChatResponse:
    """The response with an inline thinking block moved from ``text`` to ``reasoning``."""
    answer, reasoning = split_text(response.text)
    if reasoning is None:
        return response
    joined = "\n\n".join(r for r in (response.reasoning, reasoning) if r)
    return dataclasses.replace(response, text=answer, reasoning=joined)
