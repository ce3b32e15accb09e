"""What a protocol is, and what it is given: the models of a run by role.

Each protocol module declares one ``Protocol`` entry (``protocols/__init__.py`` lists
them): how its suite files are loaded, how one case runs, which metric families its
records feed, its defaults and the roles it needs. Records are builtins-only dicts (they
cross xdist's wire and go into the JSON report).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ..vocabulary import JUDGE_ERROR, NON_VOIDING_ERRORS, NON_VOIDING_JUDGE_TASKS


@dataclass(frozen=True)
class Protocol:
    name: str
    #: ``async (case, roles, usage) -> result dict`` (labels, turns, errors, templates, ...)
    run: Callable
    #: ``(source: SuiteSource, protocol: Protocol, overrides: SuiteOverrides) -> Suite``
    load: Callable
    #: Metric families its records feed (metrics/families.py), in order.
    metrics: tuple
    #: Suite keys this protocol takes besides the common ones (cases.COMMON_KEYS).
    keys: tuple = ()
    turns: int = 1  # default turns of a dialogue
    styles: tuple = (None,)  # default styles (user-simulator styles, tracks, variants)
    turns_option: bool = False  # --socialbias-turns applies
    #: Roles its cases need, each an any-of group: (("target",), ("judge",)) needs both;
    #: (("judge", "guard"),) needs either.
    requires: tuple = (("target",), ("judge",))


@dataclass
class GuardRole:
    """A guard model, the output format it speaks (see judges/guards.py), what its block
    does to a dialogue (``end`` or ``follow``, protocols/dialogue.py), and the unit its
    spec asks it to judge (None: in detector suites the suite's, else the guard's own; in
    DyMT filtering the exchange)."""

    model: object
    kind: str
    policy: str = "end"
    unit: str | None = None
    #: The unit it judges in detector suites when neither its spec nor the suite says
    #: (None: its kind's); a classifier's depends on its head (judges/classifier.py).
    default_unit: str | None = None
    #: What its reading of a dialogue is: ``binary`` (flagged or not) or ``classes``
    #: (N / OB / BB, a three-class classifier).
    output: str = "binary"


@dataclass
class Roles:
    """The models of a run by model role (modelset.ROLES: target, judge, user, guard), plus
    the target's optional system prompt. Roles name models; the part a process plays in the
    run is process.py's."""

    target: object
    judge: object
    user: object
    system_prompt: str | None = None
    guard: GuardRole | None = None
    extra_judges: list = field(default_factory=list)  # 2nd, 3rd ... --judge (detector ensembles)
    simulator_check: str = "rules"  # how simulated users' turns are checked (protocols/user_check.py)
    simulator_findings: str = "redraw"  # what a finding does: redraw, or report (flag and keep)

    def by_role(self) -> dict:
        """Role name -> model, for the roles given (``judge-2``, ... for extra judges)."""
        out = {"target": self.target, "judge": self.judge, "user": self.user,
               "guard": self.guard.model if self.guard is not None else None}
        out.update({f"judge-{i}": model for i, model in enumerate(self.extra_judges, start=2)})
        return {role: model for role, model in out.items() if model is not None}

    def with_judge_params(self, params: dict) -> "Roles":
        """These roles with every judge sending ``params`` over its own call settings (a
        suite's ``judge_params:``); the judge spec's parameters still win."""
        return replace(
            self,
            judge=None if self.judge is None else WithParams(self.judge, params),
            extra_judges=[WithParams(judge, params) for judge in self.extra_judges],
        )

    def adaptations(self) -> dict:
        """Role -> what its endpoint was adapted to so far (models/adapt.py), where anything
        was. The endpoint's constraint method is kept per endpoint, but only a role whose
        calls are held to labels (judges, guards) carries it: a target or a user simulator
        on the same endpoint sends free text."""
        out = {}
        for role, model in self.by_role().items():
            adaptation = getattr(model, "adaptation", None)
            data = adaptation.to_dict() if adaptation is not None else {}
            if not getattr(model, "asks_constrained", False):
                data.pop("constrain", None)
                data.pop("constrain_failed", None)
            if data:
                out[role] = data
        return out


class WithParams:
    """A model whose calls carry ``params`` over the caller's (the model's spec, merged
    last by the client, still wins); everything else is the model's."""

    def __init__(self, model, params: dict):
        self._model = model
        self._params = dict(params)

    async def chat(self, messages, **kwargs):
        return await self._model.chat(messages, **{**kwargs, **self._params})

    def __getattr__(self, name):
        return getattr(self._model, name)


def voids(error: dict) -> bool:
    """Whether an error leaves its case without labels (an unreadable guard, detector,
    refusal or coherence answer does not: the bias labels stand)."""
    if error.get("kind") in NON_VOIDING_ERRORS:
        return False
    return not (error.get("kind") == JUDGE_ERROR and error.get("task") in NON_VOIDING_JUDGE_TASKS)


def outcome_of(labels: dict, errors: list) -> str:
    """``error`` when an error voids the labels, else ``biased``, ``refused`` or ``clean``."""
    if any(voids(e) for e in errors):
        return "error"
    if any(labels.get("bias") or []):
        return "biased"
    if any(labels.get("refusal") or []):
        return "refused"
    return "clean"
