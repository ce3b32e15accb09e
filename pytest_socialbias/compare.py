"""Paired comparison with the last accepted release (``--socialbias-baseline=REPORT.json``).

Cases of this run and of the baseline report are paired by (suite, case id, style). Each
compared metric takes its test from the metric catalogue (metrics/catalogue.py):

* rates with one 0/1 outcome per case (``cumulative_bias@T``, ``reemergence``,
  ``error_rate``, BenevDial ``bb_rate``, a detector's ``tr_bb``, ...) get McNemar's exact
  test on the discordant pairs (Tango's score test when a margin is set), Newcombe's
  hybrid score interval for the paired difference, and the minimum detectable effect at
  this n;
* rates over replies (``refusal_rate``, guard rates) and means (``coherence_mean``) get
  the paired cluster MOVER interval (each run's score interval on its effective sample
  size, combined with the case-level correlation) and the one-sided tests that invert it
  (stats.paired_cluster_interval): never zero width, deterministic;
* statistics (F1, macro-F1, the OB-BB gap, agreement coefficients) are not compared case
  by case.

The regression test is one-sided against the margin: "worse by more than the margin"
(the catalogue says which direction is worse). The improvement test is one-sided at
margin 0. Holm's correction runs within a family of rows: the **gates** family holds the
rows of ``no_regression`` gates (the rows that can fail the run), across all suites,
categories and styles; the **informational** family holds the other compared rows (the
rates of ``max``/``min`` gates), adjusted among themselves. So adding an informational
gate never changes a gating verdict. Each family is adjusted separately for the
regression and the improvement tests. Verdict: ``regressed`` when the regression test's
adjusted p is below alpha, else ``improved`` when the improvement test's is, else ``no
significant change``.

What is compared: each gated rate in thresholds.yaml (max/min gates, informational) and
the rows of ``no_regression`` gates (these fail the run when a row regressed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from . import stats
from .errors import ConfigError
from .metrics import catalogue, protocol_families
from .metrics.catalogue import DIALOGUE_RATE, is_comparable, is_percent, lower_is_worse
from .metrics.families import FAMILIES

REGRESSED, IMPROVED, NO_CHANGE = "regressed", "improved", "no significant change"
#: Multiplicity families: rows that can fail the run, and the others.
GATES, INFORMATIONAL = "gates", "informational"
DEFAULT_ALPHA = 0.05
POWER = 0.8

__all__ = ["Comparison", "case_value", "compare", "compare_row", "is_comparable", "load_baseline", "lower_is_worse", "rows_for"]


@dataclass(frozen=True)
class Comparison:
    """One row to compare: a metric of a suite, optionally for a category or style."""

    suite: str
    metric: str
    category: str | None = None
    style: str | None = None
    margin: float = 0.0
    alpha: float = DEFAULT_ALPHA
    gating: bool = False  # a row of a no_regression gate: it can fail the run


def load_baseline(path: Path) -> dict:
    """Read and validate a baseline JSON report; ConfigError naming the fix if unusable."""
    from .report.json_report import validate_report

    option = f"--socialbias-baseline={path}"
    if not path.is_file():
        raise ConfigError(f"{option}: file not found; give the JSON report (--socialbias-report) of the accepted release")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{option}: not a readable JSON report ({exc}); give a file written by --socialbias-report") from None
    try:
        validate_report(data)
    except Exception as exc:  # jsonschema.ValidationError
        where = "/".join(str(p) for p in getattr(exc, "absolute_path", [])) or "(top)"
        message = getattr(exc, "message", str(exc))
        raise ConfigError(
            f"{option}: not a pytest-socialbias report of this format (at {where}: {message}); "
            "write the baseline with --socialbias-report of this plugin version"
        ) from None
    return data


# --------------------------------------------------------------------------- per-case values


def _key(record: dict) -> tuple:
    return (record["suite"], record["id"], record.get("style") or "")


def _families_of(records: list[dict]) -> tuple:
    """The metric families of the suite these records belong to (by their protocol)."""
    table = protocol_families()
    for record in records:
        return table.get(record.get("protocol"), ("dialogue",))
    return ("dialogue",)


class _Scope:
    """Where a row's cases come from and how a case counts towards its metric."""

    def __init__(self, row: Comparison, records: list[dict]):
        families = _families_of(records)
        # The suite's own declaration of the metric, else the one that compares it
        # case by case (error_rate of a detector suite counts its cases as any suite's).
        self.metric = catalogue.lookup(row.metric, families)
        if self.metric is None or self.metric.paired is None:
            self.metric = catalogue.comparable(row.metric)
        if self.metric is None:
            raise KeyError(row.metric)
        # The suite's cases belong to a row's scope as its protocol's groups say.
        self.family = FAMILIES[families[0]]
        self.row = row
        self.turn = catalogue.turn_of(row.metric) if self.metric.by_turn else None

    def member(self, record: dict) -> bool:
        return record["suite"] == self.row.suite and self.family.member(record, self.row.category, self.row.style)

    def value(self, record: dict):
        return self.metric.paired(record, self.turn, self.row.category)


def case_value(metric: str, record: dict, detector: str | None = None):
    """A case's value for a compared metric: 0/1 (or None when the case does not count
    towards it) for rates of dialogues, a list of values for rates over replies and means."""
    scope = _Scope(Comparison(record["suite"], metric, detector), [record])
    return scope.value(record)


def compare_row(row: Comparison, current: dict[tuple, dict], baseline: dict[tuple, dict]) -> dict:
    """The paired statistics of one row (p-values unadjusted; ``compare`` adjusts)."""
    scope = _Scope(row, [r for r in current.values() if r["suite"] == row.suite])
    keys = sorted(k for k, r in current.items() if scope.member(r) and k in baseline)
    worse = "less" if lower_is_worse(row.metric) else "greater"
    better = "greater" if worse == "less" else "less"
    out = {
        "suite": row.suite,
        "metric": row.metric,
        "category": row.category,
        "style": row.style,
        "margin": row.margin,
        "alpha": row.alpha,
        "n_pairs": 0,
        "baseline": None,
        "current": None,
        "diff": None,
        "diff_low": None,
        "diff_high": None,
        "p_value": None,
        "p_improvement": None,
        "mde": None,
        "method": None,
    }
    if scope.metric.kind == DIALOGUE_RATE:
        pairs = [(scope.value(baseline[k]), scope.value(current[k])) for k in keys]
        pairs = [(b, c) for b, c in pairs if b is not None and c is not None]
        n = len(pairs)
        out["n_pairs"] = n
        out["method"] = scope.metric.paired_test if row.margin == 0 else "exact unconditional (margin)"
        if not n:
            return out
        n11 = sum(1 for b, c in pairs if b and c)
        n10 = sum(1 for b, c in pairs if b and not c)
        n01 = sum(1 for b, c in pairs if not b and c)
        n00 = n - n11 - n10 - n01
        low, high = stats.paired_diff_interval(n11, n10, n01, n00)
        discordance = (n10 + n01) / n
        if discordance == 0:
            # No discordant pair yet: size the test for independent pairs at the baseline rate.
            p = (n11 + n10) / n
            discordance = 2 * p * (1 - p)
        out.update(
            baseline=(n11 + n10) / n,
            current=(n11 + n01) / n,
            diff=(n01 - n10) / n,
            diff_low=low,
            diff_high=high,
            p_value=stats.paired_margin_test(n11, n10, n01, n00, row.margin, worse),
            p_improvement=stats.mcnemar_exact(n10, n01, better),
            discordant=[n10, n01],
        )
        # The power of the exact test that is run, by enumeration (Connor's formula
        # overstated it: at its MDE for 240 pairs of discordance 0.2, the exact McNemar
        # test's power was 0.768, the margin-0.02 test's 0.726).
        if row.margin == 0:
            out["_mde"] = lambda alpha: stats.mcnemar_exact_mde(n, discordance, alpha, POWER)
        else:
            out["_mde"] = lambda alpha: stats.margin_test_mde(n, discordance, row.margin, alpha, POWER)
        return out
    values = [(scope.value(baseline[k]), scope.value(current[k])) for k in keys]
    values = [(b, c) for b, c in values if b is not None and c is not None and (b or c)]
    out["n_pairs"] = len(values)
    out["method"] = scope.metric.paired_test
    base_all = [x for b, _ in values for x in b]
    cur_all = [x for _, c in values for x in c]
    if not base_all or not cur_all:
        return out
    scale = scope.metric.scale or (0.0, 1.0)
    cap = scope.metric.scale is None  # 0/1 values: never more units than replies
    moved = stats.paired_cluster_interval(values, margin=row.margin, scale=scale, cap_at_values=cap)
    se = (moved["ci_high"] - moved["ci_low"]) / (2 * NormalDist().inv_cdf(0.975))
    baseline_value = sum(base_all) / len(base_all)
    # The most a rate can worsen from the baseline's value (a mean: to its scale's end).
    room = (scale[1] - baseline_value) if worse == "greater" else (baseline_value - scale[0])

    def interval_mde(alpha: float) -> float | None:
        """The worsening the interval's test detects with power POWER at this n (normal
        approximation on the interval's half-width); None where it exceeds what the value
        can still worsen by. The interval never has zero width, so neither has this."""
        mde = row.margin + (NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(POWER)) * se
        return None if mde > room else mde

    out["_mde"] = interval_mde
    out.update(
        baseline=baseline_value,
        current=sum(cur_all) / len(cur_all),
        diff=moved["diff"],
        diff_low=moved["ci_low"],
        diff_high=moved["ci_high"],
        p_value=moved["p_greater"] if worse == "greater" else moved["p_less"],
        # Improvement at margin 0: the other end of the same intervals.
        p_improvement=(moved if row.margin == 0 else stats.paired_cluster_interval(values, scale=scale, cap_at_values=cap))[
            "p_less" if worse == "greater" else "p_greater"
        ],
    )
    return out


def compare(records: list[dict], baseline: dict, rows: list[Comparison], current_meta: dict) -> dict:
    """All rows compared, Holm-adjusted, with verdicts and the comparability warnings."""
    current = {_key(r): r for r in records}
    base = {_key(r): r for r in baseline["cases"]}
    results = [compare_row(row, current, base) for row in rows]
    for row, result in zip(rows, results):
        result["family"] = GATES if row.gating else INFORMATIONAL
    for family in (GATES, INFORMATIONAL):
        tested = [r for r in results if r["family"] == family and r["p_value"] is not None]
        for key, adjusted_key in (("p_value", "p_adjusted"), ("p_improvement", "p_improvement_adjusted")):
            adjusted = stats.holm([r[key] for r in tested])
            for r, p in zip(tested, adjusted):
                r[adjusted_key] = p
        # The smallest worsening detectable at the strictest alpha Holm applies in the
        # family (alpha / m), beyond the row's margin.
        for r in tested:
            r["mde"] = r["_mde"](r["alpha"] / len(tested))
    for r in results:
        r.pop("_mde", None)
    for r in results:
        r.setdefault("p_adjusted", None)
        r.setdefault("p_improvement_adjusted", None)
        if r["p_adjusted"] is None:
            r["verdict"] = NO_CHANGE if r["n_pairs"] else "not compared"
        elif r["p_adjusted"] < r["alpha"]:
            r["verdict"] = REGRESSED
        elif r["p_improvement_adjusted"] < r["alpha"]:
            r["verdict"] = IMPROVED
        else:
            r["verdict"] = NO_CHANGE
    suites = sorted({row.suite for row in rows})
    unpaired = {
        suite: {
            "only_current": sum(1 for k in current if k[0] == suite and k not in base),
            "only_baseline": sum(1 for k in base if k[0] == suite and k not in current),
        }
        for suite in suites
    }
    return {
        "warnings": comparability_warnings(baseline, current_meta),
        "unpaired": unpaired,
        "rows": results,
    }


def comparability_warnings(baseline: dict, current: dict) -> list[str]:
    """Why the baseline's numbers may not be comparable with this run's."""
    out = []
    for role, what in (("judge", "judge"), ("user", "user simulator")):
        old, new = (_spec_only(found.get("models", {}).get(role)) for found in (baseline, current))
        if old is not None and new is not None and old != new:
            out.append(
                f"the baseline's {what} differs ({_spec_text(old)} there, {_spec_text(new)} here): "
                "its labels are not comparable with this run's; re-run the baseline with this "
                f"{what} before trusting the comparison"
            )
    old_t, new_t = set(baseline.get("prompt_templates", [])), set(current.get("prompt_templates", []))
    if old_t and new_t and old_t != new_t:
        out.append(
            "the baseline used other prompt templates (" + ", ".join(sorted(old_t - new_t)) + " there; "
            + ", ".join(sorted(new_t - old_t)) + " here): judge and user-simulator prompts changed, "
            "so the numbers are not comparable"
        )
    for suite, meta in sorted(current.get("suites", {}).items()):
        old = baseline.get("suites", {}).get(suite)
        if old is not None and old["sha256"] != meta["sha256"]:
            out.append(
                f"suite {suite}: its file changed since the baseline (sha256 {old['sha256'][:12]} there, "
                f"{meta['sha256'][:12]} here); only cases present in both are paired"
            )
    return out


def _spec_only(spec: dict | None) -> dict | None:
    """A role's spec without what the run adapted to and what its batcher gathered (those
    are reported, not compared)."""
    return None if spec is None else {k: v for k, v in spec.items() if k not in ("adapted", "batching")}


def _spec_text(spec: dict) -> str:
    text = f"{spec['provider']}:{spec['model']}"
    if spec.get("base_url"):
        text += f"@{spec['base_url']}"
    if spec.get("params"):
        text += "?" + "&".join(f"{k}={v}" for k, v in sorted(spec["params"].items()))
    return text


def rows_for(gates, records: list[dict]) -> list[Comparison]:
    """The rows to compare: each gated rate (max/min gates, margin 0) and each row of a
    ``no_regression`` gate (expanded over the categories or styles it names with ``by``).
    A row named by both keeps the ``no_regression`` gate's margin and alpha."""
    rows: dict[tuple, Comparison] = {}
    for gate in gates:
        if not is_comparable(gate.metric):
            continue
        if gate.kind != "no_regression":
            key = (gate.suite, gate.metric, gate.category, gate.style)
            rows.setdefault(key, Comparison(gate.suite, gate.metric, gate.category, gate.style))
            continue
        for category, style in gate_scopes(gate, records):
            rows[(gate.suite, gate.metric, category, style)] = Comparison(
                gate.suite, gate.metric, category, style, gate.bound, gate.alpha, gating=True
            )
    return sorted(rows.values(), key=lambda r: (r.suite, r.metric, r.category or "", r.style or ""))


def gate_scopes(gate, records: list[dict]) -> list[tuple]:
    """(category, style) pairs a no_regression gate covers in this run. For BenevDial
    suites the categories are demographic values (``axis=value``; axes for pairs) or
    detectors, and the styles roles or variants, as in their metric rows."""
    mine = [r for r in records if r["suite"] == gate.suite]
    if gate.by is None:
        return [(gate.category, gate.style)]
    family = FAMILIES[_families_of(mine)[0]]
    if gate.by == "category":
        values = sorted({c for r in mine for c in family.categories(r)})
        return [(value, gate.style) for value in values]
    values = sorted({s for r in mine for s in family.styles(r)})
    return [(gate.category, value) for value in values]
