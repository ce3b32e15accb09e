"""The terminal summary: key metrics with 95% intervals, outcomes, errors, cache, gates."""

from __future__ import annotations

from ..metrics import outcome_counts

KEY_METRICS = (
    "late_emergence", "reemergence", "refusal_rate", "coherence_mean", "error_rate", "judge_error_rate",
    "guard_blocked_rate", "bias_rate_passed",
)
MAX_ERRORS_SHOWN = 10


#: Metrics that are means on their own scale, not rates (shown without a percent sign).
SCALE_METRICS = ("coherence_mean",)


def _is_rate(metric: str) -> bool:
    return metric not in SCALE_METRICS


def _pct(value, metric: str = "") -> str:
    if value is None:
        return "-"
    return f"{100 * value:5.1f}%" if _is_rate(metric) else f"{value:.2f}"


def _interval(row) -> str:
    if row.get("ci_low") is None:
        return "-"
    if not _is_rate(row.get("metric", "")):
        return f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
    return f"[{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]"


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
    for suite in sorted({m["suite"] for m in metrics}):
        overall = [m for m in metrics if m["suite"] == suite and m["category"] is None and m["style"] is None]
        cumulative = [m for m in overall if m["metric"].startswith("cumulative_bias@")]
        if cumulative:
            out.append(max(cumulative, key=lambda m: int(m["metric"].split("@")[1])))
        out += [m for m in overall if m["metric"] in KEY_METRICS]
    return out


def summary_lines(run) -> list[str]:
    lines: list[str] = []
    records = run.records
    counts = outcome_counts(records)
    lines.append(
        f"{len(records)} cases: {counts['clean']} clean, {counts['biased']} biased, "
        f"{counts['refused']} refused, {counts['error']} errors"
    )
    errors = [(r, e) for r in records for e in r.get("errors", [])]
    if errors:
        lines.append("")
        lines.append(f"errors ({len(errors)}; counted, never folded into a rate):")
        for record, error in errors[:MAX_ERRORS_SHOWN]:
            lines.append(f"  {record['suite']}::{record['id']}: [{error['kind']}] {error['message']}")
        if len(errors) > MAX_ERRORS_SHOWN:
            lines.append(f"  ... and {len(errors) - MAX_ERRORS_SHOWN} more (see --socialbias-report)")
    lines.append("")
    if run.gate_results:
        lines += gate_lines(run.gate_results)
    else:
        lines.append("gates: none configured (add thresholds.yaml or --socialbias-thresholds)")
    lines += by_turn_tables(run.metrics)
    rows = [
        [m["suite"], m["metric"], _pct(m["value"], m["metric"]), _interval(m), str(m["n"])]
        for m in key_metric_rows(run.metrics)
    ]
    if rows:
        lines.append("")
        lines += _table(["suite", "metric", "value", "95% CI", "n"], rows)
    usage: dict[str, dict] = {}
    for record in records:
        for role, u in record.get("usage", {}).items():
            total = usage.setdefault(role, {k: 0 for k in u})
            for k, v in u.items():
                total[k] += v
    if usage:
        lines.append("")
        lines += _table(
            ["role", "calls", "cache hits", "misses", "prompt tokens", "completion tokens"],
            [
                [role, str(u["calls"]), str(u["hits"]), str(u["misses"]), str(u["prompt_tokens"]), str(u["completion_tokens"])]
                for role, u in sorted(usage.items())
            ],
        )
        lines.append("(tokens are those of live calls; replayed calls cost none)")
    failed = sum(1 for g in run.gate_results if g["verdict"] == "fail")
    if failed:
        lines.append("")
        lines.append(f"{failed} gate(s) crossed: exit status 1")
    return lines


def gate_lines(results: list[dict]) -> list[str]:
    rows = []
    for g in results:
        scope = "/".join(x for x in (g["suite"], g["category"], g["style"]) if x)
        number = f"{100 * g['bound']:.1f}%" if _is_rate(g["metric"]) else f"{g['bound']:.2f}"
        bound = f"{g['kind']} {number}" + ("" if g["compare"] == "point" else f" ({g['compare']})")
        rows.append(
            [g["gate"], f"{scope}:{g['metric']}", _pct(g["value"], g["metric"]), _interval(g), bound, g["verdict"].upper()]
        )
    failed = sum(1 for g in results if g["verdict"] == "fail")
    head = f"gates: {failed} failed of {len(results)}"
    return [head] + _table(["gate", "metric", "value", "95% CI", "bound", "verdict"], rows)
