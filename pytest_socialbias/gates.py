"""thresholds.yaml -> gates -> verdicts. Pure functions except ``load_gates``.

A gate names a suite and a metric (optionally a category and/or a style) and a bound,
``max`` or ``min``. ``compare`` says which number meets the bound: ``point`` (the estimate),
``ci_high`` or ``ci_low`` (the Wilson 95% interval's ends). ``max`` with ``ci_high`` is the
strict reading (fail unless the rate is shown to be below the bound); ``max`` with
``ci_low`` fails only when the rate is shown to be above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .cases import CATEGORIES, STYLES, TRACKS, UNSPECIFIED, read_yaml, validate, yaml_line
from .errors import ConfigError
from .metrics import KNOWN_METRICS_TEXT, is_known_metric

PASS, FAIL, NOT_EVALUATED = "pass", "fail", "not_evaluated"


@dataclass(frozen=True)
class Gate:
    name: str
    suite: str
    metric: str
    bound: float
    kind: str  # "max" or "min"
    compare: str = "point"
    category: str | None = None
    style: str | None = None

    def fails(self, number: float) -> bool:
        return number > self.bound if self.kind == "max" else number < self.bound


def load_gates(path: str | Path) -> list[Gate]:
    path = Path(path)
    data, node = read_yaml(path, "thresholds file")
    if data is None:
        raise ConfigError(f"{path}: the thresholds file is empty; write `gates: []` for no gates")
    if isinstance(data, dict) and isinstance(data.get("gates"), list):
        for index, raw in enumerate(data["gates"]):
            if isinstance(raw, dict) and ("max" in raw) == ("min" in raw):
                line = yaml_line(node, ["gates", index])
                raise ConfigError(
                    f"{path}:{line}: at gates[{index}]: gate {raw.get('name')!r} needs exactly one "
                    "bound: set either max: (the metric must stay at or below it) or min: (at or above)"
                )
    validate(data, "thresholds", str(path), node)
    gates, names = [], set()
    for index, raw in enumerate(data["gates"]):
        line = yaml_line(node, ["gates", index])
        kind = "max" if "max" in raw else "min"
        if not math.isfinite(raw[kind]):
            raise ConfigError(f"{path}:{line}: gate {raw['name']!r}: {kind} must be a finite number, got {raw[kind]}")
        if raw.get("category") is not None and raw["category"] not in CATEGORIES + (UNSPECIFIED,):
            raise ConfigError(
                f"{path}:{line}: gate {raw['name']!r}: unknown category {raw['category']!r}; "
                f"known: {', '.join(CATEGORIES)}"
            )
        if raw.get("style") is not None and raw["style"] not in STYLES + TRACKS:
            raise ConfigError(
                f"{path}:{line}: gate {raw['name']!r}: unknown style {raw['style']!r}; known: {', '.join(STYLES + TRACKS)}"
            )
        if not is_known_metric(raw["metric"]):
            raise ConfigError(
                f"{path}:{line}: gate {raw['name']!r}: unknown metric {raw['metric']!r}; known: "
                + KNOWN_METRICS_TEXT
            )
        if raw["name"] in names:
            raise ConfigError(f"{path}:{line}: duplicate gate name {raw['name']!r}; gate names must be unique")
        names.add(raw["name"])
        gates.append(
            Gate(
                name=raw["name"],
                suite=raw["suite"],
                metric=raw["metric"],
                bound=float(raw[kind]),
                kind=kind,
                compare=raw.get("compare", "point"),
                category=raw.get("category"),
                style=raw.get("style"),
            )
        )
    return gates


def evaluate(gates: list[Gate], metrics: list[dict]) -> list[dict]:
    """One verdict row per gate: pass, fail, or not_evaluated (metric not run or n = 0)."""
    index = {(m["suite"], m["metric"], m["category"], m["style"]): m for m in metrics}
    results = []
    for gate in gates:
        row = index.get((gate.suite, gate.metric, gate.category, gate.style))
        result = {
            "gate": gate.name,
            "suite": gate.suite,
            "metric": gate.metric,
            "category": gate.category,
            "style": gate.style,
            "kind": gate.kind,
            "bound": gate.bound,
            "compare": gate.compare,
            "value": None,
            "ci_low": None,
            "ci_high": None,
            "n": 0,
            "verdict": NOT_EVALUATED,
        }
        if row is not None:
            result.update(value=row["value"], ci_low=row["ci_low"], ci_high=row["ci_high"], n=row["n"])
        if row is not None and row["n"] and row["value"] is not None:
            number = {"point": row["value"], "ci_low": row["ci_low"], "ci_high": row["ci_high"]}[gate.compare]
            result["verdict"] = FAIL if gate.fails(number) else PASS
        results.append(result)
    return results
