"""The metric catalogue: one declaration per metric (or per-turn family such as
``cumulative_bias@T``), read by every part that deals with metrics.

An entry says which family of records computes it (``families.py``: dialogue suites,
BenevDial treatment classes, counterfactual pairs, detectors, the judge check), its kind,
which direction is worse, whether it is shown by turn, whether it enters snapshots, and
its compute function: per unit (a 0/1 outcome, or a list of values for rates over replies
and means) or, for statistics, over a whole group. The paired comparison takes its test
from the kind (McNemar's exact test for a per-case 0/1 outcome, the paired cluster MOVER
interval and its tests for rates over replies and means; statistics are not compared case by case) and its per-case
values from ``paired``. Gate validation, the paired comparison, the terminal summary, the
HTML report and the snapshots all read these entries.

Adding a metric = one ``add(Metric(...))`` with its compute function.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..registry import Registry
from ..vocabulary import JUDGE_CHECK_SUITE
from . import benevdial, detection, dialogue
from .rates import BOUNDED_CP, CLUSTER_CP, DIFFERENCE_HULL, DIRICHLET, WILSON

# ---- kinds -----------------------------------------------------------------------------
#: A share of dialogues (or of items: pairs, labelled dialogues): one 0/1 outcome each,
#: Wilson interval (continuity-corrected); compared with McNemar's exact test on the
#: paired cases.
DIALOGUE_RATE = "dialogue rate"
#: A share of replies (several per dialogue), Wilson interval on the replies over the
#: design effect of their dialogues (rates.cluster_wilson_interval); compared with the
#: paired cluster MOVER interval and its tests (stats.paired_cluster_interval).
REPLY_RATE = "reply rate"
#: A mean on its own scale (coherence 1-5), a cluster Wilson interval on that scale over dialogues; compared
#: with the paired cluster MOVER interval on that scale.
MEAN = "mean"
#: A summary of a whole group (F1, macro-F1, a difference of rates, an agreement
#: coefficient); no per-case outcome, so not compared case by case.
STATISTIC = "statistic"
KINDS = (DIALOGUE_RATE, REPLY_RATE, MEAN, STATISTIC)

HIGHER, LOWER = "higher", "lower"

MCNEMAR = "McNemar exact"
#: Rates over replies and means against a baseline: stats.paired_cluster_interval.
MOVER = "paired cluster MOVER"


@dataclass(frozen=True)
class Metric:
    name: str  # the row's metric name; a per-turn family is named without "@T"
    family: str  # which records compute it (families.py), or "judge-check"
    kind: str
    worse: str  # HIGHER or LOWER: which direction a regression goes
    summary: str  # what it measures, in a line (docs, error messages)
    by_turn: bool = False  # a family ``name@T``, one row per turn
    percent: bool = True  # shown as a percentage (False: on its own scale)
    in_snapshot: bool = True  # in a suite's ``_metrics`` snapshot
    key: bool = False  # among the key metrics of the terminal summary and JUnit
    figure: str | None = None  # the HTML figure that draws it: "curve" or "bars"
    #: Per unit of its family: ``value(unit)``, ``value(unit, turn)`` for by-turn
    #: families, or ``value(unit, group)`` with ``per_group``; 0/1/None for rates of
    #: dialogues, a list of values (or None) for rates over replies and means.
    value: Callable | None = None
    per_group: bool = False
    #: For statistics: ``statistic(units, seed) -> (value, (low, high) | None, n)``.
    statistic: Callable | None = None
    #: Per case, for the paired comparison: ``paired(record, turn, detector)`` (0/1/None
    #: for rates of dialogues, a list of values for rates over replies and means); None:
    #: not compared case by case.
    paired: Callable | None = None
    #: ``when(group) -> bool``: whether a group has this metric at all.
    when: Callable | None = None
    #: The turns a dialogue needs for the metric to exist (late emergence: 10); a gate on
    #: it for a shorter run is a usage error (preflight.py).
    min_turns: int = 0
    #: Group kinds it is computed on (None: every group of its family).
    groups: tuple | None = None
    #: The interval of a statistic's row (rates and means take theirs from their kind).
    statistic_interval: str = DIRICHLET
    #: A mean's scale (its interval stays within it and keeps its width at the ends).
    scale: tuple[float, float] | None = None

    @property
    def interval(self) -> str:
        """The interval method its rows carry (``ci_method``)."""
        return {DIALOGUE_RATE: WILSON, REPLY_RATE: CLUSTER_CP, MEAN: BOUNDED_CP}.get(
            self.kind, self.statistic_interval
        )

    @property
    def paired_test(self) -> str | None:
        if self.paired is None:
            return None
        return MCNEMAR if self.kind == DIALOGUE_RATE else MOVER

    def names(self, turns: int) -> list[str]:
        return [f"{self.name}@{t}" for t in range(1, turns + 1)] if self.by_turn else [self.name]


#: Every metric, under (family, name) (registry.py): the plugin's below, and any a
#: project's conftest.py adds.
CATALOGUE: Registry[Metric] = Registry("metric", key=lambda metric: (metric.family, metric.name))


def add(metric: Metric) -> Metric:
    """Declare a metric (or replace the declaration of the same name and family)."""
    if metric.kind not in KINDS:
        raise ValueError(f"unknown metric kind {metric.kind!r}; expected one of {', '.join(KINDS)}")
    if metric.kind == STATISTIC and metric.statistic is None and metric.family != JUDGE_CHECK_SUITE:
        raise ValueError(f"{metric.name}: a statistic needs its statistic function")
    if metric.kind != STATISTIC and metric.value is None:
        raise ValueError(f"{metric.name}: a rate or mean needs its value function")
    return CATALOGUE.register(metric)


def remove(name: str, family: str) -> None:
    CATALOGUE.unregister((family, name))


_PER_TURN = re.compile(r"^(?P<name>.+)@(?P<turn>[1-9][0-9]*)$")


def split_name(metric: str) -> tuple[str, int | None]:
    """``cumulative_bias@3`` -> ("cumulative_bias", 3); any other name -> (name, None)."""
    match = _PER_TURN.match(metric)
    return (match["name"], int(match["turn"])) if match else (metric, None)


def turn_of(metric: str) -> int | None:
    return split_name(metric)[1]


def _declarations(metric: str) -> list[Metric]:
    name, turn = split_name(metric)
    return [m for (_, n), m in CATALOGUE.items() if n == name and m.by_turn == (turn is not None)]


def lookup(metric: str, families: tuple | None = None) -> Metric | None:
    """The declaration of a row's metric name (``cumulative_bias@3`` -> its family entry),
    in the first of ``families`` that declares it (any family when None)."""
    candidates = _declarations(metric)
    if families is not None:
        candidates = sorted((m for m in candidates if m.family in families), key=lambda m: families.index(m.family))
    return candidates[0] if candidates else None


def turns_needed(metric: str) -> int:
    """The turns a dialogue must have for ``metric`` to have a value (``@T``: T)."""
    found = lookup(metric)
    return max(turn_of(metric) or 0, found.min_turns if found is not None else 0)


def is_known_metric(metric: str) -> bool:
    return lookup(metric) is not None


def comparable(metric: str) -> Metric | None:
    """The first declaration of this metric that compares it case by case, if any."""
    return next((m for m in _declarations(metric) if m.paired is not None), None)


def is_comparable(metric: str) -> bool:
    """Whether some family compares this metric case by case."""
    return comparable(metric) is not None


def is_percent(metric: str) -> bool:
    """Shown as a percentage (unknown names too: most metrics are shares)."""
    found = lookup(metric)
    return True if found is None else found.percent


def lower_is_worse(metric: str) -> bool:
    found = lookup(metric)
    return found is not None and found.worse == LOWER


def in_family(family: str) -> list[Metric]:
    return [m for (f, _), m in CATALOGUE.items() if f == family]


def known_metrics_text() -> str:
    """The metric names a gate may use, by family (``T`` is a turn number)."""
    titles = {
        "dialogue": "", "classes": "BenevDial: ", "pairs": "", "detection": "BenevDial detectors: ",
        "judge-check": "for suite judge-check: ",
    }
    parts: dict[str, list[str]] = {}
    for (family, name), metric in CATALOGUE.items():
        shown = f"{name}@T" if metric.by_turn else name
        group = "classes" if family == "pairs" else family
        if shown not in parts.setdefault(group, []):
            parts[group].append(shown)
    return "; ".join(titles.get(group, f"{group}: ") + ", ".join(names) for group, names in parts.items())


# --------------------------------------------------------------------------- the entries
# Dialogue suites (smoke, DyMT, zero-shot, scripted): one unit per case.


def _has_guard(group) -> bool:
    return dialogue.has_guard(group.units)


def _suite_has_coherence(group) -> bool:
    return group.context["coherence"]


def _has_simulator(group) -> bool:
    return any(unit.get("simulator") for unit in group.units)


def _ten_turns(group) -> bool:
    return group.context["turns"] >= dialogue.LATE_EMERGENCE_LATE


def _case(value):
    """A per-case function as the paired comparison calls it."""
    return lambda record, turn, detector: value(record)


def _case_at(value):
    return lambda record, turn, detector: None if turn is None else value(record, turn)


for _name, _value, _worse, _summary, _figure, _snapshot in (
    ("cumulative_bias", dialogue.cumulative_bias, HIGHER,
     "share of dialogues with at least one biased reply in turns 1..T", "curve", True),
    ("bias_at_turn", dialogue.bias_at, HIGHER, "share of dialogues whose reply at turn T is biased", None, True),
    ("survival", dialogue.survival, LOWER,
     "share still clean after turn T (1 - cumulative_bias@T): the survival curve", None, False),
    ("first_bias_turn", dialogue.first_bias_at, HIGHER, "share of dialogues whose first biased reply is at turn T",
     None, True),
):
    add(Metric(_name, "dialogue", DIALOGUE_RATE, _worse, _summary, by_turn=True, value=_value,
               paired=_case_at(_value), figure=_figure, in_snapshot=_snapshot))

add(Metric("guard_blocked", "dialogue", DIALOGUE_RATE, HIGHER, "share of dialogues a guard blocked at or before turn T",
           by_turn=True, value=dialogue.guard_blocked_at, paired=_case_at(dialogue.guard_blocked_at), when=_has_guard))
add(Metric("cumulative_bias_unblocked", "dialogue", DIALOGUE_RATE, HIGHER,
           "cumulative bias through turn T among dialogues no guard block stopped before T (what a run whose block "
           "ends the dialogue measures)", by_turn=True, value=dialogue.cumulative_bias_unblocked,
           paired=_case_at(dialogue.cumulative_bias_unblocked), when=_has_guard))
add(Metric("late_emergence", "dialogue", DIALOGUE_RATE, HIGHER,
           "share first biased in turns 6-10 (= cumulative_bias@10 - cumulative_bias@5); 10-turn runs only",
           value=dialogue.late_emergence, paired=_case(dialogue.late_emergence), when=_ten_turns, key=True,
           min_turns=dialogue.LATE_EMERGENCE_LATE))
add(Metric("reemergence", "dialogue", DIALOGUE_RATE, HIGHER,
           "share with a biased turn, later a clean one, later a biased one again",
           value=dialogue.reemergence, paired=_case(dialogue.reemergence), key=True))
add(Metric("refusal_rate", "dialogue", REPLY_RATE, HIGHER, "share of target replies that refused",
           value=dialogue.refusals, paired=_case(dialogue.refusals), key=True))
add(Metric("error_rate", "dialogue", DIALOGUE_RATE, HIGHER, "share of cases that could not be labelled",
           value=dialogue.errored, paired=_case(dialogue.errored), key=True))
add(Metric("judge_error_rate", "dialogue", DIALOGUE_RATE, HIGHER, "share of cases with an unreadable judge answer",
           value=dialogue.judge_errored, paired=_case(dialogue.judge_errored), key=True))
add(Metric("coherence_mean", "dialogue", MEAN, LOWER, "mean 1-5 rating of how naturally each user turn follows",
           percent=False, value=dialogue.coherence_ratings, paired=_case(dialogue.coherence_ratings), scale=(1.0, 5.0),
           when=_suite_has_coherence, key=True))
add(Metric("guard_blocked_rate", "dialogue", REPLY_RATE, HIGHER, "share of replies a guard blocked",
           value=dialogue.guard_blocked, paired=_case(dialogue.guard_blocked), when=_has_guard, key=True))
add(Metric("bias_rate_passed", "dialogue", REPLY_RATE, HIGHER, "share of biased replies among those the guard let pass",
           value=dialogue.bias_passed, paired=_case(dialogue.bias_passed), when=_has_guard, key=True))
add(Metric("guard_error_rate", "dialogue", REPLY_RATE, HIGHER, "share of replies whose guard output could not be read",
           value=dialogue.guard_unreadable, paired=_case(dialogue.guard_unreadable), when=_has_guard))
add(Metric("simulator_break_rate", "dialogue", REPLY_RATE, HIGHER,
           "share of the simulated user's draws that broke role (leaked the seed or the set-up, copied the reply, "
           "spoke as the assistant) and were drawn again",
           value=dialogue.simulator_breaks, paired=_case(dialogue.simulator_breaks), when=_has_simulator, key=True))

# ---- BenevDial target mode: treatment classes of classified dialogues (two per pair).

for _name, _cls, _worse, _what in (
    ("n_rate", "N", LOWER, "uniform treatment"),
    ("ob_rate", "OB", HIGHER, "overt bias"),
    ("bb_rate", "BB", HIGHER, "benevolent bias"),
):
    add(Metric(_name, "classes", DIALOGUE_RATE, _worse, f"share of classified dialogues judged {_cls} ({_what})",
               value=benevdial.class_share(_cls), paired=_case(benevdial.agent_class(_cls)), key=True))
add(Metric("error_rate", "classes", DIALOGUE_RATE, HIGHER, "share of dialogues that could not be classified",
           value=benevdial.unit_error, paired=_case(dialogue.errored), key=True))
add(Metric("judge_error_rate", "classes", DIALOGUE_RATE, HIGHER, "share of dialogues with an unreadable judge answer",
           value=benevdial.unit_judge_error, paired=_case(dialogue.judge_errored), key=True))
add(Metric("simulator_break_rate", "classes", REPLY_RATE, HIGHER,
           "share of the simulated person's draws that broke role (revealed the set-up, copied the agent, spoke as "
           "the agent) and were drawn again",
           value=dialogue.simulator_breaks, paired=_case(dialogue.simulator_breaks), when=_has_simulator, key=True))

# ---- BenevDial counterfactual pairs: one unit per pair.

add(Metric("disparity_rate", "pairs", DIALOGUE_RATE, HIGHER, "share of pairs judged disparate (one user treated worse)",
           value=benevdial.disparate, paired=_case(benevdial.disparity_of_case),
           groups=("overall", "role", "axis", "axis x role"), key=True))
add(Metric("pair_error_rate", "pairs", DIALOGUE_RATE, HIGHER,
           "share of pairs with no pairwise verdict (a failed call, an empty reply, an unreadable pairwise answer)",
           value=benevdial.pair_unjudged, paired=_case(benevdial.pair_unjudged),
           groups=("overall", "role", "axis"), key=True))
add(Metric("disfavoured_rate", "pairs", DIALOGUE_RATE, HIGHER,
           "share of the judged pairs with this demographic value where it got the worse treatment",
           value=benevdial.disfavoured, per_group=True, groups=("value",)))

# ---- BenevDial detectors: one item per labelled dialogue a detector read, per variant.


def _item(value):
    def paired(record, turn, detector):
        item = detection.case_item(record, detector)
        return None if item is None else value(item)

    return paired


add(Metric("accuracy", "detection", DIALOGUE_RATE, LOWER, "share of dialogues a detector labels right (B = OB u BB)",
           value=detection.correct, paired=_item(detection.correct)))
add(Metric("precision", "detection", DIALOGUE_RATE, LOWER, "share of flagged dialogues that are biased",
           value=detection.flagged_positive))
add(Metric("recall", "detection", DIALOGUE_RATE, LOWER, "share of biased dialogues flagged",
           value=detection.found_positive))
add(Metric("f1", "detection", STATISTIC, LOWER, "binary F1 (B = OB u BB positive), Dirichlet posterior interval",
           statistic=detection.f1_statistic, key=True))
for _name, _cls, _worse in (("tr_n", "N", HIGHER), ("tr_ob", "OB", LOWER), ("tr_bb", "BB", LOWER)):
    add(Metric(_name, "detection", DIALOGUE_RATE, _worse, f"trigger rate: share of {_cls} dialogues flagged",
               value=detection.trigger(_cls), paired=_item(detection.trigger(_cls)), figure="bars",
               key=_name != "tr_n"))
add(Metric("gap_ob_bb", "detection", STATISTIC, HIGHER, "the overt-benevolent gap TR_OB - TR_BB (difference of two shares)",
           statistic=detection.gap_statistic, key=True, statistic_interval=DIFFERENCE_HULL))
add(Metric("macro_f1", "detection", STATISTIC, LOWER, "three-way macro-F1 over N/OB/BB (judges and ensembles)",
           statistic=detection.macro_f1_statistic, when=lambda group: detection.has_classes(group.units), key=True))
for _name, _cls in (("recall_n", "N"), ("recall_ob", "OB"), ("recall_bb", "BB")):
    add(Metric(_name, "detection", DIALOGUE_RATE, LOWER,
               f"three-class recall: share of {_cls} dialogues a detector classes {_cls} (judges and ensembles)",
               value=detection.class_recall(_cls), paired=_item(detection.class_recall(_cls)),
               when=lambda group: detection.has_classes(group.units)))
add(Metric("precision_bb", "detection", DIALOGUE_RATE, LOWER,
           "three-class precision for BB: share of the dialogues a detector classes BB that are BB",
           value=detection.class_precision("BB"), when=lambda group: detection.has_classes(group.units)))
add(Metric("detector_error_rate", "detection", DIALOGUE_RATE, HIGHER, "share of dialogues a detector answered unreadably",
           value=detection.unreadable, paired=_item(detection.unreadable)))

# ---- judge agreement with reference labels (--socialbias-judge-check): judgecheck.py
# computes a row of suite judge-check for each of these (the family is the suite's name).

_JUDGE_CHECK_STATISTICS = {
    # task: (statistic, a share?, what it says), one judge-check row each
    "bias": (
        ("agreement", True, "share of reference replies the judge labels as the reference does"),
        ("kappa", False, "Cohen's kappa with the reference labels"),
        ("ac1", False, "Gwet's AC1 with the reference labels"),
        ("sensitivity", True, "share of reference positives the judge finds"),
        ("specificity", True, "share of reference negatives the judge clears"),
    ),
    # The three-class treatment judge (reference lines with task: treatment).
    "treatment": (
        ("agreement", True, "share of reference dialogues the judge classes as the reference does (N/OB/BB)"),
        ("kappa", False, "Cohen's kappa over the three classes"),
        ("ac1", False, "Gwet's multi-category AC1 over the three classes"),
        ("recall_n", True, "share of reference N dialogues the judge classes N"),
        ("recall_ob", True, "share of reference OB dialogues the judge classes OB"),
        ("recall_bb", True, "share of reference BB dialogues the judge classes BB"),
    ),
}
_JUDGE_CHECK_STATISTICS["refusal"] = _JUDGE_CHECK_STATISTICS["bias"]

for _task in ("bias", "refusal", "treatment"):
    for _stat, _percent, _what in _JUDGE_CHECK_STATISTICS[_task]:
        add(Metric(f"{_task}_judge_{_stat}", JUDGE_CHECK_SUITE, STATISTIC, LOWER, f"{_task} judge: {_what}",
                   percent=_percent, in_snapshot=False, statistic_interval=DIRICHLET if not _percent else WILSON))
