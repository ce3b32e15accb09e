"""thresholds.yaml -> gates -> verdicts. Pure functions except ``load_gates``.

A gate names a suite and a metric (optionally a category and/or a style) and a bound,
``max`` or ``min``. ``compare`` says which number meets the bound: ``point`` (the estimate),
``ci_high`` or ``ci_low`` (the Wilson 95% interval's ends). ``max`` with ``ci_high`` is the
strict reading (fail unless the rate is shown to be below the bound); ``max`` with
``ci_low`` fails only when the rate is shown to be above it.

A ``no_regression`` gate compares the metric with the baseline report
(``--socialbias-baseline``, see compare.py): it fails when a paired test finds the metric
worse by more than ``margin`` at level ``alpha`` after Holm's correction, for the whole
suite or, with ``by: category`` / ``by: style``, for any category or style.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .files import read_yaml, validate, yaml_line
from .metrics.catalogue import is_comparable, is_known_metric, known_metrics_text
from .vocabulary import AXES, CATEGORIES, STYLES, TRACKS, UNSPECIFIED

PASS, FAIL, NOT_EVALUATED = "pass", "fail", "not_evaluated"
NO_REGRESSION = "no_regression"
_REGRESSION_KEYS = ("margin", "alpha", "by")


@dataclass(frozen=True)
class Gate:
    name: str
    suite: str
    metric: str
    bound: float
    kind: str  # "max", "min" or "no_regression" (then bound is the margin)
    compare: str = "point"
    category: str | None = None
    style: str | None = None
    alpha: float = 0.05
    by: str | None = None

    def fails(self, number: float) -> bool:
        return number > self.bound if self.kind == "max" else number < self.bound


def load_gates(path: str | Path) -> list[Gate]:
    path = Path(path)
    data, node = read_yaml(path, "thresholds file")
    if data is None:
        raise ConfigError(f"{path}: the thresholds file is empty; write `gates: []` for no gates")
    if isinstance(data, dict) and isinstance(data.get("gates"), list):
        for index, raw in enumerate(data["gates"]):
            if not isinstance(raw, dict):
                continue
            line = yaml_line(node, ["gates", index])
            kinds = [k for k in ("max", "min", NO_REGRESSION) if k in raw]
            if len(kinds) != 1:
                raise ConfigError(
                    f"{path}:{line}: at gates[{index}]: gate {raw.get('name')!r} needs exactly one "
                    "bound: set either max: (the metric must stay at or below it), min: (at or above) "
                    "or no_regression: true (no significant worsening against --socialbias-baseline)"
                )
            extra = [k for k in _REGRESSION_KEYS if k in raw]
            if kinds[0] != NO_REGRESSION and extra:
                raise ConfigError(
                    f"{path}:{line}: at gates[{index}]: gate {raw.get('name')!r}: {', '.join(extra)} "
                    "only apply to no_regression gates; remove them or write no_regression: true"
                )
    validate(data, "thresholds", str(path), node)
    gates, names = [], set()
    for index, raw in enumerate(data["gates"]):
        line = yaml_line(node, ["gates", index])
        kind = "max" if "max" in raw else "min" if "min" in raw else NO_REGRESSION
        if kind == NO_REGRESSION:
            if not is_comparable(raw["metric"]):
                raise ConfigError(
                    f"{path}:{line}: gate {raw['name']!r}: {raw['metric']!r} cannot be compared case by "
                    "case; no_regression gates take rates of dialogues or replies (e.g. "
                    "cumulative_bias@5, refusal_rate, coherence_mean)"
                )
            if raw.get("by") and raw.get(raw["by"]) is not None:
                raise ConfigError(
                    f"{path}:{line}: gate {raw['name']!r}: by: {raw['by']} compares every {raw['by']}; "
                    f"remove {raw['by']}: {raw[raw['by']]!r} or the by: key"
                )
        elif not math.isfinite(raw[kind]):
            raise ConfigError(f"{path}:{line}: gate {raw['name']!r}: {kind} must be a finite number, got {raw[kind]}")
        if any(key in raw for key in ("axis", "value", "role", "detector", "variant")):
            raw = _benevdial_filters(raw, path, line)
        if raw.get("category") is not None and raw["category"] not in CATEGORIES + (UNSPECIFIED,) and not _AXIS_RE.match(raw["category"]) and "detector" not in raw:
            raise ConfigError(
                f"{path}:{line}: gate {raw['name']!r}: unknown category {raw['category']!r}; "
                f"known: {', '.join(CATEGORIES)}, or for BenevDial AXIS=VALUE (e.g. ability=blind) or an axis ({', '.join(AXES)})"
            )
        if raw.get("style") is not None and raw["style"] not in STYLES + TRACKS and not ({"role", "variant", "detector"} & set(raw)):
            raise ConfigError(
                f"{path}:{line}: gate {raw['name']!r}: unknown style {raw['style']!r}; known: {', '.join(STYLES + TRACKS)}"
            )
        if not is_known_metric(raw["metric"]):
            raise ConfigError(
                f"{path}:{line}: gate {raw['name']!r}: unknown metric {raw['metric']!r}; known: "
                + known_metrics_text()
            )
        if raw["name"] in names:
            raise ConfigError(f"{path}:{line}: duplicate gate name {raw['name']!r}; gate names must be unique")
        names.add(raw["name"])
        gates.append(
            Gate(
                name=raw["name"],
                suite=raw["suite"],
                metric=raw["metric"],
                bound=float(raw.get("margin", 0.0)) if kind == NO_REGRESSION else float(raw[kind]),
                kind=kind,
                compare=raw.get("compare", "point"),
                category=raw.get("category"),
                style=raw.get("style"),
                alpha=float(raw.get("alpha", 0.05)),
                by=raw.get("by"),
            )
        )
    return gates


_AXIS_RE = re.compile(r"^(" + "|".join(AXES) + r")(=[a-z0-9][a-z0-9-]*)?$")


def _benevdial_filters(raw: dict, path, line) -> dict:
    """BenevDial gate filters: ``axis`` (+ ``value``) become the row's category
    (``gender`` or ``gender=female``), ``role`` its style; for detector suites
    ``detector`` is the category and ``variant`` (default ``clean``) the style."""
    for key, clash in (("axis", "category"), ("value", "category"), ("role", "style"), ("detector", "category"), ("variant", "style")):
        if key in raw and raw.get(clash) is not None:
            raise ConfigError(f"{path}:{line}: gate {raw['name']!r}: give either {key}: or {clash}:, not both")
    if "value" in raw and "axis" not in raw:
        raise ConfigError(f"{path}:{line}: gate {raw['name']!r}: value: {raw['value']!r} needs its axis: (age, gender, race or ability)")
    out = dict(raw)
    if "axis" in raw:
        out["category"] = raw["axis"] + (f"={raw['value']}" if "value" in raw else "")
    if "role" in raw:
        out["style"] = raw["role"]
    if "detector" in raw:
        if "axis" in raw:
            raise ConfigError(f"{path}:{line}: gate {raw['name']!r}: give detector: or axis:, not both")
        out["category"] = raw["detector"]
    if "variant" in raw:
        if "role" in raw:
            raise ConfigError(f"{path}:{line}: gate {raw['name']!r}: give variant: or role:, not both")
        out["style"] = raw["variant"]
    elif "detector" in raw:
        out["style"] = "clean"  # a detector's rows are per variant; clean unless named
    return out


def evaluate(gates: list[Gate], metrics: list[dict], comparison: dict | None = None) -> list[dict]:
    """One verdict row per gate: pass, fail, or not_evaluated (metric not run or n = 0;
    for no_regression gates also: no baseline given, or no paired case)."""
    index = {(m["suite"], m["metric"], m["category"], m["style"]): m for m in metrics}
    results = []
    for gate in gates:
        if gate.kind == NO_REGRESSION:
            results.append(_evaluate_regression(gate, comparison))
            continue
        row = index.get((gate.suite, gate.metric, gate.category, gate.style))
        result = _gate_row(gate, gate.compare)
        if row is not None:
            result.update(value=row["value"], ci_low=row["ci_low"], ci_high=row["ci_high"], n=row["n"])
        if row is not None and row["n"] and row["value"] is not None:
            number = {"point": row["value"], "ci_low": row["ci_low"], "ci_high": row["ci_high"]}[gate.compare]
            result["verdict"] = FAIL if gate.fails(number) else PASS
        results.append(result)
    return results


def _gate_row(gate: Gate, compare: str) -> dict:
    """A gate's result row before any number is known: not evaluated."""
    return {
        "gate": gate.name,
        "suite": gate.suite,
        "metric": gate.metric,
        "category": gate.category,
        "style": gate.style,
        "kind": gate.kind,
        "bound": gate.bound,
        "compare": compare,
        "value": None,
        "ci_low": None,
        "ci_high": None,
        "n": 0,
        "verdict": NOT_EVALUATED,
    }


def _evaluate_regression(gate: Gate, comparison: dict | None) -> dict:
    """A no_regression gate: fails if any of its rows regressed; shows the worst row."""
    result = {
        **_gate_row(gate, "paired"),
        "p_adjusted": None,
        "detail": "no baseline: pass --socialbias-baseline=REPORT.json" if comparison is None else "no paired cases",
    }
    if comparison is None:
        return result
    rows = [
        r
        for r in comparison["rows"]
        if r["suite"] == gate.suite
        and r["metric"] == gate.metric
        and (r["category"] is not None if gate.by == "category" else r["category"] == gate.category)
        and (r["style"] is not None if gate.by == "style" else r["style"] == gate.style)
        and r["p_adjusted"] is not None
    ]
    if not rows:
        return result
    worst = min(rows, key=lambda r: (r["p_adjusted"], r["category"] or "", r["style"] or ""))
    regressed = [r for r in rows if r["verdict"] == "regressed"]
    result.update(
        value=worst["diff"],
        ci_low=worst["diff_low"],
        ci_high=worst["diff_high"],
        n=worst["n_pairs"],
        p_adjusted=worst["p_adjusted"],
        verdict=FAIL if regressed else PASS,
        detail=(
            "regressed: " + ", ".join(_scope(r) + f" (p={r['p_adjusted']:.3g})" for r in regressed)
            if regressed
            else f"no significant regression in {len(rows)} comparison(s); smallest adjusted p "
            f"{worst['p_adjusted']:.3g} ({_scope(worst)})"
        ),
    )
    return result


def _scope(row: dict) -> str:
    return row["category"] or row["style"] or "overall"
