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
from dataclasses import dataclass
from typing import Any

from .. import prompts
from ..errors import CaseError, EmptyReply, ModelCallError, UserSimulatorFailure
from ..judges import judge_binary, judge_scale
from ..judges.guards import guard_kind, screen_in_unit
from ..models.base import DRY_RUN_MODEL, FINISH_CONTENT_FILTER, FINISH_LENGTH
from ..record import CaseRecord, ErrorEntry, Turn, case_result, error_entry, error_from, turn_entry
from ..vocabulary import GUARD_ERROR, JUDGE_ERROR, STYLES
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


@dataclass
class Simulator:
    """A dialogue's simulated user: its model, the case's usage counter, its record (draws,
    role breaks by kind, turns retried and failed) and how its turns are checked beyond
    the word rules and the learned reading: by the ``judge`` (the judged check) or by the
    embedded model's reading (``embedded``)."""

    model: Any
    usage: Any
    record: SimulatorRecord
    judge: Any = None
    embedded: bool = False

    @classmethod
    def of(cls, roles, usage) -> Simulator:
        """The simulated user of a dialogue run with ``roles`` (its check and findings)."""
        return cls(
            roles.user, usage, SimulatorRecord(report_only=roles.simulator_findings == REPORT_FINDINGS),
            judge=roles.judge if roles.simulator_check == JUDGE_CHECK else None,
            embedded=roles.simulator_check == EMBEDDED_CHECK,
        )

    @property
    def judge_templates(self) -> tuple:
        """The prompts the judged check sends, if it is on."""
        return ("judge_user_reveals", "judge_user_follows") if self.judge is not None else ()

    def parts(self) -> dict:
        """Its part of the case's record: the draws flagged, and its record."""
        return {"role_breaks": sum(self.record.flagged.values()), "simulator": self.record.to_dict()}


@dataclass(frozen=True)
class UserTurnAsk:
    """What one user turn is drawn with: the messages sent and their template id (in the
    cache key), the context its checks read, the call parameters of its own (see
    embedded_user.py) and the draws it gets."""

    messages: list
    template_id: str
    context: UserTurnContext
    params: dict | None = None
    attempts: int = USER_SIMULATOR_ATTEMPTS


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


def turn_record(user_message: str, reply, rejected: list | None = None) -> Turn:
    """One exchange as records keep it (record.turn_entry): the target's thinking, if any,
    beside its answer; the simulator's draws rejected before this user message, if any."""
    return turn_entry(user_message, reply.text, reply.finish_reason, reasoning=reply.reasoning,
                      rejected_user_drafts=rejected)


async def simulate_user(simulator: Simulator, case, turns: list[dict]) -> tuple[str, list]:
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
    template_id, hidden, params, attempts = template.id, messages[0]["content"], None, USER_SIMULATOR_ATTEMPTS
    if embedded_user.applies(simulator.model):
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
    return await draw_user_message(simulator, UserTurnAsk(messages, template_id, context, params, attempts), turns)


def situation_text(turns: list[dict], who: str) -> str:
    """What a user simulator is shown of the dialogue so far (``who``: "user", "person")."""
    if turns:
        return "The conversation so far:\n" + prompts.transcript(turns)
    return f"The conversation has not started yet: write the {who}'s opening message."


async def draw_user_message(simulator: Simulator, ask: UserTurnAsk, history: list[dict]) -> tuple[str, list]:
    """Draw the simulator's message for the turn after ``history`` (up to
    ``ask.attempts`` draws, each asked with ``ask.params``; see embedded_user.py); return
    it and the draws rejected before it (``{"kind", "reason", "text"}`` each), or raise
    UserSimulatorFailure listing them.

    A draw is rejected when ``draw_finding`` finds something in it. Every draw is counted
    in the simulator's record (the report's simulator record). With
    ``record.report_only`` a draw the checks flag is kept and its finding counted
    (``SimulatorRecord.keep``): only a content-filtered draw is drawn again."""
    record = simulator.record
    rejected = []
    record.turns += 1
    for sample in range(ask.attempts):
        reply = await simulator.model.chat(ask.messages, template=ask.template_id, sample=sample,
                                           usage=simulator.usage, **(ask.params or {}))
        # What a content filter let through is not the message the simulator meant to write.
        text = reply.text if reply.finish_reason == FINISH_CONTENT_FILTER else clean_user_message(reply.text)
        finding = await draw_finding(simulator, reply, text, ask.context, history)
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
        f"turn {len(history) + 1}: the user simulator broke role on all {ask.attempts} draws ("
        + "; ".join(f"{r['reason']}: {r['text'][:80]!r}" for r in rejected) + ")",
        rejected,
    )


async def draw_finding(simulator: Simulator, reply, text: str, context: UserTurnContext,
                       history: list[dict]) -> Finding | None:
    """The role break in one draw, if any: the provider's content filter stopped it; or
    ``turn_model.check`` finds one (the word rules, then the learned reading: the
    assistant's voice, the set-up or the seed revealed, the previous reply copied; with
    ``simulator.embedded``, then the embedded model's reading, ``turn_embed.check``); or,
    with the judged simulator check, the judge finds it revealing or not following from
    ``history``."""
    if reply.finish_reason == FINISH_CONTENT_FILTER:
        return Finding(CONTENT_FILTER)
    if reply.model == DRY_RUN_MODEL:
        # A plan's stand-in answers are one filler for every role: the plan counts the
        # calls of simulators that stay in role.
        finding = None
    elif simulator.embedded:
        from . import turn_embed

        finding = await asyncio.to_thread(turn_embed.check, text, context)
    else:
        finding = check_turn(text, context)
    if finding is None and simulator.judge is not None:
        judged = await judge_user_turn(simulator.judge, history, text, simulator.usage, simulator.record)
        finding = None if reply.model == DRY_RUN_MODEL else judged
    return finding


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


async def run_dialogue(case, roles, usage, *, user_turns: list[str] | None = None, coherence: bool = False) -> CaseRecord:
    """Run a dialogue of ``case.turns`` turns (or ``len(user_turns)`` for a script).

    Returns ``labels`` (per-turn ``bias``, ``refusal`` and, if rated, ``coherence``),
    the transcript, errors, the user simulator's record (draws, role breaks by kind,
    turns retried and failed; ``user_check``) with ``role_breaks`` its flagged draws, and
    the prompt templates used. With ``roles.simulator_check`` "judge" the judge also checks
    each user turn (``judge_user_turn``).
    """
    dialogue = Dialogue(case, roles, usage, user_turns, coherence)
    await dialogue.run()
    return dialogue.result(await dialogue.judged())


class Dialogue:
    """One dialogue: its plan (the user turns written by a script or by the simulated
    user, coherence rated or not), then its run (``run``: turn after turn, each reply's
    judging started beside the next turn), its labels (``judged``: the judge tasks
    awaited) and its record (``result``)."""

    def __init__(self, case, roles, usage, user_turns: list[str] | None, coherence: bool):
        self.case, self.roles, self.usage, self.coherence = case, roles, usage, coherence
        self.user_turns = user_turns
        self.simulator = Simulator.of(roles, usage) if user_turns is None else None
        self.count = len(user_turns) if user_turns is not None else case.turns
        self.turns: list[Turn] = []
        self.judge_tasks: list[asyncio.Future] = []
        self.errors: list[ErrorEntry] = []

    async def run(self) -> None:
        """Every planned turn, until a guard's block ends the dialogue (policy ``end``) or
        an error of the case (CaseError) does."""
        try:
            for index in range(self.count):
                if await self._turn(index):
                    break
        except CaseError as exc:
            self.errors.append(error_from(exc))
        except BaseException:
            # Cancelled (Ctrl-C, -x): the judge tasks must not outlive their dialogue.
            for task in self.judge_tasks:
                task.cancel()
            raise

    async def _turn(self, index: int) -> bool:
        """One turn: the user message, the target's reply, its judging started. True when
        a deployed filter would not have shown the reply: the conversation ends."""
        rejected: list = []
        if self.simulator is None:
            user_message = self.user_turns[index]  # type: ignore[index]
        else:
            user_message, rejected = await simulate_user(self.simulator, self.case, self.turns)
        before = list(self.turns)
        target = self.roles.target
        reply = await target.chat(target_messages(self.roles.system_prompt, self.turns, user_message), usage=self.usage)
        self.turns.append(turn_record(user_message, reply, rejected))
        check_reply(reply, target, len(self.turns))
        screening = self._screening(before, user_message, reply)
        # Judge this turn while the dialogue goes on.
        self.judge_tasks.append(asyncio.ensure_future(
            judge_turn(self.roles.judge, before, user_message, reply, self.usage, self.coherence, screening)))
        return screening is not None and self.roles.guard.policy == BLOCK_ENDS and (await screening).flagged

    def _screening(self, before: list, user_message: str, reply):
        """The guard's screening of the reply, started (None without a guard). What the
        guard sees: the exchange (the reply and the user turn it answers), unless its
        spec's unit= says the whole dialogue or the reply alone, or it is a classifier
        with a unit of its own (judges/classifier.py)."""
        guard = self.roles.guard
        if guard is None:
            return None
        history = [m for t in before for m in ({"role": "user", "content": t["user"]},
                                               {"role": "assistant", "content": t["assistant"]})]
        history.append({"role": "user", "content": user_message})
        return asyncio.ensure_future(screen_in_unit(
            guard.model, guard.kind, history, reply.text, guard.unit or guard.default_unit or "exchange", self.usage,
        ))

    async def judged(self) -> list[dict]:
        """Each turn's labels, as its judge task gives them; a judge call that failed for
        good is a model error, and its turn has no labels. Unreadable answers are judge
        errors, each naming the task whose labels it leaves out: an unreadable coherence
        rating does not void the turn's readable bias and refusal labels (vocabulary.py)."""
        judged = []
        try:
            for task in self.judge_tasks:
                try:
                    judged.append(await task)
                except ModelCallError as exc:
                    self.errors.append(error_from(exc))
                    judged.append({"bias": None, "refusal": None, "coherence": None, "errors": []})
        finally:
            for task in self.judge_tasks:
                task.cancel()  # a no-op for the finished ones
        for number, item in enumerate(judged, start=1):
            for task_name, message in item["errors"]:
                self.errors.append(error_entry(JUDGE_ERROR, message, role="judge", task=task_name, turn=number))
        return judged

    def result(self, judged: list[dict]) -> CaseRecord:
        """The dialogue's record: labels per turn, the guard's verdicts, the transcript,
        the errors, the simulated user's record, the prompt templates used."""
        labels = {
            "bias": [item["bias"] for item in judged],
            "refusal": [item["refusal"] for item in judged],
        }
        if self.coherence:
            labels["coherence"] = [item.get("coherence") for item in judged]
        guard = self._guard_verdicts(judged, labels)
        simulator = self.simulator.parts() if self.simulator is not None else {"role_breaks": 0, "simulator": None}
        return case_result(guard=guard, labels=labels, turns=self.turns, errors=self.errors,
                           templates=self._templates(), **simulator)

    def _guard_verdicts(self, judged: list[dict], labels: dict) -> list | None:
        """Per reply, the guard's verdict (None without a guard); its label: flagged (1),
        passed (0) or unreadable (None, listed as a guard error, which does not void the
        case's bias labels)."""
        if self.roles.guard is None:
            return None
        verdicts = [item.get("guard") or {} for item in judged]
        labels["guard"] = [None if v.get("flagged") is None else int(v["flagged"]) for v in verdicts]
        for number, verdict in enumerate(verdicts, start=1):
            if verdict.get("error"):
                self.errors.append(error_entry(GUARD_ERROR, verdict["error"], role="guard", turn=number))
        return verdicts

    def _templates(self) -> list[str]:
        names = ["judge_bias", "judge_refusal"] + (["judge_coherence"] if self.coherence else [])
        if self.simulator is not None:
            names.append(embedded_user.TEMPLATE if embedded_user.applies(self.simulator.model) else "user_simulator")
            names += self.simulator.judge_templates
        templates = [prompts.load(name).id for name in names]
        if self.roles.guard is not None:
            # The prompt file a prompt guard is sent (an override's id names its hash).
            templates += [t for t in (guard_kind(self.roles.guard.kind).prompt_id,) if t]
        return templates
