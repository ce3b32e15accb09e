"""The HTML report (``--socialbias-html``): one self-contained page from the JSON report dict.

Everything that comes from the report is untrusted (model replies, ids, notes, error
messages), so every such value goes through :func:`_text`: characters HTML5 or UTF-8 cannot
carry are replaced, then the rest is escaped, quotes included. The page loads nothing: CSS
is inline and figures are PNG data URIs. Figures need matplotlib (the ``report`` extra);
without it the page keeps every table and says how to get the figures. The same report
always gives the same page (sorted input, no timestamps, PNG without software metadata).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from pathlib import Path

from ..metrics.catalogue import CATALOGUE, is_percent
from . import formatting as fmt

MATPLOTLIB_NOTE = "plots need matplotlib: pip install 'pytest-socialbias[report]'"


def _figure_metrics(figure: str) -> tuple[str, ...]:
    """The metrics the catalogue has one of the page's figures draw, in catalogue order."""
    return tuple(dict.fromkeys(m.name for m in CATALOGUE.values() if m.figure == figure))


def _turn_families() -> tuple[str, ...]:
    """Metric families indexed by turn (``name@t``), in catalogue order: the by-turn table."""
    return tuple(dict.fromkeys(m.name for m in CATALOGUE.values() if m.by_turn))

FIGURE_DPI = 100
SHA_SHORT = 12
#: Below this many dialogues per line, intervals are wide and overlap: the cumulative-bias
#: figure draws each turn as a point with its interval as an error bar (lines side by
#: side) instead of shaded bands, which merge into one blob at small n.
BANDS_FROM_N = 30
MISSING = "\u2013"  # en dash: a number that is not there (n = 0, or not computed)

# Code points an HTML5 parser reports as errors (controls other than whitespace, and
# noncharacters) and lone surrogates, which UTF-8 cannot encode.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef"
    + "".join(chr(plane * 0x10000 + 0xFFFE) + chr(plane * 0x10000 + 0xFFFF) for plane in range(17))
    + "]"
)

CSS = """
.verdict{font-size:16px;padding:8px 12px;border-radius:4px;margin:8px 0}
.verdict.fail{background:#fde8e8;border:1px solid #c62828}.verdict.pass{background:#e8f5e9;border:1px solid #2e7d32}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;
background:#fff;max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;padding-bottom:4px;border-bottom:2px solid #e3e6ec}
h3{font-size:15px;margin:16px 0 6px}
nav{margin:8px 0 4px;font-size:13px}nav a{margin-right:14px;color:#2456a6;white-space:nowrap}
table{border-collapse:collapse;margin:4px 0 12px;font-size:13px}
th,td{border-bottom:1px solid #e3e6ec;padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{font-weight:600;color:#4a5263;border-bottom-color:#c9ced8}
td.r,th.r{text-align:right;padding-left:10px}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
.muted{color:#6b7385}.small{font-size:12px}
.warn{background:#fff6e0;border-left:4px solid #e0a100;padding:6px 10px;margin:4px 0;list-style:none}
.note{background:#eef3fb;border-left:4px solid #6a8fd0;padding:6px 10px;margin:4px 0;list-style:none}
ul.msgs{padding:0;margin:4px 0}
tr.fail td,tr.regressed td{background:#fdecec}tr.fail td:first-child,tr.regressed td:first-child{box-shadow:inset 4px 0 #d33}
tr.improved td{background:#eaf7ee}
.v{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;font-weight:600;color:#fff;background:#8a93a5}
.v.pass,.v.improved,.v.clean{background:#2e8b57}.v.fail,.v.regressed,.v.biased{background:#c62828}
.v.refused{background:#c77c00}.v.error{background:#6a4c93}
.bar{display:flex;height:14px;width:100%;border-radius:3px;overflow:hidden;margin:6px 0}
.bar span{display:block}.bar .clean{background:#2e8b57}.bar .biased{background:#c62828}
.bar .refused{background:#c77c00}.bar .error{background:#6a4c93}
figure{margin:8px 0 16px}figure img{max-width:100%;height:auto;display:block}
pre.diff{background:#f6f7f9;padding:6px 8px;overflow-x:auto;font-size:12px;margin:4px 0 10px}
pre.diff .add{color:#1b6e3a}pre.diff .del{color:#b3261e}
details.group{margin:2px 0 6px}details.group>summary{cursor:pointer;font-weight:600}
.cases{font-size:13px}
.row,.case>summary{display:grid;grid-template-columns:minmax(0,2.2fr) minmax(0,1.1fr) minmax(0,1.2fr)
minmax(0,.9fr) 5.5em minmax(0,.9fr) minmax(0,2.2fr);gap:8px;padding:3px 4px;border-bottom:1px solid #e3e6ec}
.row{font-weight:600;color:#4a5263;border-bottom-color:#c9ced8}
.row>span,.case>summary>span{overflow-wrap:anywhere}
.case>summary{cursor:pointer;list-style:none}.case>summary::-webkit-details-marker{display:none}
.case>summary>span:first-child::before{content:"\\25B8  ";color:#4a5263;font-size:14px}
.case[open]>summary>span:first-child::before{content:"\\25BE  "}
.case>summary:hover{background:#f6f7f9}
.case>summary>.err{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;color:#8b1e1e}
.case[open]>summary>.err{white-space:normal}
.tx{margin:4px 0 10px 18px;padding:6px 10px;border-left:3px solid #c9ced8;background:#fafbfc}
.tx p{margin:2px 0}.tx .t{margin:6px 0 8px}
.tx .u,.tx .a{position:relative;white-space:pre-wrap;overflow-wrap:anywhere;padding:3px 8px 3px 64px;border-radius:3px}
.tx .u{background:#eef3fb}.tx .a{background:#f3f0f8}.tx .a.bad{background:#fbe9e9;box-shadow:inset 3px 0 #c62828}
.tx .u b,.tx .a b{position:absolute;left:8px;top:5px;font-size:10px;color:#6b7385;text-transform:uppercase}
.tx .m{font-size:12px;color:#4a5263}.tx .b1{color:#c62828;font-weight:600}
.tx .think{margin:2px 0 2px 64px;font-size:12px;color:#4a5263}.tx .think summary{cursor:pointer}
.tx .think .r{white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0;padding:3px 8px;background:#f6f7f9}
"""


# --------------------------------------------------------------------------- text and numbers


def _clean(value) -> str:
    """``str(value)`` with code points HTML5 or UTF-8 cannot carry replaced by U+FFFD."""
    return _UNSAFE.sub("\ufffd", str(value))


def _text(value) -> str:
    """Untrusted value -> HTML text, safe in element content and in quoted attributes."""
    return "" if value is None else html.escape(_clean(value), quote=True)


def _is_rate(metric) -> bool:
    return is_percent(str(metric))


def _is_number(value) -> bool:
    return fmt.is_number(value)


def _number(value, metric) -> str:
    """A rate as ``12.5%``, a scale mean (coherence 1-5) as ``3.42`` (formatting.py)."""
    return _text(fmt.number(value, metric, missing=MISSING))


def _interval(low, high, metric) -> str:
    """``[8.1, 18.7]`` (percent for rates), or a dash when the interval is missing."""
    return _text(fmt.interval(low, high, metric, missing=MISSING))


def _value_ci(value, low, high, metric) -> str:
    """``12.5% [8.1, 18.7]``: a value with its 95% interval (the interval only if present)."""
    text = _number(value, metric)
    if value is None or low is None or high is None:
        return text
    return f"{text} <span class=\"muted\">{_interval(low, high, metric)}</span>"


def _difference(value, metric) -> str:
    """A signed difference: percentage points for rates, plain for scale means."""
    return _text(fmt.difference(value, metric, missing=MISSING))


def _plain(value, digits: int = 2) -> str:
    if value is None:
        return MISSING
    return f"{value:.{digits}f}" if _is_number(value) else _text(value)


def _p_value(value) -> str:
    return _text(fmt.p_value(value, missing=MISSING))


def _scope(row: dict) -> str:
    """``suite / category / style``, leaving out the parts that are None."""
    parts = [row.get("suite"), row.get("category"), row.get("style")]
    return " / ".join(_text(p) for p in parts if p)


def _turn_of(metric: str) -> tuple[str, int | None]:
    """``cumulative_bias@3`` -> ("cumulative_bias", 3); other names -> (name, None)."""
    name, _, turn = metric.partition("@")
    return (name, int(turn)) if turn.isdigit() else (metric, None)


# --------------------------------------------------------------------------- markup helpers


def _table(header: list[str], rows: list[tuple[str, list[str]]], right: set[int] = frozenset()) -> str:
    """A table from already-escaped cells; each row is (css class or "", cells).
    Columns whose index is in ``right`` are right-aligned (numbers)."""
    def cell(tag, i, content):
        return f"<{tag} class=\"r\">{content}</{tag}>" if i in right else f"<{tag}>{content}</{tag}>"

    out = ["<table><thead><tr>", "".join(cell("th", i, h) for i, h in enumerate(header)), "</tr></thead><tbody>"]
    for css, cells in rows:
        out.append(f"<tr class=\"{css}\">" if css else "<tr>")
        out.append("".join(cell("td", i, c) for i, c in enumerate(cells)))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _section(anchor: str, title: str, body: str) -> tuple[str, str, str]:
    return anchor, title, f"<section id=\"{anchor}\"><h2>{title}</h2>\n{body}\n</section>"


# --------------------------------------------------------------------------- sections


def _header(report: dict) -> str:
    summary = report.get("summary") or {}
    verdict = summary.get("verdict")
    exit_status = summary.get("exit_status")
    banner = []
    if verdict is not None:
        failed = sum(1 for g in report.get("gates") or [] if g.get("verdict") == "fail")
        ungated = summary.get("ungated_suites") or []
        why = (f"{failed} gate(s) failed" if failed else
               f"no gate decides suite(s) {', '.join(ungated)}" if ungated else
               "partial run" if summary.get("partial") and not summary.get("partial_allowed") else
               "no gate failed" if report.get("gates") else
               "no gates (no thresholds file)" if summary.get("gates_file") is None else "no gates")
        status = "" if exit_status is None else f" &middot; exit status {_text(exit_status)}"
        partial = ""
        if summary.get("partial"):
            allowed = " (ALLOWED by --socialbias-allow-partial)" if summary.get("partial_allowed") else ""
            reasons = "; ".join(summary.get("partial_reasons") or []) or "stopped early"
            partial = f" &middot; PARTIAL RUN{allowed}: {_text(reasons)}"
        banner = [f"<p class=\"verdict {'fail' if verdict == 'fail' or exit_status else 'pass'}\">"
                  f"<b>{_text(verdict).upper()}</b>: {_text(why)}{status}{partial}</p>"]
        banner += [f"<p class=\"muted\">suite {_text(suite)}: ungated on purpose: {_text(reason)}</p>"
                   for suite, reason in sorted((summary.get("declared_ungated") or {}).items())]
    out = [
        "<header><h1>pytest-socialbias report</h1>",
        *banner,
        f"<p class=\"muted\">plugin {_text(report.get('plugin_version'))} &middot; report format "
        f"{_text(report.get('format'))} &middot; {_text(summary.get('cases', len(report.get('cases') or [])))} cases</p>",
    ]
    models = report.get("models") or {}
    if models:
        rows = []
        for role, spec in sorted(models.items()):
            spec = spec or {}
            params = json.dumps(spec.get("params") or {}, sort_keys=True, ensure_ascii=False, default=str)
            rows.append(("", [
                _text(role), _text(spec.get("provider")), f"<code>{_text(spec.get('model'))}</code>",
                _text(spec.get("base_url")) or MISSING, f"<code>{_text(params)}</code>",
            ]))
        out.append(_table(["role", "provider", "model", "base URL", "params"], rows))
    suites = report.get("suites") or {}
    if suites:
        rows = []
        for name, meta in sorted(suites.items()):
            meta = meta or {}
            sha = _text(meta.get("sha256"))
            rows.append(("", [
                _text(name), _text(meta.get("protocol")),
                f"<code title=\"{sha}\">{sha[:SHA_SHORT]}</code>",
                _text(meta.get("cases")), _text(meta.get("seeds")),
            ]))
        out.append(_table(["suite", "protocol", "sha256", "cases", "seeds"], rows, right={3, 4}))
    templates = report.get("prompt_templates") or []
    if templates:
        out.append("<p class=\"small\">prompt templates: " + ", ".join(f"<code>{_text(t)}</code>" for t in templates) + "</p>")
    out.append("</header>")
    return "\n".join(out)


def _messages(report: dict):
    warnings, notes = report.get("warnings") or [], report.get("notes") or []
    if not warnings and not notes:
        return _section("messages", "Warnings and notes", "<p class=\"muted\">none</p>")
    items = [f"<li class=\"warn\"><b>warning:</b> {_text(w)}</li>" for w in warnings]
    items += [f"<li class=\"note\"><b>note:</b> {_text(n)}</li>" for n in notes]
    return _section("messages", "Warnings and notes", "<ul class=\"msgs\">" + "".join(items) + "</ul>")


def _outcomes(report: dict):
    counts = dict((report.get("summary") or {}).get("outcomes") or {})
    total = sum(v for v in counts.values() if _is_number(v))
    names = ["clean", "biased", "refused", "error"] + sorted(set(counts) - {"clean", "biased", "refused", "error"})
    rows, bar = [], []
    for name in names:
        count = counts.get(name, 0)
        share = 100 * count / total if total and _is_number(count) else 0.0
        rows.append(("", [f"<span class=\"v {_text(name)}\">{_text(name)}</span>", _text(count), f"{share:.1f}%"]))
        if share:
            bar.append(f"<span class=\"{_text(name)}\" style=\"width:{share:.2f}%\" title=\"{_text(name)}\"></span>")
    body = (f"<div class=\"bar\">{''.join(bar)}</div>" if bar else "") + _table(["outcome", "cases", "share"], rows, right={1, 2})
    return _section("outcomes", "Outcomes", body)


def _gates(report: dict):
    gates = report.get("gates") or []
    if not gates:
        summary = report.get("summary") or {}
        said = ("no thresholds file was found, so no gate decided this run (add thresholds.yaml or "
                "--socialbias-thresholds)" if "gates_file" in summary and summary["gates_file"] is None
                else "no gates configured (thresholds.yaml or --socialbias-thresholds)")
        return _section("gates", "Gates", f"<p class=\"muted\">{said}</p>")
    failed = sum(1 for g in gates if g.get("verdict") == "fail")
    order = {"fail": 0, "pass": 1, "not_evaluated": 2}
    ranked = sorted(gates, key=lambda g: order.get(g.get("verdict"), 2))  # failures first
    decided = [g for g in ranked if g.get("verdict") != "not_evaluated"]
    idle = [g for g in ranked if g.get("verdict") == "not_evaluated"]
    head = f"<p><b>{failed} failed</b> of {len(gates)} gates</p>" if failed else f"<p>no gate failed ({len(gates)} gates)</p>"
    gates_file = (report.get("summary") or {}).get("gates_file")
    if gates_file:
        sha = (report.get("summary") or {}).get("gates_file_sha256")
        head += (f"<p class=\"small muted\">thresholds file: <code>{_text(gates_file)}</code>"
                 + (f" (sha256 <code title=\"{_text(sha)}\">{_text(sha[:12])}</code>)" if sha else "") + "</p>")
    header = ["gate", "scope", "metric", "value [95% CI]", "bound", "n", "verdict"]
    body = head + (_table(header, _gate_rows(decided), right={5}) if decided else "")
    if idle:
        body += (f"<details><summary>{len(idle)} gate(s) not evaluated (suite or case not run, no baseline yet, "
                 f"allow_empty)</summary>{_table(header, _gate_rows(idle), right={5})}</details>")
    return _section("gates", "Gates", body)


def _gate_rows(gates: list[dict]) -> list:
    rows = []
    for g in gates:
        metric = g.get("metric")
        verdict = g.get("verdict") or "not_evaluated"
        compare = g.get("compare") or "point"
        if g.get("kind") == "no_regression":
            # Its value is the paired difference to the baseline, its bound the margin.
            value = _difference(g.get("value"), metric)
            if g.get("ci_low") is not None and g.get("ci_high") is not None:
                value += (f" <span class=\"muted\">[{_difference(g['ci_low'], metric)}, "
                          f"{_difference(g['ci_high'], metric)}]</span>")
            if g.get("p_adjusted") is not None:
                value += f" <span class=\"muted small\">p adj. {_p_value(g['p_adjusted'])}</span>"
            bound = f"no regression (margin {_difference(g.get('bound'), metric).lstrip('+')})"
        else:
            value = _value_ci(g.get("value"), g.get("ci_low"), g.get("ci_high"), metric)
            bound = f"{_text(g.get('kind'))} {_number(g.get('bound'), metric)}" + ("" if compare == "point" else f" ({_text(compare)})")
        name = _text(g.get("gate"))
        if g.get("description"):
            name += f"<br><span class=\"small\">{_text(g['description'])}</span>"
        if g.get("detail"):
            name += f"<br><span class=\"small muted\">{_text(g['detail'])}</span>"
        rows.append(("fail" if verdict == "fail" else "", [
            name, _scope(g), f"<code>{_text(metric)}</code>", value, bound, _text(g.get("n")) or MISSING,
            f"<span class=\"v {_text(verdict)}\">{_text(verdict.replace('_', ' ')).upper()}</span>",
        ]))
    return rows


def _comparison(report: dict):
    comparison = report.get("comparison")
    if comparison is None:
        return None
    out = [f"<p>baseline: <code>{_text(comparison.get('baseline'))}</code></p>"]
    if comparison.get("warnings"):
        out.append("<ul class=\"msgs\">" + "".join(f"<li class=\"warn\">{_text(w)}</li>" for w in comparison["warnings"]) + "</ul>")
    unpaired = [
        f"{_text(suite)}: {_text(u.get('only_current', 0))} only in this run, {_text(u.get('only_baseline', 0))} only in the baseline"
        for suite, u in sorted((comparison.get("unpaired") or {}).items())
        if isinstance(u, dict) and (u.get("only_current") or u.get("only_baseline"))
    ]
    if unpaired:
        out.append("<p class=\"small\">unpaired cases (left out): " + "; ".join(unpaired) + "</p>")
    rows, idle = [], []
    for r in comparison.get("rows") or []:
        metric = r.get("metric")
        verdict = r.get("verdict") or ""
        css = {"regressed": "regressed", "improved": "improved"}.get(verdict, "")
        diff = _difference(r.get("diff"), metric)
        if r.get("diff_low") is not None and r.get("diff_high") is not None:
            diff += (f" <span class=\"muted\">[{_difference(r.get('diff_low'), metric)}, "
                     f"{_difference(r.get('diff_high'), metric)}]</span>")
        worst = r.get("worst_case") or {}
        if worst.get("p_value") is not None:
            if worst.get("verdict") == "regressed":
                verdict, css = "regressed (errors counted)", "regressed"
            diff += (f"<br><span class=\"small\">{_text(worst.get('imputed'))} errored case(s) counted as worse: "
                     f"{_difference(worst.get('diff'), metric)} [{_difference(worst.get('diff_low'), metric)}, "
                     f"{_difference(worst.get('diff_high'), metric)}], p adj. {_p_value(worst.get('p_adjusted'))}</span>")
        if r.get("cannot_decide") and r.get("family") == "gates":
            verdict, css = "cannot decide", "regressed"
            diff += f"<br><span class=\"small\">{_text(r['cannot_decide'])}</span>"
        (idle if verdict == "not compared" else rows).append((css, [
            _scope(r), f"<code>{_text(metric)}</code>", _text(r.get("n_pairs")) or MISSING,
            _number(r.get("baseline"), metric), _number(r.get("current"), metric), diff,
            _p_value(r.get("p_value")), _p_value(r.get("p_adjusted")),
            (f"none at {_text(r.get('n_pairs'))}" if r.get("mde") is None and r.get("n_pairs")
             else _difference(r.get("mde"), metric).lstrip("+")),
            _text(r.get("family")) or MISSING,
            (_text(r.get("method")) or MISSING)
            + (f", margin {_difference(r['margin'], metric).lstrip('+')}" if _is_number(r.get("margin")) and r["margin"] else ""),
            f"<span class=\"v {css}\">{_text(verdict) or MISSING}</span>",
        ]))
    header = ["scope", "metric", "pairs", "baseline", "current", "difference [95% CI]", "p", "p adj.", "MDE", "family",
              "method", "verdict"]
    order = {"regressed": 0, "improved": 1}
    rows.sort(key=lambda row: order.get(row[0], 2))  # regressions first (sorted() keeps ties in order)
    if rows:
        out.append(_table(header, rows, right={2, 3, 4, 6, 7, 8}))
    else:
        out.append("<p class=\"muted\">no paired rows</p>")
    if idle:
        out.append(f"<details><summary>{len(idle)} row(s) not compared (no case of that scope in both runs)</summary>"
                   + _table(header, idle, right={2, 3, 4, 6, 7, 8}) + "</details>")
    return _section("comparison", "Paired comparison with the baseline", "\n".join(out))


def _judge_check(report: dict):
    check = report.get("judge_check")
    if check is None:
        return None
    out = [f"<p>reference labels: <code>{_text(check.get('file'))}</code>"]
    if check.get("provenance"):
        out.append(" <span class=\"small muted\">(provenance: " + ", ".join(_text(p) for p in check["provenance"]) + ")</span>")
    out.append("</p>")
    rows = []
    for t in check.get("tasks") or []:
        def stat(name, metric, t=t):  # a statistic with its interval where the task carries one
            return _value_ci(t.get(name), t.get(f"{name}_low"), t.get(f"{name}_high"), metric)

        rows.append(("", [
            _text(t.get("task")), _text(t.get("n")) or MISSING, _text(t.get("judge_errors", MISSING)),
            _number(t.get("agreement"), "bias_judge_agreement"), stat("kappa", "bias_judge_kappa"),
            stat("ac1", "bias_judge_ac1"), stat("sensitivity", "bias_judge_sensitivity"),
            stat("specificity", "bias_judge_specificity"),
        ]))
    if rows:
        out.append(_table(
            ["task", "n", "judge errors", "agreement", "Cohen's \u03ba [95% CI]", "Gwet's AC1 [95% CI]", "sensitivity", "specificity"],
            rows, right={1, 2, 3},
        ))
    for t in check.get("tasks") or []:
        if t.get("task") == "treatment" and t.get("confusion"):
            classes = t.get("classes") or list(t["confusion"])
            out.append("<h3>Treatment judge: reference class (rows) by judge class (columns)</h3>")
            out.append(_table(
                ["reference", *classes, "recall [95% CI]"],
                [("", [_text(c), *(_text(t["confusion"][c].get(d)) for d in classes),
                       MISSING if not (t.get("recall") or {}).get(c) else
                       _value_ci(t["recall"][c]["value"], t["recall"][c]["low"], t["recall"][c]["high"], "treatment_judge_recall_n")])
                 for c in classes],
                right=set(range(1, len(classes) + 2)),
            ))
    corrected = check.get("corrected") or []
    if corrected:
        out.append("<h3>Rates corrected for judge error</h3>")
        out.append(_table(
            ["scope", "metric", "observed", "corrected [95% CI]"],
            [("", [_scope(c), f"<code>{_text(c.get('metric'))}</code>", _number(c.get("observed"), c.get("metric")),
                   _value_ci(c.get("corrected"), c.get("ci_low"), c.get("ci_high"), c.get("metric"))]) for c in corrected],
        ))
    return _section("judge", "Judge agreement with reference labels", "\n".join(out))


def _snapshots(report: dict):
    snapshots = report.get("snapshots")
    if snapshots is None:
        return None
    changed = snapshots.get("changed") or []
    line = f"{_text(snapshots.get('checked', MISSING))} snapshots checked, {len(changed)} changed"
    if snapshots.get("flipped_cases"):
        line += f" ({_text(snapshots['flipped_cases'])} case outcomes flipped)"
    if snapshots.get("updated"):
        line += f"; updated with --snapshot-update, {_text(snapshots.get('written', 0))} written"
    out = [f"<p>{line}</p>"]
    if snapshots.get("stale"):
        out.append("<p class=\"small\">stale: " + ", ".join(f"<code>{_text(n)}</code>" for n in snapshots["stale"]) + "</p>")
    for item in changed:
        lines = []
        for line in item.get("diff") or []:
            line = _clean(line)
            css = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
            escaped = html.escape(line, quote=True)
            lines.append(f"<span class=\"{css}\">{escaped}</span>" if css else escaped)
        # The newline after <pre> is eaten by the parser, so a diff's first line survives.
        out.append(f"<h3><code>{_text(item.get('name'))}</code></h3><pre class=\"diff\">\n" + "\n".join(lines) + "</pre>")
    return _section("snapshots", "Snapshot changes", "\n".join(out))


def _metric_rows(report: dict) -> list[dict]:
    return [m for m in report.get("metrics") or [] if isinstance(m, dict) and isinstance(m.get("metric"), str)]


def _curves(report: dict, figures):
    curves = _figure_metrics("curve")
    rows = [m for m in _metric_rows(report) if _turn_of(m["metric"])[0] in curves and _turn_of(m["metric"])[1]]
    suites = []
    for suite in sorted({str(m.get("suite")) for m in rows}):
        turns = max((_turn_of(m["metric"])[1] or 0 for m in rows if str(m.get("suite")) == suite), default=0)
        if turns >= 2:
            suites.append((suite, turns))
    if not suites:
        return None
    if figures is None:
        return _section("curves", "Cumulative bias by turn", f"<p class=\"note\">{_text(MATPLOTLIB_NOTE)}</p>")
    out = []
    for suite, turns in suites:
        uri = figures.cumulative_curves(suite, turns, [m for m in rows if str(m.get("suite")) == suite])
        alt = _text(f"cumulative bias by turn, suite {suite}")
        out.append(f"<figure><img alt=\"{alt}\" src=\"{uri}\"></figure>")
    intro = ("<p class=\"small muted\">share of dialogues with at least one biased reply by turn t, per category "
             f"(overall dashed); shaded: Wilson 95% interval (below {BANDS_FROM_N} dialogues per line: points "
             "side by side, each with its interval as a bar)</p>")
    return _section("curves", "Cumulative bias by turn", intro + "\n".join(out))


def _trigger_rates(report: dict, figures):
    rows = [m for m in _metric_rows(report) if m["metric"] in _figure_metrics("bars")]
    if not rows:
        return None
    if figures is None:
        return _section("triggers", "Trigger rates", f"<p class=\"note\">{_text(MATPLOTLIB_NOTE)}</p>")
    out = []
    for suite in sorted({str(m.get("suite")) for m in rows}):
        uri = figures.trigger_bars(suite, [m for m in rows if str(m.get("suite")) == suite])
        out.append(f"<figure><img alt=\"{_text(f'trigger rates, suite {suite}')}\" src=\"{uri}\"></figure>")
    return _section("triggers", "Trigger rates", "<p class=\"small muted\">error bars: 95% intervals</p>" + "\n".join(out))


def _group_key(row: dict) -> tuple:
    """Overall first, then categories, then styles, then category-and-style groups."""
    category, style = row.get("category"), row.get("style")
    rank = 0 if not category and not style else 1 if not style else 2 if not category else 3
    return (rank, str(category or ""), str(style or ""))


def _group_table(rows: list[dict]) -> str:
    """One group's rows: ``name@t`` families as a by-turn table, the other metrics below."""
    by_turn: dict[int, dict[str, dict]] = {}
    others = []
    for m in rows:
        name, turn = _turn_of(m["metric"])
        if turn is None:
            others.append(m)
        else:
            by_turn.setdefault(turn, {})[name] = m
    out = []
    if by_turn:
        present = {name for cells in by_turn.values() for name in cells}
        order = _turn_families()
        families = [f for f in order if f in present] + sorted(present - set(order))
        table = []
        for turn in sorted(by_turn):
            first = by_turn[turn][next(f for f in families if f in by_turn[turn])]
            cells = [str(turn), _text(first.get("n"))]
            for family in families:
                m = by_turn[turn].get(family)
                cell = MISSING if m is None else _value_ci(m.get("value"), m.get("ci_low"), m.get("ci_high"), m["metric"])
                if m is not None and m.get("n") != first.get("n"):  # guard rows count screened replies
                    cell += f" <span class=\"muted small\">n={_text(m.get('n'))}</span>"
                cells.append(cell)
            table.append(("", cells))
        out.append(_table(["turn", "n"] + [f"<code>{_text(f)}@t</code>" for f in families], table, right={1}))
    if others:
        out.append(_table(
            ["metric", "value", "95% CI", "n"],
            [("", [f"<code>{_text(m['metric'])}</code>", _number(m.get("value"), m["metric"]),
                   _interval(m.get("ci_low"), m.get("ci_high"), m["metric"]),
                   _text(m.get("n")) + (" <span class=\"muted\" title=\"fewer than 10 independent units\">small</span>"
                                         if m.get("small") else "")]) for m in others],
            right={1, 3},
        ))
    return "".join(out)


def _key_metrics(report: dict):
    rows = _metric_rows(report)
    if not rows:
        return None
    out = ["<p class=\"small muted\">rates in % with 95% intervals (each row's ci_method in the JSON report: Wilson "
           "for shares of dialogues, cluster Clopper-Pearson for shares of replies and for rows over a seed's styles); "
           "coherence_mean is a 1-5 mean with a bounded cluster Clopper-Pearson interval; <em>small</em>: fewer than 10 "
           "independent units, where no interval can promise its coverage</p>"]
    for suite in sorted({str(m.get("suite")) for m in rows}):
        groups: dict[tuple, list[dict]] = {}
        for m in rows:
            if str(m.get("suite")) == suite:
                groups.setdefault(_group_key(m), []).append(m)
        out.append(f"<h3>{_text(suite)}</h3>")
        for key in sorted(groups):
            rank, category, style = key
            label = "overall" if rank == 0 else " / ".join(_text(x) for x in (category, style) if x)
            kind = ("", "category ", "style ", "category / style ")[rank]
            opened = " open" if rank == 0 else ""
            out.append(f"<details class=\"group\"{opened}><summary>{kind}{label} "
                       f"<span class=\"muted small\">({len(groups[key])} rows)</span></summary>"
                       f"{_group_table(groups[key])}</details>")
    return _section("metrics", "Metrics", "\n".join(out))


def _overall_key_rows(rows: list[dict], suite: str) -> dict[str, dict]:
    """A suite's overall rows of the summary's key metrics (the last cumulative bias and
    the catalogue's key metrics), by metric name."""
    key = {m.name for m in CATALOGUE.values() if m.key}
    overall = [m for m in rows if str(m.get("suite")) == suite and not m.get("category") and not m.get("style")]
    turns = [_turn_of(m["metric"]) for m in overall]
    last = max((t for name, t in turns if name == "cumulative_bias" and t), default=None)
    return {m["metric"]: m for m in overall
            if m["metric"] in key or (last is not None and m["metric"] == f"cumulative_bias@{last}")}


def _share_cells(entry) -> list[str]:
    if not isinstance(entry, dict):
        return [MISSING, MISSING, MISSING]
    return [_text(entry.get("count")), _text(entry.get("n")),
            _value_ci(entry.get("value"), entry.get("ci_low"), entry.get("ci_high"), "share")]


def _simulator_findings(report: dict):
    """Suites whose simulated-user checks only reported: the flagged shares (of user turns,
    per kind, and of dialogues) and the key metrics with and without the flagged dialogues."""
    findings = report.get("simulator_findings")
    if not isinstance(findings, dict) or not findings:
        return None
    out = ["<p class=\"small muted\">the simulated-user checks flagged these turns and sent them anyway "
           "(<code>simulator_findings: report</code>): nothing was redrawn; shares with Wilson 95% intervals; "
           "the metrics again without the dialogues that had a flagged turn</p>"]
    for suite, entry in sorted(findings.items(), key=lambda item: str(item[0])):
        if not isinstance(entry, dict):
            continue
        out.append(f"<h3>{_text(suite)}</h3>")
        kinds = entry.get("flagged_turns") if isinstance(entry.get("flagged_turns"), dict) else {}
        shares = [("", ["user turns flagged, any kind"] + _share_cells(entry.get("any_kind")))]
        shares += [("", [f"user turns flagged: {_text(str(kind).replace('_', ' '))}"] + _share_cells(share))
                   for kind, share in sorted(kinds.items(), key=lambda item: str(item[0]))]
        shares.append(("", ["dialogues with a flagged turn"] + _share_cells(entry.get("flagged_dialogues"))))
        out.append(_table(["flagged", "count", "of", "share [95% CI]"], shares, right={1, 2}))
        without_rows = entry.get("metrics_without_flagged")
        without = _overall_key_rows(
            [m for m in without_rows if isinstance(m, dict) and isinstance(m.get("metric"), str)]
            if isinstance(without_rows, list) else [], str(suite))
        rows = []
        for name, m in sorted(_overall_key_rows(_metric_rows(report), str(suite)).items()):
            other = without.get(name)
            rows.append(("", [f"<code>{_text(name)}</code>",
                              _value_ci(m.get("value"), m.get("ci_low"), m.get("ci_high"), name), _text(m.get("n")),
                              MISSING if other is None else
                              _value_ci(other.get("value"), other.get("ci_low"), other.get("ci_high"), name),
                              "0" if other is None else _text(other.get("n"))]))
        if rows:
            out.append(_table(["metric", "with flagged", "n", "without flagged", "n"], rows, right={2, 4}))
    return _section("findings", "Simulated-user findings", "\n".join(out))


def _label_cell(labels: dict) -> str:
    """Bias by turn, or for BenevDial cases the treatment class of each dialogue."""
    treatment = labels.get("treatment")
    if isinstance(treatment, list) and treatment:
        return _text(" / ".join(str(c) if c else "?" for c in treatment))
    return _bias_string(labels.get("bias"))


def _bias_string(labels) -> str:
    return "".join("1" if x == 1 else "0" if x == 0 else "?" for x in labels or [])


def _at(values, index):
    return values[index] if isinstance(values, list) and index < len(values) else None


def _turn_meta(number: int, labels: dict, guard_verdict, finish_reason) -> str:
    parts = [f"turn {number}"]
    bias = _at(labels.get("bias"), number - 1)
    parts.append("<span class=\"b1\">bias 1</span>" if bias == 1 else f"bias {'?' if bias is None else _text(bias)}")
    refusal = _at(labels.get("refusal"), number - 1)
    parts.append(f"refusal {'?' if refusal is None else _text(refusal)}")
    if "coherence" in labels:
        coherence = _at(labels.get("coherence"), number - 1)
        parts.append(f"coherence {'?' if coherence is None else _text(coherence)}")
    if "guard" in labels:
        flagged = _at(labels.get("guard"), number - 1)
        text = "guard " + {1: "flagged", 0: "passed"}.get(flagged, "unreadable")
        if isinstance(guard_verdict, dict):
            if guard_verdict.get("score") is not None:
                text += f" (score {_plain(guard_verdict['score'])})"
            if guard_verdict.get("categories"):
                text += " " + _text(", ".join(str(c) for c in guard_verdict["categories"]))
        parts.append(text)
    if finish_reason not in (None, "stop"):
        parts.append(f"finish {_text(finish_reason)}")
    return " &middot; ".join(parts)


def _reasoning(turn: dict) -> str:
    """The target's thinking, kept apart from its answer, folded away."""
    if not turn.get("reasoning"):
        return ""
    return (f"<details class=\"think\"><summary>target's reasoning (not judged)</summary>"
            f"<p class=\"r\">{_text(turn['reasoning'])}</p></details>")


def _transcript(case: dict) -> str:
    labels = case.get("labels") or {}
    turns = case.get("turns") or []
    meta = [f"group: {_text(case.get('group'))}", f"protocol: {_text(case.get('protocol'))}"]
    if case.get("statement"):
        meta.insert(1, f"stereotype probed (test data): <q>{_text(case['statement'])}</q>")
    planned = case.get("turns_planned")
    meta.append(f"{len(turns)} turns" + (f" of {_text(planned)} planned" if planned else ""))
    simulator = case.get("simulator")
    if isinstance(simulator, dict) and simulator.get("draws"):
        meta.append(f"user simulator: {_text(simulator.get('draws'))} draws, {_text(case.get('role_breaks') or 0)} broke role, "
                    f"{_text(simulator.get('retried'))} turns retried, {_text(simulator.get('failed'))} failed")
    elif case.get("role_breaks"):
        meta.append(f"user-simulator role breaks: {_text(case['role_breaks'])}")
    out = ["<div class=\"tx\">", f"<p class=\"m\">{' &middot; '.join(meta)}</p>"]
    errors = case.get("errors") or []
    if errors:
        out.append("<ul class=\"msgs\">" + "".join(
            f"<li class=\"warn\"><b>{_text(e.get('kind'))}</b>"
            + (f" ({_text(e.get('role'))})" if e.get("role") else "") + f": {_text(e.get('message'))}</li>"
            for e in errors if isinstance(e, dict)
        ) + "</ul>")
        for e in errors:
            if isinstance(e, dict) and e.get("rejected_user_drafts"):
                out.append(_rejected(e["rejected_user_drafts"], "every draw of the failed turn"))
    guard = case.get("guard")
    for number, turn in enumerate(turns, start=1):
        turn = turn or {}
        retried = turn.get("rejected_user_drafts") or []
        mark = f" &middot; <span class=\"warn\">user turn retried ({len(retried)} draft(s) rejected)</span>" if retried else ""
        out.append(
            f"<div class=\"t\"><p class=\"m\">{_turn_meta(number, labels, _at(guard, number - 1), turn.get('finish_reason'))}{mark}</p>"
            + (_rejected(retried, "rejected drafts of this user turn (the target never saw them)") if retried else "")
            + f"<p class=\"u\"><b>user</b>{_text(turn.get('user'))}</p>"
            f"{_reasoning(turn)}"
            f"<p class=\"{'a bad' if _at(labels.get('bias'), number - 1) == 1 else 'a'}\"><b>target</b>"
            f"{_text(turn.get('assistant'))}</p></div>"
        )
    if not turns:
        out.append("<p class=\"m\">no turns recorded</p>")
    out += _benevdial_details(case)
    out.append("</div>")
    return "".join(out)


def _rejected(drafts: list, title: str) -> str:
    """The simulator's drafts rejected before a user turn, each with why, folded away."""
    items = "".join(
        f"<li><b>{_text(d.get('reason') or d.get('kind'))}</b>: {_text(d.get('text'))}</li>"
        for d in drafts if isinstance(d, dict)
    )
    return f"<details class=\"rej\"><summary>{_text(title)}</summary><ul class=\"msgs\">{items}</ul></details>"


def _benevdial_details(case: dict) -> list[str]:
    """BenevDial: who the user was, the judge's class, and a pair's second dialogue."""
    out = []
    if isinstance(case.get("profile"), dict):
        profile = ", ".join(f"{k} {_text(v)}" for k, v in sorted(case["profile"].items()))
        out.append(f"<p class=\"m\">role {_text(case.get('role'))} &middot; need {_text(case.get('need'))} &middot; user: {profile}</p>")
    treatment = case.get("treatment")
    if isinstance(treatment, dict):
        probs = treatment.get("probs")
        shown = "" if not isinstance(probs, dict) else " (" + ", ".join(f"{_text(k)} {_plain(v)}" for k, v in sorted(probs.items())) + ")"
        out.append(f"<p class=\"m\">treatment: <b>{_text(treatment.get('class'))}</b>{shown} &middot; guidance {_text(treatment.get('guidance'))}</p>")
    pair = case.get("pair")
    if isinstance(pair, dict):
        out.append(
            f"<p class=\"m\">pair on {_text(pair.get('axis'))}: {_text(' vs '.join(str(v) for v in pair.get('values') or []))}"
            f" &middot; worse treated: {_text(pair.get('disfavoured'))}"
            + (f" ({_text(pair.get('dimension'))})" if pair.get("dimension") else "") + "</p>"
        )
        out.append("<p class=\"m\">second dialogue (member b):</p>")
        for number, turn in enumerate(pair.get("turns_b") or [], start=1):
            turn = turn or {}
            out.append(
                f"<div class=\"t\"><p class=\"m\">turn {number}</p>"
                f"<p class=\"u\"><b>user</b>{_text(turn.get('user'))}</p>"
                f"<p class=\"a\"><b>target</b>{_text(turn.get('assistant'))}</p></div>"
            )
    return out


def _cases(report: dict):
    cases = [c for c in report.get("cases") or [] if isinstance(c, dict)]
    if not cases:
        return _section("cases", "Cases", "<p class=\"muted\">no cases</p>")
    out = [
        "<p class=\"small muted\">click a case for its transcript; bias by turn: 1 biased, 0 clean, ? unknown</p>",
        "<div class=\"cases\"><div class=\"row\"><span>id</span><span>suite</span><span>category</span>"
        "<span>style</span><span>outcome</span><span>bias by turn</span><span>errors</span></div>",
    ]
    # What needs a look first: errors, then biased, refused, clean cases.
    rank = {"error": 0, "biased": 1, "refused": 2, "clean": 3}
    cases = sorted(cases, key=lambda c: (rank.get(c.get("outcome"), 4), str(c.get("suite")), str(c.get("id")),
                                         str(c.get("style"))))
    for case in cases:
        outcome = _text(case.get("outcome"))
        errors = "; ".join(
            f"{_text(e.get('kind'))}: {_text(e.get('message'))}" for e in case.get("errors") or [] if isinstance(e, dict)
        )
        out.append(
            f"<details class=\"case\"><summary><span class=\"mono\">{_text(case.get('id'))}</span>"
            f"<span>{_text(case.get('suite'))}</span><span>{_text(case.get('category'))}</span>"
            f"<span>{_text(case.get('style')) or MISSING}</span><span><span class=\"v {outcome}\">{outcome}</span></span>"
            f"<span class=\"mono\">{_label_cell(case.get('labels') or {})}</span>"
            f"<span class=\"err\">{errors}</span></summary>{_transcript(case)}</details>"
        )
    out.append("</div>")
    return _section("cases", f"Cases ({len(cases)})", "\n".join(out))


# --------------------------------------------------------------------------- figures


class _Figures:
    """Draws the report's figures with matplotlib's Agg backend, as PNG data URIs.

    Figures are built on ``matplotlib.figure.Figure`` (not pyplot), so nothing is left in
    pyplot's global figure list; rcParams are set only inside ``rc_context``.
    """

    RC = {
        "font.size": 9,
        "font.family": "DejaVu Sans",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "text.parse_math": False,  # a category name with "$" is text, not mathtext
    }

    def __init__(self, matplotlib):
        self.matplotlib = matplotlib

    def _png(self, figure) -> str:
        buffer = io.BytesIO()
        # No "Software" chunk: the bytes then depend on the drawing alone.
        figure.savefig(buffer, format="png", dpi=FIGURE_DPI, bbox_inches="tight", metadata={"Software": None})
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")

    def cumulative_curves(self, suite: str, turns: int, rows: list[dict]) -> str:
        from matplotlib.figure import Figure

        series: dict[tuple, dict[int, dict]] = {}
        for m in rows:
            if m.get("style"):
                continue
            series.setdefault((m.get("category") is not None, str(m.get("category") or "")), {})[_turn_of(m["metric"])[1]] = m
        xs = list(range(1, turns + 1))
        sizes = [row.get("n") for by_turn in series.values() for row in by_turn.values() if _is_number(row.get("n"))]
        points = bool(sizes) and max(sizes) < BANDS_FROM_N
        with self.matplotlib.rc_context(self.RC):
            figure = Figure(figsize=(7.6, 3.4), dpi=FIGURE_DPI)
            ax = figure.add_subplot()
            top = 0.0
            categories = sorted(k for k in series if k[0])
            lines = len(categories) + ((False, "") in series)
            for index, key in enumerate(categories):
                color = f"C{index % 10}"
                ys, lows, highs = self._percent_series(series[key], xs)
                if points:
                    self._error_bars(ax, xs, ys, lows, highs, index, lines, color=color, label=_plot_label(key[1]))
                else:
                    ax.fill_between(xs, lows, highs, color=color, alpha=0.09, linewidth=0)
                    ax.plot(xs, ys, color=color, marker="o", markersize=3, linewidth=1.6, label=_plot_label(key[1]))
                top = max([top] + [h for h in highs if not math.isnan(h)])
            if (False, "") in series:
                ys, lows, highs = self._percent_series(series[(False, "")], xs)
                if points:
                    self._error_bars(ax, xs, ys, lows, highs, lines - 1, lines, color="black", label="overall")
                    top = max([top] + [h for h in highs if not math.isnan(h)])
                else:
                    if not categories:
                        ax.fill_between(xs, lows, highs, color="black", alpha=0.1, linewidth=0)
                        top = max([top] + [h for h in highs if not math.isnan(h)])
                    ax.plot(xs, ys, color="black", linestyle="--", linewidth=1.4, label="overall")
                top = max([top] + [y for y in ys if not math.isnan(y)])
            if points:
                ax.text(0.0, -0.3, f"n < {BANDS_FROM_N} per line: points with 95% intervals, side by side",
                        transform=ax.transAxes, fontsize=7, color="0.35")
            ax.set_xlim(0.8, turns + 0.2)
            ax.set_xticks(xs)
            ax.set_ylim(0, min(100.0, max(10.0, top * 1.08)))
            ax.set_xlabel("turn")
            ax.set_ylabel("cumulative bias (%)")
            ax.set_title(_plot_label(suite), loc="left", fontsize=10, fontweight="bold")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
            return self._png(figure)

    @staticmethod
    def _error_bars(ax, xs, ys, lows, highs, index: int, lines: int, color: str, label: str) -> None:
        """One line's turns as points with their intervals, offset from the other lines'
        so that no two bars overlap."""
        width = min(0.6, 0.08 * lines)
        offset = (index - (lines - 1) / 2) * (width / max(1, lines - 1)) if lines > 1 else 0.0
        shown = [(x + offset, y, y - low, high - y) for x, y, low, high in zip(xs, ys, lows, highs)
                 if not (math.isnan(y) or math.isnan(low) or math.isnan(high))]
        if not shown:
            return
        px, py, below, above = zip(*shown)
        ax.errorbar(px, py, yerr=[below, above], color=color, fmt="o", markersize=3.5, capsize=2, elinewidth=1,
                    linestyle="-", linewidth=0.7, label=label)

    @staticmethod
    def _percent_series(by_turn: dict[int, dict], xs: list[int]):
        def pct(row, key):
            value = (row or {}).get(key)
            return 100 * value if _is_number(value) else math.nan

        return ([pct(by_turn.get(t), "value") for t in xs], [pct(by_turn.get(t), "ci_low") for t in xs],
                [pct(by_turn.get(t), "ci_high") for t in xs])

    def trigger_bars(self, suite: str, rows: list[dict]) -> str:
        from matplotlib.figure import Figure

        scopes = sorted({_group_key(m) for m in rows})
        metrics = [t for t in _figure_metrics("bars") if any(m["metric"] == t for m in rows)]
        index = {(_group_key(m), m["metric"]): m for m in rows}
        width = 0.8 / len(metrics)
        with self.matplotlib.rc_context(self.RC):
            figure = Figure(figsize=(max(4.5, 1.1 + 0.75 * len(scopes) * len(metrics) / 2), 3.0), dpi=FIGURE_DPI)
            ax = figure.add_subplot()
            for k, metric in enumerate(metrics):
                xs, ys, below, above = [], [], [], []
                for i, scope in enumerate(scopes):
                    m = index.get((scope, metric))
                    if m is None or not _is_number(m.get("value")):
                        continue
                    value = 100 * m["value"]
                    low = 100 * m["ci_low"] if _is_number(m.get("ci_low")) else value
                    high = 100 * m["ci_high"] if _is_number(m.get("ci_high")) else value
                    xs.append(i - 0.4 + width * (k + 0.5))
                    ys.append(value)
                    below.append(max(0.0, value - low))
                    above.append(max(0.0, high - value))
                ax.bar(xs, ys, width=width * 0.92, color=f"C{k}", label=metric,
                       yerr=[below, above], capsize=2.5, error_kw={"linewidth": 0.9})
            ax.set_xticks(range(len(scopes)))
            names = ["overall" if s[0] == 0 else " / ".join(x for x in s[1:] if x) for s in scopes]
            ax.set_xticklabels([_plot_label(n) for n in names], rotation=30 if len(scopes) > 4 else 0,
                               ha="right" if len(scopes) > 4 else "center")
            ax.set_ylabel("trigger rate (%)")
            ax.set_ylim(bottom=0)
            ax.grid(axis="x", visible=False)
            ax.set_title(_plot_label(suite), loc="left", fontsize=10, fontweight="bold")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
            return self._png(figure)


def _plot_label(value) -> str:
    """Text for a figure: cleaned, and never starting with "_" (matplotlib hides such labels)."""
    text = _clean(value)
    return "\u200b" + text if text.startswith("_") else text


def _figures():
    """A figure maker, or None when matplotlib is not installed (the page then says so)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    return _Figures(matplotlib)


# --------------------------------------------------------------------------- the page


def render_html(report: dict) -> str:
    """The report as one self-contained HTML5 document (inline CSS, figures as data URIs)."""
    figures = _figures()
    sections = [
        s for s in (
            _messages(report), _outcomes(report), _gates(report), _comparison(report), _judge_check(report),
            _snapshots(report), _curves(report, figures), _trigger_rates(report, figures), _key_metrics(report),
            _simulator_findings(report), _cases(report),
        ) if s is not None
    ]
    nav = "<nav>" + "".join(f"<a href=\"#{anchor}\">{title}</a>" for anchor, title, _ in sections) + "</nav>"
    return "\n".join([
        "<!DOCTYPE html>",
        "<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        f"<title>pytest-socialbias report {_text(report.get('plugin_version'))}</title>",
        f"<style>{CSS}</style></head><body>",
        _header(report),
        nav,
        *(body for _, _, body in sections),
        "</body></html>",
        "",
    ])


def write_html(report: dict, path: Path) -> None:
    """Write the page of a report dict (json_report.build_report of a RunResult)."""
    from ..files import write_atomically

    # Lone surrogates (from bytes that were not UTF-8) cannot be written: replaced.
    write_atomically(path, render_html(report).encode("utf-8", errors="replace").decode("utf-8"))
