"""The terminal summary: key metrics with 95% intervals, outcomes, errors, cache, gates."""

from __future__ import annotations

from ..metrics import outcome_counts
from ..metrics.catalogue import CATALOGUE, is_percent
from . import formatting as fmt

MAX_ERRORS_SHOWN = 10
MAX_ERRORS_SHOWN_BRIEF = 3  # under -q
MAX_METRIC_DIFF_LINES = 40


def key_metrics() -> set[str]:
    """The metrics the summary shows for each suite (the catalogue marks them)."""
    return {metric.name for metric in CATALOGUE.values() if metric.key}


def _is_rate(metric: str) -> bool:
    return is_percent(metric)


def _pct(value, metric: str = "") -> str:
    return fmt.number(value, metric, width=5)


def _interval(row) -> str:
    return fmt.interval(row.get("ci_low"), row.get("ci_high"), row.get("metric", ""))


def _cell(row) -> str:
    """``12.5 [8.1-18.7]``: a value with its interval, compact, for the by-turn table."""
    if row is None or row.get("value") is None:
        return "-"
    if not _is_rate(row["metric"]):
        return f"{row['value']:.2f} [{row['ci_low']:.2f}-{row['ci_high']:.2f}]"
    return f"{100 * row['value']:.1f} [{100 * row['ci_low']:.1f}-{100 * row['ci_high']:.1f}]"


def _turn_columns(turns: int) -> list[int]:
    """All turns up to 6; beyond that turns 1, 3, 5, 7 and the last (1, 3, 5, 7, 10)."""
    if turns <= 6:
        return list(range(1, turns + 1))
    return sorted({t for t in (1, 3, 5, 7) if t < turns} | {turns})


def by_turn_tables(metrics: list[dict]) -> list[str]:
    """Per multi-turn suite: cumulative bias by turn for overall, each category and each
    style, then refusal rate and coherence, all in percent with 95% intervals."""
    lines: list[str] = []
    for suite in sorted({m["suite"] for m in metrics}):
        rows = [m for m in metrics if m["suite"] == suite]
        turns = max((int(m["metric"].split("@")[1]) for m in rows if m["metric"].startswith("cumulative_bias@")), default=0)
        if turns < 2:
            continue
        index = {(m["metric"], m["category"], m["style"]): m for m in rows}
        columns = _turn_columns(turns)
        groups = [(None, None)] + sorted({(m["category"], None) for m in rows if m["category"]}) + sorted(
            {(None, m["style"]) for m in rows if m["style"]}
        )
        has_coherence = any(m["metric"] == "coherence_mean" for m in rows)
        header = ["group", "n"] + [f"cum@{t}" for t in columns] + ["refusal"] + (["coherence"] if has_coherence else [])
        table = []
        for category, style in groups:
            first = index.get((f"cumulative_bias@{columns[0]}", category, style))
            line = [category or style or "overall", str(first["n"]) if first else "0"]
            line += [_cell(index.get((f"cumulative_bias@{t}", category, style))) for t in columns]
            line.append(_cell(index.get(("refusal_rate", category, style))))
            if has_coherence:
                line.append(_cell(index.get(("coherence_mean", category, style))))
            table.append(line)
        lines.append("")
        lines.append(f"{suite}: cumulative bias by turn, % [95% CI]; refusal % of replies; coherence 1-5")
        lines += _table(header, table)
    return lines


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def key_metric_rows(metrics: list[dict]) -> list[dict]:
    """Overall rows: the last cumulative bias per suite plus refusal and error rates."""
    out = []
    key = key_metrics()
    for suite in sorted({m["suite"] for m in metrics}):
        overall = [m for m in metrics if m["suite"] == suite and m["category"] is None and m["style"] is None]
        cumulative = [m for m in overall if m["metric"].startswith("cumulative_bias@")]
        if cumulative:
            out.append(max(cumulative, key=lambda m: int(m["metric"].split("@")[1])))
        out += [m for m in overall if m["metric"] in key]
    return out


def outcomes_line(records) -> str:
    """``4 cases: 2 clean, 1 biased, 1 refused, 0 errors``."""
    counts = outcome_counts(records)
    return (f"{len(records)} cases: {counts['clean']} clean, {counts['biased']} biased, "
            f"{counts['refused']} refused, {counts['error']} errors")


def summary_lines(result, brief: bool = False) -> list[str]:
    """The summary of a RunResult (result.py), line by line. ``brief`` (pytest's ``-q``):
    the outcomes, the errors, what fails the run and the gate table only; the tables of
    metrics, usage, comparison and agreement stay in the reports."""
    lines: list[str] = []
    records = result.records
    lines.append(outcomes_line(records))
    if not brief:
        lines += adaptation_lines(result.models)
        lines += simulator_lines(records)
    errors = [(r, e) for r in records for e in r.get("errors", [])]
    if errors:
        from ..judges.binary import REPLAYED_NOTE

        replayed = sum(1 for _, e in errors if REPLAYED_NOTE in e["message"])
        cached = f"; {replayed} from answers replayed from the cache, which a recording run asks again" if replayed else ""
        shown_most = MAX_ERRORS_SHOWN_BRIEF if brief else MAX_ERRORS_SHOWN
        lines.append("")
        lines.append(f"errors ({len(errors)}; counted, never folded into a rate{cached}):")
        for record, error in errors[:shown_most]:
            lines.append(f"  {record['suite']}::{record['id']}: [{error['kind']}] {error['message']}")
        if len(errors) > shown_most:
            lines.append(f"  ... and {len(errors) - shown_most} more (see --socialbias-report)")
        from ..models.guard import circuit_lines

        lines += circuit_lines(records)  # endpoints that stopped answering
    lines.append("")
    lines += partial_lines(result)
    lines += ungated_lines(result)
    if result.gates:
        lines += gate_lines(result.gates, result.suites_run)
    else:
        lines += no_gates_lines(result)
    if brief:
        if result.snapshots is not None and result.snapshots.failed:
            lines.append(f"snapshots: {len(result.snapshots.flipped_cases)} case(s) flipped, more than "
                         f"--socialbias-snapshot-max-flips={result.snapshots.max_flips}")
        return lines + verdict_lines(result)
    lines += by_turn_tables(result.metrics)
    lines += benevdial_tables(result.metrics)
    lines += detector_tables(result.metrics, result.detection)
    shown = key_metric_rows(result.metrics)
    rows = [
        [m["suite"], m["metric"], _pct(m["value"], m["metric"]), _interval(m), str(m["n"]) + (" small" if m.get("small") else "")]
        for m in shown
    ]
    if rows:
        lines.append("")
        lines += _table(["suite", "metric", "value", "95% CI", "n"], rows)
        if any(m.get("small") for m in shown):
            lines.append("(small: fewer than 10 independent units (dialogues, seeds, clusters, items) behind the value;"
                         " no interval method can promise its 95% there)")
    lines += simulator_findings_lines(records, result.metrics)
    usage = result.usage
    if usage:
        reasoning = any(u.get("reasoning_tokens") for u in usage.values())
        unrecorded = sum(u.get("unrecorded", 0) for u in usage.values())
        lines.append("")
        lines += _table(
            ["role", "calls", "cache hits", "misses"] + (["not recorded"] if unrecorded else [])
            + ["prompt tokens", "completion tokens"] + (["of which reasoning"] if reasoning else []),
            [
                [role, str(u["calls"]), str(u["hits"]), str(u["misses"])]
                + ([str(u.get("unrecorded", 0))] if unrecorded else [])
                + [str(u["prompt_tokens"]), str(u["completion_tokens"])]
                + ([str(u.get("reasoning_tokens", 0))] if reasoning else [])
                for role, u in usage.items()
            ],
        )
        lines.append("(tokens are those of live calls; replayed calls cost none)")
        if unrecorded:
            lines.append(f"(not recorded: {unrecorded} miss(es) with no answer in the cache, which "
                         "--socialbias-record=none does not call; their cases are errors)")
        repaired = [f"{role} {u['repaired']}" for role, u in usage.items() if u.get("repaired")]
        if repaired:
            lines.append(f"answers with fields that could not be read ({', '.join(repaired)}): token counts or "
                         "log-probabilities of the wrong kind were ignored and lone surrogates in text replaced "
                         "(U+FFFD); the answers themselves were used")
        for role, u in usage.items():
            if u.get("replicas"):
                served = "; ".join(
                    f"{url}: {n['served']} served" + (f", {n['failed']} failed (taken out for a while each time)"
                                                      if n["failed"] else "")
                    for url, n in u["replicas"].items()
                )
                lines.append(f"replicas of the {role}: {served}")
    from ..models.batchstats import batching_lines

    lines += batching_lines(result.models)  # in-process models: the batches they gathered
    if result.comparison is not None:
        lines += comparison_lines(result.comparison)
    if result.judge_check is not None:
        lines += judge_check_lines(result.judge_check)
    lines += snapshot_lines(result.snapshots)
    check_usage = result.judge_check_usage
    if check_usage:
        u = check_usage["judge"]
        lines.append(f"judge check: {u['calls']} judge calls ({u['hits']} cached), {u['prompt_tokens']} prompt / {u['completion_tokens']} completion tokens")
    return lines + verdict_lines(result)


def verdict_lines(result) -> list[str]:
    """The line that says why the results fail the run, after a blank line; none when
    they do not."""
    why = failure_reason(result)
    return ["", f"{why}: exit status 1"] if why else []


def failure_reason(result) -> str | None:
    """Why the results fail the run, in words (the first reason), or None."""
    if result.failed_gates:
        return f"{result.failed_gates} gate(s) failed"
    if result.ungated:
        return f"{len(result.ungated)} suite(s) decided by no gate ({', '.join(result.ungated)})"
    if result.partial_failure:
        return "partial run (only part of the cases)"
    if result.gateless_failure:
        return "no thresholds file under --socialbias-strict"
    if result.snapshots is not None and result.snapshots.failed:
        return f"{len(result.snapshots.flipped_cases)} flipped snapshot(s)"
    return None


def one_line(result, unwritten: list[str] = ()) -> str:
    """The whole summary in one line (pytest's ``-qq``): outcomes, gates, the verdict, the
    report written."""
    counts = outcome_counts(result.records)
    parts = [f"socialbias: {len(result.records)} cases ({counts['clean']} clean, {counts['biased']} biased, "
             f"{counts['refused']} refused, {counts['error']} errors)"]
    if result.gates:
        failed = [g["gate"] for g in result.gates if g["verdict"] == "fail"]
        names = f" ({', '.join(failed[:5])}{', ...' if len(failed) > 5 else ''})" if failed else ""
        parts.append(f"gates {len(failed)} failed of {len(result.gates)}{names}")
    else:
        parts.append("no gates")
    if unwritten:
        parts.append(f"{len(unwritten)} report(s) not written")
    parts.append("FAILED: exit status 1" if result.failed or unwritten else "passed")
    if result.report_path is not None and not unwritten:
        parts.append(f"report {result.report_path}")
    return "; ".join(parts)


def partial_lines(result) -> list[str]:
    """A partial run, said first: why, and what it means for the exit status."""
    if not result.partial:
        return []
    why = "; ".join(result.partial_reasons) or "stopped early"
    if result.partial_allowed:
        return [f"PARTIAL RUN (ALLOWED by --socialbias-allow-partial): {why}; metrics and gates cover only these "
                "cases, and the exit status is theirs: it decides no release"]
    return [f"PARTIAL RUN: {why}; metrics and gates cover only these cases, so the run fails: run the suite files "
            "whole to decide (gate one category on purpose in the suite or thresholds file), or pass "
            "--socialbias-allow-partial for local debugging"]


def ungated_lines(result) -> list[str]:
    """Suites measured with no gate: the run fails; and those declared ungated on purpose."""
    from ..gates import ungated_fix

    lines = []
    if result.ungated:
        lines.append(f"UNGATED: suite(s) {', '.join(result.ungated)} ran but no gate of "
                     f"{result.gates_file or 'the thresholds file'} names them, so nothing decides their cases and "
                     f"the run fails: {ungated_fix(list(result.ungated), result.gates_file)}")
    for suite, why in sorted(result.declared_ungated.items()):
        lines.append(f"suite {suite}: ungated on purpose ({result.gates_file}): {why}")
    return lines


def no_gates_lines(result) -> list[str]:
    """What a run with no gates says: nothing decided it, and how to change that."""
    if result.gates_file is not None:
        return [f"gates: none ({result.gates_file} lists none); nothing decides this run"]
    where = result.gates_looked_for or "thresholds.yaml"
    if result.strict:
        return [f"gates: NO THRESHOLDS FILE ({where} not found): the run fails (--socialbias-strict)"]
    return [
        f"gates: none: no thresholds file ({where} not found), so nothing decides this run; add one or "
        "pass --socialbias-thresholds, and --socialbias-strict to fail runs that have none"
    ]


def simulator_lines(records) -> list[str]:
    """One line per suite whose dialogues a simulated user wrote: its turns, the draws
    that broke role (by kind), the turns retried and failed."""
    from ..metrics import simulator_summary

    lines = []
    for suite, entry in simulator_summary(records).items():
        total = entry["overall"]
        broke = sum(total["flagged"].values())
        kinds = ", ".join(f"{kind.replace('_', ' ')} {n}" for kind, n in total["flagged"].items())
        line = (f"user simulator, {suite}: {total['turns']} turns, {total['draws']} draws, {broke} broke role"
                f"{f' ({kinds})' if kinds else ''}; {total['retried']} turns retried, {total['failed']} failed")
        judged = total.get("judged")
        if judged:
            share = judged["passed"] / judged["draws"] if judged["draws"] else 0.0
            line += (f"; judged check: {judged['passed']} of {judged['draws']} draws coherent and not revealing "
                     f"({share:.1%}), {judged['unreadable']} unreadable")
        lines.append(line)
    return lines


def _share(entry: dict) -> str:
    """``2 of 6 (33.3% [9.7, 70.0])``: a share of the findings with its Wilson interval."""
    return (f"{entry['count']} of {entry['n']} ({fmt.number(entry['value'], 'share')} "
            f"{fmt.interval(entry['ci_low'], entry['ci_high'], 'share')})")


def simulator_findings_lines(records, metrics) -> list[str]:
    """Per suite whose simulated-user checks only reported (``simulator_findings: report``):
    the user turns flagged of any kind and per kind, the dialogues with a flagged turn,
    and the suite's key metrics with and without those dialogues (metrics.simulator_findings)."""
    from ..metrics import simulator_findings

    lines: list[str] = []
    for suite, entry in simulator_findings(list(records)).items():
        kinds = "; ".join(f"{kind.replace('_', ' ')} {_share(share)}" for kind, share in entry["flagged_turns"].items())
        lines.append("")
        lines.append(f"simulated-user findings, {suite} (reported only: flagged turns were sent, none redrawn): "
                     f"user turns flagged {_share(entry['any_kind'])}{f': {kinds}' if kinds else ''}; dialogues "
                     f"with a flagged turn {_share(entry['flagged_dialogues'])}")
        without = {m["metric"]: m for m in key_metric_rows(entry["metrics_without_flagged"])}
        rows = []
        for m in key_metric_rows([m for m in metrics if m["suite"] == suite]):
            other = without.get(m["metric"])
            rows.append([m["metric"], f"{_pct(m['value'], m['metric'])} {_interval(m)}", str(m["n"]),
                         "-" if other is None else f"{_pct(other['value'], other['metric'])} {_interval(other)}",
                         "0" if other is None else str(other["n"])])
        if rows:
            lines += _table(["metric", "with flagged", "n", "without flagged", "n"], rows)
    return lines


def adaptation_lines(models: dict) -> list[str]:
    """What the run adapted to at each role's endpoint, and why, said once."""
    from ..models.adapt import Adaptation

    lines = []
    for role, spec in sorted(models.items()):
        said = Adaptation.from_dict(spec.get("adapted")).describe()
        if said:
            lines.append(f"  - {role} ({spec['provider']}:{spec['model']}): " + "; ".join(said))
    return (["", "adapted to the models (recorded in the report's models section):"] + lines) if lines else []


def gate_lines(results: list[dict], ran: set | None = None) -> list[str]:
    """The gate table. Gates of suites this run did not run (``ran``) are summed up in
    one line instead of a row each (the JSON report keeps every gate)."""
    idle = [g for g in results if ran is not None and g["suite"] not in ran and g["verdict"] == "not_evaluated"]
    order = {"fail": 0, "not_evaluated": 1, "pass": 2}
    shown = sorted((g for g in results if g not in idle), key=lambda g: order[g["verdict"]])  # failures first
    rows = []
    for g in shown:
        scope = "/".join(x for x in (g["suite"], g["category"], g["style"]) if x)
        if g["kind"] == "no_regression":
            scope += " (paired diff)"
            value = _signed(g["value"], g["metric"])
            interval = "-" if g["ci_low"] is None else f"[{_signed(g['ci_low'], g['metric'])}, {_signed(g['ci_high'], g['metric'])}]"
        else:
            value, interval = _pct(g["value"], g["metric"]), _interval(g)
        rows.append([g["gate"], f"{scope}:{g['metric']}", value, interval, gate_bound_text(g), g["verdict"].upper()])
    failed = sum(1 for g in results if g["verdict"] == "fail")
    head = f"gates: {failed} failed of {len(results)}"
    lines = [head] + (_table(["gate", "metric", "value", "95% CI", "bound", "verdict"], rows) if rows else [])
    for g in shown:
        if g.get("detail"):
            lines.append(f"  {g['gate']}: {g['detail']}")
    if idle:
        suites = ", ".join(sorted({g["suite"] for g in idle}))
        lines.append(f"  {len(idle)} gate(s) of suites not run here ({suites}): not evaluated")
    return lines


def gate_bound_text(g: dict) -> str:
    if g["kind"] == "no_regression":
        margin = f"{100 * g['bound']:.1f}%" if _is_rate(g["metric"]) else f"{g['bound']:.2f}"
        return f"no regression (margin {margin})"
    number = f"{100 * g['bound']:.1f}%" if _is_rate(g["metric"]) else f"{g['bound']:.2f}"
    return f"{g['kind']} {number}" + ("" if g["compare"] == "point" else f" ({g['compare']})")


def _signed(value, metric: str) -> str:
    return fmt.difference(value, metric, unit=False)


def _p(value) -> str:
    return fmt.p_value(value)


def comparison_lines(comparison: dict) -> list[str]:
    """The paired comparison with the baseline: one row per compared rate."""
    lines = ["", f"paired comparison with the baseline {comparison['baseline']} (Holm-adjusted within each family: "
             "gates = rows of no_regression gates, which can fail the run; informational = the rest):"]
    for warning in comparison["warnings"]:
        lines.append(f"WARNING: {warning}")
    rows = []
    for r in comparison["rows"]:
        scope = "/".join(x for x in (r["suite"], r["category"], r["style"]) if x)
        rate = _is_rate(r["metric"])
        interval = "-" if r["diff_low"] is None else f"[{_signed(r['diff_low'], r['metric'])}, {_signed(r['diff_high'], r['metric'])}]"
        rows.append(
            [
                f"{scope}:{r['metric']}", str(r["n_pairs"]), fmt.number(r["baseline"], r["metric"]),
                fmt.number(r["current"], r["metric"]),
                _signed(r["diff"], r["metric"]), interval, _p(r["p_value"]), _p(r["p_adjusted"]),
                _mde_text(r, rate), r.get("family", "-"), r["verdict"],
            ]
        )
    lines += _table(
        ["metric", "pairs", "baseline", "now", "diff", "95% CI", "p", "p (Holm)", "MDE", "family", "verdict"], rows
    )
    lines.append("(diff and MDE in percentage points; p: one-sided test for a regression beyond the margin;")
    lines.append(" MDE: smallest worsening beyond the margin this n detects with 80% power at the family's")
    lines.append(" strictest corrected alpha, the discordance growing with it; 'none at n' where no worsening")
    lines.append(" is detectable with these pairs)")
    for r in comparison["rows"]:
        scope = "/".join(x for x in (r["suite"], r["category"], r["style"]) if x) + ":" + r["metric"]
        worst = r.get("worst_case")
        if worst and worst.get("p_value") is not None:
            lines.append(
                f"{scope}: counting the {worst['imputed']} case(s) that errored in one run as worse: "
                f"{_signed(worst['diff'], r['metric'])} [{_signed(worst['diff_low'], r['metric'])}, "
                f"{_signed(worst['diff_high'], r['metric'])}], p (Holm) {_p(worst['p_adjusted'])}, {worst['verdict']}"
            )
        if r.get("cannot_decide") and r.get("family") == "gates":
            lines.append(f"{scope}: cannot decide: {r['cannot_decide']}")
    return lines


def _mde_text(row: dict, rate: bool) -> str:
    if row["mde"] is None:
        return f"none at {row['n_pairs']}" if row["n_pairs"] else "-"
    return f"{100 * row['mde']:.1f}" if rate else f"{row['mde']:.2f}"


def judge_check_lines(check: dict) -> list[str]:
    lines = ["", f"judge agreement with {check['file']} ({'; '.join(check['provenance'])}):"]
    rows = []
    for t in check["tasks"]:
        def num(key, scale=False, t=t):
            value = t.get(key)
            if value is None:
                return "-"
            return f"{value:.2f}" if scale else f"{100 * value:.1f}%"

        kappa = num("kappa", True) + ("" if t.get("kappa_low") is None else f" [{t['kappa_low']:.2f}, {t['kappa_high']:.2f}]")
        ac1 = num("ac1", True) + ("" if t.get("ac1_low") is None else f" [{t['ac1_low']:.2f}, {t['ac1_high']:.2f}]")
        rows.append([t["task"], str(t["n"]), str(t["judge_errors"]), num("agreement"), kappa, ac1, num("sensitivity"), num("specificity")])
    lines += _table(["task", "n", "unreadable", "agreement", "kappa [95% CI]", "AC1 [95% CI]", "sensitivity", "specificity"], rows)
    for t in check["tasks"]:
        if t["task"] == "treatment" and t.get("confusion"):
            lines += treatment_lines(t)
    corrected = [c for c in check["corrected"] if c["category"] is None and c["style"] is None]
    if corrected:
        lines.append("judge-corrected rates (Rogan-Gladen), overall:")
        lines += _table(
            ["suite", "metric", "observed", "corrected", "95% CI"],
            [
                [
                    c["suite"], c["metric"], f"{100 * c['observed']:.1f}%",
                    "-" if c["corrected"] is None else f"{100 * c['corrected']:.1f}%",
                    "-" if c["ci_low"] is None else f"[{100 * c['ci_low']:.1f}, {100 * c['ci_high']:.1f}]",
                ]
                for c in corrected
            ],
        )
    return lines


def treatment_lines(t: dict) -> list[str]:
    """The treatment judge's confusion matrix (reference rows) and per-class recall."""
    classes = t["classes"]
    rows = []
    for c in classes:
        recall = t["recall"].get(c)
        shown = "-" if recall is None else f"{100 * recall['value']:.1f}% [{100 * recall['low']:.1f}, {100 * recall['high']:.1f}]"
        rows.append([c, *(str(t["confusion"][c][d]) for d in classes), shown])
    lines = ["treatment judge, reference (rows) by judge (columns):"]
    return lines + _table(["reference", *classes, "recall [95% CI]"], rows)


def snapshot_lines(result) -> list[str]:
    """Syrupy's diff of every case (and suite metrics) that differs from its snapshot."""
    lines: list[str] = []
    if result is None:
        return lines
    if result.updating:
        lines.append("")
        lines.append(f"snapshots: {result.written} written or updated, {len(result.removed)} stale removed (--snapshot-update)")
        return lines
    if not result.checked and not result.stale:
        return lines
    flips = result.flipped_cases
    lines.append("")
    lines.append(
        f"snapshots: {result.checked} compared, {len(flips)} case(s) flipped"
        + (", suite metrics changed" if any(c["kind"] == "metrics" for c in result.changed) else "")
    )
    for change in result.changed:
        lines.append(f"  {change['name']}:")
        shown = change["diff"] if change["kind"] == "case" else change["diff"][:MAX_METRIC_DIFF_LINES]
        lines += [f"    {line}" for line in shown]
        if len(shown) < len(change["diff"]):
            lines.append(f"    ... {len(change['diff']) - len(shown)} more line(s) (see --socialbias-report)")
    if result.stale:
        lines.append(f"  {len(result.stale)} snapshot(s) have no case any more: {', '.join(result.stale[:10])}"
                     " (run the whole suite with --snapshot-update to drop them)")
    if flips:
        if result.max_flips is None:
            lines.append("  (flips never fail the run by themselves: --socialbias-snapshot-max-flips=N opts in;"
                         " accept the new outcomes with --snapshot-update)")
        elif result.failed:
            lines.append(f"  {len(flips)} flipped case(s) > --socialbias-snapshot-max-flips={result.max_flips}: exit status 1")
    return lines


def _dry_totals(plan: dict) -> dict[str, list[int]]:
    """Role (and ``total``) -> [calls, cached, repeats, to call, est. prompt tokens, est.
    completion tokens] of a dry run's plan."""
    out = {}
    totals = [0] * 6
    for role, u in sorted(plan["usage"].items()):
        values = [u["calls"], u["hits"], u.get("repeated", 0), u["misses"], u["prompt_tokens"], u["completion_tokens"]]
        totals = [a + b for a, b in zip(totals, values)]
        out[role] = values
    out["total"] = totals
    return out


def dry_run_lines(plan: dict) -> list[str]:
    rows = [[role] + [f"{v:,}" for v in values] for role, values in _dry_totals(plan).items()]
    lines = [f"{plan['cases']} case(s) selected; no model was called"]
    if plan.get("models"):
        lines.append(plan["models"])
    lines += _table(["role", "calls", "cached", "repeats", "to call", "est. prompt tokens", "est. completion tokens"], rows)
    lines.append("(cached: in the cache now; repeats: asked earlier in this plan, sent once and then answered")
    lines.append(" from the cache; estimates for the calls to make: prompts at 4 characters per token,")
    lines.append(" completions at each role's max_tokens (an upper bound; judges answer in one token);")
    lines.append(" retries for role breaks and unreadable judge answers come on top)")
    if plan.get("problems"):
        lines.append(f"the plan met: {', '.join(plan['problems'])} (e.g. a replay-only cache missing entries)")
    lines += [f"WARNING: {missing}" for missing in plan.get("missing", [])]
    lines += [f"WARNING: {gate}" for gate in plan.get("power", [])]
    return lines


def dry_run_one_line(plan: dict) -> str:
    """The dry run's plan in one line (pytest's ``-qq``)."""
    calls, cached, repeats, to_call, prompt, completion = _dry_totals(plan)["total"]
    warnings = len(plan.get("missing", [])) + len(plan.get("power", []))
    return (f"socialbias dry run: {plan['cases']} case(s), {calls:,} calls ({cached:,} cached, {repeats:,} repeats, "
            f"{to_call:,} to call; est. {prompt:,} prompt / {completion:,} completion tokens); no model was called"
            + (f"; {warnings} warning(s) (run without -qq to read them)" if warnings else ""))


def summary_block(result, unwritten: list[str] = (), verbosity: int = 0) -> list[tuple[str, str | None]]:
    """The summary a run ends with, as (line, colour) pairs (colour: None, "yellow" for a
    warning, "red" for a failure): warnings, notes, the summary lines, reports written.
    ``verbosity`` is pytest's: under ``-q`` (-1) the brief summary (no notes, no tables
    but the gates'), under ``-qq`` (-2 or less) one line."""
    from ..files import shown_path

    if verbosity <= -2:
        return [(fmt.printable(one_line(result, unwritten)), "red" if result.failed or unwritten else None)]
    brief = verbosity == -1
    out: list[tuple[str, str | None]] = [(f"WARNING: {warning}", "yellow") for warning in result.warnings]
    if brief and result.notes:
        out.append((f"note: {len(result.notes)} note(s) left out under -q (see --socialbias-report)", None))
    if not brief:
        out += [(f"note: {note}", None) for note in result.notes[:20]]
        if len(result.notes) > 20:
            out.append((f"note: ... and {len(result.notes) - 20} more (see --socialbias-report)", None))
    for line in summary_lines(result, brief=brief):
        red = line.rstrip().endswith("FAIL") or line.endswith(": exit status 1")
        out.append((line, "red" if red else None))
    # Errors, notes and adaptations quote models and servers: shown, never acted on.
    out = [(fmt.printable(line), colour) for line, colour in out]
    out += [(f"ERROR: {problem}", "red") for problem in unwritten]
    if result.report_path is not None and not any(p.startswith("--socialbias-report=") for p in unwritten):
        out.append((f"JSON report: {result.report_path}", None))
    if result.html_path is not None and not any(p.startswith("--socialbias-html=") for p in unwritten):
        out.append((f"HTML report: {shown_path(result.html_path)}", None))
    return out


def junit_properties(result) -> list[tuple[str, str]]:
    """(name, value) pairs for --junitxml: gate verdicts, key metrics, comparison verdicts."""
    props = []
    for g in result.gates:
        value = "-" if g["value"] is None else f"{g['value']:.6g}"
        props.append((f"socialbias.gate.{g['gate']}", f"{g['verdict']} value={value} bound={gate_bound_text(g)} n={g['n']}"))
    for m in key_metric_rows(result.metrics):
        interval = "" if m["ci_low"] is None else f" [{m['ci_low']:.6g}, {m['ci_high']:.6g}]"
        value = "-" if m["value"] is None else f"{m['value']:.6g}"
        props.append((f"socialbias.metric.{m['suite']}.{m['metric']}", f"{value}{interval} n={m['n']}"))
    if result.comparison is not None:
        for r in result.comparison["rows"]:
            scope = ".".join(x for x in (r["suite"], r["category"], r["style"]) if x)
            props.append((f"socialbias.comparison.{scope}.{r['metric']}", f"{r['verdict']} p_adjusted={_p(r['p_adjusted'])}"))
    if result.snapshots is not None and result.snapshots.checked:
        props.append(("socialbias.snapshots.flipped_cases", str(len(result.snapshots.flipped_cases))))
    return props


def junit_gate_cases(result, unwritten: list[str] = ()) -> list[tuple[str, str, str, list]]:
    """(node id, outcome, message, properties) of the JUnit test cases that decide the
    run: one per gate of the suites run here (``passed``, ``failed`` with its numbers and
    reason, ``skipped`` when not evaluated), then one failed case per other reason the
    run fails (flipped snapshots, no thresholds file under --socialbias-strict, a report
    not written)."""
    gates_file = result.gates_file or "thresholds.yaml"
    cases = []
    for g in result.gates:
        if g["verdict"] == "not_evaluated" and g.get("detail") == "suite not run":
            continue
        value = "-" if g["value"] is None else f"{g['value']:.6g}"
        interval = "" if g["ci_low"] is None else f" [{g['ci_low']:.6g}, {g['ci_high']:.6g}]"
        numbers = f"{g['metric']} = {value}{interval} (n={g['n']}), bound {gate_bound_text(g)}"
        message = f"gate {g['gate']} {g['verdict'].upper()}: {numbers}" + (f"; {g['detail']}" if g.get("detail") else "")
        outcome = {"pass": "passed", "fail": "failed", "not_evaluated": "skipped"}[g["verdict"]]
        properties = [("socialbias.gate.value", value), ("socialbias.gate.bound", gate_bound_text(g)),
                      ("socialbias.gate.n", str(g["n"])), ("socialbias.gate.verdict", g["verdict"])]
        cases.append((f"{gates_file}::{g['gate']}", outcome, message, properties))
    if result.snapshots is not None and result.snapshots.failed:
        flipped = len(result.snapshots.flipped_cases)
        cases.append(("socialbias::snapshots", "failed", f"{flipped} case(s) differ from their snapshots, more than "
                      "--socialbias-snapshot-max-flips allows", []))
    if result.gateless_failure:
        cases.append(("socialbias::thresholds", "failed", no_gates_lines(result)[0], []))
    if result.ungated:
        cases.append(("socialbias::ungated", "failed", ungated_lines(result)[0], []))
    if result.partial_failure:
        cases.append(("socialbias::partial", "failed", partial_lines(result)[0], []))
    for problem in unwritten:
        cases.append(("socialbias::report", "failed", problem, []))
    return cases


def benevdial_tables(metrics: list[dict]) -> list[str]:
    """Per BenevDial suite: N/OB/BB shares overall, per role and per demographic value
    (all roles together); for pairs, the disparity rate per axis and the disfavoured rate."""
    lines: list[str] = []
    for suite in sorted({m["suite"] for m in metrics if m["metric"] == "bb_rate"}):
        rows = [m for m in metrics if m["suite"] == suite]
        index = {(m["metric"], m["category"], m["style"]): m for m in rows}
        groups = [(None, None)] + sorted({(None, m["style"]) for m in rows if m["style"] and m["category"] is None})
        groups += sorted({(m["category"], None) for m in rows if m["category"] and "=" in m["category"] and m["metric"] == "bb_rate"})
        table = []
        for category, style in groups:
            first = index.get(("n_rate", category, style))
            table.append(
                [category or style or "overall", str(first["n"]) if first else "0"]
                + [_cell(index.get((metric, category, style))) for metric in ("n_rate", "ob_rate", "bb_rate")]
            )
        lines.append("")
        lines.append(f"{suite}: treatment classes, % of classified dialogues [95% CI] (N uniform, OB overt, BB benevolent)")
        lines += _table(["group", "n", "N", "OB", "BB"], table)
        pairs = [m for m in rows if m["metric"] == "disparity_rate" and m["style"] is None]
        if pairs:
            lines.append(f"{suite}: counterfactual pairs judged disparate, by axis; disfavoured: share of pairs with the value where it got the worse treatment")
            table = [[m["category"] or "all pairs", str(m["n"]), _cell(m)] for m in pairs]
            table += [
                [f"  {m['category']}", str(m["n"]), _cell(m)]
                for m in rows if m["metric"] == "disfavoured_rate"
            ]
            lines += _table(["axis / value", "n", "disparate / disfavoured %"], table)
    return lines


DETECTOR_COLUMNS = ("accuracy", "precision", "recall", "f1", "tr_n", "tr_ob", "tr_bb", "gap_ob_bb", "macro_f1")


def flip_lines(suite: str, flips: list[dict]) -> list[str]:
    """Per detector shown the demographics: the labels that moved, clean dialogues, per
    true class (count, % of the class's dialogues); the JSON report has every variant and
    the intervals."""
    lines: list[str] = []
    for detector in sorted({f["detector"] for f in flips if f["suite"] == suite}):
        rows = [f for f in flips if f["suite"] == suite and f["detector"] == detector and f["variant"] == "clean"]
        if not rows:
            continue
        moves = [(t["from"], t["to"]) for t in next((r["transitions"] for r in rows if r.get("transitions")), [])]

        def cell(entry):
            return "-" if entry is None else f"{entry['count']} ({100 * entry['share']:.0f}%)"

        table = []
        for r in rows:
            found = {(t["from"], t["to"]): t for t in r.get("transitions") or []}
            table.append([r["truth"], str(r["n"]), str(r["unreadable"]), cell(r.get("moved")),
                          *(cell(found.get(m)) for m in moves), cell(r.get("new_errors")), cell(r.get("fixed"))])
        lines.append(f"{suite}: labels that moved when {detector} was shown the demographics (clean; count, % of the class)")
        lines += _table(["truth", "n", "unreadable", "moved", *(f"{a}->{b}" for a, b in moves), "new errors", "fixed"], table)
    return lines


def detector_tables(metrics: list[dict], detection: dict | None) -> list[str]:
    """Per detector suite: every detector in every variant (clean vs transformed), then
    the ensemble's methods and the surface markers of patronising talk."""
    lines: list[str] = []
    for suite in sorted({m["suite"] for m in metrics if m["metric"] == "tr_bb"}):
        rows = [m for m in metrics if m["suite"] == suite and m["category"] is not None]
        index = {(m["metric"], m["category"], m["style"]): m for m in rows}
        keys = sorted({(m["category"], m["style"]) for m in rows}, key=lambda k: (k[0], k[1] != "clean", k[1]))
        table = []
        for detector, variant in keys:
            n = index.get(("accuracy", detector, variant))
            cells = []
            for metric in DETECTOR_COLUMNS:
                row = index.get((metric, detector, variant))
                cells.append("-" if row is None or row["value"] is None else f"{100 * row['value']:.1f}")
            table.append([detector, variant, str(n["n"]) if n else "0"] + cells)
        lines.append("")
        lines.append(f"{suite}: detectors, % (B = OB u BB positive; TR = share flagged per true class; gap = TR_OB - TR_BB)")
        lines += _table(["detector", "variant", "n", "acc", "P", "R", "F1", "TR_N", "TR_OB", "TR_BB", "gap", "macroF1"], table)
        for row in (detection or {}).get("detectors", []):
            if row["suite"] != suite:
                continue
            if row["output"] == "binary":
                lines.append(f"{row['detector']}: a binary detector: {row['limit']}; not available for it: "
                             f"{', '.join(row['not_available'])}")
            if row["truncated"]:
                lines.append(f"{row['detector']}: {row['truncated']} of {row['dialogues']} dialogue(s) read in part: "
                             "longer than the classifier's input limit, cut to fit (the records' units say where)")
        lines += flip_lines(suite, (detection or {}).get("flips") or [])
        methods = (detection or {}).get("ensemble_methods", {}).get(suite)
        if methods:
            lines.append("ensemble: " + ", ".join(f"{method} for {count} dialogue(s)" for method, count in sorted(methods.items())))
        markers = (detection or {}).get("markers", {}).get(suite)
        if markers:
            def num(value):
                return "-" if value is None else f"{value:.2f}"

            lines.append(f"{suite}: surface markers of the agent turns (means by true class; d = Cohen's d against N)")
            lines += _table(
                ["marker", "N", "OB", "BB", "d OB", "d BB"],
                [[m["marker"], num(m["n_mean"]), num(m["ob_mean"]), num(m["bb_mean"]), num(m["d_ob"]), num(m["d_bb"])] for m in markers],
            )
    return lines
