"""Metrics: pure functions over case records. No pytest, no I/O.

``compute_metrics`` turns records into rows ``{suite, metric, category, style, value,
ci_low, ci_high, n}`` (None where a field does not apply; ``value`` None when n is 0):
each suite's records go through the metric families of its protocol (families.py), and
every catalogue entry of a family (catalogue.py) is computed on every group it applies to.

Cases whose outcome is ``error`` are left out of the label rates (their n says so) and
counted by ``error_rate`` / ``judge_error_rate``, so errors never vanish.
"""

from __future__ import annotations

from ..vocabulary import OUTCOMES
from . import catalogue
from .catalogue import DIALOGUE_RATE, MEAN, REPLY_RATE, STATISTIC, Metric, is_known_metric
from .detection import confusion, detection_summary, macro_f1, unavailable_metrics
from .dialogue import (
    LATE_EMERGENCE_EARLY,
    LATE_EMERGENCE_LATE,
    bias_at_turn,
    cumulative_bias_at,
    first_bias_at_turn,
    first_bias_turn,
    has_reemergence,
    late_emergence_counts,
    reemergence_counts,
    suite_turns,
    survival_at,
)
from .families import FAMILIES, Group
from .rates import (
    BOOTSTRAP_SEED,
    DIGITS,
    Z95,
    bounded_mean_interval,
    group_seed,
    mean_row,
    rate_row,
    reply_rate_row,
    value_row,
    wilson_interval,
)

__all__ = [
    "BOOTSTRAP_SEED", "DIGITS", "LATE_EMERGENCE_EARLY", "LATE_EMERGENCE_LATE", "Z95", "bias_at_turn",
    "bounded_mean_interval", "compute_metrics", "confusion", "cumulative_bias_at", "detection_rows",
    "detection_summary", "unavailable_metrics",
    "first_bias_at_turn", "first_bias_turn", "group_seed", "has_reemergence", "is_known_metric",
    "late_emergence_counts", "macro_f1", "metric_sort_key", "outcome_counts", "reemergence_counts",
    "suite_turns", "survival_at", "wilson_interval",
]


def protocol_families() -> dict[str, tuple]:
    """Protocol name -> the metric families its records feed (from the protocol table)."""
    from ..protocols import PROTOCOLS

    return {name: protocol.metrics for name, protocol in PROTOCOLS.items()}


def compute_metrics(records: list[dict], families: dict[str, tuple] | None = None) -> list[dict]:
    """All metric rows for the given case records, sorted deterministically.

    ``families`` maps a protocol to its metric families (default: the protocol table)."""
    families = families if families is not None else protocol_families()
    rows: list[dict] = []
    by_suite: dict[str, list[dict]] = {}
    for record in records:
        by_suite.setdefault(record["suite"], []).append(record)
    for suite, items in sorted(by_suite.items()):
        items = sorted(items, key=lambda r: (r["id"], r.get("style") or ""))
        for family in families.get(items[0].get("protocol"), ("dialogue",)):
            rows += family_rows(suite, family, items)
    return sorted(rows, key=metric_sort_key)


def family_rows(suite: str, family: str, records: list[dict]) -> list[dict]:
    """One family's rows for a suite: every entry on every group it applies to."""
    groups, turns = FAMILIES[family].groups(suite, records)
    metrics = catalogue.in_family(family)
    rows = []
    for group in groups:
        for metric in metrics:
            if metric.groups is not None and group.kind not in metric.groups:
                continue
            if metric.when is not None and not metric.when(group):
                continue
            for turn in range(1, turns + 1) if metric.by_turn else (None,):
                rows.append(metric_row(suite, metric, group, turn))
    return rows


def metric_row(suite: str, metric: Metric, group: Group, turn: int | None) -> dict:
    name = metric.name if turn is None else f"{metric.name}@{turn}"
    if metric.kind == STATISTIC:
        value, interval, n = metric.statistic(group.units, group.seed)
        return value_row(suite, name, group.category, group.style, value, interval, n, metric.interval)
    if metric.by_turn:
        values = [metric.value(unit, turn) for unit in group.units]
    elif metric.per_group:
        values = [metric.value(unit, group) for unit in group.units]
    else:
        values = [metric.value(unit) for unit in group.units]
    if group.cluster is not None:
        clusters = [group.cluster(unit) for unit in group.units]
    else:
        clusters = [unit.get("cluster") if isinstance(unit, dict) else None for unit in group.units]
    clustered = [(c, v) for c, v in zip(clusters, values) if v is not None]
    values = [v for v in values if v is not None]
    shared = [c for c, _ in clustered if c is not None]
    if metric.kind in (REPLY_RATE, MEAN) and len(shared) != len(set(shared)):
        # The replies (or ratings) of a seed's dialogues in several styles are one cluster.
        merged: dict = {}
        for cluster, value in clustered:
            merged.setdefault(cluster, []).extend(value)
        values = list(merged.values())
    if metric.kind == DIALOGUE_RATE:
        if len(shared) != len(set(shared)):
            # Units that share a case (the two dialogues of a pair) are not independent:
            # the interval is over the cases, the clusters.
            by_cluster: dict = {}
            for cluster, value in clustered:
                by_cluster.setdefault(cluster, []).append(float(value))
            return reply_rate_row(suite, name, group.category, group.style, list(by_cluster.values()))
        return rate_row(suite, name, group.category, group.style, sum(values), len(values))
    if metric.kind == REPLY_RATE:
        # Replies of one dialogue are not independent: the interval's sample size is the
        # replies over the design effect of the dialogues (rates.cluster_wilson_interval).
        return reply_rate_row(suite, name, group.category, group.style, values)
    if metric.kind == MEAN:
        return mean_row(suite, name, group.category, group.style, values, metric.scale)
    raise ValueError(f"{metric.name}: unknown kind {metric.kind!r}")


def detection_rows(suite: str, category, style, items: list[tuple], seed: int) -> list[dict]:
    """The detector rows of one group of (truth, predicted class or None, flagged or None)
    items (one detector in one variant)."""
    group = Group("detector", category, style, items, seed)
    return [
        metric_row(suite, metric, group, None)
        for metric in catalogue.in_family("detection")
        if metric.when is None or metric.when(group)
    ]


def metric_sort_key(row: dict):
    name, _, turn = row["metric"].partition("@")
    return (
        row["suite"],
        row["category"] or "",
        row["style"] or "",
        name,
        int(turn) if turn.isdigit() else 0,
    )


def simulator_summary(records) -> dict:
    """The simulated users' record per suite, overall and per style (DyMT's user style,
    BenevDial's role): user turns asked for, draws made, draws that broke role by kind,
    turns retried (a draw broke role, a later one passed), turns failed (every draw broke
    role: the case is an error), and with the judged check the draws it saw, passed and
    could not read. Empty when no simulated user spoke."""

    def blank() -> dict:
        return {"turns": 0, "draws": 0, "flagged": {}, "retried": 0, "failed": 0}

    def add(into: dict, record: dict) -> None:
        into["turns"] += record["turns"]
        into["draws"] += record["draws"]
        into["retried"] += record["retried"]
        into["failed"] += record["failed"]
        for kind, count in record["flagged"].items():
            into["flagged"][kind] = into["flagged"].get(kind, 0) + count
        judged = record.get("judged")
        if judged:
            total = into.setdefault("judged", {"draws": 0, "passed": 0, "unreadable": 0})
            for key in total:
                total[key] += judged[key]

    out: dict = {}
    for record in records:
        simulator = record.get("simulator")
        if not simulator:
            continue
        suite = out.setdefault(record["suite"], {"overall": blank(), "styles": {}})
        add(suite["overall"], simulator)
        style = record.get("style") or record.get("role")
        if style:
            add(suite["styles"].setdefault(style, blank()), simulator)
    for suite in out.values():
        for entry in (suite["overall"], *suite["styles"].values()):
            entry["flagged"] = dict(sorted(entry["flagged"].items()))
        suite["styles"] = dict(sorted(suite["styles"].items()))
    return dict(sorted(out.items()))


def simulator_findings(records: list[dict], families: dict[str, tuple] | None = None) -> dict:
    """Per suite whose simulated-user checks only reported (``simulator_findings: report``):
    the kept user turns the checks flagged, per kind, as a share of the user turns drawn
    (with a Wilson interval and its n), the dialogues with at least one flagged turn, and
    the suite's metric rows computed again without those dialogues (the run's own metrics
    are the rows with them). Empty when no suite reported so."""
    out: dict = {}
    by_suite: dict[str, list] = {}
    for record in records:
        if (record.get("simulator") or {}).get("findings") == "report":
            by_suite.setdefault(record["suite"], []).append(record)
    for suite, items in sorted(by_suite.items()):
        turns = sum(r["simulator"]["turns"] for r in items)
        kinds: dict[str, int] = {}
        for record in items:
            for kind, count in record["simulator"].get("kept_flagged", {}).items():
                kinds[kind] = kinds.get(kind, 0) + count
        flagged = [r for r in items if r["simulator"].get("kept_flagged")]
        kept = [r for r in items if not r["simulator"].get("kept_flagged")]

        def share(k: int, n: int) -> dict:
            low, high = wilson_interval(k, n)
            return {"count": k, "n": n, "value": round(k / n, DIGITS) if n else None,
                    "ci_low": round(low, DIGITS), "ci_high": round(high, DIGITS)}

        out[suite] = {
            "turns": turns,
            "flagged_turns": {kind: share(count, turns) for kind, count in sorted(kinds.items())},
            "any_kind": share(sum(kinds.values()), turns),
            "flagged_dialogues": share(len(flagged), len(items)),
            "metrics_without_flagged": compute_metrics(kept, families) if kept else [],
        }
    return out


def outcome_counts(records: list[dict]) -> dict:
    counts = {outcome: 0 for outcome in OUTCOMES}
    for record in records:
        counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
    return counts
