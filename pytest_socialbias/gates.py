"""thresholds.yaml -> gates -> verdicts. Pure functions except ``load_gates``.

A gate names a suite and a metric (optionally a category and/or a style) and a bound,
``max`` or ``min``. ``compare`` says which number meets the bound: ``point`` (the estimate),
``ci_high`` or ``ci_low`` (the ends of the row's 95% interval, whichever method its
``ci_method`` names). ``max`` with ``ci_high`` is the strict reading (fail unless the
rate is shown to be below the bound); ``max`` with ``ci_low`` fails only when the rate
is shown to be above it.

A ``no_regression`` gate compares the metric with the baseline report
(``--socialbias-baseline``, see compare.py): it fails when a paired test finds the metric
worse by more than ``margin`` at level ``alpha`` after Holm's correction, for the whole
suite or, with ``by: category`` / ``by: style``, for any category or style.

No evidence is not a pass. A gate whose suite ran in this session decides on evidence or
fails saying why: its metric with n = 0 (every case errored, every answer unreadable), a
``no_regression`` gate with no baseline (unless the run says there is none yet,
``--socialbias-baseline=none``) or a baseline that pairs no case. ``allow_empty: true``
opts a gate out: it then shows as not evaluated, with the reason. Gates of suites this
session did not run are not evaluated (and summed up apart).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .files import SchemaProblems, read_yaml, validate, yaml_line
from .metrics.catalogue import is_comparable, is_known_metric, is_percent, known_metrics_text
from .vocabulary import AXES, CATEGORIES, JUDGE_CHECK_SUITE, STYLES, TRACKS, UNSPECIFIED

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
    allow_empty: bool = False  # no evidence: not evaluated instead of failed
    description: str | None = None  # why the bound is where it is (the thresholds file's words)
    index: int = field(default=0, compare=False)  # its place in the file's list (for file:line messages)

    def fails(self, number: float) -> bool:
        return number > self.bound if self.kind == "max" else number < self.bound


class GateProblems(ConfigError):
    """Every problem found in a thresholds file, each at the line of the key at fault, in
    one message; ``gates`` holds the gates that are sound (the checks made later, on the
    run's suites, add theirs to the same message: ``with_more``)."""

    def __init__(self, path: Path, problems: list[tuple[int, str]], gates: list | None = None):
        self.path = Path(path)
        self.problems = sorted(problems, key=lambda problem: problem[0])
        self.gates = list(gates or [])
        super().__init__(self._text())

    def with_more(self, problems: list[tuple[int, str]]) -> "GateProblems":
        return GateProblems(self.path, self.problems + list(problems), self.gates)

    def _text(self) -> str:
        if len(self.problems) == 1:
            line, text = self.problems[0]
            return f"{self.path}:{line}: {text}"
        return (f"{len(self.problems)} problems in {self.path} (fix them all before the next run):\n"
                + "\n".join(f"  {self.path}:{line}: {text}" for line, text in self.problems))


def did_you_mean(name, known, lower: bool = True) -> str:
    """`` (did you mean 'X'?)`` for the known name nearest ``name`` (difflib), or ``""``."""
    known = [str(k) for k in known]
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    if not close and lower:
        by_lower = {k.lower(): k for k in known}
        close = [by_lower[c] for c in difflib.get_close_matches(str(name).lower(), list(by_lower), n=1, cutoff=0.6)]
    return f" (did you mean {close[0]!r}?)" if close else ""


def metric_hint(metric: str) -> str:
    """The nearest metric name a gate may use, with the turn kept (``cumulative_bais@3``
    -> ``cumulative_bias@3``); a per-turn metric given without its turn says so."""
    from .metrics.catalogue import CATALOGUE, split_name

    name, turn = split_name(str(metric))
    per_turn = sorted({n for (_, n), m in CATALOGUE.items() if m.by_turn})
    whole = sorted({n for (_, n), m in CATALOGUE.items() if not m.by_turn})
    if turn is None and name in per_turn:
        return f" ({name} is counted per turn: write {name}@T, e.g. {name}@5)"
    if turn is not None and name in whole:
        return f" ({name} has no turns: write {name})"
    close = difflib.get_close_matches(name, per_turn if turn is not None else whole, n=1, cutoff=0.6)
    close = close or difflib.get_close_matches(name, whole if turn is not None else per_turn, n=1, cutoff=0.6)
    if not close:
        return ""
    suggestion = close[0] + (f"@{turn or 5}" if close[0] in per_turn else "")
    return f" (did you mean {suggestion!r}?)"


def load_gates(path: str | Path, known_suites: set | None = None, root: Path | None = None) -> list[Gate]:
    """The gates of a thresholds file; GateProblems naming every problem at once, each at
    the line of its key, with the nearest known name for a misspelt metric, style,
    category or (given ``known_suites``, the suites the project defines: the suite files
    under ``root``) suite."""
    path = Path(path)
    data, node = read_yaml(path, "thresholds file")
    if data is None:
        raise ConfigError(f"{path}: the thresholds file is empty; write `gates: []` for no gates")
    problems: list[tuple[int, str]] = []
    broken: set[int] = set()  # gates with a problem: not checked further, not kept

    def problem(index: int, key, text: str) -> None:
        where = ["gates", index] + ([key] if key else [])
        problems.append((yaml_line(node, where), text))
        broken.add(index)

    if isinstance(data, dict) and isinstance(data.get("gates"), list):
        for index, raw in enumerate(data["gates"]):
            if not isinstance(raw, dict):
                continue
            kinds = [k for k in ("max", "min", NO_REGRESSION) if k in raw]
            if len(kinds) != 1:
                problem(index, kinds[1] if len(kinds) > 1 else None,
                        f"at gates[{index}]: gate {raw.get('name')!r} needs exactly one "
                        "bound: set either max: (the metric must stay at or below it), min: (at or above) "
                        "or no_regression: true (no significant worsening against --socialbias-baseline)")
                continue
            extra = [k for k in _REGRESSION_KEYS if k in raw]
            if kinds[0] != NO_REGRESSION and extra:
                problem(index, extra[0], f"at gates[{index}]: gate {raw.get('name')!r}: {', '.join(extra)} "
                        "only apply to no_regression gates; remove them or write no_regression: true")
    try:
        validate(data, "thresholds", str(path), node, limit=None)
    except SchemaProblems as exc:
        if not (isinstance(data, dict) and isinstance(data.get("gates"), list)):
            raise ConfigError(str(exc)) from None  # not a list of gates at all: nothing more to read
        bounds_said = set(broken)  # gates whose bounds are named above: the schema's oneOf says it again
        for error_path, line, text, validator in exc.found:
            if len(error_path) >= 2 and error_path[0] == "gates" and isinstance(error_path[1], int):
                if len(error_path) == 2 and validator == "oneOf" and error_path[1] in bounds_said:
                    continue
                broken.add(error_path[1])
            problems.append((line, text.split(": ", 1)[1] if text.startswith(f"{path}:") else text))
    gates: list[Gate] = []
    names: set[str] = set()
    for index, raw in enumerate(data["gates"]):
        if index in broken or not isinstance(raw, dict):
            continue
        found = _gate_problems(raw, known_suites, root)
        for key, text in found:
            problem(index, key, f"gate {raw['name']!r}{' ' if key == 'suite' else ': '}{text}")
        if found:
            continue
        if raw["name"] in names:
            problem(index, "name", f"duplicate gate name {raw['name']!r}; gate names must be unique")
            continue
        names.add(raw["name"])
        kind = "max" if "max" in raw else "min" if "min" in raw else NO_REGRESSION
        if any(key in raw for key in ("axis", "value", "role", "detector", "variant")):
            raw = _benevdial_filters(raw)
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
                allow_empty=bool(raw.get("allow_empty", False)),
                index=index,
                description=raw.get("description"),
            )
        )
    if problems:
        raise GateProblems(path, problems, gates)
    return gates


def unknown_suite_text(suite: str, known_suites, root=None) -> str:
    """Why a gate's suite is refused, with the nearest known name; the option that skips
    the gates of absent suites is offered only when no known name is near: it would drop
    a misspelt gate without a word."""
    known = sorted(set(known_suites) - {JUDGE_CHECK_SUITE})
    guess = did_you_mean(suite, sorted(known_suites))
    fix = ("fix the name" if guess else
           f"fix the name; if its suite file was deleted, `python -m pytest_socialbias remove {suite}` removes its "
           "gates too; or pass --socialbias-gates-for=present to skip the gates of suites this project does not have")
    where = f" under {root}" if root is not None else " of the project"
    return (f"names suite {suite!r}, which no suite file{where} defines{guess}; {fix} "
            f"(known suites: {', '.join(known) or 'none found'})")


def _gate_problems(raw: dict, known_suites: set | None, root=None) -> list[tuple[str | None, str]]:
    """Every problem of one schema-valid gate, as (its key, what is wrong): its suite, its
    metric, its bound, its filters, each checked on its own."""
    out: list[tuple[str | None, str]] = []
    kind = "max" if "max" in raw else "min" if "min" in raw else NO_REGRESSION
    if known_suites is not None and raw["suite"] not in known_suites:
        out.append(("suite", unknown_suite_text(raw["suite"], known_suites, root)))
    known_metric = is_known_metric(raw["metric"])
    if not known_metric:
        hint = metric_hint(raw["metric"])
        out.append(("metric", f"unknown metric {raw['metric']!r}{hint}; "
                    + ("every metric is listed under Metrics in docs/results.md" if hint else f"known: {known_metrics_text()}")))
    if kind == NO_REGRESSION:
        if known_metric and not is_comparable(raw["metric"]):
            out.append(("metric", f"{raw['metric']!r} cannot be compared case by case; no_regression gates take rates "
                        "of dialogues or replies (e.g. cumulative_bias@5, refusal_rate, coherence_mean)"))
        if raw.get("by") and raw.get(raw["by"]) is not None:
            out.append(("by", f"by: {raw['by']} compares every {raw['by']}; remove {raw['by']}: {raw[raw['by']]!r} "
                        "or the by: key"))
    elif not math.isfinite(raw[kind]):
        out.append((kind, f"{kind} must be a finite number, got {raw[kind]}"))
    elif known_metric and is_percent(raw["metric"]) and not 0 <= raw[kind] <= 1:
        out.append((kind, f"{kind}: {raw[kind]} is not a rate; {raw['metric']} is a share between 0 and 1"
                    f"{_did_you_mean(raw[kind])}"))
    for key, clash in (("axis", "category"), ("value", "category"), ("role", "style"), ("detector", "category"), ("variant", "style")):
        if key in raw and raw.get(clash) is not None:
            out.append((key, f"give either {key}: or {clash}:, not both"))
    if "value" in raw and "axis" not in raw:
        out.append(("value", f"value: {raw['value']!r} needs its axis: (age, gender, race or ability)"))
    if "detector" in raw and "axis" in raw:
        out.append(("detector", "give detector: or axis:, not both"))
    if "variant" in raw and "role" in raw:
        out.append(("variant", "give variant: or role:, not both"))
    category = raw.get("category")
    if category is not None and category not in CATEGORIES + (UNSPECIFIED,) and not _AXIS_RE.match(category) and "detector" not in raw:
        out.append(("category", f"unknown category {category!r}{did_you_mean(category, CATEGORIES + AXES)}; known: "
                    f"{', '.join(CATEGORIES)}, or for BenevDial AXIS=VALUE (e.g. ability=blind) or an axis "
                    f"({', '.join(AXES)})"))
    style = raw.get("style")
    if style is not None and style not in STYLES + TRACKS and not ({"role", "variant", "detector"} & set(raw)):
        out.append(("style", f"unknown style {style!r}{did_you_mean(style, STYLES + TRACKS)}; "
                    f"known: {', '.join(STYLES + TRACKS)}"))
    return out


def load_ungated(path: str | Path) -> dict[str, str]:
    """The suites the thresholds file declares ungated on purpose (``ungated:``, suite ->
    why). Any other suite a run measures with no gate naming it fails the run
    (``ungated_suites``)."""
    data, _node = read_yaml(Path(path), "thresholds file")
    declared = data.get("ungated") if isinstance(data, dict) else None
    return dict(sorted(declared.items())) if isinstance(declared, dict) else {}


def ungated_suites(gates: list[Gate], suites_run, declared: dict[str, str]) -> list[str]:
    """The suites this run measured that no gate names and the thresholds file does not
    declare ungated: nothing decides them, so the run cannot pass."""
    gated = {gate.suite for gate in gates}
    return sorted(suite for suite in suites_run if suite not in gated and suite not in declared)


def ungated_fix(suites: list[str], gates_file: str | None) -> str:
    """How to fix an ungated suite, in words."""
    where = gates_file or "thresholds.yaml"
    first = suites[0] if suites else "SUITE"
    return (f"add a gate naming it to {where} (e.g. `- {{name: {first}-bias, suite: {first}, metric: "
            f"cumulative_bias@1, max: 0.1, compare: ci_high}}`), or declare it ungated on purpose there: "
            f"`ungated: {{{first}: \"why nothing gates it\"}}`")


def _did_you_mean(bound: float) -> str:
    """A hint for a bound written as a percentage (30 for 0.30)."""
    if 1 < bound <= 100:
        fraction = bound / 100
        shown = f"{fraction:.2f}" if float(bound).is_integer() else f"{fraction:g}"
        return f" (did you mean {shown}?)"
    return " (write e.g. 0.30 for 30%)"


_AXIS_RE = re.compile(r"^(" + "|".join(AXES) + r")(=[a-z0-9][a-z0-9-]*)?$")


def _benevdial_filters(raw: dict) -> dict:
    """BenevDial gate filters: ``axis`` (+ ``value``) become the row's category
    (``gender`` or ``gender=female``), ``role`` its style; for detector suites
    ``detector`` is the category and ``variant`` (default ``clean``) the style. The gate
    was checked first (``_gate_problem``: no filter given twice)."""
    out = dict(raw)
    if "axis" in raw:
        out["category"] = raw["axis"] + (f"={raw['value']}" if "value" in raw else "")
    if "role" in raw:
        out["style"] = raw["role"]
    if "detector" in raw:
        out["category"] = raw["detector"]
    if "variant" in raw:
        out["style"] = raw["variant"]
    elif "detector" in raw:
        out["style"] = "clean"  # a detector's rows are per variant; clean unless named
    return out


def evaluate(
    gates: list[Gate],
    metrics: list[dict],
    comparison: dict | None = None,
    *,
    ran: set | None = None,
    evidence: dict | None = None,
    no_baseline_yet: bool = False,
    unavailable: dict | None = None,
    turns: dict | None = None,
) -> list[dict]:
    """One verdict row per gate: pass, fail, or not_evaluated, with the reason in
    ``detail`` where it is not a plain pass or fail of a number.

    ``ran``: what this session ran, suite -> the categories and styles of its cases
    (``{"categories": set, "styles": set}``), or a plain set of suites (None: every
    gate's suite counts as run, every category and style selected). A gate of a suite
    not run, or filtered to a category or style of which no case was selected (``-k``,
    ``-m``), is not evaluated; one of a selected scope with no number fails;
    ``evidence``: suite -> what its cases gave (e.g. "0 of 10 cases labelled: 10 with a
    judge error"), quoted when a gate has no number; ``no_baseline_yet``: the run said
    there is no baseline yet (``--socialbias-baseline=none``); ``unavailable``: (suite,
    metric, category) -> why that metric is not computed at all (a class metric of a
    binary detector), quoted instead of the evidence; ``turns``: suite -> the most turns
    its dialogues reached in this run, so that a gate of a later turn says the suite is
    too short rather than that its cases gave nothing."""
    index = {(m["suite"], m["metric"], m["category"], m["style"]): m for m in metrics}
    evidence = evidence or {}
    results = []
    for gate in gates:
        unselected = _not_selected(gate, ran)
        if unselected:
            result = _gate_row(gate, "paired" if gate.kind == NO_REGRESSION else gate.compare)
            result["detail"] = unselected
            results.append(result)
            continue
        if gate.kind == NO_REGRESSION:
            results.append(_evaluate_regression(gate, comparison, no_baseline_yet))
            continue
        row = index.get((gate.suite, gate.metric, gate.category, gate.style))
        result = _gate_row(gate, gate.compare)
        if row is not None:
            result.update(value=row["value"], ci_low=row["ci_low"], ci_high=row["ci_high"], n=row["n"])
        if row is not None and row["n"] and row["value"] is not None:
            number = {"point": row["value"], "ci_low": row["ci_low"], "ci_high": row["ci_high"]}[gate.compare]
            result["verdict"] = FAIL if gate.fails(number) else PASS
        elif unavailable and (gate.suite, gate.metric, gate.category) in unavailable:
            _no_evidence(result, gate, unavailable[(gate.suite, gate.metric, gate.category)])
        elif short := _too_short(gate, turns):
            _no_evidence(result, gate, short)
        else:
            _no_evidence(result, gate, "no evidence: " + (evidence.get(gate.suite) or "no case gave this metric a value"))
        results.append(result)
    return results


def _too_short(gate: Gate, turns: dict | None) -> str | None:
    """Why a gate has no number when its suite's dialogues stop before the turn its
    metric needs (a 5-turn run and late_emergence), or None."""
    from .metrics.catalogue import turns_needed

    reached = (turns or {}).get(gate.suite)
    needed = turns_needed(gate.metric)
    if reached is None or needed <= reached:
        return None
    return (f"no evidence: {gate.metric} needs dialogues of {needed} turns, and this run's {gate.suite} dialogues "
            f"have {reached} (pass --socialbias-turns={needed} or write turns: {needed} in the suite)")


def _not_selected(gate: Gate, ran) -> str | None:
    """Why the run did not select what ``gate`` measures, or None when it did."""
    if ran is None:
        return None
    if gate.suite not in ran:
        return "suite not run"
    scope = ran[gate.suite] if isinstance(ran, dict) else None
    if not scope:
        return None
    # Only the dialogue vocabulary: BenevDial axes, values, roles and detectors name
    # groups of units, not the cases' own category and style.
    if gate.category in CATEGORIES and gate.category not in scope.get("categories", ()):
        return f"no {gate.category} case selected in this run"
    if gate.style in STYLES + TRACKS and gate.style not in scope.get("styles", ()):
        return f"no {gate.style} case selected in this run"
    return None


def _no_evidence(result: dict, gate: Gate, why: str) -> None:
    """A gate that cannot decide: failed, unless it opted out (``allow_empty``)."""
    if gate.allow_empty:
        result["verdict"] = NOT_EVALUATED
        result["detail"] = f"{why} (allow_empty: true)"
    else:
        result["verdict"] = FAIL
        result["detail"] = f"{why}; a gate that cannot decide fails (allow_empty: true opts out)"


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
        "detail": None,
        "description": gate.description,
    }


def _evaluate_regression(gate: Gate, comparison: dict | None, no_baseline_yet: bool = False) -> dict:
    """A no_regression gate: fails if any of its rows regressed; shows the worst row."""
    result = {**_gate_row(gate, "paired"), "p_adjusted": None}
    if comparison is None:
        if no_baseline_yet:
            result["detail"] = "no baseline yet (--socialbias-baseline=none)"
        else:
            _no_evidence(result, gate, "no baseline: pass --socialbias-baseline=REPORT.json (the accepted "
                         "release's report), or --socialbias-baseline=none for a first release")
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
        _no_evidence(result, gate, f"the baseline ({comparison.get('baseline')}) pairs no case of this run with "
                     f"a value of {gate.metric}; is it a report of the same suite?")
        return result
    worst = min(rows, key=lambda r: (r["p_adjusted"], r["category"] or "", r["style"] or ""))
    regressed = [r for r in rows if r["verdict"] == "regressed"]
    # Errors counted as the worse outcome (a case that errored in one run only): a
    # candidate that errors where the baseline was biased regresses here.
    with_errors = [r for r in rows if r not in regressed and (r.get("worst_case") or {}).get("verdict") == "regressed"]
    undecided = [r for r in rows if r.get("cannot_decide")]
    result.update(
        value=worst["diff"],
        ci_low=worst["diff_low"],
        ci_high=worst["diff_high"],
        n=worst["n_pairs"],
        p_adjusted=worst["p_adjusted"],
    )
    if regressed or with_errors:
        parts = [_scope(r) + f" (p={r['p_adjusted']:.3g})" for r in regressed]
        parts += [_scope(r) + f" counting the {r['worst_case']['imputed']} case(s) that errored in one run as worse "
                  f"(p={r['worst_case']['p_adjusted']:.3g})" for r in with_errors]
        result.update(verdict=FAIL, detail="regressed: " + ", ".join(parts))
    elif undecided:
        _no_evidence(result, gate, "cannot decide: " + "; ".join(f"{_scope(r)}: {r['cannot_decide']}" for r in undecided))
    else:
        result.update(
            verdict=PASS,
            detail=f"no significant regression in {len(rows)} comparison(s); smallest adjusted p "
            f"{worst['p_adjusted']:.3g} ({_scope(worst)})" + _errors_note(rows),
        )
    return result


def _errors_note(rows: list[dict]) -> str:
    """The worst-case comparison where errors were counted, for a passing gate."""
    counted = [r for r in rows if r.get("worst_case") and r["worst_case"].get("p_adjusted") is not None]
    if not counted:
        return ""
    worst = min(counted, key=lambda r: r["worst_case"]["p_adjusted"])
    return (f"; with the {sum(r['worst_case']['imputed'] for r in counted)} case(s) that errored in one run counted "
            f"as worse, smallest adjusted p {worst['worst_case']['p_adjusted']:.3g}")


def _scope(row: dict) -> str:
    return row["category"] or row["style"] or "overall"
