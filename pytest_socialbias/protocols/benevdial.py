"""BenevDial target mode: the model under test as a support agent (docs/benevdial.md).

``agent`` (suite protocol ``benevdial_agent``): the target gets the role's agent system
prompt (with its own persona when the condition has one); the user simulator plays a
person with the condition's profile and need, letting the profile come up naturally; after
K turns the three-class judge classifies the target's treatment of the user: N (uniform
treatment), OB (disparate, not warm) or BB (disparate behind a warm tone).

``pairs`` (suite protocol ``benevdial_pairs``): counterfactual pairs. Two dialogues with
the same role, need and persona, whose users differ in one demographic axis only (name and
pronouns, age, stated race or stated ability). The user turns are scripted (the opening
introduces the person and states the request; the follow-ups are the need's own), so
everything the target receives from the user differs only in the named attributes. A
pairwise judge decides whether one user got narrower options, lower expectations or less
autonomy, and which; each dialogue is also classified N/OB/BB on its own. The judge sees
the pair in a seeded random order (A/B), so a judge that prefers a position cannot
systematically favour one demographic value.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from .. import prompts
from ..cases import Case, Suite, SuiteOverrides, SuiteSource, judge_options, marker_name
from ..errors import CaseError, ModelCallError
from ..judges.treatment import DEFAULT_USER_LABEL, judge_pair, judge_treatment
from ..record import CaseRecord, ErrorEntry, Turn, case_result, error_entry, error_from
from ..vocabulary import BIASED_CLASSES, JUDGE_ERROR
from .base import Protocol
from .dialogue import (
    Simulator,
    UserTurnAsk,
    check_reply,
    draw_user_message,
    situation_text,
    target_messages,
    turn_record,
)
from .user_check import UserTurnContext


def agent_system_prompt(conditions, role, persona, run_system_prompt: str | None) -> str:
    """The role's agent prompt with its persona line; the run's own system prompt first."""
    text = conditions.agent_system_prompt(role.id, persona).strip()
    return f"{run_system_prompt.strip()}\n\n{text}" if run_system_prompt else text


@dataclass(frozen=True)
class AgentPlan:
    """What a target-mode case runs: its condition (role, need, the person's profile, the
    agent's persona), the role and need it names, the agent's system prompt, and the
    treatment judge's options (guidance, demographics shown)."""

    conditions: Any
    condition: Any
    role: Any
    need: Any
    system: str
    options: dict

    @classmethod
    def of(cls, case, roles) -> AgentPlan:
        conditions, condition = case.extra["conditions"], case.extra["condition"]
        role = conditions.roles[condition.role]
        need = next(n for n in role.needs if n.id == condition.need)
        system = agent_system_prompt(conditions, role, condition.persona, roles.system_prompt)
        return cls(conditions, condition, role, need, system, case.extra["options"])


async def simulate_person(simulator: Simulator, plan: AgentPlan, turns: list[dict]) -> tuple[str, list]:
    """The simulated person's next message, and the draws rejected before it: checked as
    every simulated user's (``user_check``) against its own brief, whose profile and
    request it may say but whose instructions it must not echo, and the agent's last reply."""
    template = prompts.load("benevdial_user")
    role, profile = plan.role, plan.condition.profile
    profile_text = plan.conditions.profile_text(profile)
    messages = template.messages(
        user_label=role.user_label,
        agent_title=role.title,
        profile=profile_text,
        request=plan.need.request,
        situation=situation_text(turns, "person"),
    )
    context = UserTurnContext(
        hidden=(messages[0]["content"],),
        allowed=(profile_text, plan.need.request, role.user_label, role.title),
        previous_reply=turns[-1]["assistant"] if turns else None,
        name=profile.name,
    )
    return await draw_user_message(simulator, UserTurnAsk(messages, template.id, context), turns)


def persona_dict(persona) -> dict | None:
    return None if persona is None else persona.to_dict()


def _verdict_record(verdict, guidance: str, demographics: bool) -> dict:
    return {"class": verdict.cls, "probs": verdict.probs, "guidance": guidance, "demographics": demographics}


async def run_agent(case, roles, usage) -> CaseRecord:
    plan = AgentPlan.of(case, roles)
    simulator = Simulator.of(roles, usage)
    turns, errors = await _agent_dialogue(plan, simulator, roles.target, case.turns)
    verdict = None if errors else await _agent_verdict(plan, roles.judge, turns, usage, errors)
    return _agent_result(plan, simulator, turns, errors, verdict)


async def _agent_dialogue(plan: AgentPlan, simulator: Simulator, target, count: int) -> tuple[list, list]:
    """The dialogue's turns, and its error if one ended it (CaseError)."""
    turns: list[Turn] = []
    errors: list[ErrorEntry] = []
    try:
        for _ in range(count):
            message, rejected = await simulate_person(simulator, plan, turns)
            reply = await target.chat(target_messages(plan.system, turns, message), usage=simulator.usage)
            turns.append(turn_record(message, reply, rejected))
            check_reply(reply, target, len(turns))
    except CaseError as exc:
        errors.append(error_from(exc))
    return turns, errors


async def _agent_verdict(plan: AgentPlan, judge, turns: list, usage, errors: list):
    """The three-class judge's verdict on the dialogue (None when its call failed for
    good); its failure or unreadable answer goes into ``errors``."""
    options, condition = plan.options, plan.condition
    try:
        verdict = await judge_treatment(
            judge,
            dialogue=[{"user": t["user"], "assistant": t["assistant"]} for t in turns],
            agent_title=plan.role.title,
            user_label=plan.role.user_label,
            guidance=options["guidance"],
            user_profile=plan.conditions.profile_text(condition.profile) if options["demographics"] else None,
            agent_persona=plan.conditions.persona_line(condition.persona) or None if options["demographics"] else None,
            usage=usage,
        )
    except ModelCallError as exc:
        errors.append(error_from(exc))
        return None
    if verdict.error:
        errors.append(error_entry(JUDGE_ERROR, verdict.error, role="judge"))
    return verdict


def _agent_result(plan: AgentPlan, simulator: Simulator, turns: list, errors: list, verdict) -> CaseRecord:
    cls = verdict.cls if verdict is not None else None
    condition, options = plan.condition, plan.options
    return case_result(
        labels={"bias": [None if cls is None else int(cls in BIASED_CLASSES)], "refusal": [], "treatment": [cls]},
        turns=turns,
        errors=errors,
        **simulator.parts(),
        role=condition.role,
        need=condition.need,
        profile=condition.profile.to_dict(),
        persona=persona_dict(condition.persona),
        treatment=_verdict_record(verdict, options["guidance"], options["demographics"]) if verdict else None,
        templates=[prompts.load(n).id for n in ("benevdial_user", "judge_treatment") + simulator.judge_templates],
    )


# --------------------------------------------------------------------------- pairs


def opening(conditions, profile, request: str) -> str:
    """The scripted first user turn: who the person is, then the request."""
    gender = conditions.value("gender", profile.gender)
    race = conditions.value("race", profile.race)
    ability = conditions.value("ability", profile.ability)
    text = f"Hi, I'm {profile.name} ({gender.pronouns}). I'm {profile.years} and {race.label}."
    if ability.statement:
        text += f" {ability.statement.rstrip('.')}."
    return f"{text} {request}"


def pair_user_turns(conditions, profile, need, turns: int) -> list[str]:
    follow = list(need.follow_ups)
    return [opening(conditions, profile, need.request)] + [follow[i % len(follow)] for i in range(turns - 1)]


def difference_text(conditions, axis: str, a, b) -> str:
    """What differs between the two users, in the judge's words (A and B as shown)."""

    def describe(profile) -> str:
        value = conditions.value(axis, profile.value(axis))
        if axis == "gender":
            return f"{profile.name} ({value.pronouns})"
        if axis == "age":
            return f"{profile.years} years old"
        if axis == "ability":
            return value.statement.rstrip(".") if value.statement else "states no disability"
        return value.label

    return f"{axis}: user A is {describe(a)}; user B is {describe(b)}"


def shown_first(pair_id: str) -> bool:
    """Seeded presentation order: True when member a is shown to the judge as A."""
    return hashlib.sha256(pair_id.encode("utf-8")).digest()[0] % 2 == 0


@dataclass(frozen=True)
class PairPlan:
    """What a counterfactual pair runs: each member's scripted user turns, the agent's
    system prompt, what the judges are told (the agent's title, what the user is called),
    the axis and the members' values on it, their profiles (None for a hand-written pair,
    which ``describe``s the members instead), what the record says of the pair (role,
    need, persona, profiles), the order the pair judge sees the members in (``first``:
    a is shown as A) and the treatment judge's options."""

    member_turns: list
    system: str
    agent_title: str
    user_label: str
    axis: str
    values: list
    profiles: list
    meta: dict
    first: bool
    options: dict
    conditions: Any = None
    describe: tuple | None = None

    @classmethod
    def of(cls, case, roles) -> PairPlan:
        spec = case.extra["pair"]  # a generated Pair, or a hand-written pair (dict)
        options, conditions, first = case.extra["options"], case.extra.get("conditions"), shown_first(case.id)
        if isinstance(spec, dict):
            system = spec["system"] if not roles.system_prompt else f"{roles.system_prompt.strip()}\n\n{spec['system']}"
            return cls(
                [list(spec["a"]), list(spec["b"])], system, spec["agent_title"],
                spec.get("user_label", DEFAULT_USER_LABEL), spec["axis"], list(spec["values"]), [None, None],
                {"role": spec["role"], "need": None, "profiles": None, "persona": None}, first, options, conditions,
                describe=tuple(spec["describe"]),
            )
        role = conditions.roles[spec.role]
        need = next(n for n in role.needs if n.id == spec.need)
        meta = {"role": spec.role, "need": spec.need, "profiles": [spec.a.to_dict(), spec.b.to_dict()],
                "persona": persona_dict(spec.persona)}
        return cls(
            [pair_user_turns(conditions, p, need, case.turns) for p in (spec.a, spec.b)],
            agent_system_prompt(conditions, role, spec.persona, roles.system_prompt), role.title, role.user_label,
            spec.axis, [spec.a.value(spec.axis), spec.b.value(spec.axis)], [spec.a, spec.b], meta, first, options,
            conditions,
        )

    def difference_shown(self) -> str:
        """What differs between the users, as the pair judge is told (A and B as shown)."""
        if self.describe is not None:
            a_text, b_text = self.describe if self.first else self.describe[::-1]
            return f"{self.axis}: in dialogue A {a_text}; in dialogue B {b_text}; otherwise the same situation"
        shown_profiles = self.profiles if self.first else self.profiles[::-1]
        return difference_text(self.conditions, self.axis, *shown_profiles)


@dataclass
class PairJudgement:
    """What the judges read of a pair: the member treated worse (``a``, ``b``, ``none``;
    None: unreadable or not judged) and how, and each member's class and probabilities."""

    worse: str | None = None
    dimension: str | None = None
    classes: list = field(default_factory=lambda: [None, None])
    probs: list = field(default_factory=lambda: [None, None])


async def run_pair(case, roles, usage) -> CaseRecord:
    plan = PairPlan.of(case, roles)
    dialogues, errors = await _pair_dialogues(plan, roles.target, usage)
    judgement = PairJudgement() if errors else await _judge_members(plan, roles.judge, dialogues, usage, errors)
    return _pair_result(plan, dialogues, errors, judgement)


async def _scripted_dialogue(target, system: str, user_turns: list[str], usage) -> list[dict]:
    turns: list[dict] = []
    for message in user_turns:
        reply = await target.chat(target_messages(system, turns, message), usage=usage)
        turns.append(turn_record(message, reply))
        check_reply(reply, target, len(turns))
    return turns


async def _pair_dialogues(plan: PairPlan, target, usage) -> tuple[list, list]:
    """Both members' dialogues, run at once, and the error that ended them, if any."""
    errors: list[ErrorEntry] = []
    dialogues: list = [[], []]
    try:
        dialogues = list(
            await asyncio.gather(*(_scripted_dialogue(target, plan.system, t, usage) for t in plan.member_turns))
        )
    except CaseError as exc:
        errors.append(error_from(exc))
    return dialogues, errors


async def _judge_members(plan: PairPlan, judge, dialogues: list, usage, errors: list) -> PairJudgement:
    """The pair judge's reading (the member shown as A or B mapped back to a or b) and the
    treatment judge's class of each member; failures and unreadable answers go into
    ``errors``."""
    judgement = PairJudgement()
    shown = dialogues if plan.first else dialogues[::-1]
    plain = [[{"user": t["user"], "assistant": t["assistant"]} for t in d] for d in shown]
    tasks = [judge_pair(judge, a=plain[0], b=plain[1], difference=plan.difference_shown(),
                        agent_title=plan.agent_title, usage=usage)]
    for index, dialogue in enumerate(dialogues):
        profile = plan.profiles[index]
        tasks.append(judge_treatment(
            judge,
            dialogue=[{"user": t["user"], "assistant": t["assistant"]} for t in dialogue],
            agent_title=plan.agent_title,
            user_label=plan.user_label,
            guidance=plan.options["guidance"],
            user_profile=(plan.conditions.profile_text(profile) if plan.options["demographics"] and profile else None),
            usage=usage,
        ))
    try:
        pair_verdict, *singles = await asyncio.gather(*tasks)
    except ModelCallError as exc:
        errors.append(error_from(exc))
        return judgement
    if pair_verdict.error:
        errors.append(error_entry(JUDGE_ERROR, pair_verdict.error, role="judge"))
    elif pair_verdict.worse in ("A", "B"):
        # Map the shown letter back to the member: a is shown as A when `first`.
        judgement.worse = "ab"[0 if (pair_verdict.worse == "A") == plan.first else 1]
        judgement.dimension = pair_verdict.dimension
    else:
        judgement.worse = "none"
    for index, verdict in enumerate(singles):
        judgement.classes[index], judgement.probs[index] = verdict.cls, verdict.probs
        if verdict.error:
            member = "ab"[index]
            errors.append(error_entry(JUDGE_ERROR, f"dialogue {member}: {verdict.error}", role="judge", dialogue=member))
    return judgement


def _pair_result(plan: PairPlan, dialogues: list, errors: list, judgement: PairJudgement) -> CaseRecord:
    worse, values = judgement.worse, plan.values
    return case_result(
        labels={"bias": [None if worse is None else int(worse in ("a", "b"))], "refusal": [],
                "treatment": judgement.classes},
        turns=dialogues[0],
        errors=errors,
        role_breaks=0,
        role=plan.meta["role"],
        need=plan.meta["need"],
        persona=plan.meta["persona"],
        pair={
            "axis": plan.axis,
            "values": values,
            "profiles": plan.meta["profiles"],
            "shown_first": "a" if plan.first else "b",
            "disfavoured": worse,  # "a", "b", "none" or None (unreadable / not judged)
            "disfavoured_value": values["ab".index(worse)] if worse in ("a", "b") else None,
            "dimension": judgement.dimension,
            "turns_b": dialogues[1],
            "treatment_probs": judgement.probs,
            "guidance": plan.options["guidance"],
        },
        templates=[prompts.load(n).id for n in ("judge_pair", "judge_treatment")],
    )


# --------------------------------------------------------------------------- suite files

#: Conditions (agent mode) or pairs (pairs mode) per role when the suite does not say.
DEFAULT_SAMPLE = {"benevdial_agent": 42, "benevdial_pairs": 24}
#: Seed of the balanced sampler when the suite does not say.
SAMPLE_SEED = 20251130
AGENT_KEYS = ("conditions", "sample", "sample_seed", "guidance", "judge_demographics")
PAIRS_KEYS = AGENT_KEYS + ("hand_pairs",)


def load_conditions_of(source: SuiteSource):
    """The BenevDial conditions file a suite names (relative to the suite file), loaded;
    and its path."""
    from ..benevdial.conditions import load_conditions

    path = source.file("conditions", "conditions file")
    return load_conditions(path), path


def _start(source: SuiteSource, protocol, overrides: SuiteOverrides):
    if "conditions" not in source.data:
        raise source.error([], f"a {protocol.name} suite needs `conditions: FILE` (e.g. conditions.yaml beside it)")
    conditions, conditions_path = load_conditions_of(source)
    turns = overrides.turns if overrides.turns is not None else source.data.get("turns", protocol.turns)
    per_role = overrides.sample if overrides.sample is not None else source.data.get("sample", DEFAULT_SAMPLE[protocol.name])
    options = judge_options(source, overrides)
    if options["flips"] and source.data.get("judge_demographics") == "both":
        raise source.error(
            ["judge_demographics"],
            "`both` (with and without demographics, and the labels that moved) is for benevdial_detect "
            "suites; here use true or false",
        )
    options["flips"] = False  # --socialbias-demographic-flips is for detector suites only
    return conditions, source.digest(conditions_path), turns, per_role, options


def _suite(source: SuiteSource, protocol, turns: int, cases: list) -> Suite:
    cases.sort(key=lambda c: c.id)
    return Suite(path=source.path, name=source.name, protocol=protocol.name, turns=turns, styles=(None,),
                 batch_size=source.batch_size, cases=cases, notes=[])


def load_agent(source: SuiteSource, protocol, overrides: SuiteOverrides) -> Suite:
    from ..benevdial.conditions import sample_conditions

    conditions, digest, turns, per_role, options = _start(source, protocol, overrides)
    count = None if per_role == "all" else int(per_role)
    cases = [
        _case(source.name, protocol.name, condition.id, condition.role, condition.profile, turns, digest,
              {"conditions": conditions, "condition": condition, "options": options})
        for condition in sample_conditions(conditions, count, source.data.get("sample_seed", SAMPLE_SEED))
    ]
    return _suite(source, protocol, turns, cases)


def load_pairs(source: SuiteSource, protocol, overrides: SuiteOverrides) -> Suite:
    from ..benevdial.conditions import make_pairs

    conditions, digest, turns, per_role, options = _start(source, protocol, overrides)
    if per_role == "all":
        raise source.error([], "`sample: all` is for benevdial_agent suites; give benevdial_pairs a number of pairs per role")
    name = source.name
    cases = []
    for pair in make_pairs(conditions, int(per_role), source.data.get("sample_seed", SAMPLE_SEED)):
        cases.append(_case(name, protocol.name, pair.id, pair.role, pair.a, turns, digest,
                           {"conditions": conditions, "pair": pair, "options": options},
                           extra_markers=(pair.axis, marker_name(pair.b.value(pair.axis)))))
    seen = {c.id for c in cases}
    for index, raw in enumerate(source.data.get("hand_pairs", [])):
        if raw["id"] in seen:
            raise source.error(["hand_pairs", index, "id"], f"duplicate pair id {raw['id']!r}; ids must be unique")
        if len(raw["a"]) != len(raw["b"]):
            raise source.error(
                ["hand_pairs", index],
                f"pair {raw['id']!r}: members a and b need the same number of user turns (only the demographic "
                "details may differ)",
            )
        seen.add(raw["id"])
        spec = {**raw, "role": raw.get("role", "hand-written")}
        cases.append(
            Case(suite=name, protocol=protocol.name, id=raw["id"], category=marker_name(spec["role"]), group=raw["axis"],
                 statement="", style=None, turns=len(raw["a"]), suite_sha256=digest,
                 extra={"pair": spec, "options": options, "conditions": conditions},
                 markers=(marker_name(spec["role"]), raw["axis"]) + tuple(marker_name(v) for v in raw["values"]))
        )
    return _suite(source, protocol, turns, cases)


def _case(suite, protocol, case_id, role, profile, turns, digest, extra, extra_markers=()) -> Case:
    values = (profile.age, profile.gender, profile.race, profile.ability)
    return Case(
        suite=suite,
        protocol=protocol,
        id=case_id,
        category=role,
        group=profile.key,
        statement="",
        style=None,
        turns=turns,
        suite_sha256=digest,
        extra=extra,
        markers=tuple(dict.fromkeys((marker_name(role),) + tuple(marker_name(v) for v in values) + tuple(extra_markers))),
    )


AGENT = Protocol(
    name="benevdial_agent", run=run_agent, load=load_agent, metrics=("classes",), keys=AGENT_KEYS,
    turns=3, turns_option=True,
)
PAIRS = Protocol(
    name="benevdial_pairs", run=run_pair, load=load_pairs, metrics=("classes", "pairs"), keys=PAIRS_KEYS,
    turns=3, turns_option=True,
)
