"""The smoke protocol: a short dialogue that proves the pipe end to end.

Per turn: the user simulator writes a user message from the seed and the dialogue so far;
the target answers (it sees only the conversation, never the seed); the bias and refusal
judges label the reply, each in its own call. Judge calls for turn t run while turn t+1
is generated.
"""

from __future__ import annotations

import asyncio
import re

from .. import prompts
from ..errors import ModelCallError
from ..judges import judge_binary
from ..models.base import FINISH_CONTENT_FILTER

#: SPEC decoding defaults for the conversation roles (a spec's own parameters win).
TARGET_DEFAULTS = {"temperature": 0.7, "max_tokens": 250}
USER_DEFAULTS = {"temperature": 0.7, "max_tokens": 250}

_ROLE_PREFIX = re.compile(r"^\s*(\*\*)?\s*(user|human|me)\s*(\*\*)?\s*:\s*(\*\*)?\s*", re.IGNORECASE)
_QUOTES = ("\"\"", "''", "“”", "‘’")


def clean_user_message(text: str) -> str:
    """Strip a leading role label and wrapping quotes from a simulated user message."""
    text = (text or "").strip()
    text = _ROLE_PREFIX.sub("", text, count=1).strip()
    for opening, closing in _QUOTES:
        if len(text) >= 2 and text[0] == opening and text[-1] == closing:
            text = text[1:-1].strip()
    return text


async def simulate_user(user_model, case, turns, usage) -> str:
    """The next user message; one new draw (sample 1) if the first comes back empty."""
    template = prompts.load("user_simulator")
    style = case.style or "assessment"
    situation = (
        "The conversation so far:\n" + prompts.transcript(turns)
        if turns
        else "The conversation has not started yet: write the user's opening message."
    )
    messages = template.messages(
        statement=case.statement,
        category=case.category,
        group=case.group,
        style_instructions=template.extras[f"style_{style}"].strip(),
        situation=situation,
    )
    for sample in (0, 1):
        reply = await user_model.chat(messages, template=template.id, sample=sample, usage=usage)
        text = clean_user_message(reply.text)
        if text:
            return text
    raise ModelCallError("user", str(user_model.spec), "the user simulator returned an empty message twice")


async def judge_turn(judge, user_message: str, reply, usage) -> dict:
    """Bias and refusal labels for one target reply (two independent judge calls)."""
    values = {
        "user_message": user_message,
        "reply": reply.text,
        "fence": prompts.fence(user_message, reply.text),
    }
    if reply.finish_reason == FINISH_CONTENT_FILTER:
        # A provider's content filter stopped the reply: that is a refusal, never a clean
        # reply. Whatever text came before the stop is still judged for bias.
        refusal_task = None
    else:
        refusal_task = judge_binary(judge, prompts.load("judge_refusal"), "refusal", usage, **values)
    if reply.text.strip():
        bias = await judge_binary(judge, prompts.load("judge_bias"), "biased", usage, **values)
    else:
        bias = None
    refusal = await refusal_task if refusal_task is not None else None
    errors = [v.error for v in (bias, refusal) if v is not None and v.error]
    return {
        "bias": (int(bias.label) if bias.label is not None else None) if bias else 0,
        "refusal": 1 if refusal is None else (int(refusal.label) if refusal.label is not None else None),
        "errors": errors,
    }


async def run(case, roles, usage) -> dict:
    """Run one smoke case; returns the labels, the transcript and any errors."""
    turns: list[dict] = []
    judge_tasks = []
    errors: list[dict] = []
    try:
        for _ in range(case.turns):
            user_message = await simulate_user(roles.user, case, turns, usage)
            messages = []
            if roles.system_prompt:
                messages.append({"role": "system", "content": roles.system_prompt})
            for turn in turns:
                messages.append({"role": "user", "content": turn["user"]})
                messages.append({"role": "assistant", "content": turn["assistant"]})
            messages.append({"role": "user", "content": user_message})
            reply = await roles.target.chat(messages, usage=usage)
            turns.append(
                {"user": user_message, "assistant": reply.text, "finish_reason": reply.finish_reason}
            )
            # Judge this turn while the dialogue goes on.
            judge_tasks.append(asyncio.ensure_future(judge_turn(roles.judge, user_message, reply, usage)))
    except ModelCallError as exc:
        errors.append({"kind": "model_error", "role": exc.role, "message": str(exc)})
    judged = []
    for task in judge_tasks:
        try:
            judged.append(await task)
        except ModelCallError as exc:
            errors.append({"kind": "model_error", "role": exc.role, "message": str(exc)})
            judged.append({"bias": None, "refusal": None, "errors": []})
    for number, item in enumerate(judged, start=1):
        for message in item["errors"]:
            errors.append({"kind": "judge_error", "role": "judge", "message": f"turn {number}: {message}"})
    return {
        "labels": {
            "bias": [item["bias"] for item in judged],
            "refusal": [item["refusal"] for item in judged],
        },
        "turns": turns,
        "errors": errors,
        "templates": sorted(
            prompts.load(name).id for name in ("user_simulator", "judge_bias", "judge_refusal")
        ),
    }
