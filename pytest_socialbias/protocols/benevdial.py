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

from .. import prompts
from ..cases import Case, Suite, SuiteOverrides, SuiteSource, judge_options, marker_name
from ..errors import ModelCallError
from ..judges.treatment import DEFAULT_USER_LABEL, judge_pair, judge_treatment
from ..vocabulary import BIASED_CLASSES, EMPTY_REPLY, JUDGE_ERROR, MODEL_ERROR
from .base import Protocol
from .dialogue import (
    EmptyReply,
    UserSimulatorFailure,
    check_reply,
    draw_user_message,
    simulator_error,
    situation_text,
    target_messages,
    turn_record,
)
from .user_check import EMBEDDED_CHECK, JUDGE_CHECK, REPORT_FINDINGS, SimulatorRecord, UserTurnContext


def agent_system_prompt(conditions, role, persona, run_system_prompt: str | None) -> str:
    """The role's agent prompt with its persona line; the run's own system prompt first."""
    text = conditions.agent_system_prompt(role.id, persona).strip()
    return f"{run_system_prompt.strip()}\n\n{text}" if run_system_prompt else text


async def simulate_person(
    user_model, conditions, role, need, profile, turns: list[dict], usage, record: SimulatorRecord, judge=None,
    embedded: bool = False,
) -> tuple[str, list]:
    """The simulated person's next message, and the draws rejected before it: checked as
    every simulated user's (``user_check``) against its own brief, whose profile and
    request it may say but whose instructions it must not echo, and the agent's last reply."""
    template = prompts.load("benevdial_user")
    situation = situation_text(turns, "person")
    profile_text = conditions.profile_text(profile)
    messages = template.messages(
        user_label=role.user_label,
        agent_title=role.title,
        profile=profile_text,
        request=need.request,
        situation=situation,
    )
    context = UserTurnContext(
        hidden=(messages[0]["content"],),
        allowed=(profile_text, need.request, role.user_label, role.title),
        previous_reply=turns[-1]["assistant"] if turns else None,
        name=profile.name,
    )
    return await draw_user_message(user_model, messages, template.id, len(turns) + 1, usage, context=context,
                                   record=record, judge=judge, history=turns, embedded=embedded)


def persona_dict(persona) -> dict | None:
    return None if persona is None else persona.to_dict()


def _verdict_record(verdict, guidance: str, demographics: bool) -> dict:
    return {"class": verdict.cls, "probs": verdict.probs, "guidance": guidance, "demographics": demographics}


async def _classify(judge, conditions, role, condition_profile, persona, turns, options, usage):
    return await judge_treatment(
        judge,
        dialogue=[{"user": t["user"], "assistant": t["assistant"]} for t in turns],
        agent_title=role.title,
        user_label=role.user_label,
        guidance=options["guidance"],
        user_profile=conditions.profile_text(condition_profile) if options["demographics"] else None,
        agent_persona=conditions.persona_line(persona) or None if options["demographics"] else None,
        usage=usage,
    )


async def run_agent(case, roles, usage) -> dict:
    conditions = case.extra["conditions"]
    condition = case.extra["condition"]
    options = case.extra["options"]
    role = conditions.roles[condition.role]
    need = next(n for n in role.needs if n.id == condition.need)
    system = agent_system_prompt(conditions, role, condition.persona, roles.system_prompt)
    turns: list[dict] = []
    errors: list[dict] = []
    record = SimulatorRecord(report_only=roles.simulator_findings == REPORT_FINDINGS)
    simulator_judge = roles.judge if roles.simulator_check == JUDGE_CHECK else None
    embedded = roles.simulator_check == EMBEDDED_CHECK
    try:
        for _ in range(case.turns):
            message, rejected = await simulate_person(
                roles.user, conditions, role, need, condition.profile, turns, usage, record, simulator_judge, embedded
            )
            reply = await roles.target.chat(target_messages(system, turns, message), usage=usage)
            turns.append(turn_record(message, reply, rejected))
            check_reply(reply, roles.target, len(turns))
    except UserSimulatorFailure as exc:
        errors.append(simulator_error(exc))
    except EmptyReply as exc:
        errors.append({"kind": EMPTY_REPLY, "role": "target", "message": str(exc)})
    except ModelCallError as exc:
        errors.append({"kind": MODEL_ERROR, "role": exc.role, "message": str(exc)})
    verdict = None
    if not errors:
        try:
            verdict = await _classify(roles.judge, conditions, role, condition.profile, condition.persona, turns, options, usage)
        except ModelCallError as exc:
            errors.append({"kind": MODEL_ERROR, "role": exc.role, "message": str(exc)})
        else:
            if verdict.error:
                errors.append({"kind": JUDGE_ERROR, "role": "judge", "message": verdict.error})
    cls = verdict.cls if verdict is not None else None
    return {
        "labels": {"bias": [None if cls is None else int(cls in BIASED_CLASSES)], "refusal": [], "treatment": [cls]},
        "turns": turns,
        "errors": errors,
        "role_breaks": sum(record.flagged.values()),
        "simulator": record.to_dict(),
        "role": condition.role,
        "need": condition.need,
        "profile": condition.profile.to_dict(),
        "persona": persona_dict(condition.persona),
        "treatment": _verdict_record(verdict, options["guidance"], options["demographics"]) if verdict else None,
        "templates": sorted(prompts.load(n).id for n in ("benevdial_user", "judge_treatment")
                            + (("judge_user_reveals", "judge_user_follows") if simulator_judge is not None else ())),
    }


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


async def _scripted_dialogue(target, system: str, user_turns: list[str], usage) -> list[dict]:
    turns: list[dict] = []
    for message in user_turns:
        reply = await target.chat(target_messages(system, turns, message), usage=usage)
        turns.append(turn_record(message, reply))
        check_reply(reply, target, len(turns))
    return turns


async def run_pair(case, roles, usage) -> dict:
    spec = case.extra["pair"]  # a generated Pair, or a hand-written pair (dict)
    options = case.extra["options"]
    conditions = case.extra.get("conditions")
    if isinstance(spec, dict):
        member_turns = [list(spec["a"]), list(spec["b"])]
        system = spec["system"] if not roles.system_prompt else f"{roles.system_prompt.strip()}\n\n{spec['system']}"
        agent_title, axis, values = spec["agent_title"], spec["axis"], list(spec["values"])
        user_label = spec.get("user_label", DEFAULT_USER_LABEL)
        meta = {"role": spec["role"], "need": None, "profiles": None, "persona": None}
        profiles = [None, None]
    else:
        role = conditions.roles[spec.role]
        need = next(n for n in role.needs if n.id == spec.need)
        system = agent_system_prompt(conditions, role, spec.persona, roles.system_prompt)
        member_turns = [pair_user_turns(conditions, p, need, case.turns) for p in (spec.a, spec.b)]
        agent_title, user_label, axis = role.title, role.user_label, spec.axis
        values = [spec.a.value(axis), spec.b.value(axis)]
        profiles = [spec.a, spec.b]
        meta = {
            "role": spec.role, "need": spec.need,
            "profiles": [spec.a.to_dict(), spec.b.to_dict()], "persona": persona_dict(spec.persona),
        }
    errors: list[dict] = []
    dialogues = [[], []]
    try:
        dialogues = list(
            await asyncio.gather(*(_scripted_dialogue(roles.target, system, t, usage) for t in member_turns))
        )
    except ModelCallError as exc:
        errors.append({"kind": MODEL_ERROR, "role": exc.role, "message": str(exc)})
    except EmptyReply as exc:
        errors.append({"kind": EMPTY_REPLY, "role": "target", "message": str(exc)})
    first = shown_first(case.id)
    shown = dialogues if first else dialogues[::-1]
    classes = [None, None]
    probs = [None, None]
    worse = dimension = None
    if not errors:
        if isinstance(spec, dict):
            a_text, b_text = spec["describe"] if first else spec["describe"][::-1]
            difference_shown = f"{axis}: in dialogue A {a_text}; in dialogue B {b_text}; otherwise the same situation"
        else:
            shown_profiles = profiles if first else profiles[::-1]
            difference_shown = difference_text(conditions, axis, *shown_profiles)
        plain = [[{"user": t["user"], "assistant": t["assistant"]} for t in d] for d in shown]
        tasks = [judge_pair(roles.judge, a=plain[0], b=plain[1], difference=difference_shown, agent_title=agent_title, usage=usage)]
        for index, dialogue in enumerate(dialogues):
            tasks.append(
                judge_treatment(
                    roles.judge,
                    dialogue=[{"user": t["user"], "assistant": t["assistant"]} for t in dialogue],
                    agent_title=agent_title,
                    user_label=user_label,
                    guidance=options["guidance"],
                    user_profile=(conditions.profile_text(profiles[index]) if options["demographics"] and profiles[index] else None),
                    usage=usage,
                )
            )
        try:
            pair_verdict, *singles = await asyncio.gather(*tasks)
        except ModelCallError as exc:
            errors.append({"kind": MODEL_ERROR, "role": exc.role, "message": str(exc)})
        else:
            if pair_verdict.error:
                errors.append({"kind": JUDGE_ERROR, "role": "judge", "message": pair_verdict.error})
            elif pair_verdict.worse in ("A", "B"):
                # Map the shown letter back to the member: a is shown as A when `first`.
                member = 0 if (pair_verdict.worse == "A") == first else 1
                worse = "ab"[member]
                dimension = pair_verdict.dimension
            else:
                worse = "none"
            for index, verdict in enumerate(singles):
                classes[index], probs[index] = verdict.cls, verdict.probs
                if verdict.error:
                    errors.append({"kind": JUDGE_ERROR, "role": "judge", "dialogue": "ab"[index],
                                   "message": f"dialogue {'ab'[index]}: {verdict.error}"})
    disparate = None if worse is None else int(worse in ("a", "b"))
    return {
        "labels": {"bias": [disparate], "refusal": [], "treatment": classes},
        "turns": dialogues[0],
        "errors": errors,
        "role_breaks": 0,
        "role": meta["role"],
        "need": meta["need"],
        "persona": meta["persona"],
        "pair": {
            "axis": axis,
            "values": values,
            "profiles": meta["profiles"],
            "shown_first": "a" if first else "b",
            "disfavoured": worse,  # "a", "b", "none" or None (unreadable / not judged)
            "disfavoured_value": values["ab".index(worse)] if worse in ("a", "b") else None,
            "dimension": dimension,
            "turns_b": dialogues[1],
            "treatment_probs": probs,
            "guidance": options["guidance"],
        },
        "templates": sorted(prompts.load(n).id for n in ("judge_pair", "judge_treatment")),
    }


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
