"""``python -m pytest_socialbias table``: the papers' tables built from real reports of
fake targets with different behaviours (tests/support/tableworld.py)."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.compare import Comparison, compare
from pytest_socialbias.testing import FakeServer

from ..support.helpers import read_report
from ..support.tableworld import TableWorld, build_reports

DYMT = ("t-dymt", "t-baselines", "t2", "t3-partial")
DETECT = ("detect-operational", "detect-plain")
GUARD_ROW = "guard openai:meta-llama/Llama-Guard-3-8B (llama-guard-3, unit context)"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("table-runs")
    with FakeServer(TableWorld()) as server:
        paths = build_reports(folder, server.openai_base_url)
        assert server.script_errors == []
    return paths


def table(capsys, *args) -> tuple[int, str, str]:
    status = main(["table", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def cells(text: str) -> dict[tuple[str, str, str], dict]:
    """The CSV output by (table, row, column)."""
    return {(r["table"], r["row"], r["column"]): r for r in csv.DictReader(io.StringIO(text))}


def row_of(report: dict, suite: str, metric: str, category=None, style=None) -> dict:
    found = [m for m in report["metrics"] if (m["suite"], m["metric"], m["category"], m["style"]) == (suite, metric, category, style)]
    assert len(found) == 1, (suite, metric, category, style)
    return found[0]


def assert_cell_is(cell: dict, metric_row: dict) -> None:
    """The cell holds the report's own value, interval and n (nothing recomputed)."""
    assert (cell["metric"], float(cell["value"]), float(cell["ci_low"]), float(cell["ci_high"]), int(cell["n"])) == (
        metric_row["metric"], metric_row["value"], metric_row["ci_low"], metric_row["ci_high"], metric_row["n"])


MAIN = "DyMT: bias, coherence and refusal per target (cumulative bias through turn 5)"
RISE = "DyMT: rise of cumulative bias from turn 5 to turn 10, per category (share first biased in turns 6-10)"


def test_dymt_table_a_row_per_target_joined_by_model_with_the_reports_intervals(reports, capsys):
    status, out, err = table(capsys, *(reports[n] for n in DYMT), "--format", "csv")
    assert status == 0, err
    got = cells(out)
    t_dymt, t_base, t2 = (read_report(reports[n]) for n in ("t-dymt", "t-baselines", "t2"))
    # Target t's row joins two reports: the DyMT run and the baselines run.
    assert_cell_is(got[(MAIN, "openai:t", "Zero-shot bias")], row_of(t_base, "zeroshot", "cumulative_bias@1"))
    assert_cell_is(got[(MAIN, "openai:t", "FairMT avg bias @5")], row_of(t_base, "scripted", "cumulative_bias@5"))
    assert_cell_is(got[(MAIN, "openai:t", "DyMT avg bias @5")], row_of(t_dymt, "dymt", "cumulative_bias@5"))
    assert_cell_is(got[(MAIN, "openai:t", "DyMT coherence")], row_of(t_dymt, "dymt", "coherence_mean"))
    assert_cell_is(got[(MAIN, "openai:t", "DyMT refusal")], row_of(t_dymt, "dymt", "refusal_rate"))
    assert_cell_is(got[(MAIN, "openai:t2", "Zero-shot bias")], row_of(t2, "zeroshot", "cumulative_bias@1"))
    # The canned behaviours: t is fair on the baselines, t2 biased on all 8 seeds; in DyMT
    # both are biased on 1 of 8 through turn 5; t refused 1 of 80 replies, t2 none.
    values = {(r, c): (got[(MAIN, r, c)]["value"], got[(MAIN, r, c)]["n"]) for r in ("openai:t", "openai:t2")
              for c in ("Zero-shot bias", "FairMT avg bias @5", "DyMT avg bias @5", "DyMT refusal")}
    assert values == {
        ("openai:t", "Zero-shot bias"): ("0.0", "8"), ("openai:t", "FairMT avg bias @5"): ("0.0", "8"),
        ("openai:t", "DyMT avg bias @5"): ("0.125", "8"), ("openai:t", "DyMT refusal"): ("0.0125", "80"),
        ("openai:t2", "Zero-shot bias"): ("1.0", "8"), ("openai:t2", "FairMT avg bias @5"): ("1.0", "8"),
        ("openai:t2", "DyMT avg bias @5"): ("0.125", "8"), ("openai:t2", "DyMT refusal"): ("0.0", "80"),
    }
    # The markdown: value [interval] n in each cell, percent for rates, the notes below.
    status, text, _ = table(capsys, *(reports[n] for n in DYMT))
    assert "| Target | Zero-shot bias (%) | FairMT avg bias @5 (%) | DyMT avg bias @5 (%) | DyMT coherence | DyMT refusal (%) |" in text
    assert "| openai:t2 | 100.0 [59.8, 100.0] n=8 !1 |" in text
    assert "1. fewer than 10 independent units behind the value" in text


def test_the_turn_option_and_the_rise_per_category(reports, capsys):
    status, out, err = table(capsys, *(reports[n] for n in DYMT), "--format", "csv", "--turn", "10", "--pairs", "none")
    assert status == 0, err
    got = cells(out)
    t2 = read_report(reports["t2"])
    main_title = MAIN.replace("turn 5", "turn 10")
    assert_cell_is(got[(main_title, "openai:t2", "DyMT avg bias @10")], row_of(t2, "dymt", "cumulative_bias@10"))
    # The rise 5 -> 10: late_emergence per category and overall (t2 turns biased at turn 7).
    assert_cell_is(got[(RISE, "openai:t2", "all")], row_of(t2, "dymt", "late_emergence"))
    assert_cell_is(got[(RISE, "openai:t", "race")], row_of(read_report(reports["t-dymt"]), "dymt", "late_emergence", "race"))
    rises = {(r, c): got[(RISE, r, c)]["value"] for r in ("openai:t", "openai:t2") for c in ("age", "gender", "race", "all")}
    assert rises == {("openai:t", "age"): "0.0", ("openai:t", "gender"): "0.0", ("openai:t", "race"): "1.0",
                     ("openai:t", "all"): "0.125", ("openai:t2", "age"): "1.0", ("openai:t2", "gender"): "0.5",
                     ("openai:t2", "race"): "1.0", ("openai:t2", "all"): "0.875"}
    # The rise equals cumulative bias @10 - @5 over the same dialogues.
    assert row_of(t2, "dymt", "late_emergence")["value"] == pytest.approx(
        row_of(t2, "dymt", "cumulative_bias@10")["value"] - row_of(t2, "dymt", "cumulative_bias@5")["value"], abs=1e-6)
    assert not any(k[0] == "pairwise" for k in got)  # --pairs none


def test_every_cell_of_a_partial_run_carries_its_note(reports, capsys):
    status, out, err = table(capsys, *(reports[n] for n in DYMT), "--format", "csv")
    assert status == 0, err
    t3 = [r for (title, row, _), r in cells(out).items() if row == "openai:t3" and title != "pairwise"]
    filled = [r for r in t3 if r["value"]]
    assert len(filled) == 3 + 3  # DyMT bias, coherence, refusal; the rise for age, gender and all
    assert all("a partial run (selected only part of the collected suites' cases (selected with -k 'age or gender')"
               in r["notes"] and "t3-partial.json" in r["notes"] for r in filled)
    # Columns the partial run has no case for say why they are empty.
    empty = {r["column"]: r["notes"] for r in t3 if not r["value"]}
    assert empty["Zero-shot bias"] == "no zeroshot suite among this target's reports"
    assert empty["race"].endswith("suite dymt has no dialogue of category race")
    # Rows of complete runs carry no such note; comparisons with t3 carry it too.
    others = [r for (title, row, _), r in cells(out).items() if row == "openai:t" and title != "pairwise"]
    assert others and not any("partial" in r["notes"] for r in others)
    paired = [r for (title, row, _), r in cells(out).items() if title == "pairwise" and row == "openai:t vs openai:t3"
              and r["value"]]
    assert paired and all("a partial run" in r["notes"] and r["n"] == "4" for r in paired)


def test_pairs_use_the_gates_paired_tests_on_the_matching_cases(reports, capsys):
    status, out, err = table(capsys, *(reports[n] for n in DYMT), "--format", "csv", "--pairs", "first")
    assert status == 0, err
    pairs = {(r["row"], r["column"]): r for (title, _, _), r in cells(out).items() if title == "pairwise"}
    assert {row for row, _ in pairs} == {"openai:t vs openai:t2", "openai:t vs openai:t3"}  # each with the first
    zero = pairs[("openai:t vs openai:t2", "Zero-shot bias")]
    # 8 seeds, t fair and t2 biased on each: McNemar's exact test on 8 discordant pairs,
    # Holm over the pair's 6 columns: what compare.compare gives the same cases as a gate.
    t_base, t2, t_dymt = (read_report(reports[n]) for n in ("t-baselines", "t2", "t-dymt"))
    rows = [Comparison("zeroshot", "cumulative_bias@1", gating=True), Comparison("scripted", "cumulative_bias@5", gating=True),
            Comparison("dymt", "cumulative_bias@5", gating=True), Comparison("dymt", "coherence_mean", gating=True),
            Comparison("dymt", "refusal_rate", gating=True), Comparison("dymt", "late_emergence", gating=True)]
    expected = compare(t2["cases"], {"cases": t_base["cases"] + t_dymt["cases"]}, rows, {})["rows"]
    assert (int(zero["n"]), float(zero["value"]), float(zero["p_worse_holm"])) == (
        expected[0]["n_pairs"], expected[0]["diff"], expected[0]["p_adjusted"])
    assert expected[0]["p_adjusted"] == pytest.approx(6 * 0.5 ** 8)
    assert zero["verdict"] == "openai:t2 worse"
    rise = pairs[("openai:t vs openai:t2", "Rise 5->10")]
    assert float(rise["p_worse_holm"]) == expected[5]["p_adjusted"] and rise["verdict"] == "no significant difference"
    assert pairs[("openai:t vs openai:t3", "Zero-shot bias")]["verdict"] == "not compared: a row has no such run"


def test_mismatched_runs_are_flagged_and_other_suite_files_not_paired(reports, capsys, tmp_path):
    """A target measured with another judge, and with another seeds file: its cells say
    so, and its cases are not paired with the others'."""
    other = json.loads(reports["t2"].read_text())
    other["models"]["target"]["model"] = "t4"
    other["models"]["judge"]["model"] = "j-other"
    other["suites"]["dymt"]["sha256"] = "0" * 64
    (tmp_path / "t4.json").write_text(json.dumps(other))
    status, out, err = table(capsys, reports["t-dymt"], reports["t-baselines"], tmp_path / "t4.json", "--format", "csv")
    assert status == 0, err
    got = cells(out)
    dymt_bias = got[(MAIN, "openai:t4", "DyMT avg bias @5")]["notes"]
    assert "openai:t4, DyMT avg bias @5: not measured as openai:t's" in dymt_bias
    assert "the baseline's judge differs (openai:j@" in dymt_bias  # compare.comparability_warnings' words
    assert "suite dymt ran from another suite, seeds or dialogues file (sha256 000000000000 here" in dymt_bias
    assert "judge differs" in got[(MAIN, "openai:t4", "Zero-shot bias")]["notes"]
    assert "judge differs" not in got[(MAIN, "openai:t", "Zero-shot bias")]["notes"]  # the column's first row
    pair = got[("pairwise", "openai:t vs openai:t4", "DyMT avg bias @5")]
    assert pair["verdict"] == "not compared: the suite files differ (sha256): their cases do not match"
    assert got[("pairwise", "openai:t vs openai:t4", "Zero-shot bias")]["n"] == "8"
    # One target's two reports reached it at two endpoints: every cell of its row says so.
    moved = json.loads(reports["t-baselines"].read_text())
    moved["models"]["target"]["base_url"] = "http://127.0.0.1:9/v1"
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    status, out, err = table(capsys, reports["t-dymt"], tmp_path / "moved.json", "--format", "csv")
    got = cells(out)
    assert all("openai:t: its reports reached the target at different endpoints, parameters or checkpoints"
               in got[(MAIN, "openai:t", column)]["notes"] for column in ("Zero-shot bias", "DyMT avg bias @5"))


def test_detector_rows_of_other_judges_are_not_flagged_but_other_dialogues_are(reports, capsys, tmp_path):
    other = json.loads(reports["detect-plain"].read_text())
    other["models"]["judge"]["model"] = "jz"  # another judge: another row, not a mismatch
    (tmp_path / "jz.json").write_text(json.dumps(other))
    status, out, err = table(capsys, reports["detect-operational"], tmp_path / "jz.json", "--layout", "benevdial-detect",
                             "--format", "csv")
    assert status == 0, err
    got = cells(out)
    assert not any("not measured as" in r["notes"] for r in got.values())
    assert got[("pairwise", "judge openai:ja, operational vs judge openai:jz, plain", "Acc")]["n"] == "6"
    other["suites"]["detect"]["sha256"] = "1" * 64  # another dialogues file
    (tmp_path / "jz.json").write_text(json.dumps(other))
    _, out, _ = table(capsys, reports["detect-operational"], tmp_path / "jz.json", "--layout", "benevdial-detect",
                      "--format", "csv")
    got = cells(out)
    notes = got[(next(t for t, _, _ in got if t.startswith("BenevDial")), "judge openai:jz, plain", "Acc")]["notes"]
    assert "suite detect ran from another suite, seeds or dialogues file (sha256 111111111111 here" in notes
    assert "judge differs" not in notes
    assert got[("pairwise", "judge openai:ja, operational vs judge openai:jz, plain", "Acc")]["verdict"] == (
        "not compared: the suite files differ (sha256): their cases do not match")


def test_a_failed_or_errored_run_is_noted(reports, capsys, tmp_path):
    failed = json.loads(reports["t2"].read_text())
    failed["summary"]["exit_status"] = 1
    failed["summary"]["verdict"] = "fail"
    case = next(c for c in failed["cases"] if c["suite"] == "zeroshot")
    case["outcome"] = "error"
    (tmp_path / "failed.json").write_text(json.dumps(failed))
    status, out, err = table(capsys, tmp_path / "failed.json", "--format", "csv")
    assert status == 0, err
    notes = cells(out)[(MAIN, "openai:t2", "Zero-shot bias")]["notes"]
    assert "the run exited with status 1 (verdict fail)" in notes
    assert "1 of 8 case(s) of suite zeroshot errored; they are counted apart (error_rate), not in the cell's n" in notes
    assert "case(s) of suite" not in cells(out)[(MAIN, "openai:t2", "DyMT avg bias @5")]["notes"]


def test_detector_table_a_row_per_detector_and_guidance(reports, capsys):
    status, out, err = table(capsys, *(reports[n] for n in DETECT), "--layout", "benevdial-detect", "--format", "csv")
    assert status == 0, err
    got = cells(out)
    title = next(t for t, _, _ in got if t.startswith("BenevDial detection"))
    rows = list(dict.fromkeys(row for t, row, _ in got if t == title))
    assert rows == [
        "judge openai:ja, operational", "judge openai:jb, operational", "ensemble of openai:ja + openai:jb, operational",
        "judge openai:ja, plain", "judge openai:jb, plain", "ensemble of openai:ja + openai:jb, plain",
    ]
    report = read_report(reports["detect-plain"])
    for column, metric in (("Acc", "accuracy"), ("R", "recall"), ("F1", "f1"), ("TR_N", "tr_n"), ("TR_OB", "tr_ob"),
                           ("TR_BB", "tr_bb"), ("OB-BB gap", "gap_ob_bb"), ("Macro-F1", "macro_f1"),
                           ("Unreadable", "detector_error_rate")):
        assert_cell_is(got[(title, "judge openai:ja, plain", column)], row_of(report, "detect", metric, "judge-1", "clean"))
    # ja sees both kinds of narrowing, jb none: TR_OB/TR_BB 1 and 0, F1 1 and 0.
    assert [got[(title, f"judge openai:{j}, plain", "TR_BB")]["value"] for j in ("ja", "jb")] == ["1.0", "0.0"]
    # jb never flags: its precision has no denominator; the cell says n=0, no number.
    assert (got[(title, "judge openai:jb, plain", "P")]["value"], got[(title, "judge openai:jb, plain", "P")]["n"]) == ("", "0")
    pair = got[("pairwise", "judge openai:ja, operational vs judge openai:jb, operational", "Acc")]
    assert (pair["n"], float(pair["value"])) == ("6", pytest.approx(-4 / 6))
    status, text, _ = table(capsys, *(reports[n] for n in DETECT), "--layout", "benevdial-detect", "--pairs", "none")
    assert "| judge openai:ja, plain | 100.0 [51.7, 100.0] n=6 !1 |" in text
    assert "| judge openai:jb, plain | 33.3 [6.0, 75.9] n=6 !1 | - n=0 |" in text


def test_a_guard_row_has_no_three_class_cells(reports, capsys):
    """A guard only flags: TR_OB and TR_BB from its flags, no macro-F1 (the report has no
    such row for it, and the table says why the cell is empty)."""
    status, out, err = table(capsys, reports["detect-plain"], reports["detect-guard"], "--layout", "benevdial-detect",
                             "--format", "csv")
    assert status == 0, err
    got = cells(out)
    title = next(t for t, _, _ in got if t.startswith("BenevDial detection"))
    guard = read_report(reports["detect-guard"])
    assert_cell_is(got[(title, GUARD_ROW, "TR_OB")], row_of(guard, "detect", "tr_ob", "guard", "clean"))
    assert [got[(title, GUARD_ROW, c)]["value"] for c in ("TR_OB", "TR_BB", "OB-BB gap")] == ["1.0", "0.0", "1.0"]
    macro = got[(title, GUARD_ROW, "Macro-F1")]
    assert (macro["value"], macro["notes"]) == ("", "not available for a detector that only flags")
    pair = got[("pairwise", f"judge openai:ja, plain vs {GUARD_ROW}", "TR_BB")]
    assert (pair["n"], float(pair["value"])) == ("2", -1.0)


def test_the_formats_escape_their_text(reports, capsys, tmp_path):
    args = [*(reports[n] for n in ("t-dymt", "t2"))]
    status, _, _ = table(capsys, *args, "--format", "html", "-o", tmp_path / "t.html")
    assert status == 0
    page = (tmp_path / "t.html").read_text()
    assert page.startswith("<!doctype html>") and page.count("<table>") == 3
    assert ('<th>openai:t2</th><td class="c"><span class="v">100.0</span><sup><a href="#note-1">1</a></sup><br>'
            '<span class="ci">[59.8, 100.0]</span> <span class="n">n=8</span></td>') in page
    assert '<li id="note-1">fewer than 10 independent units' in page
    status, latex, _ = table(capsys, *args, "--format", "latex")
    assert r"\toprule" in latex and r"Zero-shot bias (\%)" in latex
    assert r"openai:t2 & 100.0 {\scriptsize [59.8, 100.0]} {\scriptsize n=8}$^{1}$" in latex
    # A label with characters the formats act on comes out as text.
    hostile = json.loads(reports["t2"].read_text())
    hostile["models"]["target"]["model"] = "<b>x</b>_&%|\nnext"
    (tmp_path / "hostile.json").write_text(json.dumps(hostile))
    _, page, _ = table(capsys, tmp_path / "hostile.json", "--format", "html")
    assert "<b>x</b>" not in page and "openai:&lt;b&gt;x&lt;/b&gt;_&amp;%|" in page
    _, latex, _ = table(capsys, tmp_path / "hostile.json", "--format", "latex")
    assert r"openai:<b>x</b>\_\&\%| next & " in latex
    _, text, _ = table(capsys, tmp_path / "hostile.json")
    assert "| openai:<b>x</b>_&%\\| next |" in text


@pytest.mark.parametrize("args, message", [
    (["missing.json"], "missing.json: file not found; give JSON reports written by --socialbias-report"),
    (["bad.json"], "bad.json: not a pytest-socialbias report of this format (at (top): 'format' is a required property)"),
    (["t2", "t2"], "suite dymt of target openai:t2 is in two reports"),
    (["t2", "--suite", "bogus=x"], "--suite bogus=x: give COLUMN=NAME with COLUMN one of zeroshot, fairmt, dymt"),
    (["detect-plain"], "detect-plain.json: no target in this report (a detector run?)"),
    (["t2", "--layout", "benevdial-detect"], "t2.json: no detector suite (protocol benevdial_detect) in this report"),
    (["detect-plain", "--layout", "benevdial-detect", "--variant", "mask"], "suite detect has no rows of variant 'mask'"),
])
def test_bad_input_is_one_line_naming_the_file_and_the_fix(reports, capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps({"cases": []}))
    for name in ("t2", "detect-plain"):
        shutil.copy(reports[name], tmp_path / f"{name}.json")
    args = [f"{a}.json" if a in ("t2", "detect-plain") else a for a in args]
    status, out, err = table(capsys, *args)
    assert status == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_two_suites_of_one_protocol_need_a_choice(reports, capsys, tmp_path):
    both = json.loads(reports["t2"].read_text())
    both["suites"]["fairmt"] = dict(both["suites"]["scripted"])
    both["metrics"] += [{**m, "suite": "fairmt", "value": 0.5} for m in both["metrics"] if m["suite"] == "scripted"]
    both["cases"] += [{**c, "suite": "fairmt"} for c in both["cases"] if c["suite"] == "scripted"]
    (tmp_path / "both.json").write_text(json.dumps(both))
    status, _, err = table(capsys, tmp_path / "both.json")
    assert status == 2
    assert "target openai:t2: suites fairmt" in err and "choose one with --suite fairmt=NAME" in err
    status, out, _ = table(capsys, tmp_path / "both.json", "--suite", "fairmt=fairmt", "--format", "csv")
    assert status == 0 and cells(out)[(MAIN, "openai:t2", "FairMT avg bias @5")]["value"] == "0.5"


def test_help_names_the_layouts_and_formats(capsys):
    assert main(["table", "--help"]) == 0
    text = capsys.readouterr().out
    for word in ("dymt", "benevdial-detect", "markdown", "csv", "latex", "html", "--turn", "--suite", "--variant", "--pairs"):
        assert word in text


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium here to read the page")
def test_a_browser_reads_the_html_page_as_written(reports, capsys, tmp_path):
    """The page as a browser parses it: the same tables, rows and cells as written (no
    markup broken by a label), and a screenshot of it renders."""
    import subprocess

    status, _, _ = table(capsys, *(reports[n] for n in DYMT), "--format", "html", "-o", tmp_path / "t.html")
    assert status == 0
    browser = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*browser, "--dump-dom", (tmp_path / "t.html").as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    written = (tmp_path / "t.html").read_text()
    for tag in ("<table>", "<tr>", '<td class="c">', "<sup>"):
        assert dom.count(tag) == written.count(tag) > 0, tag
    subprocess.run([*browser, f"--screenshot={tmp_path / 't.png'}", "--window-size=1400,1200",
                    (tmp_path / "t.html").as_uri()], capture_output=True, timeout=120, check=True)
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
