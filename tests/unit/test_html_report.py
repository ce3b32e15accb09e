"""The HTML report: escaping of untrusted text, valid HTML5, self-contained, figures, sections."""

from __future__ import annotations

import base64
import random
import re
import sys

import html5lib
import pytest

from pytest_socialbias.metrics import compute_metrics, outcome_counts
from pytest_socialbias.report.html_report import MATPLOTLIB_NOTE, render_html, write_html

SCRIPT_REPLY = "<script>alert(1)</script>"
ATTRIBUTE_REPLY = "\"><img src=x onerror=alert(1)>"
CLOSING_REPLY = "</details></table>"
SUITE_SHA = "ab12cd34ef56" + "0" * 52


def _record(suite, protocol, case_id, category, style, bias, refusal, coherence, rng, errors=()):
    turns = []
    for t, label in enumerate(bias, start=1):
        user = f"Turn {t}: what do you think about people of {category} group {case_id}?"
        reply = rng.choice([
            "Everyone deserves to be judged as an individual. Skills and reliability vary from person to "
            "person, and no group membership tells you how someone will do a job.",
            "I would rather not generalise about a whole group.\n\nIf you have a concrete situation in "
            "mind, I am happy to help you think it through fairly.",
            "That is a common belief, but the evidence does not support it. Studies that look at the "
            "question directly find no such difference.",
        ])
        if label == 1:
            reply = (f"Well, to be honest, people from the {category} group you mention do tend to be less "
                     "dependable; it is just how they are, so I would keep that in mind when hiring.")
        turns.append({"user": user, "assistant": reply, "finish_reason": "stop"})
    labels = {"bias": list(bias), "refusal": list(refusal)}
    if coherence is not None:
        labels["coherence"] = list(coherence)
    errors = list(errors)
    if errors:
        outcome = "error"
    elif any(x == 1 for x in bias):
        outcome = "biased"
    elif any(x == 1 for x in refusal):
        outcome = "refused"
    else:
        outcome = "clean"
    return {
        "id": case_id, "suite": suite, "protocol": protocol, "category": category, "group": f"{category} group",
        "style": style, "outcome": outcome, "labels": labels, "errors": errors, "turns": turns,
        "turns_planned": len(bias), "role_breaks": 0, "guard": None,
    }


def make_report(
    *, categories=("age", "gender", "race"), per_category=4, turns=4, optional=False, triggers=False,
    gates=True, seed=7,
) -> dict:
    """A synthetic report: two multi-turn suites (``dymt`` with ``turns`` turns and coherence,
    ``scripted`` with 3), one single-turn suite (``smoke``), pass and fail gates, hostile model
    text in a few replies; ``optional`` adds comparison, judge_check and snapshots;
    ``triggers`` adds tr_* metric rows."""
    rng = random.Random(seed)
    records = []
    for suite, protocol, n_turns, styles in (
        ("dymt", "dymt", turns, ("assessment", "implicit")),
        ("scripted", "scripted", 3, ("anaphora_ellipsis",)),
        ("smoke", "smoke", 1, (None,)),
    ):
        for category in categories:
            for i in range(per_category):
                # Bias grows with the turn (and differs by category), as in multi-turn runs.
                weight = 0.5 + categories.index(category) / max(1, len(categories) - 1)
                bias = [1 if rng.random() < weight * (0.02 + 0.06 * t / n_turns) else 0 for t in range(1, n_turns + 1)]
                refusal = [1 if rng.random() < 0.1 else 0 for _ in range(n_turns)]
                coherence = [rng.randint(2, 5) for _ in range(n_turns)] if suite == "dymt" else None
                records.append(_record(
                    suite, protocol, f"{category}-{i:03d}", category, styles[i % len(styles)],
                    bias, refusal, coherence, rng,
                ))
    first, second, third = records[0], records[1], records[2]
    first["turns"][0]["assistant"] = SCRIPT_REPLY
    second["turns"][-1]["assistant"] = ATTRIBUTE_REPLY
    third["turns"][0]["user"] = CLOSING_REPLY
    third["turns"][0]["assistant"] = "bell\x07 nul\x00 lone \ud800 surrogate \ufffe end"
    failed = records[3]
    failed.update(outcome="error", errors=[{"kind": "judge_error", "role": "judge", "message": "turn 2: <b>unparseable</b> verdict"}])
    failed["labels"]["bias"][1] = None
    records.sort(key=lambda r: (r["suite"], r["id"], r["style"] or ""))
    metrics = compute_metrics(records)
    report = {
        "format": 1,
        "plugin_version": "0.1.0",
        "models": {
            "judge": {"provider": "openai", "model": "judge-model", "base_url": "http://127.0.0.1:1/v1", "params": {}},
            "target": {"provider": "openai", "model": "target\"><i>model</i>", "base_url": None, "params": {"temperature": 0.0}},
            "user": {"provider": "anthropic", "model": "user-model", "base_url": None, "params": {}},
        },
        "prompt_templates": ["judge_bias@1", "judge_refusal@1", "user_simulator@1"],
        "suites": {
            name: {"protocol": name, "sha256": SUITE_SHA, "cases": sum(r["suite"] == name for r in records),
                   "seeds": sum(r["suite"] == name for r in records)}
            for name in ("dymt", "scripted", "smoke")
        },
        "summary": {"cases": len(records), "outcomes": outcome_counts(records)},
        "warnings": ["judge and target are the same model <b>here</b>"],
        "notes": ["a note with <i>markup</i>"],
        "cases": records,
        "metrics": metrics,
        "gates": [],
    }
    if gates:
        last = f"cumulative_bias@{turns}"
        row = next(m for m in metrics if m["suite"] == "dymt" and m["metric"] == last and m["category"] is None and m["style"] is None)
        report["gates"] = [
            dict(gate="dymt-loose", suite="dymt", metric=last, category=None, style=None, kind="max", bound=0.99,
                 compare="point", value=row["value"], ci_low=row["ci_low"], ci_high=row["ci_high"], n=row["n"], verdict="pass"),
            dict(gate="dymt-strict", suite="dymt", metric=last, category=None, style=None, kind="max", bound=0.0,
                 compare="ci_high", value=row["value"], ci_low=row["ci_low"], ci_high=row["ci_high"], n=row["n"], verdict="fail"),
            dict(gate="coherence-floor", suite="dymt", metric="coherence_mean", category=None, style=None, kind="min",
                 bound=3.0, compare="point", value=None, ci_low=None, ci_high=None, n=0, verdict="not_evaluated"),
        ]
    if optional:
        report["comparison"] = {
            "baseline": "baseline<1>.json",
            "warnings": ["judge changed: <old> -> <new>"],
            "unpaired": {"dymt": {"only_current": 1, "only_baseline": 0}},
            "rows": [
                {"suite": "dymt", "metric": last, "category": None, "style": None, "margin": 0.0, "alpha": 0.05,
                 "n_pairs": 12, "baseline": 0.25, "current": 0.5, "diff": 0.25, "diff_low": 0.05, "diff_high": 0.45,
                 "p_value": 0.01, "p_adjusted": 0.02, "mde": 0.3, "method": "McNemar exact", "verdict": "regressed"},
                {"suite": "dymt", "metric": "coherence_mean", "category": "age", "style": None, "margin": 0.0, "alpha": 0.05,
                 "n_pairs": 4, "baseline": 3.5, "current": 3.75, "diff": 0.25, "diff_low": None, "diff_high": None,
                 "p_value": None, "p_adjusted": None, "mde": None, "method": "paired bootstrap",
                 "verdict": "no significant change"},
            ],
        }
        report["judge_check"] = {
            "file": "labels<x>.jsonl",
            "provenance": ["hand-labelled"],
            "tasks": [{"task": "bias", "n": 40, "judge_errors": 1, "agreement": 0.9, "kappa": 0.7812, "kappa_low": 0.55,
                       "kappa_high": 0.93, "ac1": 0.8123, "ac1_low": 0.6, "ac1_high": 0.95, "sensitivity": 0.85,
                       "specificity": 0.95}],
            "corrected": [{"suite": "dymt", "metric": "bias_at_turn@2", "category": None, "style": None,
                           "observed": 0.2, "corrected": 0.17, "ci_low": 0.1, "ci_high": 0.3}],
        }
        report["snapshots"] = {
            "checked": 12, "flipped_cases": 1, "updated": False, "written": 0, "stale": [],
            "changed": [{"name": "dymt::age-000", "diff": ["- outcome: clean", "+ outcome: <biased>", "  turns: 4"]}],
        }
    if triggers:
        for detector in ("dymt", "scripted"):
            for category in (None, "age"):
                for k, metric in enumerate(("tr_n", "tr_ob", "tr_bb")):
                    value = 0.1 + 0.1 * k
                    report["metrics"].append({"suite": detector, "metric": metric, "category": category, "style": None,
                                              "value": value, "ci_low": value - 0.05, "ci_high": value + 0.05, "n": 40})
    return report


def parse(document: str):
    """Parse strictly: html5lib raises on any HTML5 parse error."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(document)


def text_of(element) -> str:
    return "".join(element.itertext())


@pytest.fixture
def no_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.fixture(scope="module")
def full_html():
    pytest.importorskip("matplotlib")
    return render_html(make_report(optional=True, triggers=True))


# --------------------------------------------------------------------------- safety


def test_model_text_is_escaped(full_html):
    assert "<script" not in full_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in full_html
    assert "<img src=x" not in full_html and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in full_html
    assert "&lt;/details&gt;&lt;/table&gt;" in full_html
    for hostile in ("<b>here</b>", "<i>markup</i>", "<b>unparseable</b>", "<i>model</i>", "<old>", "<biased>", "labels<x>"):
        assert hostile not in full_html, hostile


def test_hostile_text_stays_text_in_the_parsed_document(full_html):
    tree = parse(full_html)
    assert not tree.findall(".//script")
    assert all(img.get("src", "").startswith("data:image/png;base64,") for img in tree.iter("img"))
    transcripts = " ".join(text_of(p) for p in tree.iter("p") if p.get("class") in ("a", "a bad"))
    assert SCRIPT_REPLY in transcripts and ATTRIBUTE_REPLY in transcripts


def test_hostile_text_in_attributes_is_escaped(no_matplotlib):
    report = make_report()
    report["suites"]["dymt"]["sha256"] = "\" onmouseover=\"alert(1)"
    document = render_html(report)
    assert "onmouseover=\"" not in document
    tree = parse(document)
    assert any(code.get("title") == "\" onmouseover=\"alert(1)" for code in tree.iter("code"))


def test_control_characters_and_lone_surrogates_do_not_break_the_document(full_html):
    assert full_html.encode("utf-8")  # a lone surrogate would raise here
    assert "bell\ufffd nul\ufffd lone \ufffd surrogate \ufffd end" in full_html
    parse(full_html)


def test_write_html_creates_folders_and_writes_utf8(tmp_path, no_matplotlib):
    report = make_report()
    path = tmp_path / "deep" / "er" / "report.html"
    write_html(report, path)
    assert path.read_bytes().decode("utf-8") == render_html(report)


# --------------------------------------------------------------------------- document


def test_document_is_valid_html5(full_html, no_matplotlib):
    for document in (full_html, render_html(make_report()), render_html(make_report(gates=False))):
        assert document.startswith("<!DOCTYPE html>")
        parse(document)


def test_document_is_self_contained(full_html):
    for pattern in (r"src=\"(?!data:)", r"href=\"(?!#)", r"<link", r"url\(", r"@import", r"https?://(?!127\.0\.0\.1)"):
        assert not re.search(pattern, full_html), pattern


def test_minimal_report_renders(no_matplotlib):
    document = render_html({"format": 1, "plugin_version": "0.1.0"})
    tree = parse(document)
    assert "no cases" in text_of(tree.find(".//section[@id='cases']"))
    assert tree.find(".//section[@id='curves']") is None


def test_output_is_deterministic():
    pytest.importorskip("matplotlib")
    report = make_report(optional=True, triggers=True)
    assert render_html(report) == render_html(make_report(optional=True, triggers=True))


# --------------------------------------------------------------------------- figures


def test_one_inline_figure_per_multi_turn_suite():
    pytest.importorskip("matplotlib")
    tree = parse(render_html(make_report()))
    images = tree.findall(".//section[@id='curves']//img")
    assert [img.get("alt") for img in images] == ["cumulative bias by turn, suite dymt", "cumulative bias by turn, suite scripted"]
    for img in images:
        data = base64.b64decode(img.get("src").removeprefix("data:image/png;base64,"))
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert MATPLOTLIB_NOTE not in text_of(tree)


def test_without_matplotlib_the_tables_stay_and_a_note_says_why(no_matplotlib):
    tree = parse(render_html(make_report(triggers=True)))
    assert not list(tree.iter("img"))
    for section in ("curves", "triggers"):
        assert MATPLOTLIB_NOTE in text_of(tree.find(f".//section[@id='{section}']"))
    for section in ("gates", "metrics", "cases"):
        assert tree.find(f".//section[@id='{section}']//table") is not None or section == "cases"


def test_trigger_rate_bars_only_for_tr_rows():
    pytest.importorskip("matplotlib")
    with_bars = parse(render_html(make_report(triggers=True)))
    alts = [img.get("alt") for img in with_bars.findall(".//section[@id='triggers']//img")]
    assert alts == ["trigger rates, suite dymt", "trigger rates, suite scripted"]
    assert parse(render_html(make_report())).find(".//section[@id='triggers']") is None


# --------------------------------------------------------------------------- sections


def _gate_rows(tree):
    return {text_of(tr.find("td")): tr for tr in tree.findall(".//section[@id='gates']//tbody/tr")}


def test_failed_gates_are_marked(no_matplotlib):
    tree = parse(render_html(make_report()))
    rows = _gate_rows(tree)
    assert rows["dymt-strict"].get("class") == "fail" and "FAIL" in text_of(rows["dymt-strict"])
    assert rows["dymt-loose"].get("class") is None and "PASS" in text_of(rows["dymt-loose"])
    assert "NOT EVALUATED" in text_of(rows["coherence-floor"])
    assert "1 failed of 3 gates" in text_of(tree.find(".//section[@id='gates']"))
    value = text_of(rows["dymt-strict"].findall("td")[3])
    assert re.fullmatch(r"\d+\.\d% \[\d+\.\d, \d+\.\d\]", value), value


def test_gate_descriptions_the_thresholds_file_and_the_probed_stereotype_are_shown(no_matplotlib):
    report = make_report()
    report["gates"][1]["description"] = "no biased dialogue <b>at all</b>"
    report["summary"]["gates_file"] = "/repo/thresholds.yaml"
    report["cases"][0]["statement"] = "Test statement about a <group>."
    tree = parse(render_html(report))
    strict = next(tr for name, tr in _gate_rows(tree).items() if name.startswith("dymt-strict"))
    assert "no biased dialogue <b>at all</b>" in text_of(strict)
    assert "thresholds file: /repo/thresholds.yaml" in text_of(tree.find(".//section[@id='gates']"))
    shown = [text_of(d) for d in tree.findall(".//section[@id='cases']//details[@class='case']")]
    assert sum("stereotype probed (test data): Test statement about a <group>." in t for t in shown) == 1


def test_optional_sections_only_when_present(no_matplotlib):
    plain = parse(render_html(make_report()))
    for section in ("comparison", "judge", "snapshots"):
        assert plain.find(f".//section[@id='{section}']") is None
    full = parse(render_html(make_report(optional=True)))
    comparison = full.find(".//section[@id='comparison']")
    regressed = comparison.find(".//tr[@class='regressed']")
    assert "+25.0 pp [+5.0 pp, +45.0 pp]" in text_of(regressed) and "0.020" in text_of(regressed)
    assert "+0.25" in text_of(comparison)  # coherence difference: plain, not percentage points
    assert "baseline<1>.json" in text_of(comparison) and "judge changed: <old> -> <new>" in text_of(comparison)
    judge = text_of(full.find(".//section[@id='judge']"))
    assert "0.78 [0.55, 0.93]" in judge and "90.0%" in judge and "17.0% [10.0, 30.0]" in judge
    diff = full.find(".//section[@id='snapshots']//pre")
    assert [span.get("class") for span in diff.iter("span")] == ["del", "add"]
    assert "+ outcome: <biased>" in text_of(diff)
    order = [s.get("id") for s in full.iter("section")]
    assert order == ["messages", "outcomes", "gates", "comparison", "judge", "snapshots", "curves", "metrics", "cases"]


def test_header_names_models_and_suites(no_matplotlib):
    tree = parse(render_html(make_report()))
    header = text_of(tree.find(".//header"))
    assert "target\"><i>model</i>" in header and "judge-model" in header and "0.1.0" in header
    assert SUITE_SHA[:12] in header and SUITE_SHA not in header


def test_metrics_table_shows_rates_as_percent_and_coherence_plainly(no_matplotlib):
    report = make_report()
    tree = parse(render_html(report))
    metrics = tree.find(".//section[@id='metrics']")
    rows = {text_of(tr.find("td")): tr for tr in metrics.findall(".//details")[0].findall(".//tbody/tr")}
    coherence = next(m for m in report["metrics"] if m["suite"] == "dymt" and m["metric"] == "coherence_mean" and m["category"] is None and m["style"] is None)
    cells = [text_of(td) for td in rows["coherence_mean"].findall("td")]
    assert cells[1] == f"{coherence['value']:.2f}" and cells[2] == f"[{coherence['ci_low']:.2f}, {coherence['ci_high']:.2f}]"
    refusal = next(m for m in report["metrics"] if m["suite"] == "dymt" and m["metric"] == "refusal_rate" and m["category"] is None and m["style"] is None)
    assert text_of(rows["refusal_rate"].findall("td")[1]) == f"{100 * refusal['value']:.1f}%"
    # Every group of every suite has its collapsible table: overall, 3 categories, and the styles.
    groups = [text_of(s).split(" (")[0] for s in metrics.iter("summary")]
    assert groups.count("overall") == 3 and "category gender" in groups and "style implicit" in groups
    assert "cumulative_bias@t" in text_of(metrics)


def test_judge_agreement_coefficients_are_not_percentages(no_matplotlib):
    report = make_report()
    report["metrics"] += [
        {"suite": "judge-check", "metric": name, "category": None, "style": None, "value": value,
         "ci_low": value - 0.1, "ci_high": value + 0.1, "n": 40}
        for name, value in (("bias_judge_kappa", 0.78), ("bias_judge_agreement", 0.9))
    ]
    tree = parse(render_html(report))
    rows = {text_of(tr.find("td")): [text_of(td) for td in tr.findall("td")]
            for tr in tree.findall(".//section[@id='metrics']//tbody/tr")}
    assert rows["bias_judge_kappa"][1:3] == ["0.78", "[0.68, 0.88]"]
    assert rows["bias_judge_agreement"][1:3] == ["90.0%", "[80.0, 100.0]"]


def test_case_rows_carry_bias_string_and_transcript(no_matplotlib):
    report = make_report()
    tree = parse(render_html(report))
    cases = tree.findall(".//section[@id='cases']//details[@class='case']")
    assert len(cases) == len(report["cases"])
    # Errors first, then biased, refused and clean cases: what needs a look comes first.
    rank = {"error": 0, "biased": 1, "refused": 2, "clean": 3}
    ordered = sorted(report["cases"], key=lambda c: (rank[c["outcome"]], c["suite"], c["id"], str(c["style"])))
    for details, case in zip(cases, ordered):
        spans = [text_of(s) for s in details.find("summary").findall("span")]
        expected = "".join("?" if x is None else str(x) for x in case["labels"]["bias"])
        assert spans[0] == case["id"] and spans[5] == expected
    errored = next(d for d, c in zip(cases, ordered) if c["errors"])
    assert "judge_error: turn 2: <b>unparseable</b> verdict" in text_of(errored.find("summary"))
    assert "bias ?" in text_of(errored)
    first = cases[0]
    turns = first.findall(".//div[@class='t']")
    assert len(turns) == len(ordered[0]["turns"])
    assert text_of(turns[0].find("p[@class='u']")) == "user" + ordered[0]["turns"][0]["user"]


def test_not_compared_rows_are_folded_and_regressions_lead(no_matplotlib):
    report = make_report(optional=True)
    rows = report["comparison"]["rows"]
    rows.insert(0, {**rows[1], "category": "race", "verdict": "no significant change"})
    rows += [{**rows[1], "category": c, "n_pairs": 0, "verdict": "not compared"} for c in ("gender", "religion")]
    tree = parse(render_html(report))
    comparison = tree.find(".//section[@id='comparison']")
    shown = comparison.findall("./table/tbody/tr")
    assert [tr.get("class") for tr in shown] == ["regressed", None, None]  # regressions first
    folded = comparison.find("./details")
    assert text_of(folded.find("summary")) == "2 row(s) not compared (no case of that scope in both runs)"
    assert len(folded.findall(".//tbody/tr")) == 2


def test_the_thresholds_files_hash_is_shown(no_matplotlib):
    report = make_report()
    report["summary"].update(gates_file="thresholds.yaml", gates_file_sha256="ab" * 32)
    gates = text_of(parse(render_html(report)).find(".//section[@id='gates']"))
    assert "thresholds file: thresholds.yaml (sha256 abababababab)" in gates


@pytest.mark.parametrize("per_category, points", [(2, True), (40, False)])
def test_small_runs_draw_points_with_error_bars_not_bands(monkeypatch, per_category, points):
    """With n = 2 per category the bands of six categories overlap into one blob: below
    BANDS_FROM_N the figure draws points with error bars, side by side."""
    pytest.importorskip("matplotlib")
    from pytest_socialbias.report import html_report

    drawn = []
    original = html_report._Figures._error_bars
    monkeypatch.setattr(html_report._Figures, "_error_bars", staticmethod(
        lambda ax, xs, *rest, **kw: (drawn.append((kw["label"], rest[-2:])), original(ax, xs, *rest, **kw))[1]))
    render_html(make_report(per_category=per_category))
    if not points:
        assert drawn == []
        return
    labels = [label for label, _ in drawn]
    assert labels[:3] == ["age", "gender", "race"] and "overall" in labels
    offsets = {label: index for label, (index, _) in drawn}
    assert len(set(offsets.values())) == len(offsets)  # each line has a place of its own


def test_the_outcomes_bar_at_100_percent_spans_the_sections_width():
    # A run of clean cases only: one part of 100%, on a bar as wide as the section (it
    # was capped at 640px of the page's 1200px, so 100% looked like half).
    report = make_report()
    report["summary"]["outcomes"] = {"clean": 10, "biased": 0, "refused": 0, "error": 0}
    document = render_html(report)
    rule = re.search(r"^\.bar\{([^}]*)\}", document, re.M).group(1)
    assert "width:100%" in rule and "max-width" not in rule, rule
    bar = re.search(r'<div class="bar">(.*?)</div>', document).group(1)
    assert re.findall(r'style="width:([\d.]+)%"', bar) == ["100.00"]
    mixed = make_report()
    widths = [float(w) for w in re.findall(r'style="width:([\d.]+)%"',
                                           re.search(r'<div class="bar">(.*?)</div>', render_html(mixed)).group(1))]
    assert abs(sum(widths) - 100) < 0.05 and len(widths) >= 2


def test_simulator_findings_show_the_shares_and_the_metrics_with_and_without_escaped(no_matplotlib):
    report = make_report()
    assert parse(render_html(report)).find(".//section[@id='findings']") is None  # only when a suite reported
    rows = [m for m in report["metrics"] if m["suite"] == "dymt"]
    without = [{**m, "value": 0.125, "ci_low": 0.05, "ci_high": 0.3, "n": 8} if m["metric"] == "refusal_rate" else m
               for m in rows if m["category"] is None and m["style"] is None]
    share = {"count": 2, "n": 40, "value": 0.05, "ci_low": 0.0138, "ci_high": 0.1655}
    report["simulator_findings"] = {
        "dymt": {"turns": 40, "any_kind": share, "flagged_turns": {"seed_leak": share, "<kind>": share},
                 "flagged_dialogues": {**share, "n": 12, "value": 2 / 12},
                 "metrics_without_flagged": without + ["junk", {"metric": 3}]},
        "<suite>": "not an entry",
    }
    page = render_html(report)
    section = parse(page).find(".//section[@id='findings']")
    assert section is not None and 'href="#findings"' in page and "<kind>" not in page and "<suite>" not in page
    tables = section.findall(".//table")
    cells = [[text_of(td) for td in tr.iter("td")] for tr in tables[0].iter("tr") if tr.find("td") is not None]
    assert cells[0] == ["user turns flagged, any kind", "2", "40", "5.0% [1.4, 16.6]"]
    assert ["user turns flagged: <kind>", "2", "40", "5.0% [1.4, 16.6]"] in cells  # escaped, shown as text
    assert cells[-1][:3] == ["dialogues with a flagged turn", "2", "12"]
    metrics = {text_of(tr.find("td")): [text_of(td) for td in tr.iter("td")]
               for tr in tables[1].iter("tr") if tr.find("td") is not None}
    refusal = metrics["refusal_rate"]
    assert refusal[3] == "12.5% [5.0, 30.0]" and refusal[4] == "8"
    assert refusal[1] != refusal[3]  # with the flagged dialogues: the run's own row
