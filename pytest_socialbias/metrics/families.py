"""Metric families: how one protocol's records become units, and units become groups.

A family turns a suite's records into units (a dialogue case; a classified dialogue, two
per pair; a pair; a labelled dialogue as one detector read it) and the units into groups,
each a metric row's scope: ``category`` and ``style`` (overall, per category, per style
for dialogue suites; per role and demographic value for BenevDial; per detector and
variant for detector suites). Every catalogue entry of the family is computed on every
group it applies to. For the paired comparison a family also says which cases belong to
a row's scope, and what the scopes of a ``no_regression`` gate with ``by:`` are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..vocabulary import AXES
from . import benevdial, detection, dialogue
from .rates import group_seed


@dataclass(frozen=True)
class Group:
    kind: str  # "overall", "category", "style", "role", "value", "detector", ...
    category: str | None
    style: str | None
    units: list
    seed: int  # seed of the group's posterior draws (Dirichlet intervals)
    context: dict = field(default_factory=dict)  # suite-wide facts (turns, coherence)
    #: ``cluster(unit)``: the independent unit a unit belongs to (a DyMT seed's dialogues in
    #: two styles are one); None: each unit's own ``cluster`` key, else the unit itself.
    cluster: Callable | None = None


@dataclass(frozen=True)
class Family:
    name: str
    #: ``groups(suite, records) -> (groups, turns)``: the family's groups in a suite.
    groups: Callable
    #: ``member(record, category, style) -> bool``: a case in a row's scope (comparison).
    member: Callable
    #: ``categories(record)`` / ``styles(record)``: the scopes ``by: category|style`` covers.
    categories: Callable
    styles: Callable


# ---- dialogue suites ---------------------------------------------------------------------


def _dialogue_groups(suite: str, records: list[dict]):
    context = {"turns": dialogue.suite_turns(records), "coherence": dialogue.has_coherence(records)}

    def group(kind, category, style, units):
        # A seed run in several styles is one unit of the sample: its dialogues share the
        # seed (and a model's answer to it), so rows over styles cluster by seed.
        return Group(kind, category, style, units, group_seed(suite, category, style), context, cluster=seed_of)

    out = [group("overall", None, None, records)]
    out += [group("category", c, None, [r for r in records if r["category"] == c])
            for c in sorted({r["category"] for r in records})]
    out += [group("style", None, s, [r for r in records if r.get("style") == s])
            for s in sorted({r["style"] for r in records if r.get("style")})]
    return out, context["turns"]


def seed_of(record: dict):
    """The seed a dialogue case was drawn from: its id (its styles share it)."""
    return record["id"]


def _dialogue_member(record, category, style) -> bool:
    return (category is None or record["category"] == category) and (style is None or record.get("style") == style)


# ---- BenevDial target mode -----------------------------------------------------------


def _class_groups(suite: str, records: list[dict]):
    units = [u for r in records for u in benevdial.class_units(r)]
    groups = [Group(kind, category, style, subset, group_seed(suite, category, style))
              for kind, category, style, subset in benevdial.class_groups(units)]
    return groups, 0


def _pair_groups(suite: str, records: list[dict]):
    pairs = [r for r in records if r["protocol"] == "benevdial_pairs" and r.get("pair")]
    if not pairs:
        return [], 0
    roles = sorted({r.get("role") for r in records if r.get("role")})
    groups = [Group(kind, category, style, subset, group_seed(suite, category, style))
              for kind, category, style, subset in benevdial.pair_groups(pairs, roles)]
    return groups, 0


def _benevdial_member(record, category, style) -> bool:
    if style is not None and record.get("role") != style:
        return False
    if category is None:
        return True
    axis, _, value = category.partition("=")
    if value:
        return (record.get("profile") or {}).get(axis) == value
    return (record.get("pair") or {}).get("axis") == axis


def _benevdial_categories(record) -> list[str]:
    if record.get("protocol") == "benevdial_agent":
        return [f"{axis}={value}" for axis, value in (record.get("profile") or {}).items() if axis in AXES]
    return [record["pair"]["axis"]] if record.get("pair") else []


def _role(record) -> list[str]:
    return [record["role"]] if record.get("role") else []


# ---- detectors -------------------------------------------------------------------------


def _detection_groups(suite: str, records: list[dict]):
    groups = [Group(kind, category, style, items, seed)
              for kind, category, style, items, seed in detection.detection_groups(suite, records)]
    return groups, 0


def _detection_member(record, category, style) -> bool:
    # The category (the detector) is read by the per-case functions; a row's style is its
    # variant (None: clean).
    return (record.get("variant") or "clean") == (style or "clean")


FAMILIES: dict[str, Family] = {
    "dialogue": Family(
        "dialogue", _dialogue_groups, _dialogue_member,
        categories=lambda record: [record["category"]],
        styles=lambda record: [record["style"]] if record.get("style") else [],
    ),
    "classes": Family("classes", _class_groups, _benevdial_member, _benevdial_categories, _role),
    "pairs": Family("pairs", _pair_groups, _benevdial_member, _benevdial_categories, _role),
    "detection": Family(
        "detection", _detection_groups, _detection_member,
        categories=lambda record: list(record.get("detections") or {}),
        styles=lambda record: [record.get("variant") or "clean"],
    ),
}
