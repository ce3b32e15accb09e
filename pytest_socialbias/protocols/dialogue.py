"""Dialogues: the shared machinery of every protocol.

A dialogue alternates user turns and target replies. The user turns come either from the
user simulator, which sees the seed and adapts to the target's replies (smoke, DyMT), or
from a fixed script (the zero-shot probe, the scripted FairMT-style tracks). The target
sees only the conversation (its optional system prompt plus user/assistant turns), never
the seed. Every reply is judged for bias and refusal, each in its own call and never
shown earlier labels; user turns can be rated for coherence. Judge calls for turn t run
while turn t+1 is generated, so a dialogue's critical path is user simulator -> target.
"""

from __future__ import annotations

import asyncio
import re

from .. import prompts
from ..errors import ModelCallError
from ..judges import judge_binary, judge_scale
from ..judges.guards import screen_in_unit
from ..models.base import FINISH_CONTENT_FILTER, FINISH_LENGTH
from ..vocabulary import STYLES

#: What a guard's block does to the dialogue (--socialbias-guard-policy): ``end`` it there,
#: as a deployed filter would (the user never sees the reply, the dialogue stops), or
#: ``follow`` it on with the reply flagged.
BLOCK_ENDS, BLOCK_FOLLOWS = "end", "follow"
GUARD_POLICIES = (BLOCK_ENDS, BLOCK_FOLLOWS)

#: Draws of the user simulator per turn before its failure is recorded.
USER_SIMULATOR_ATTEMPTS = 3

_ROLE_PREFIX = re.compile(r"^\s*(\*\*)?\s*(user|human|me|client)\s*(\*\*)?\s*:\s*(\*\*)?\s*", re.IGNORECASE)
_QUOTES = ("\"\"", "''", "“”", "‘’")
# The simulator wrote the assistant's part: a reply label, or an AI speaking as itself.
_ASSISTANT_VOICE = re.compile(
    r"^\s*(\*\*)?\s*(assistant|ai|chatbot|bot|model)\s*(\*\*)?\s*:|\bas an ai\b|\bas a (large )?language model\b"
    r"|\bi(?: am|'m) an ai\b|\bi(?: am|'m) (?:just )?a language model\b",
    re.IGNORECASE,
)
# Meta-talk about the set-up instead of a user's message.
_META = re.compile(
    r"\brole-?play(?:ing)?\b|\bsimulat(?:ed|ion|ing|e|or)\b|\bthe stereotype being measured\b|\btest data\b"
    r"|\bthese instructions\b|\bmy instructions\b|\bsafety audit\b|\bin character\b",
    re.IGNORECASE,
)
_NEXT_SPEAKER = re.compile(r"\n\s*(\*\*)?\s*(assistant|ai|bot)\s*(\*\*)?\s*:.*", re.IGNORECASE | re.DOTALL)


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def clean_user_message(text: str, statement: str | None = None) -> tuple[str, str | None]:
    """A simulated user message, cleaned; and the role break found in it, if any.

    Strips a leading role label, wrapping quotes, and anything after the simulator
    started writing the assistant's next turn. A role break is the assistant's voice
    (``Assistant:``, "as an AI"), meta-talk about the simulation, or the seed statement
    itself (the target must never see the seed).
    """
    text = _NEXT_SPEAKER.sub("", (text or "").strip()).strip()
    text = _ROLE_PREFIX.sub("", text, count=1).strip()
    for opening, closing in _QUOTES:
        if len(text) >= 2 and text[0] == opening and text[-1] == closing:
            text = text[1:-1].strip()
    if not text:
        return text, "empty message"
    if _ASSISTANT_VOICE.search(text):
        return text, "wrote as the assistant"
    if _META.search(text):
        return text, "talked about the simulation instead of playing the user"
    if statement and _normalise(statement) and _normalise(statement) in _normalise(text):
        return text, "quoted the seed statement"
    return text, None


class UserSimulatorFailure(Exception):
    """The user simulator broke role on every draw for this turn."""


class EmptyReply(Exception):
    """The target's reply has no answer to label (empty, or its thinking was cut before
    any answer): an error of the case with its reason, never a clean reply."""


def turn_record(user_message: str, reply) -> dict:
    """One exchange as records keep it; the target's thinking, if any, beside its answer."""
    turn = {"user": user_message, "assistant": reply.text, "finish_reason": reply.finish_reason}
    if reply.reasoning:
        turn["reasoning"] = reply.reasoning
    return turn


def check_reply(reply, target, turn: int) -> None:
    """Raise EmptyReply when the target's reply has no answer. A provider's content-filter
    stop is not empty: it counts as a refusal."""
    if reply.text.strip() or reply.finish_reason == FINISH_CONTENT_FILTER:
        return
    budget = getattr(target, "max_tokens", None)
    budget_text = f"the {budget}-token budget" if budget else "the token budget"
    if reply.finish_reason == FINISH_LENGTH and (reply.reasoning or reply.reasoning_tokens):
        why = f"{budget_text} went to reasoning; raise max_tokens in the spec (e.g. ?max_tokens=4096)"
    elif reply.finish_reason == FINISH_LENGTH:
        why = f"{budget_text} ran out before any answer; raise max_tokens in the spec"
    else:
        why = f"the model answered nothing (finish reason {reply.finish_reason!r})"
    raise EmptyReply(f"turn {turn}: empty reply: {why}")


async def simulate_user(user_model, case, turns: list[dict], usage) -> tuple[str, int]:
    """The next user message and the number of role breaks retried before it."""
    template = prompts.load("user_simulator")
    style = case.style if case.style in STYLES else STYLES[0]
    situation = situation_text(turns, "user")
    messages = template.messages(
        statement=case.statement,
        category=case.category,
        group=case.group,
        style_instructions=template.extras[f"style_{style}"].strip(),
        situation=situation,
    )
    return await draw_user_message(user_model, messages, template.id, len(turns) + 1, usage, statement=case.statement)


def situation_text(turns: list[dict], who: str) -> str:
    """What a user simulator is shown of the dialogue so far (``who``: "user", "person")."""
    if turns:
        return "The conversation so far:\n" + prompts.transcript(turns)
    return f"The conversation has not started yet: write the {who}'s opening message."


async def draw_user_message(user_model, messages, template_id: str, turn: int, usage, *, statement=None, brief=()) -> tuple[str, int]:
    """Draw the simulator's message (up to USER_SIMULATOR_ATTEMPTS draws); return it and the
    number of role breaks retried before it, or raise UserSimulatorFailure listing them.

    A draw is a role break when ``clean_user_message`` finds one, when the provider's
    content filter stopped it, or when it repeats a line of its ``brief`` (its own
    instructions, for simulators that echo them)."""
    problems = []
    for sample in range(USER_SIMULATOR_ATTEMPTS):
        reply = await user_model.chat(messages, template=template_id, sample=sample, usage=usage)
        text, problem = clean_user_message(reply.text, statement)
        if reply.finish_reason == FINISH_CONTENT_FILTER:
            # What the filter let through is not the message the simulator meant to write.
            text, problem = reply.text, "stopped by the provider's content filter"
        if problem is None and any(line in text for line in brief):
            problem = "repeated its instructions"
        if problem is None:
            return text, sample
        problems.append(f"{problem}: {text[:80]!r}")
    raise UserSimulatorFailure(
        f"turn {turn}: the user simulator broke role on all {USER_SIMULATOR_ATTEMPTS} draws ("
        + "; ".join(problems) + ")"
    )


def target_messages(system_prompt: str | None, turns: list[dict], user_message: str) -> list[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for turn in turns:
        messages.append({"role": "user", "content": turn["user"]})
        messages.append({"role": "assistant", "content": turn["assistant"]})
    messages.append({"role": "user", "content": user_message})
    return messages


async def judge_turn(
    judge, turns_before: list[dict], user_message: str, reply, usage, coherence: bool, screening=None
) -> dict:
    """Bias and refusal labels for one reply, the user turn's coherence if asked, and the
    guard's screening of the reply (an awaitable) when a guard is configured."""
    values = {"user_message": user_message, "reply": reply.text, "fence": prompts.fence(user_message, reply.text)}
    tasks = {}
    if screening is not None:
        tasks["guard"] = screening
    if reply.finish_reason != FINISH_CONTENT_FILTER:
        tasks["refusal"] = judge_binary(judge, prompts.load("judge_refusal"), "refusal", usage, **values)
    if reply.text.strip():
        tasks["bias"] = judge_binary(judge, prompts.load("judge_bias"), "biased", usage, **values)
    if coherence:
        history = prompts.transcript(turns_before) or "(no conversation yet)"
        tasks["coherence"] = judge_scale(
            judge,
            prompts.load("judge_coherence"),
            "score",
            usage,
            history=history,
            user_message=user_message,
            fence=prompts.fence(history, user_message),
        )
    results = dict(zip(tasks, await asyncio.gather(*tasks.values())))
    screened = results.pop("guard", None)
    labels = {
        # Only a content-filter stop reaches here without text (an empty reply otherwise is
        # an error, see check_reply): it is a refusal, and endorses nothing. Whatever text
        # came before a filter stop is still judged.
        "bias": _label(results.get("bias"), default=0),
        "refusal": _label(results.get("refusal"), default=1),
    }
    if coherence:
        labels["coherence"] = _label(results.get("coherence"), default=None)
    labels["errors"] = [(task, v.error) for task, v in results.items() if v.error]
    if screened is not None:
        labels["guard"] = screened.to_dict()
    return labels


def _label(verdict, default):
    if verdict is None:
        return default
    if verdict.label is None:
        return None
    return int(verdict.label)


async def run_dialogue(case, roles, usage, *, user_turns: list[str] | None = None, coherence: bool = False) -> dict:
    """Run a dialogue of ``case.turns`` turns (or ``len(user_turns)`` for a script).

    Returns ``labels`` (per-turn ``bias``, ``refusal`` and, if rated, ``coherence``),
    the transcript, errors, the number of user-simulator role breaks, and the prompt
    templates used.
    """
    turns: list[dict] = []
    judge_tasks = []
    errors: list[dict] = []
    role_breaks = 0
    count = len(user_turns) if user_turns is not None else case.turns
    try:
        for index in range(count):
            if user_turns is not None:
                user_message = user_turns[index]
            else:
                user_message, retried = await simulate_user(roles.user, case, turns, usage)
                role_breaks += retried
            before = list(turns)
            reply = await roles.target.chat(target_messages(roles.system_prompt, turns, user_message), usage=usage)
            turns.append(turn_record(user_message, reply))
            check_reply(reply, roles.target, len(turns))
            screening = None
            if roles.guard is not None:
                # What the guard sees: the exchange (the reply and the user turn it
                # answers), unless its spec's unit= says the whole dialogue or the reply alone.
                history = [m for t in before for m in ({"role": "user", "content": t["user"]},
                                                       {"role": "assistant", "content": t["assistant"]})]
                history.append({"role": "user", "content": user_message})
                screening = asyncio.ensure_future(screen_in_unit(
                    roles.guard.model, roles.guard.kind, history, reply.text, roles.guard.unit or "exchange", usage,
                ))
            # Judge this turn while the dialogue goes on.
            judge_tasks.append(
                asyncio.ensure_future(judge_turn(roles.judge, before, user_message, reply, usage, coherence, screening))
            )
            if screening is not None and roles.guard.policy == BLOCK_ENDS:
                # A deployed filter would not have shown the reply: the conversation ends.
                if (await screening).flagged:
                    break
    except UserSimulatorFailure as exc:
        errors.append({"kind": "user_simulator_error", "role": "user", "message": str(exc)})
    except EmptyReply as exc:
        errors.append({"kind": "empty_reply", "role": "target", "message": str(exc)})
    except ModelCallError as exc:
        errors.append({"kind": "model_error", "role": exc.role, "message": str(exc)})
    except BaseException:
        # Cancelled (Ctrl-C, -x): the judge tasks must not outlive their dialogue.
        for task in judge_tasks:
            task.cancel()
        raise
    judged = []
    try:
        for task in judge_tasks:
            try:
                judged.append(await task)
            except ModelCallError as exc:
                errors.append({"kind": "model_error", "role": exc.role, "message": str(exc)})
                judged.append({"bias": None, "refusal": None, "coherence": None, "errors": []})
    finally:
        for task in judge_tasks:
            task.cancel()  # a no-op for the finished ones
    for number, item in enumerate(judged, start=1):
        for task, message in item["errors"]:
            # The task says which labels it leaves out: an unreadable coherence rating
            # does not void the turn's readable bias and refusal labels (vocabulary.py).
            errors.append({"kind": "judge_error", "role": "judge", "task": task, "message": f"turn {number}: {message}"})
    labels = {
        "bias": [item["bias"] for item in judged],
        "refusal": [item["refusal"] for item in judged],
    }
    names = ["judge_bias", "judge_refusal"]
    if coherence:
        labels["coherence"] = [item.get("coherence") for item in judged]
        names.append("judge_coherence")
    if user_turns is None:
        names.append("user_simulator")
    guard = None
    if roles.guard is not None:
        # Per reply: flagged (1), passed (0) or unreadable (None, listed as a guard error,
        # which does not void the case's bias labels).
        verdicts = [item.get("guard") or {} for item in judged]
        labels["guard"] = [None if v.get("flagged") is None else int(v["flagged"]) for v in verdicts]
        guard = verdicts
        for number, verdict in enumerate(verdicts, start=1):
            if verdict.get("error"):
                errors.append({"kind": "guard_error", "role": "guard", "message": f"turn {number}: {verdict['error']}"})
    return {
        "guard": guard,
        "labels": labels,
        "turns": turns,
        "errors": errors,
        "role_breaks": role_breaks,
        "templates": sorted(prompts.load(name).id for name in names),
    }
