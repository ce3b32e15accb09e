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

from .. import prompts
from ..errors import ModelCallError
from ..judges import judge_binary, judge_scale
from ..judges.guards import guard_kind, screen_in_unit
from ..models.base import DRY_RUN_MODEL, FINISH_CONTENT_FILTER, FINISH_LENGTH
from ..vocabulary import EMPTY_REPLY, GUARD_ERROR, JUDGE_ERROR, MODEL_ERROR, STYLES, USER_SIMULATOR_ERROR
from . import embedded_user
from .turn_model import check as check_turn
from .user_check import (
    CONTENT_FILTER,
    EMBEDDED_CHECK,
    JUDGE_CHECK,
    JUDGED,
    REPORT_FINDINGS,
    Finding,
    SimulatorRecord,
    UserTurnContext,
    clean_user_message,
)

#: What a guard's block does to the dialogue (--socialbias-guard-policy): ``follow`` it on
#: with the reply flagged (post-hoc filtering, as the DyMT paper screened its dialogues;
#: the default), or ``end`` it there, as a deployed filter would (the user never sees the
#: reply, the dialogue stops). A follow run also gives the end policy's cumulative rate
#: (metrics: cumulative_bias_unblocked), from the turns up to each dialogue's first block.
BLOCK_ENDS, BLOCK_FOLLOWS = "end", "follow"
GUARD_POLICIES = (BLOCK_ENDS, BLOCK_FOLLOWS)

#: Draws of the user simulator per turn before its failure is recorded.
USER_SIMULATOR_ATTEMPTS = 3

class UserSimulatorFailure(Exception):
    """The user simulator broke role on every draw for this turn."""

    def __init__(self, message: str, rejected: list | None = None):
        super().__init__(message)
        self.rejected = rejected or []


class EmptyReply(Exception):
    """The target's reply has no answer to label (empty, or its thinking was cut before
    any answer): an error of the case with its reason, never a clean reply."""


def turn_record(user_message: str, reply, rejected: list | None = None) -> dict:
    """One exchange as records keep it; the target's thinking, if any, beside its answer;
    the simulator's draws rejected before this user message, if any (kind, reason, text)."""
    turn = {"user": user_message, "assistant": reply.text, "finish_reason": reply.finish_reason}
    if reply.reasoning:
        turn["reasoning"] = reply.reasoning
    if rejected:
        turn["rejected_user_drafts"] = list(rejected)
    return turn


def simulator_error(exc: UserSimulatorFailure) -> dict:
    """The case error of a turn whose every draw broke role, with the rejected drafts."""
    return {"kind": USER_SIMULATOR_ERROR, "role": "user", "message": str(exc),
            "rejected_user_drafts": list(exc.rejected)}


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


async def simulate_user(user_model, case, turns: list[dict], usage, record: SimulatorRecord, judge=None,
                        embedded: bool = False) -> tuple[str, list]:
    """The next user message and the draws rejected before it (``draw_user_message``)."""
    template = prompts.load("user_simulator")
    style = case.style if case.style in STYLES else STYLES[0]
    situation = situation_text(turns, "user")
    messages = template.messages(
        statement=case.statement,
        category=case.category,
        group=case.group,
        style_instructions=template.snippet(f"style_{style}", statement=case.statement, category=case.category,
                                            group=case.group).strip(),
        situation=situation,
    )
    template_id, hidden, params, attempts = template.id, messages[0]["content"], {}, USER_SIMULATOR_ATTEMPTS
    if embedded_user.applies(user_model):
        # The embedded model continues a transcript instead (embedded_user.py).
        asked = embedded_user.request(case, style, turns)
        messages, template_id, hidden, params, attempts = (
            asked.messages, asked.template_id, asked.hidden, asked.params, asked.attempts)
    context = UserTurnContext(
        seed=case.statement,
        hidden=(hidden,),
        allowed=tuple(x for x in (case.group, case.category) if x),
        previous_reply=turns[-1]["assistant"] if turns else None,
    )
    return await draw_user_message(user_model, messages, template_id, len(turns) + 1, usage, context=context,
                                   record=record, judge=judge, history=turns, embedded=embedded,
                                   params=params, attempts=attempts)


def situation_text(turns: list[dict], who: str) -> str:
    """What a user simulator is shown of the dialogue so far (``who``: "user", "person")."""
    if turns:
        return "The conversation so far:\n" + prompts.transcript(turns)
    return f"The conversation has not started yet: write the {who}'s opening message."


async def draw_user_message(
    user_model, messages, template_id: str, turn: int, usage, *, context: UserTurnContext, record: SimulatorRecord,
    judge=None, history: list[dict] = (), embedded: bool = False, params: dict | None = None,
    attempts: int = USER_SIMULATOR_ATTEMPTS,
) -> tuple[str, list]:
    """Draw the simulator's message (up to ``attempts`` draws, each asked with the call
    ``params`` of its own; see embedded_user.py); return it and the
    draws rejected before it (``{"kind", "reason", "text"}`` each), or raise
    UserSimulatorFailure listing them.

    A draw is rejected when ``turn_model.check`` finds a role break in it (the word rules,
    then the learned reading: the assistant's voice, the set-up or the seed revealed, the
    previous reply copied; with ``embedded``, then the embedded model's reading,
    ``turn_embed.check``), when
    the provider's content filter stopped it, or, with a ``judge`` (the judged simulator
    check), when the judge finds it revealing or not following from ``history``. Every
    draw is counted in ``record`` (the report's simulator record). With
    ``record.report_only`` a draw the checks flag is kept and its finding counted
    (``SimulatorRecord.keep``): only a content-filtered draw is drawn again."""
    rejected = []
    record.turns += 1
    for sample in range(attempts):
        reply = await user_model.chat(messages, template=template_id, sample=sample, usage=usage, **(params or {}))
        text = clean_user_message(reply.text)
        if reply.finish_reason == FINISH_CONTENT_FILTER:
            # What the filter let through is not the message the simulator meant to write.
            text, finding = reply.text, Finding(CONTENT_FILTER)
        elif reply.model == DRY_RUN_MODEL:
            # A dry run's stand-in answers are one filler for every role: the plan counts
            # the calls of simulators that stay in role.
            finding = None
        elif embedded:
            from . import turn_embed

            finding = await asyncio.to_thread(turn_embed.check, text, context)
        else:
            finding = check_turn(text, context)
        if finding is None and judge is not None:
            judged = await judge_user_turn(judge, history, text, usage, record)
            finding = None if reply.model == DRY_RUN_MODEL else judged
        record.add(finding)
        if finding is not None and record.report_only and finding.kind != CONTENT_FILTER:
            record.keep(finding)  # report-only findings: flagged and counted, never redrawn
            finding = None
        if finding is None:
            if rejected:
                record.retried += 1
            return text, rejected
        rejected.append({**finding.to_dict(), "text": text})
    record.failed += 1
    raise UserSimulatorFailure(
        f"turn {turn}: the user simulator broke role on all {attempts} draws ("
        + "; ".join(f"{r['reason']}: {r['text'][:80]!r}" for r in rejected) + ")",
        rejected,
    )


async def judge_user_turn(judge, history: list[dict], user_message: str, usage, record: SimulatorRecord) -> Finding | None:
    """The judged simulator check: the judge is asked whether the user turn reveals the
    test or states the stereotype outright, and whether it follows from the conversation
    so far. A turn it finds revealing or not following is a role break; an unreadable
    verdict is not (the deterministic checks already passed it) but is counted apart in
    ``record`` (judged, passed, unreadable)."""
    transcript = prompts.transcript(history) or "(no conversation yet)"
    values = {"history": transcript, "user_message": user_message, "fence": prompts.fence(transcript, user_message)}
    reveals, follows = await asyncio.gather(
        judge_binary(judge, prompts.load("judge_user_reveals"), "reveals", usage, **values),
        judge_binary(judge, prompts.load("judge_user_follows"), "follows", usage, **values),
    )
    record.judged += 1
    if reveals.label is None or follows.label is None:
        record.judged_unreadable += 1
    if reveals.label:
        return Finding(JUDGED, "reveals the test or states the stereotype")
    if follows.label is not None and not follows.label:
        return Finding(JUDGED, "does not follow from the conversation")
    if reveals.label is not None and follows.label is not None:
        record.judged_passed += 1
    return None


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
    the transcript, errors, the user simulator's record (draws, role breaks by kind,
    turns retried and failed; ``user_check``) with ``role_breaks`` its flagged draws, and
    the prompt templates used. With ``roles.simulator_check`` "judge" the judge also checks
    each user turn (``judge_user_turn``).
    """
    turns: list[dict] = []
    judge_tasks = []
    errors: list[dict] = []
    record = SimulatorRecord(report_only=roles.simulator_findings == REPORT_FINDINGS)
    rejected: list = []
    simulator_judge = roles.judge if roles.simulator_check == JUDGE_CHECK else None
    embedded = roles.simulator_check == EMBEDDED_CHECK
    count = len(user_turns) if user_turns is not None else case.turns
    try:
        for index in range(count):
            if user_turns is not None:
                user_message = user_turns[index]
            else:
                user_message, rejected = await simulate_user(roles.user, case, turns, usage, record, simulator_judge,
                                                             embedded)
            before = list(turns)
            reply = await roles.target.chat(target_messages(roles.system_prompt, turns, user_message), usage=usage)
            turns.append(turn_record(user_message, reply, rejected))
            check_reply(reply, roles.target, len(turns))
            screening = None
            if roles.guard is not None:
                # What the guard sees: the exchange (the reply and the user turn it
                # answers), unless its spec's unit= says the whole dialogue or the reply
                # alone, or it is a classifier with a unit of its own (judges/classifier.py).
                history = [m for t in before for m in ({"role": "user", "content": t["user"]},
                                                       {"role": "assistant", "content": t["assistant"]})]
                history.append({"role": "user", "content": user_message})
                screening = asyncio.ensure_future(screen_in_unit(
                    roles.guard.model, roles.guard.kind, history, reply.text,
                    roles.guard.unit or roles.guard.default_unit or "exchange", usage,
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
        errors.append(simulator_error(exc))
    except EmptyReply as exc:
        errors.append({"kind": EMPTY_REPLY, "role": "target", "message": str(exc)})
    except ModelCallError as exc:
        errors.append({"kind": MODEL_ERROR, "role": exc.role, "message": str(exc)})
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
                errors.append({"kind": MODEL_ERROR, "role": exc.role, "message": str(exc)})
                judged.append({"bias": None, "refusal": None, "coherence": None, "errors": []})
    finally:
        for task in judge_tasks:
            task.cancel()  # a no-op for the finished ones
    for number, item in enumerate(judged, start=1):
        for task, message in item["errors"]:
            # The task says which labels it leaves out: an unreadable coherence rating
            # does not void the turn's readable bias and refusal labels (vocabulary.py).
            errors.append({"kind": JUDGE_ERROR, "role": "judge", "task": task, "message": f"turn {number}: {message}"})
    labels = {
        "bias": [item["bias"] for item in judged],
        "refusal": [item["refusal"] for item in judged],
    }
    names = ["judge_bias", "judge_refusal"]
    if coherence:
        labels["coherence"] = [item.get("coherence") for item in judged]
        names.append("judge_coherence")
    if user_turns is None:
        names.append(embedded_user.TEMPLATE if embedded_user.applies(roles.user) else "user_simulator")
        if simulator_judge is not None:
            names += ["judge_user_reveals", "judge_user_follows"]
    templates = [prompts.load(name).id for name in names]
    guard = None
    if roles.guard is not None:
        # The prompt file a prompt guard is sent (an override's id names its hash).
        templates += [t for t in (guard_kind(roles.guard.kind).prompt_id,) if t]
        # Per reply: flagged (1), passed (0) or unreadable (None, listed as a guard error,
        # which does not void the case's bias labels).
        verdicts = [item.get("guard") or {} for item in judged]
        labels["guard"] = [None if v.get("flagged") is None else int(v["flagged"]) for v in verdicts]
        guard = verdicts
        for number, verdict in enumerate(verdicts, start=1):
            if verdict.get("error"):
                errors.append({"kind": GUARD_ERROR, "role": "guard", "message": f"turn {number}: {verdict['error']}"})
    return {
        "guard": guard,
        "labels": labels,
        "turns": turns,
        "errors": errors,
        "role_breaks": sum(record.flagged.values()) if user_turns is None else 0,
        "simulator": record.to_dict() if user_turns is None else None,
        "templates": sorted(templates),
    }
