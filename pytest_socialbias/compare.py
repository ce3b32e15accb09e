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
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from . import stats
from .errors import ConfigError
from .metrics import catalogue, protocol_families
from .metrics.catalogue import DIALOGUE_RATE, is_comparable, lower_is_worse
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


def _errored(record: dict) -> bool:
    return record.get("outcome") == "error"


def compare_row(row: Comparison, current: dict[tuple, dict], baseline: dict[tuple, dict]) -> dict:
    """The paired statistics of one row (p-values unadjusted; ``compare`` adjusts).

    A case that errored in one run and has a value in the other is left out of the plain
    comparison and counted as the worse outcome in a second one (``worst_case``): the
    candidate's error as its worst value, the baseline's error as its best. A candidate
    that errors exactly where the baseline was biased is then no longer invisible."""
    scope = _Scope(row, [r for r in current.values() if r["suite"] == row.suite])
    keys = sorted(k for k, r in current.items() if scope.member(r) and k in baseline)
    worse = "less" if lower_is_worse(row.metric) else "greater"
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
    sides = [(scope.value(baseline[k]), scope.value(current[k]), _errored(baseline[k]), _errored(current[k])) for k in keys]
    if scope.metric.kind == DIALOGUE_RATE:
        worst, best = (1, 0) if worse == "greater" else (0, 1)
        seeds = [k[:2] for k in keys]  # a seed's dialogues in several styles are one cluster
        pairs = [(seed, b, c) for seed, (b, c, _, _) in zip(seeds, sides) if b is not None and c is not None]
        imputed = [(seed, best, c) if b is None else (seed, b, worst) for seed, (b, c, b_err, c_err) in zip(seeds, sides)
                   if (b is None) != (c is None) and (b_err if b is None else c_err)]
        clustered = len({seed for seed, _, _ in pairs + imputed}) < len(pairs + imputed)
        if clustered:
            out["method"] = "cluster sign-flip (seeds)" if row.margin == 0 else "paired cluster MOVER (seeds, margin)"
            out.update(_seed_rate_row(pairs, row, worse))
            if imputed:
                out["worst_case"] = _worst_case(_seed_rate_row(pairs + imputed, row, worse), len(imputed))
            return out
        out["method"] = scope.metric.paired_test if row.margin == 0 else "exact unconditional (margin)"
        out.update(_rate_row([(b, c) for _, b, c in pairs], row, worse))
        if imputed:
            out["worst_case"] = _worst_case(_rate_row([(b, c) for _, b, c in pairs + imputed], row, worse), len(imputed))
        return out
    out["method"] = scope.metric.paired_test
    scale = scope.metric.scale or (0.0, 1.0)
    worst, best = (scale[1], scale[0]) if worse == "greater" else (scale[0], scale[1])
    values = [(b, c) for b, c, _, _ in sides if b and c]
    imputed = [([best] * len(c), c) if not b else (b, [worst] * len(b)) for b, c, b_err, c_err in sides
               if bool(b) != bool(c) and (b_err if not b else c_err)]
    # A case with values on one side only (and no error) still counts towards that side.
    one_sided = [(b or [], c or []) for b, c, b_err, c_err in sides
                 if bool(b) != bool(c) and not (b_err if not b else c_err)]
    out.update(_cluster_row(values + one_sided, row, worse, scope.metric))
    if imputed:
        out["worst_case"] = _worst_case(_cluster_row(values + one_sided + imputed, row, worse, scope.metric), len(imputed))
    return out


def _worst_case(stats_row: dict, imputed: int) -> dict:
    keep = ("n_pairs", "baseline", "current", "diff", "diff_low", "diff_high", "p_value", "_mde", "_min_p", "_needed")
    return {"imputed": imputed, **{k: stats_row.get(k) for k in keep}}


def _rate_row(pairs: list, row: Comparison, worse: str) -> dict:
    """McNemar's exact test (or the margin test) and Newcombe's interval on 0/1 pairs,
    with what the MDE and the decidability checks need, as closures of alpha."""
    n = len(pairs)
    out: dict = {"n_pairs": n}
    if not n:
        return out
    better = "greater" if worse == "less" else "less"
    n11 = sum(1 for b, c in pairs if b and c)
    n10 = sum(1 for b, c in pairs if b and not c)
    n01 = sum(1 for b, c in pairs if not b and c)
    n00 = n - n11 - n10 - n01
    low, high = stats.paired_diff_interval(n11, n10, n01, n00)
    # The power calculation in the direction of the worsening: for a rate where lower is
    # worse, on its complement (1 - rate), whose pairs that got better are n01.
    base_rate = (n11 + n10) / n if worse == "greater" else (n01 + n00) / n
    discordance = (n10 + n01) / n or 2 * base_rate * (1 - base_rate)  # none seen: as for independent pairs
    out.update(
        baseline=(n11 + n10) / n,
        current=(n11 + n01) / n,
        diff=(n01 - n10) / n,
        diff_low=low,
        diff_high=high,
        p_value=stats.paired_margin_test(n11, n10, n01, n00, row.margin, worse),
        p_improvement=stats.mcnemar_exact(n10, n01, better),
        discordant=[n10, n01],
        _mde=lambda alpha: stats.paired_mde(n, discordance, base_rate, alpha, POWER, row.margin),
        _min_p=stats.paired_min_p(n, row.margin),
        _needed=lambda alpha: stats.paired_pairs_needed(discordance, base_rate, alpha, POWER, row.margin, start=n + 1),
    )
    return out


def _seed_rate_row(pairs: list, row: Comparison, worse: str) -> dict:
    """Paired 0/1 outcomes grouped by seed (a DyMT seed in two styles): the clustered
    paired test (the exact sign-flip test over seeds at margin 0, the paired cluster MOVER
    test at a margin), the paired cluster MOVER interval over seeds, and the MDE and
    decidability on the effective pairs (the pairs over the design effect of the seeds'
    paired differences)."""
    n = len(pairs)
    out: dict = {"n_pairs": n}
    if not n:
        return out
    by_seed: dict = {}
    for seed, b, c in pairs:
        base, cur = by_seed.setdefault(seed, ([], []))
        base.append(float(b))
        cur.append(float(c))
    clusters = [by_seed[seed] for seed in sorted(by_seed)]
    better = "greater" if worse == "less" else "less"
    n11 = sum(1 for _, b, c in pairs if b and c)
    n10 = sum(1 for _, b, c in pairs if b and not c)
    n01 = sum(1 for _, b, c in pairs if not b and c)
    n00 = n - n11 - n10 - n01
    moved = stats.paired_cluster_interval(clusters, interval_only=True)
    # The design effect of the seeds' paired differences: how much the pairs of a seed
    # move together (none seen: as if every pair of a seed moved with the others).
    diff = (n01 - n10) / n
    spread = math.fsum((c - b - diff) ** 2 for _, b, c in pairs)
    k = len(clusters)
    between = k / (k - 1) * math.fsum((math.fsum(c) - math.fsum(b) - diff * len(b)) ** 2 for b, c in clusters) if k > 1 else 0.0
    deff = max(1.0, between / spread) if spread > 0 and between > 0 else n / k
    effective = max(1, int(n / deff))
    base_rate = (n11 + n10) / n if worse == "greater" else (n01 + n00) / n
    discordance = (n10 + n01) / n or 2 * base_rate * (1 - base_rate)
    differences = [int(round(math.fsum(c) - math.fsum(b))) for b, c in clusters]
    if row.margin == 0:
        min_p = 0.5 ** k
    else:
        best, worst = (0.0, 1.0) if worse == "greater" else (1.0, 0.0)
        extreme = stats.paired_cluster_interval([([best] * len(b), [worst] * len(c)) for b, c in clusters], margin=row.margin)
        min_p = extreme["p_greater"] if worse == "greater" else extreme["p_less"]

    def needed(alpha: float) -> int | None:
        found = stats.paired_pairs_needed(discordance, base_rate, alpha, POWER, row.margin, start=effective + 1)
        return None if found is None else max(n + 1, math.ceil(found * deff))

    out.update(
        baseline=(n11 + n10) / n,
        current=(n11 + n01) / n,
        diff=diff,
        diff_low=moved["ci_low"],
        diff_high=moved["ci_high"],
        p_value=stats.clustered_paired_test(clusters, row.margin, worse),
        p_improvement=stats.cluster_sign_test(differences, better),
        discordant=[n10, n01],
        seeds=k,
        _mde=lambda alpha: stats.paired_mde(effective, discordance, base_rate, alpha, POWER, row.margin),
        _min_p=min_p,
        _needed=needed,
    )
    return out


def _cluster_row(values: list, row: Comparison, worse: str, metric) -> dict:
    """The paired cluster MOVER interval and its tests on rates over replies or means."""
    out: dict = {"n_pairs": len(values)}
    base_all = [x for b, _ in values for x in b]
    cur_all = [x for _, c in values for x in c]
    if not base_all or not cur_all:
        return out
    scale = metric.scale or (0.0, 1.0)
    cap = metric.scale is None  # 0/1 values: never more units than replies
    moved = stats.paired_cluster_interval(values, margin=row.margin, scale=scale, cap_at_values=cap)
    se = (moved["ci_high"] - moved["ci_low"]) / (2 * NormalDist().inv_cdf(0.975))
    baseline_value = sum(base_all) / len(base_all)
    # The most a rate can worsen from the baseline's value (a mean: to its scale's end).
    room = (scale[1] - baseline_value) if worse == "greater" else (baseline_value - scale[0])
    z = NormalDist().inv_cdf

    def interval_mde(alpha: float) -> float | None:
        """The worsening the interval's test detects with power POWER at this n (normal
        approximation on the interval's half-width); None where it exceeds what the value
        can still worsen by. The interval never has zero width, so neither has this."""
        mde = row.margin + (z(1 - alpha) + z(POWER)) * se
        return None if mde > room else mde

    def needed(alpha: float) -> int | None:
        """About how many cases the MDE needs to fall within ``room`` (the half-width
        shrinks as one over the square root of the cases)."""
        if room <= row.margin or se <= 0:
            return None
        return max(len(values) + 1, math.ceil(len(values) * ((z(1 - alpha) + z(POWER)) * se / (room - row.margin)) ** 2))

    # The smallest p the test could give: every baseline value at its best, every current
    # one at its worst, as many values as each case has.
    best, worst = (scale[0], scale[1]) if worse == "greater" else (scale[1], scale[0])
    extreme = [([best] * len(b), [worst] * len(c)) for b, c in values if b and c]
    min_p = 1.0
    if extreme:
        ends = stats.paired_cluster_interval(extreme, margin=row.margin, scale=scale, cap_at_values=cap)
        min_p = ends["p_greater"] if worse == "greater" else ends["p_less"]
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
        _mde=interval_mde,
        _min_p=min_p,
        _needed=needed,
    )
    return out


def _reachable(rows: list[dict]) -> dict[int, bool]:
    """Whether each row's regression test could reject at all after Holm's correction, in
    the best case for it: every row whose smallest possible p is below its own rejected
    first, each at its smallest p. ``id(row)`` -> bool."""
    order = sorted(rows, key=lambda r: r["_min_p"])
    m = len(order)
    worst_so_far, out, first_at = 0.0, {}, {}
    prefix = []
    for i, r in enumerate(order):
        worst_so_far = max(worst_so_far, (m - i) * r["_min_p"])
        prefix.append(worst_so_far)
        first_at.setdefault(r["_min_p"], i)
    for r in order:
        out[id(r)] = prefix[first_at[r["_min_p"]]] < r["alpha"]
    return out


def _decide(r: dict, family_size: int, reachable: bool) -> None:
    """The row's MDE at the family's strictest alpha, and why it cannot decide (None when
    it can): its test can never reach its level with these pairs, or no worsening within
    the range is found with 80% power."""
    strict = r["alpha"] / family_size
    r["mde"] = r["_mde"](strict)
    r["min_p"] = r["_min_p"]
    if reachable and r["mde"] is not None:
        r["cannot_decide"] = None
        return
    needed = r["_needed"](strict)
    need = f"it needs about {needed} pairs" if needed else "no number of pairs would do at this rate"
    if not reachable:
        why = (f"with {r['n_pairs']} pair(s) the smallest p its test could give is {r['_min_p']:.3g}, above its level "
               f"after Holm's correction over {family_size} row(s) (alpha {r['alpha']:g})")
    else:
        why = f"with {r['n_pairs']} pair(s) no worsening within the range is found with {POWER:.0%} power (MDE none)"
    r["cannot_decide"] = f"{why}; {need}"
    r["pairs_needed"] = needed


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
        reachable = _reachable(tested)
        for r in tested:
            _decide(r, len(tested), reachable[id(r)])
        # The same rows with errors counted as the worse outcome, adjusted among themselves.
        worst = [r["worst_case"] for r in tested if r.get("worst_case") and r["worst_case"]["p_value"] is not None]
        for w, p in zip(worst, stats.holm([w["p_value"] for w in worst])):
            w["p_adjusted"] = p
    for r in results:
        for key in ("_mde", "_min_p", "_needed"):
            r.pop(key, None)
        if r.get("worst_case"):
            for key in ("_mde", "_min_p", "_needed"):
                r["worst_case"].pop(key, None)
            r["worst_case"].setdefault("p_adjusted", None)
            adjusted = r["worst_case"]["p_adjusted"]
            r["worst_case"]["verdict"] = REGRESSED if adjusted is not None and adjusted < r["alpha"] else NO_CHANGE
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
