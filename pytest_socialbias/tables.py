"""``python -m pytest_socialbias table REPORT.json...``: the papers' tables across runs.

Each cell is a metric row of one JSON report (``--socialbias-report``), shown with the
95% interval and the n the report holds; nothing is recomputed. Two layouts:

* ``dymt``: one row per target (reports of several suites of one target are joined by the
  target's provider and model): the zero-shot probe's bias, the scripted baseline's and
  DyMT's cumulative bias through turn T (5 unless ``--turn``), DyMT's coherence and
  refusal rate; and a second table with the rise from turn 5 to turn 10 per category
  (``late_emergence``: first biased in turns 6-10), from 10-turn DyMT runs.
* ``benevdial-detect``: one row per detector of a detector suite (judges at their
  guidance level, with or without demographics, ensembles, guards) and variant: accuracy,
  precision, recall, F1 (B = OB u BB), the trigger rates, the OB-BB gap, three-class
  macro-F1, and the share of unreadable answers.

A cell never silently comes from a run that cannot carry it: a partial run, a run whose
cases errored, a run that exited non-zero, fewer than 10 units behind a value, or a row
measured with another judge, user simulator, prompt version, suite file or plugin version
than the column's first row, each puts a numbered note on the cell.

Rows are compared pairwise where their cases match (the same suite file, paired by case
id and style), with the paired tests of the ``no_regression`` gates (compare.py): each
pair of rows is one family, Holm-adjusted over its columns.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .metrics.catalogue import is_comparable, is_percent
from .report.formatting import difference, interval, number, p_value

LAYOUTS = ("dymt", "benevdial-detect")
FORMATS = ("markdown", "csv", "latex", "html")
PAIRINGS = ("all", "first", "none")
#: Fewer units than this behind a value: no interval method promises its coverage (the report's ``small``).
SMALL = "fewer than 10 independent units behind the value: no interval method can promise its 95% there"


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Source:
    """One JSON report as given on the command line."""

    path: Path
    data: dict

    @property
    def name(self) -> str:
        return str(self.path)

    def cases(self, suite: str) -> list[dict]:
        return [c for c in self.data["cases"] if c["suite"] == suite]

    def metric(self, suite: str, metric: str, category: str | None = None, style: str | None = None) -> dict | None:
        for row in self.data["metrics"]:
            if (row["suite"], row["metric"], row["category"], row["style"]) == (suite, metric, category, style):
                return row
        return None


@dataclass(frozen=True)
class Column:
    key: str
    heading: str
    metric: str


@dataclass
class Cell:
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    notes: list[int] = field(default_factory=list)


@dataclass
class Table:
    title: str
    corner: str  # heading of the row labels
    columns: list[Column]
    rows: list[tuple[str, dict[str, Cell | None]]]
    missing: dict[tuple[str, str], str] = field(default_factory=dict)  # (row, column) -> why empty


@dataclass
class Pair:
    """One paired comparison of two rows in one column (compare.compare_row's output)."""

    first: str
    second: str
    column: str
    metric: str
    result: dict | None  # None: not compared
    why_not: str | None = None
    notes: list[int] = field(default_factory=list)


@dataclass
class Document:
    layout: str
    tables: list[Table]
    pairs: list[Pair]
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> int:
        """The number of a note (added once, numbered from 1)."""
        if text not in self.notes:
            self.notes.append(text)
        return self.notes.index(text) + 1


# --------------------------------------------------------------------------- reading reports


def load_reports(paths: list[Path]) -> list[Source]:
    """Each file read and checked against the report schema; ConfigError naming the file."""
    from .report.json_report import validate_report

    sources = []
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{path}: file not found; give JSON reports written by --socialbias-report")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            validate_report(data)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not a readable JSON report ({exc}); give a file written by --socialbias-report") from None
        except Exception as exc:  # noqa: BLE001 - jsonschema.ValidationError, imported lazily
            where = "/".join(str(p) for p in getattr(exc, "absolute_path", [])) or "(top)"
            raise ConfigError(
                f"{path}: not a pytest-socialbias report of this format (at {where}: {getattr(exc, 'message', exc)}); "
                "write it again with --socialbias-report of this plugin version"
            ) from None
        sources.append(Source(path, data))
    return sources


def _run_notes(doc: Document, source: Source, suite: str) -> list[int]:
    """Notes every cell of ``suite`` from ``source`` carries: partial run, errored cases,
    a non-zero exit status."""
    out = []
    summary = source.data["summary"]
    if summary.get("partial"):
        reasons = "; ".join(summary.get("partial_reasons") or []) or "part of the suites' cases ran"
        out.append(doc.note(f"{source.name}: a partial run ({reasons}): its cells cover only the cases that ran"))
    cases = source.cases(suite)
    errored = sum(1 for c in cases if c["outcome"] == "error")
    if errored:
        out.append(doc.note(f"{source.name}: {errored} of {len(cases)} case(s) of suite {suite} errored; they are "
                            "counted apart (error_rate), not in the cell's n"))
    status = summary.get("exit_status")
    if status:
        out.append(doc.note(f"{source.name}: the run exited with status {status} (verdict {summary.get('verdict')}): "
                            "a gate failed, a case failed or a file was not written; read that report"))
    return out


def _cell(doc: Document, source: Source, suite: str, metric: str, category=None, style=None) -> Cell | None:
    row = source.metric(suite, metric, category, style)
    if row is None:
        return None
    cell = Cell(metric, row["value"], row["ci_low"], row["ci_high"], row["n"], _run_notes(doc, source, suite))
    if row.get("small"):
        cell.notes.append(doc.note(SMALL))
    return cell


def _meta(source: Source, models: bool) -> dict:
    return {"models": source.data["models"] if models else {}, "prompt_templates": [], "suites": {}}


def _mismatch(reference: tuple[Source, str], other: tuple[Source, str], models: bool = True) -> list[str]:
    """Why a row's suite run is not measured as the column's first row's was: another
    judge or user simulator (``models``: not where the judges are the rows), suite file,
    prompt version or plugin version."""
    from .compare import comparability_warnings

    (ref, ref_suite), (cur, cur_suite) = reference, other
    # compare.py's words for another judge or user simulator ("the baseline": the first row).
    out = comparability_warnings(_meta(ref, models), _meta(cur, models))
    ref_sha, cur_sha = ref.data["suites"][ref_suite]["sha256"], cur.data["suites"][cur_suite]["sha256"]
    if ref_sha != cur_sha:
        out.append(f"suite {cur_suite} ran from another suite, seeds or dialogues file (sha256 {cur_sha[:12]} here, "
                   f"{ref_sha[:12]} in {ref.name}): its cases are not paired with that row's")
    versions = {}
    for template in ref.data["prompt_templates"]:
        name, _, version = template.partition("@")
        versions[name] = version
    for template in cur.data["prompt_templates"]:
        name, _, version = template.partition("@")
        if name in versions and versions[name] != version:
            out.append(f"prompt {name} at {version} here, {versions[name]} in {ref.name}")
    if ref.data["plugin_version"] != cur.data["plugin_version"]:
        out.append(f"plugin version {cur.data['plugin_version']} here, {ref.data['plugin_version']} in {ref.name}")
    return out


def _flag_mismatches(doc: Document, table: Table, origin: dict, models: bool = True) -> None:
    """Per column, a note on each cell measured otherwise than the column's first row.
    ``origin``: (row label, column key) -> (source, suite)."""
    for column in table.columns:
        placed = [(label, origin[(label, column.key)]) for label, cells in table.rows
                  if cells.get(column.key) is not None and (label, column.key) in origin]
        if not placed:
            continue
        first_label, first = placed[0]
        for label, found in placed[1:]:
            for why in _mismatch(first, found, models):
                number_ = doc.note(f"{label}, {column.heading}: not measured as {first_label}'s ({found[0].name}: {why})")
                dict(table.rows)[label][column.key].notes.append(number_)


# --------------------------------------------------------------------------- the DyMT layout

#: The columns of the DyMT table: key, heading, protocol of the suite, metric (T: --turn).
DYMT_COLUMNS = (
    ("zeroshot", "Zero-shot bias", "zeroshot", "cumulative_bias@1"),
    ("fairmt", "FairMT avg bias", "scripted", "cumulative_bias@T"),
    ("dymt", "DyMT avg bias", "dymt", "cumulative_bias@T"),
    ("coherence", "DyMT coherence", "dymt", "coherence_mean"),
    ("refusal", "DyMT refusal", "dymt", "refusal_rate"),
)
SUITE_KEYS = ("zeroshot", "fairmt", "dymt")
RISE = "late_emergence"


def target_of(source: Source) -> str:
    spec = source.data["models"].get("target")
    if spec is None:
        raise ConfigError(f"{source.name}: no target in this report (a detector run?); the dymt layout reads target "
                          "runs; use --layout benevdial-detect for detector suites")
    return f"{spec['provider']}:{spec['model']}"


def _suites_by_target(sources: list[Source], chosen: dict[str, str]) -> dict[str, dict[str, tuple[Source, str]]]:
    """target -> column key (zeroshot, fairmt, dymt) -> (source, suite name)."""
    protocols = {key: protocol for key, _, protocol, _ in DYMT_COLUMNS if key in SUITE_KEYS}
    out: dict[str, dict[str, tuple[Source, str]]] = {}
    seen: dict[tuple[str, str], Source] = {}
    for source in sources:
        target = target_of(source)
        mine = out.setdefault(target, {})
        for suite, meta in sorted(source.data["suites"].items()):
            if (target, suite) in seen:
                raise ConfigError(f"suite {suite} of target {target} is in two reports: {seen[(target, suite)].name} and "
                                  f"{source.name}; give one of them")
            seen[(target, suite)] = source
            for key, protocol in protocols.items():
                wanted = chosen.get(key)
                if (wanted is not None and suite != wanted) or (wanted is None and meta["protocol"] != protocol):
                    continue
                if key in mine:
                    other_source, other = mine[key]
                    raise ConfigError(
                        f"target {target}: suites {other} ({other_source.name}) and {suite} ({source.name}) could both "
                        f"fill the {key} column; choose one with --suite {key}=NAME"
                    )
                mine[key] = (source, suite)
    return out


def build_dymt(sources: list[Source], turn: int = 5, chosen: dict[str, str] | None = None, pairs: str = "all") -> Document:
    doc = Document("dymt", [], [])
    by_target = _suites_by_target(sources, chosen or {})
    specs: dict[str, set] = {}
    for source in sources:
        spec = source.data["models"]["target"]
        specs.setdefault(target_of(source), set()).add(
            (spec.get("base_url"), json.dumps(spec.get("params"), sort_keys=True), spec.get("checkpoint")))
    columns = [Column(key, heading + (f" @{turn}" if "@T" in metric else ""), metric.replace("@T", f"@{turn}"))
               for key, heading, _, metric in DYMT_COLUMNS]
    main = Table(f"DyMT: bias, coherence and refusal per target (cumulative bias through turn {turn})", "Target",
                 columns, [])
    origin: dict = {}
    for target, suites in by_target.items():
        target_notes = []
        if len(specs[target]) > 1:
            target_notes.append(doc.note(f"{target}: its reports reached the target at different endpoints, "
                                         f"parameters or checkpoints ({', '.join(sorted(str(s) for s in specs[target]))})"))
        cells: dict[str, Cell | None] = {}
        for column in columns:
            suite_key = column.key if column.key in SUITE_KEYS else "dymt"
            found = suites.get(suite_key)
            if found is None:
                cells[column.key] = None
                main.missing[(target, column.key)] = f"no {suite_key} suite among this target's reports"
                continue
            cell = _cell(doc, found[0], found[1], column.metric)
            if cell is None:
                main.missing[(target, column.key)] = f"{found[0].name}: suite {found[1]} has no {column.metric} row"
            else:
                cell.notes[:0] = target_notes
                origin[(target, column.key)] = found
            cells[column.key] = cell
        main.rows.append((target, cells))
    _flag_mismatches(doc, main, origin)
    doc.tables.append(main)
    doc.tables.append(_rise_table(doc, by_target))
    doc.pairs = _dymt_pairs(doc, main, by_target, pairs)
    return doc


def _rise_table(doc: Document, by_target: dict) -> Table:
    """Per target and category, the share first biased in turns 6-10 (= cumulative bias @10
    minus @5 over the same dialogues), from 10-turn DyMT runs."""
    categories: list[str] = []
    for suites in by_target.values():
        if "dymt" in suites:
            source, suite = suites["dymt"]
            for row in source.data["metrics"]:
                if row["suite"] == suite and row["metric"] == RISE and row["category"] and row["category"] not in categories:
                    categories.append(row["category"])
    columns = [Column(c, c, RISE) for c in sorted(categories)] + [Column("all", "all", RISE)]
    table = Table("DyMT: rise of cumulative bias from turn 5 to turn 10, per category (share first biased in turns 6-10)",
                  "Target", columns, [])
    origin: dict = {}
    for target, suites in by_target.items():
        cells: dict[str, Cell | None] = {}
        found = suites.get("dymt")
        for column in columns:
            cell = None
            if found is not None:
                cell = _cell(doc, found[0], found[1], RISE, None if column.key == "all" else column.key)
            if cell is None:
                table.missing[(target, column.key)] = _why_no_rise(found, column.key)
            else:
                origin[(target, column.key)] = found
            cells[column.key] = cell
        table.rows.append((target, cells))
    _flag_mismatches(doc, table, origin)
    return table


def _why_no_rise(found: tuple | None, category: str) -> str:
    if found is None:
        return "no dymt suite among this target's reports"
    source, suite = found
    if source.metric(suite, RISE) is None:
        return f"{source.name}: suite {suite} has no {RISE} rows (it needs 10-turn dialogues: --socialbias-turns=10)"
    return f"{source.name}: suite {suite} has no dialogue of category {category}"


def _dymt_pairs(doc: Document, main: Table, by_target: dict, pairs: str) -> list[Pair]:
    columns = [c for c in main.columns if is_comparable(c.metric)] + [Column("rise", "Rise 5->10", RISE)]
    out = []
    for first, second in _row_pairs([label for label, _ in main.rows], pairs):
        wanted = []
        for column in columns:
            suite_key = column.key if column.key in SUITE_KEYS else "dymt"
            wanted.append((column, by_target[first].get(suite_key), by_target[second].get(suite_key), suite_key))
        out += _compare_pair(doc, first, second, wanted)
    return out


# --------------------------------------------------------------------------- pairing


def _renamed(records: list[dict], suite: str, detector: str | None = None) -> list[dict]:
    """Records under one suite name (and, for a detector, its detections under one key),
    so the two sides of a pair share their case keys."""
    out = []
    for record in records:
        renamed = {**record, "suite": suite}
        if detector is not None:
            found = (record.get("detections") or {}).get(detector)
            renamed["detections"] = {"row": found} if found is not None else {}
        out.append(renamed)
    return out


def _compare_pair(doc: Document, first: str, second: str, wanted: list) -> list[Pair]:
    """One family per pair of rows: every column whose cases match, Holm-adjusted together
    (compare.compare, with the rows as gating rows: the same tests a no_regression gate runs).
    ``wanted``: (column, (source, suite[, detector, variant]) or None, the same, kind)."""
    from .compare import Comparison, compare

    pairs, rows, first_records, second_records = [], [], [], []
    for column, a, b, key in wanted:
        pair = Pair(first, second, column.heading, column.metric, None)
        pairs.append(pair)
        if a is None or b is None:
            pair.why_not = "a row has no such run"
            continue
        if a[0].data["suites"][a[1]]["sha256"] != b[0].data["suites"][b[1]]["sha256"]:
            pair.why_not = "the suite files differ (sha256): their cases do not match"
            continue
        detector = a[2] if len(a) > 2 else None
        style = a[3] if len(a) > 3 else None
        name = f"{key}:{column.key}"
        first_records += _renamed(a[0].cases(a[1]), name, detector)
        second_records += _renamed(b[0].cases(b[1]), name, b[2] if detector else None)
        for source, suite in (a[:2], b[:2]):
            pair.notes += [n for n in _run_notes(doc, source, suite) if n not in pair.notes]
        rows.append((pair, Comparison(name, column.metric, "row" if detector else None, style, gating=True)))
    if rows:
        done = compare(second_records, {"cases": first_records}, [c for _, c in rows], {})
        for (pair, _), result in zip(rows, done["rows"]):
            pair.result = result
            if not result["n_pairs"]:
                pair.why_not = "no case of one row pairs with a case of the other"
    return pairs


# --------------------------------------------------------------------------- the BenevDial detector layout

DETECT_COLUMNS = (
    ("accuracy", "Acc"), ("precision", "P"), ("recall", "R"), ("f1", "F1"),
    ("tr_n", "TR_N"), ("tr_ob", "TR_OB"), ("tr_bb", "TR_BB"), ("gap_ob_bb", "OB-BB gap"),
    ("macro_f1", "Macro-F1"), ("detector_error_rate", "Unreadable"),
)


def _model_key(detector: str) -> str:
    base = detector.split("+", 1)[0]
    return "judge" if base in ("judge", "judge-1") else base


def _spec_text(spec: dict | None) -> str:
    return "?" if spec is None else f"{spec['provider']}:{spec['model']}"


def _detector_order(detector: str) -> tuple:
    """Judges (in --judge order), then their ensemble, then a guard; each without, then with demographics."""
    base, _, shown = detector.partition("+")
    kind = 2 if base.startswith("guard") else 1 if base.startswith("ensemble") else 0
    number_ = int(base.split("-", 1)[1]) if base.startswith("judge-") else 0
    return kind, number_, shown


def detector_label(source: Source, suite: str, detector: str) -> str:
    """A detector row's name: its model (an ensemble: its judges), and for judges the
    guidance level and whether they were shown the demographics (as the cases record)."""
    models = source.data["models"]
    entries = [c["detections"][detector] for c in source.cases(suite) if detector in (c.get("detections") or {})]
    if detector.startswith("ensemble"):
        judges = sorted((k for k in models if k == "judge" or k.startswith("judge-")), key=_detector_order)
        what = "ensemble of " + " + ".join(_spec_text(models[k]) for k in judges)
    elif detector.startswith("guard"):
        spec = models.get("guard")
        unit = sorted({e.get("unit") for e in entries if e.get("unit")})
        how = ([spec["kind"]] if spec and spec.get("kind") else []) + ([f"unit {', '.join(unit)}"] if unit else [])
        what = f"guard {_spec_text(spec)}" + (f" ({', '.join(how)})" if how else "")
    else:
        what = f"judge {_spec_text(models.get(_model_key(detector)))}"
    if not detector.startswith("guard"):
        guidance = sorted({str(e["guidance"]) for e in entries if "guidance" in e})
        shown = {bool(e.get("demographics")) for e in entries if "demographics" in e}
        what += f", {'/'.join(guidance) if guidance else 'guidance not recorded'}"
        if True in shown:
            what += ", with demographics"
    return what


def _row_pairs(labels: list[str], pairs: str) -> list[tuple[str, str]]:
    """Which rows are compared: every two (all), each with the first (first), none."""
    if pairs == "none":
        return []
    if pairs == "first":
        return [(labels[0], other) for other in labels[1:]]
    return [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]]


def build_detect(sources: list[Source], variant: str = "clean", pairs: str = "all") -> Document:
    doc = Document("benevdial-detect", [], [])
    columns = [Column(metric, heading, metric) for metric, heading in DETECT_COLUMNS]
    table = Table(f"BenevDial detection ({variant} dialogues; binary metrics with B = OB u BB; trigger rates per true class)",
                  "Detector", columns, [])
    origin: dict = {}
    places: dict[str, tuple] = {}  # row label -> (source, suite, detector, variant)
    suites_named = {suite for s in sources for suite, meta in s.data["suites"].items() if meta["protocol"] == "benevdial_detect"}
    for source in sources:
        detect_suites = [s for s, meta in sorted(source.data["suites"].items()) if meta["protocol"] == "benevdial_detect"]
        if not detect_suites:
            raise ConfigError(f"{source.name}: no detector suite (protocol benevdial_detect) in this report; the "
                              "benevdial-detect layout reads detector runs; use --layout dymt for target runs")
        for suite in detect_suites:
            detectors = sorted({row["category"] for row in source.data["metrics"]
                                if row["suite"] == suite and row["category"] and row["style"] == variant},
                               key=_detector_order)
            if not detectors:
                raise ConfigError(f"{source.name}: suite {suite} has no rows of variant {variant!r}; choose one it ran "
                                  "with --variant")
            for detector in detectors:
                label = detector_label(source, suite, detector) + (f" [{suite}]" if len(suites_named) > 1 else "")
                if label in places:
                    raise ConfigError(f"{label}: measured in two reports ({places[label][0].name} and {source.name}); "
                                      "give one of them")
                places[label] = (source, suite, detector, variant)
                cells = {}
                for column in columns:
                    cell = _cell(doc, source, suite, column.metric, detector, variant)
                    cells[column.key] = cell
                    if cell is None:
                        table.missing[(label, column.key)] = "not available for a detector that only flags"
                    else:
                        origin[(label, column.key)] = (source, suite)
                table.rows.append((label, cells))
    _flag_mismatches(doc, table, origin, models=False)  # the judges and guards are what the rows compare
    doc.tables.append(table)
    comparable = [c for c in columns if is_comparable(c.metric)]
    for first, second in _row_pairs([label for label, _ in table.rows], pairs):
        a, b = places[first], places[second]
        doc.pairs += _compare_pair(doc, first, second, [(c, a, b, "detect") for c in comparable])
    return doc


# --------------------------------------------------------------------------- rendering


def cell_text(cell: Cell | None, missing: str = "-") -> str:
    if cell is None:
        return missing
    if cell.value is None:
        return f"{missing} n={cell.n}"
    return f"{_value(cell)} {interval(cell.ci_low, cell.ci_high, cell.metric)} n={cell.n}"


def _value(cell: Cell) -> str:
    if cell.metric == "gap_ob_bb":  # a signed difference of two shares
        return difference(cell.value, cell.metric, unit=False)
    text = number(cell.value, cell.metric)
    return text[:-1] if is_percent(cell.metric) else text  # percent: the heading says so


def _marks(notes: list[int]) -> str:
    return ",".join(str(n) for n in sorted(set(notes)))


def verdict_text(pair: Pair) -> str:
    """What the paired tests found, in the second row's terms."""
    if pair.result is None or pair.why_not:
        return f"not compared: {pair.why_not}"
    verdict = pair.result["verdict"]
    if verdict == "regressed":
        return f"{pair.second} worse"
    if verdict == "improved":
        return f"{pair.second} better"
    return "no significant difference"


def _pair_cells(pair: Pair) -> list[str]:
    r = pair.result or {}
    diff = difference(r.get("diff"), pair.metric, unit=False)
    ci = interval(r.get("diff_low"), r.get("diff_high"), pair.metric)
    return [
        f"{pair.first} vs {pair.second}", pair.column, str(r.get("n_pairs", 0)),
        "-" if r.get("diff") is None else f"{diff} {ci}",
        p_value(r.get("p_adjusted")), p_value(r.get("p_improvement_adjusted")),
        verdict_text(pair), r.get("method") or "-",
    ]


PAIR_HEADINGS = ["Rows (A vs B)", "Column", "Pairs", "B - A [95% CI]", "p B worse (Holm)", "p B better (Holm)",
                 "Verdict", "Test"]
PAIRS_TITLE = ("Pairwise: the paired tests of the no_regression gates on the cases both rows ran "
               "(percentage points for rates; Holm over the columns of each pair of rows)")


def _heading(column: Column) -> str:
    return column.heading + (" (%)" if is_percent(column.metric) else "")


def render_markdown(doc: Document) -> str:
    out = []
    for table in doc.tables:
        out += [f"## {table.title}", "", "| " + " | ".join([table.corner] + [_heading(c) for c in table.columns]) + " |",
                "|" + "---|" * (len(table.columns) + 1)]
        for label, cells in table.rows:
            texts = []
            for column in table.columns:
                cell = cells.get(column.key)
                text = cell_text(cell)
                if cell is not None and cell.notes:
                    text += f" !{_marks(cell.notes)}"
                texts.append(_md(text))
            out.append("| " + " | ".join([_md(label)] + texts) + " |")
        out += [""] + _missing_lines(table) + ([""] if table.missing else [])
    if doc.pairs:
        out += [f"## {PAIRS_TITLE}", "", "| " + " | ".join(PAIR_HEADINGS) + " |", "|" + "---|" * len(PAIR_HEADINGS)]
        for pair in doc.pairs:
            cells = _pair_cells(pair)
            if pair.notes:
                cells[2] += f" !{_marks(pair.notes)}"
            out.append("| " + " | ".join(_md(c) for c in cells) + " |")
        out.append("")
    out += _note_lines(doc)
    return "\n".join(out).rstrip() + "\n"


def _md(text: str) -> str:
    """Text in a Markdown table cell: a pipe would end the cell, a line break the row."""
    return " ".join(text.splitlines()).replace("|", "\\|")


def _missing_lines(table: Table) -> list[str]:
    headings = {c.key: c.heading for c in table.columns}
    return [f"- {label}, {headings[key]}: empty, {why}" for (label, key), why in table.missing.items()]


def _note_lines(doc: Document) -> list[str]:
    lines = ["Cells: value [95% interval] n (the report's own interval and denominator); !k: see note k."]
    if doc.notes:
        lines += ["", "Notes:", ""] + [f"{i}. {text}" for i, text in enumerate(doc.notes, start=1)]
    return lines


def render_csv(doc: Document) -> str:
    """One line per cell and per paired comparison, values as the reports hold them
    (shares as fractions)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["table", "row", "column", "metric", "value", "ci_low", "ci_high", "n", "p_worse_holm",
                     "p_better_holm", "verdict", "notes"])
    for table in doc.tables:
        for label, cells in table.rows:
            for column in table.columns:
                cell = cells.get(column.key)
                if cell is None:
                    writer.writerow([table.title, label, column.heading, column.metric, "", "", "", "", "", "", "",
                                     table.missing.get((label, column.key), "")])
                    continue
                writer.writerow([table.title, label, column.heading, cell.metric, _raw(cell.value), _raw(cell.ci_low),
                                 _raw(cell.ci_high), cell.n, "", "", "", " | ".join(doc.notes[n - 1] for n in cell.notes)])
    for pair in doc.pairs:
        r = pair.result or {}
        writer.writerow(["pairwise", f"{pair.first} vs {pair.second}", pair.column, pair.metric, _raw(r.get("diff")),
                         _raw(r.get("diff_low")), _raw(r.get("diff_high")), r.get("n_pairs", 0),
                         _raw(r.get("p_adjusted")), _raw(r.get("p_improvement_adjusted")), verdict_text(pair),
                         " | ".join(doc.notes[n - 1] for n in pair.notes)])
    return buffer.getvalue()


def _raw(value) -> str:
    return "" if value is None else repr(value)


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\n": " ", "\r": " "}


def _tex(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in text)


def render_latex(doc: Document) -> str:
    """booktabs tables (\\usepackage{booktabs}); notes as numbered superscripts."""
    out = []
    for table in doc.tables + ([None] if doc.pairs else []):
        if table is None:
            headings = PAIR_HEADINGS
            title = PAIRS_TITLE
            body = []
            for pair in doc.pairs:
                cells = [_tex(c) for c in _pair_cells(pair)]
                if pair.notes:
                    cells[2] += f"$^{{{_marks(pair.notes)}}}$"
                body.append(" & ".join(cells) + r" \\")
        else:
            headings = [table.corner] + [_heading(c) for c in table.columns]
            title = table.title
            body = []
            for label, cells in table.rows:
                texts = [_tex(label)]
                for column in table.columns:
                    cell = cells.get(column.key)
                    if cell is None or cell.value is None:
                        text = "--" if cell is None else f"-- {{\\scriptsize n={cell.n}}}"
                    else:
                        text = (f"{_value(cell)} {{\\scriptsize {interval(cell.ci_low, cell.ci_high, cell.metric)}}} "
                                f"{{\\scriptsize n={cell.n}}}")
                    if cell is not None and cell.notes:
                        text += f"$^{{{_marks(cell.notes)}}}$"
                    texts.append(text)
                body.append(" & ".join(texts) + r" \\")
            body += ["% " + _tex(line[2:]) for line in _missing_lines(table)]  # why a cell is empty
        out += [f"% {_tex(title)}", r"\begin{table}[t]", r"\centering", r"\small",
                r"\begin{tabular}{l" + "c" * (len(headings) - 1) + "}", r"\toprule",
                " & ".join(_tex(h) for h in headings) + r" \\", r"\midrule", *body, r"\bottomrule", r"\end{tabular}",
                f"\\caption{{{_tex(title)}}}", r"\end{table}", ""]
    out += ["% " + _tex(line) for line in _note_lines(doc) if line]
    return "\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1b1b1b}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #ccc;padding:.35rem .6rem;vertical-align:top}
th{background:#f3f3f3;text-align:left}tr>th:first-child{min-width:14em;max-width:26em}
td.c{text-align:center;white-space:nowrap}td.d{white-space:nowrap}.wide{overflow-x:auto}
.v{font-weight:600}.ci{color:#555;font-size:.85em}.n{color:#777;font-size:.8em}
sup a{color:#b00020;text-decoration:none;font-weight:600}.empty{color:#999}
.worse{color:#b00020;font-weight:600}.better{color:#0a6b2d;font-weight:600}
ol li{margin:.2rem 0}.legend{color:#555}"""


def render_html(doc: Document) -> str:
    esc = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>pytest-socialbias table ({esc(doc.layout)})</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>pytest-socialbias: {esc(doc.layout)} table</h1>",
             ('<p class="legend">Each cell: value, its 95% interval and n, as the report holds them; a red mark '
              "points to a note below.</p>")]

    def marks(notes):
        if not notes:
            return ""
        return "<sup>" + ",".join(f'<a href="#note-{n}">{n}</a>' for n in sorted(set(notes))) + "</sup>"

    for table in doc.tables:
        parts.append(f'<h2>{esc(table.title)}</h2><div class="wide"><table><tr><th>{esc(table.corner)}</th>'
                     + "".join(f"<th>{esc(_heading(c))}</th>" for c in table.columns) + "</tr>")
        for label, cells in table.rows:
            row = [f"<th>{esc(label)}</th>"]
            for column in table.columns:
                cell = cells.get(column.key)
                if cell is None:
                    why = table.missing.get((label, column.key), "")
                    row.append(f'<td class="c empty" title="{esc(why)}">&ndash;</td>')
                    continue
                if cell.value is None:
                    row.append(f'<td class="c empty">&ndash; <span class="n">n={cell.n}</span>{marks(cell.notes)}</td>')
                    continue
                row.append(f'<td class="c"><span class="v">{esc(_value(cell))}</span>{marks(cell.notes)}<br>'
                           f'<span class="ci">{esc(interval(cell.ci_low, cell.ci_high, cell.metric))}</span> '
                           f'<span class="n">n={cell.n}</span></td>')
            parts.append("<tr>" + "".join(row) + "</tr>")
        parts.append("</table></div>")
        if table.missing:
            parts.append("<ul>" + "".join(f"<li>{esc(line[2:])}</li>" for line in _missing_lines(table)) + "</ul>")
    if doc.pairs:
        parts.append(f"<h2>{esc(PAIRS_TITLE)}</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in PAIR_HEADINGS)
                     + "</tr>")
        for pair in doc.pairs:
            cells = _pair_cells(pair)
            verdict = cells[6]
            css = "worse" if verdict.endswith(" worse") else "better" if verdict.endswith(" better") else ""
            row = [esc(c) for c in cells]
            row[2] += marks(pair.notes)
            row[6] = f'<span class="{css}">{row[6]}</span>' if css else row[6]
            parts.append("<tr>" + "".join(f'<td class="d">{c}</td>' if i in (3, 4, 5) else f"<td>{c}</td>"
                                          for i, c in enumerate(row)) + "</tr>")
        parts.append("</table>")
    if doc.notes:
        parts.append("<h2>Notes</h2><ol>" + "".join(f'<li id="note-{i}">{esc(t)}</li>'
                                                    for i, t in enumerate(doc.notes, start=1)) + "</ol>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


RENDERERS = {"markdown": render_markdown, "csv": render_csv, "latex": render_latex, "html": render_html}


# --------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json",
                        help="JSON reports (--socialbias-report); a target's suites may come from several")
    parser.add_argument("--layout", choices=LAYOUTS, default="dymt",
                        help="dymt: a row per target (zero-shot, scripted and DyMT bias, coherence, refusal; the rise "
                        "from turn 5 to 10 per category); benevdial-detect: a row per detector (accuracy, precision, "
                        "recall, F1, TR_N/OB/BB, OB-BB gap, macro-F1, unreadable) (default dymt)")
    parser.add_argument("--format", choices=FORMATS, default="markdown", dest="fmt",
                        help="output format (default markdown; html is a standalone page); csv holds one line per "
                        "cell and per comparison, with the values as the reports hold them (shares as fractions)")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of standard output")
    parser.add_argument("--turn", type=int, default=5, metavar="T",
                        help="dymt: cumulative bias through this turn for the scripted and DyMT columns (default 5)")
    parser.add_argument("--suite", action="append", default=[], metavar="COLUMN=NAME", dest="suites",
                        help="dymt: the suite (by name) that fills a column (zeroshot, fairmt, dymt; DyMT's coherence, "
                        "refusal and rise come from the dymt one), needed where a target's reports hold several suites "
                        "of the column's protocol, e.g. --suite fairmt=fairmt --suite dymt=dymt-fairmt")
    parser.add_argument("--variant", default="clean", metavar="NAME",
                        help="benevdial-detect: the variant the rows show (default clean)")
    parser.add_argument("--pairs", choices=PAIRINGS, default="all",
                        help="which rows are compared with the paired tests: every two (all, the default), each with "
                        "the first row (first), or none")


def _chosen(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, name = value.partition("=")
        if not sep or key not in SUITE_KEYS or not name:
            raise ConfigError(f"--suite {value}: give COLUMN=NAME with COLUMN one of {', '.join(SUITE_KEYS)}")
        out[key] = name
    return out


def build(args: argparse.Namespace) -> Document:
    sources = load_reports(list(args.reports))
    if args.layout == "dymt":
        if args.turn < 1:
            raise ConfigError(f"--turn {args.turn}: give a turn number from 1")
        return build_dymt(sources, args.turn, _chosen(args.suites), args.pairs)
    return build_detect(sources, args.variant, args.pairs)


def run(args: argparse.Namespace) -> int:
    from .files import write_atomically

    text = RENDERERS[args.fmt](build(args))
    if args.output is None:
        print(text, end="")
        return 0
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(args.output, text)
    except OSError as exc:
        raise ConfigError(f"-o {args.output}: not written ({exc.strerror or exc})") from None
    print(f"{args.layout} table ({args.fmt}) written to {args.output}")
    return 0
