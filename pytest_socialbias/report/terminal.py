"""The terminal summary: key metrics with 95% intervals, outcomes, errors, cache, gates."""

from __future__ import annotations

from ..metrics import outcome_counts

KEY_METRICS = ("refusal_rate", "error_rate", "judge_error_rate")
MAX_ERRORS_SHOWN = 10


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:5.1f}%"


def _interval(row) -> str:
    if row.get("ci_low") is None:
        return "-"
    return f"[{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]"


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
    rows = [
        [m["suite"], m["metric"], _pct(m["value"]), _interval(m), str(m["n"])]
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
        bound = f"{g['kind']} {100 * g['bound']:.1f}%" + ("" if g["compare"] == "point" else f" ({g['compare']})")
        rows.append([g["gate"], f"{scope}:{g['metric']}", _pct(g["value"]), _interval(g), bound, g["verdict"].upper()])
    failed = sum(1 for g in results if g["verdict"] == "fail")
    head = f"gates: {failed} failed of {len(results)}"
    return [head] + _table(["gate", "metric", "value", "95% CI", "bound", "verdict"], rows)
