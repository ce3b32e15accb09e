"""BenevDial detector mode: how well do judges, ensembles and guards see benevolent bias?

One case is one labelled dialogue (docs/dialogues-format.md) in one variant (``clean``, or
a robustness transformation of its turns: ``fold``, ``mask``, ``shuffle``, ``foldmask``,
``randmask``, ``foldrandmask``; of its agent turns unless the suite's ``variant_scope`` says ``all`` or
``paper``, benevdial/transforms.py). Every configured detector reads it:

* each ``--judge`` (the three-class treatment judge at the suite's guidance, with or
  without demographics): detector ``judge`` (or ``judge-1``, ``judge-2``, ... when there
  are several), and then their ``ensemble`` (probability average, or majority vote where
  a judge gives no probabilities; judges/ensemble.py);
* the guard of ``--socialbias-guard``, screening every agent turn as a unit (the turn
  alone, with the dialogue before it, or with the user turn before it), or the whole
  dialogue as one unit, the dialogue flagged if any unit is: detector ``guard``. A
  classifier head (``hfcls:``) is such a guard; a three-class one also gives a class.

Every detection says its ``output``: ``classes`` (N / OB / BB: judges, ensembles,
three-class classifiers) or ``binary`` (flagged or not: chat guards, binary
classifiers, which cannot tell OB from BB).

The primary detector (the ensemble, else the judge, else the guard) sets the item's
outcome (``biased`` when it flags the dialogue); every detector's reading is in the record.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import prompts
from ..benevdial.dialogues import as_turn_pairs
from ..cases import Case, Suite, SuiteOverrides, SuiteSource, judge_options, marker_name
from ..errors import ModelCallError
from ..judges.ensemble import combine
from ..judges.treatment import DEFAULT_USER_LABEL, judge_treatment
from ..record import CaseRecord, ErrorEntry, case_result, error_entry, error_from
from ..vocabulary import (
    AXES,
    DETECTOR_ERROR,
    GUARD_ERROR,
    JUDGE_ERROR,
    PERSONA_AXES,
    VARIANTS,
    WITH_DEMOGRAPHICS,
)
from ..vocabulary import BIASED_CLASSES as BIASED
from .base import Protocol


def detector_ids(judges: int, guard: bool) -> list[str]:
    ids = ["judge"] if judges == 1 else [f"judge-{i}" for i in range(1, judges + 1)]
    if judges > 1:
        ids.append("ensemble")
    if guard:
        ids.append("guard")
    return ids


def primary_detector(judges: int, guard: bool) -> str | None:
    if judges > 1:
        return "ensemble"
    if judges == 1:
        return "judge"
    return "guard" if guard else None


def demographics_text(conditions, dialogue: dict) -> tuple[str, str | None]:
    """The user's and the agent's demographics in words, for a judge that is shown them."""

    def label(axis, value):
        if conditions is None or value is None:
            return value
        try:
            return conditions.value(axis, value).label
        except (KeyError, ValueError):
            return value

    user = dialogue["user"]
    user_text = ", ".join(f"{axis} {label(axis, user[axis])}" for axis in AXES)
    agent = dialogue.get("agent")
    agent_text = None if not agent else ", ".join(
        f"{axis} {label(axis, agent.get(axis))}" for axis in PERSONA_AXES if agent.get(axis)
    )
    return user_text, agent_text


def agent_title(conditions, role: str) -> str:
    if conditions is not None and role in conditions.roles:
        return conditions.roles[role].title
    return role.replace("-", " ") + " agent"


def user_label(conditions, role: str) -> str:
    """What the role calls the person it helps (its ``user_label``), else "user"."""
    if conditions is not None and role in conditions.roles:
        return conditions.roles[role].user_label
    return DEFAULT_USER_LABEL


@dataclass(frozen=True)
class DetectPlan:
    """What a detector case runs: the labelled dialogue in its variant (``dialogue``, and
    its agent turns with the user turns they answer, ``pairs``), the judges and the guard
    that read it, the detectors' ids and the primary one, and what the judges are told
    (the agent's title, what the user is called, the demographics in words)."""

    variant: str
    dialogue: dict
    pairs: list
    judges: list
    guard: Any
    ids: list
    primary: str | None
    options: dict
    title: str
    label: str
    user_text: str | None
    agent_text: str | None

    @property
    def flips(self) -> bool:
        """Each judge also reads the dialogue shown the demographics (``judge+demographics``)."""
        return bool(self.options.get("flips", False))

    @classmethod
    def of(cls, case, roles) -> DetectPlan:
        from ..benevdial.transforms import transform_dialogue

        extra, options, variant = case.extra, case.extra["options"], case.style or "clean"
        conditions = extra.get("conditions")
        dialogue = transform_dialogue(
            extra["dialogue"], variant, seed=options["variant_seed"], cues=extra.get("cues", ()),
            scope=options["variant_scope"], mask=options.get("mask_token", MASK_TOKEN),
        )
        pairs = [{"user": t["user"], "assistant": t["assistant"]} for t in as_turn_pairs(dialogue["turns"])]
        judges = [roles.judge] + list(roles.extra_judges) if roles.judge is not None else []
        guard = roles.guard if options.get("use_guard", True) else None
        shown = options["demographics"] or options.get("flips", False)
        user_text, agent_text = demographics_text(conditions, dialogue) if shown else (None, None)
        return cls(
            variant, dialogue, pairs, judges, guard, detector_ids(len(judges), guard is not None),
            primary_detector(len(judges), guard is not None), options, agent_title(conditions, dialogue["role"]),
            user_label(conditions, dialogue["role"]), user_text, agent_text,
        )

    def calls(self, usage) -> list[tuple[str, Any]]:
        """(detector id, its reading as an awaitable): each judge at the suite's setting;
        with flips, each judge without the demographics and again with them; the guard."""
        def classify(judge, shown: bool):
            return judge_treatment(
                judge, dialogue=self.pairs, agent_title=self.title, user_label=self.label,
                guidance=self.options["guidance"], user_profile=self.user_text if shown else None,
                agent_persona=self.agent_text if shown else None, usage=usage,
            )

        calls = []
        for detector, judge in zip([i for i in self.ids if i.startswith("judge")], self.judges):
            calls.append((detector, classify(judge, self.options["demographics"])))
            if self.flips:
                calls.append((detector + WITH_DEMOGRAPHICS, classify(judge, True)))
        if self.guard is not None:
            from ..judges.guards import screen_dialogue

            calls.append(("guard", screen_dialogue(self.guard.model, self.guard.kind, self.dialogue["turns"],
                                                   self.guard_unit(), usage)))
        return calls

    def guard_unit(self) -> str:
        """The guard spec's unit=, else --socialbias-guard-unit or the suite's, else the
        unit the guard is evaluated in by its authors and by BenevDial (a classifier's
        depends on its head: judges/classifier.py)."""
        from ..judges.guards import guard_kind

        guard = self.guard
        return guard.unit or self.options["guard_unit"] or guard.default_unit or guard_kind(guard.kind).default_unit

    def templates(self) -> list[str]:
        templates = [prompts.load("judge_treatment").id] if self.judges else []
        if self.guard is not None:
            from ..judges.guards import guard_kind

            # The prompt file a prompt guard is sent (an override's id names its hash).
            templates += [t for t in (guard_kind(self.guard.kind).prompt_id,) if t]
        return templates


async def run_detect(case, roles, usage) -> CaseRecord:
    plan = DetectPlan.of(case, roles)
    calls = plan.calls(usage)
    results = await asyncio.gather(*(call for _, call in calls), return_exceptions=True)
    errors: list[ErrorEntry] = []
    detections = {detector: _detection(plan, detector, result, errors)
                  for detector, result in zip([d for d, _ in calls], results)}
    if "ensemble" in plan.ids:
        for suffix in ("", WITH_DEMOGRAPHICS) if plan.flips else ("",):
            detections["ensemble" + suffix] = _ensemble(plan, detections, suffix, errors)
    return _detect_result(plan, detections, errors)


def _detection(plan: DetectPlan, detector: str, result, errors: list) -> dict:
    """One detector's reading of the dialogue; its failure (a second detector's is a
    detector error, which voids nothing) or unreadable answer goes into ``errors``."""
    if isinstance(result, ModelCallError):
        errors.append(error_from(result, where=detector, secondary=detector != plan.primary))
        return {"class": None, "flagged": None, "probs": None, "error": str(result)}
    if isinstance(result, BaseException):
        raise result
    if detector == "guard":
        return _guard_detection(plan, result, errors)
    flagged = None if result.cls is None else result.cls in BIASED
    if result.error:
        kind = JUDGE_ERROR if detector == plan.primary else DETECTOR_ERROR
        errors.append(error_entry(kind, f"{detector}: {result.error}", role="judge"))
    return {"class": result.cls, "flagged": flagged, "probs": result.probs, "output": "classes",
            # the judge setting that read it (rows of the `table` command)
            "guidance": plan.options["guidance"],
            "demographics": detector.endswith(WITH_DEMOGRAPHICS) or plan.options["demographics"]}


def _guard_detection(plan: DetectPlan, result: dict, errors: list) -> dict:
    detection = {
        "class": result.get("class"), "flagged": result["flagged"], "probs": result.get("probs"),
        "units": result["units"], "unit": result["unit"], "output": plan.guard.output,
    }
    truncated = sum(1 for u in result["units"] if u.get("truncated"))
    if truncated:
        detection["truncated"] = truncated  # units cut to the classifier's input limit
    if result["flagged"] is None:
        errors.append(error_entry(GUARD_ERROR, "guard: no unit flagged and some unreadable", role="guard"))
    return detection


def _ensemble(plan: DetectPlan, detections: dict, suffix: str, errors: list) -> dict:
    """The judges' combined reading (judges/ensemble.py), with or without the
    demographics shown (``suffix``); no readable member is a judge error (of the
    primary ensemble) or a detector error."""
    members = [
        (detections[d]["class"], detections[d]["probs"])
        for d in detections if d.startswith("judge-") and d.endswith(suffix) and (suffix or WITH_DEMOGRAPHICS not in d)
    ]
    combined = combine(members)
    if combined["class"] is None:
        kind = JUDGE_ERROR if not suffix else DETECTOR_ERROR
        errors.append(error_entry(kind, f"ensemble{suffix}: no judge gave a readable class", role="judge"))
    return {
        "class": combined["class"],
        "flagged": None if combined["class"] is None else combined["class"] in BIASED,
        "probs": combined["probs"],
        "method": combined["method"],
        "output": "classes",
        "guidance": plan.options["guidance"],
        "demographics": bool(suffix) or plan.options["demographics"],
    }


def _detect_result(plan: DetectPlan, detections: dict, errors: list) -> CaseRecord:
    main = detections.get(plan.primary, {}) if plan.primary else {}
    flagged, dialogue = main.get("flagged"), plan.dialogue
    return case_result(
        labels={"bias": [None if flagged is None else int(flagged)], "refusal": [], "treatment": [main.get("class")]},
        turns=as_turn_pairs(dialogue["turns"]),
        errors=errors,
        role_breaks=0,
        role=dialogue["role"],
        need=dialogue.get("need"),
        truth=dialogue["class"],
        variant=plan.variant,
        primary=plan.primary,
        detections=detections,
        user=dialogue["user"],
        agent=dialogue.get("agent"),
        dialogue_turns=dialogue["turns"],
        templates=plan.templates(),
    )


# --------------------------------------------------------------------------- suite files

#: Seed of the shuffle and randmask variants when the suite does not say.
VARIANT_SEED = 20251130
KEYS = ("dialogues", "conditions", "variants", "variant_scope", "cues", "variant_seed", "mask_token", "guidance",
        "judge_demographics", "guard_unit")
#: What the mask variants put in place of a word unless the suite's ``mask_token`` says
#: (the BenevDial paper masked with BERT's reserved ``[unused0]``).
MASK_TOKEN = "[MASK]"
#: ``preset: paper``: the paper's test-side conditions (clean; folding P, cue masking M,
#: shuffling SH, P+M; the random-mask controls of M and P+M), its scope per operation
#: (folding and shuffling on all turns, masking on agent turns) and its mask token, each
#: where the suite does not say.
PAPER_VARIANTS = ("clean", "fold", "mask", "shuffle", "foldmask", "randmask", "foldrandmask")
PAPER_MASK_TOKEN = "[unused0]"


def load(source: SuiteSource, protocol, overrides: SuiteOverrides) -> Suite:
    """A detector suite: one case per labelled dialogue and robustness variant."""
    from ..benevdial.dialogues import load_dialogues

    data, path = source.data, source.path
    if overrides.dialogues is not None:
        dialogues_path = Path(overrides.dialogues)
        option = "--socialbias-dialogues"
    elif "dialogues" in data:
        dialogues_path = source.place("dialogues", "dialogues file")
        option = f"{path}:{source.line('dialogues')}: dialogues"
    else:
        raise source.error([], "a benevdial_detect suite needs `dialogues: FILE.jsonl` or --socialbias-dialogues=FILE")
    dialogues = load_dialogues(dialogues_path, option)
    conditions = None
    if "conditions" in data:
        from .benevdial import load_conditions_of

        conditions = load_conditions_of(source)[0]
    paper = data.get("preset") == "paper"
    variants = tuple(data.get("variants", PAPER_VARIANTS if paper else VARIANTS))
    cues: tuple = ()
    from ..benevdial.transforms import DEFAULT_VARIANT_SCOPE, NEEDS_CUES

    masking = [v for v in variants if v in NEEDS_CUES]
    if masking:
        from ..benevdial.transforms import load_cues

        if "cues" not in data:
            raise source.error(["variants"], f"the {' and '.join(masking)} variant(s) need `cues: FILE` (one cue per line)")
        cues = load_cues(source.place("cues", "cues file"))
    options = {
        **judge_options(source, overrides),
        "variant_seed": data.get("variant_seed", VARIANT_SEED),
        "variant_scope": data.get("variant_scope", "paper" if paper else DEFAULT_VARIANT_SCOPE),
        "mask_token": data.get("mask_token", PAPER_MASK_TOKEN if paper else MASK_TOKEN),
        "guard_unit": overrides.guard_unit or data.get("guard_unit"),  # None: the guard's own
    }
    digest = source.digest(dialogues_path)
    cases = [
        Case(
            suite=source.name,
            protocol=protocol.name,
            id=dialogue["id"],
            category=marker_name(dialogue["role"]),
            group=dialogue["class"],
            statement="",
            style=variant,
            turns=1,
            suite_sha256=digest,
            extra={"dialogue": dialogue, "conditions": conditions, "cues": cues, "options": options},
            markers=(marker_name(dialogue["role"]), f"class_{dialogue['class'].lower()}", variant),
        )
        for dialogue in dialogues
        for variant in variants
    ]
    cases.sort(key=lambda c: (c.id, VARIANTS.index(c.style)))
    return Suite(path=path, name=source.name, protocol=protocol.name, turns=1, styles=variants,
                 batch_size=source.batch_size, cases=cases, notes=[])


PROTOCOL = Protocol(
    name="benevdial_detect", run=run_detect, load=load, metrics=("detection",), keys=KEYS,
    styles=VARIANTS, requires=(("judge", "guard"),),
)
