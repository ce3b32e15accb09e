"""The aggregating side of a run: records in, one frozen RunResult out.

Registered only on the process that reports (the xdist controller, or the only process),
the way pytest-cov splits its roles. Records arrive from every case's report; once all
cases have run, ``aggregate`` computes the metrics, asks the judge about the reference
labels (``--socialbias-judge-check``), compares with the baseline report
(``--socialbias-baseline``), summarises detector suites and checks the gates.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from .errors import ConfigError
from .files import shown_path
from .gates import Gate, evaluate, load_ungated, ungated_suites
from .metrics import compute_metrics, detection_summary, metric_sort_key, unavailable_metrics
from .models import UsageCounter
from .result import RunResult
from .vocabulary import JUDGE_CHECK_SUITE


class Aggregator:
    def __init__(self, settings, models, gates: list[Gate], gates_file: Path | None = None):
        """Loads what the aggregation will need (baseline report, reference labels) now,
        so a bad file is a usage error before any case runs."""
        self.settings = settings
        self.models = models
        self.gates = gates
        self.gates_file = gates_file  # the thresholds file read, None when none was found
        self.skipped_gates: list[Gate] = []  # of suites the project lacks (--socialbias-gates-for=present)
        self.skipped_hints: dict[str, str] = {}  # a skipped gate's suite -> " (did you mean 'X'?)" when near one
        # The thresholds file's bytes as this run read them (it may change before the report).
        self.gates_file_sha256 = hashlib.sha256(gates_file.read_bytes()).hexdigest() if gates_file is not None else None
        self.partial = False  # set when the run stopped early (-x, --maxfail)
        # The selection options that can leave out cases (-k, -m, --lf, node ids, ...),
        # as the user wrote them: named when the run selected only part of a suite.
        self.selection_filters: list[str] = []
        # Suites run on purpose with no gate (the thresholds file's ungated:), -> why.
        self.declared_ungated = load_ungated(gates_file) if gates_file is not None else {}
        both = sorted({gate.suite for gate in gates} & set(self.declared_ungated))
        if both:
            raise ConfigError(f"{gates_file}: ungated: names suite(s) that gates name too: {', '.join(both)}; "
                              "remove them from ungated: or remove their gates")
        self.records: list[dict] = []
        self.notes: list[str] = []
        # Suite name -> {"path": suite file, "cases": cases in it}: for snapshots.
        self.suite_files: dict[str, dict] = {}
        self.baseline: dict | None = None
        self.judge_reference: list[dict] | None = None
        self.judge_check_usage = UsageCounter()
        # (shown path, reference items, the judge's answers): asked by ask_judge, or given
        # by combine from the partial file of the shard that asked them.
        self.judge_answers: tuple | None = None
        self.dry_plan: dict | None = None  # --socialbias-dry-run: calls and tokens per role
        # What the in-process batchers gathered (models/batchstats.py): an entry per
        # process, from the xdist workers (workeroutput) or the shards' partial files;
        # this process's own is read when the report is made.
        self.batch_entries: list[dict] = []
        self.concurrency = getattr(settings, "concurrency", None)  # calls in flight per process
        if settings.baseline_report is not None:
            from .compare import load_baseline

            self.baseline = load_baseline(settings.baseline_report)
        if settings.judge_check is not None:
            from .judgecheck import load_reference

            self.judge_reference = load_reference(settings.judge_check)
            if "judge" not in models.specs and not models.uses_local_default:
                raise ConfigError("--socialbias-judge-check needs a judge: pass --judge=PROVIDER:MODEL")

    def skip_gates(self, skipped: list[Gate]) -> None:
        """The gates of suites this project lacks (--socialbias-gates-for=present), kept
        apart and named in a note."""
        self.skipped_gates = list(skipped)
        if skipped:
            self.note(
                f"{len(skipped)} gate(s) of suites this project does not have were skipped "
                f"(--socialbias-gates-for=present): {', '.join(gate.name for gate in skipped)}"
            )

    def name_local_models(self) -> None:
        """Under xdist only the workers collected, so only they switched to the embedded
        model: this process's report and warnings must say so too. The cases ran, so the
        results stand; when the models cannot be named, a note says why."""
        if self.models.uses_local_default and "target" not in self.models.specs:
            try:
                self.models.use_local_default()
            except ConfigError as exc:
                self.note(f"the report's models are unknown: {exc}")

    def batching(self) -> list[dict]:
        """Every process's batch counts: those handed over, and this process's own."""
        from .models.batchstats import process_entry

        own = process_entry(self.models) if hasattr(self.models, "batch_stats") else None
        return self.batch_entries + ([own] if own else [])

    def add(self, record: dict) -> None:
        self.records.append(record)

    def note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def aggregate(self, snapshots=None, failures_before: int = 0) -> RunResult:
        """The run's one complete result: metrics, judge check, comparison, detection
        summary, gate verdicts, the snapshot comparison (``snapshots(records, metrics)``:
        snapshots.check_snapshots bound to the session, or None without syrupy) and the
        exit status (1 when the results fail the run or ``failures_before`` items failed)."""
        self.name_local_models()
        records = sorted(self.records, key=lambda r: (r["suite"], r["id"], r.get("style") or ""))
        metrics = compute_metrics(records)
        judge_check = None
        if self.judge_answers is None and self.judge_reference is not None:
            self.judge_answers = self.ask_judge()
        if self.judge_answers is not None:
            from .judgecheck import summarize

            judge_check, rows = summarize(*self.judge_answers, metrics)
            metrics = sorted(metrics + rows, key=metric_sort_key)
        comparison = None
        models = self.models.spec_dicts()
        for role, adapted in _adaptations(records).items():
            if role in models:
                models[role]["adapted"] = adapted
        from .models.batchstats import summarize

        summarize(models, self.batching(), self.concurrency)  # timing-dependent: see batchstats.py
        if self.baseline is not None:
            from .compare import compare, rows_for
            from .report.json_report import run_metadata

            comparison = {
                "baseline": shown_path(self.settings.baseline_report),
                **compare(records, self.baseline, rows_for(self.gates, records), run_metadata(models, records)),
            }
        from .options import NO_BASELINE

        ran: dict = {JUDGE_CHECK_SUITE: {}} if judge_check is not None else {}
        for record in records:
            scope = ran.setdefault(record["suite"], {"categories": set(), "styles": set()})
            scope["categories"].add(record.get("category"))
            scope["styles"].add(record.get("style"))
        verdicts = evaluate(
            self.gates, metrics, comparison, ran=ran, evidence=evidence_by_suite(records),
            no_baseline_yet=self.settings.baseline == NO_BASELINE, unavailable=unavailable_metrics(records),
            turns=turns_by_suite(records),
        )
        ungated = ungated_suites(self.gates + self.skipped_gates, ran, self.declared_ungated) if self.gates_file else []
        result = RunResult(
            models=models,
            records=tuple(records),
            metrics=tuple(metrics),
            gates=tuple(verdicts),
            warnings=tuple(self.models.warnings),
            notes=tuple(self.notes),
            comparison=comparison,
            judge_check=judge_check,
            judge_check_usage=self.judge_check_usage.to_dict(),
            detection=detection_summary(records),
            report_path=self.settings.report,
            html_path=self.settings.html,
            gates_file=shown_path(self.gates_file) if self.gates_file is not None else None,
            gates_file_sha256=self.gates_file_sha256,
            gates_looked_for=shown_path(self.settings.thresholds_file),
            partial=bool(self.partial_reasons(records)),
            partial_reasons=tuple(self.partial_reasons(records)),
            partial_allowed=bool(getattr(self.settings, "allow_partial", False)),
            ungated=tuple(s for s in ungated if s != JUDGE_CHECK_SUITE),
            declared_ungated={k: v for k, v in self.declared_ungated.items() if k in ran},
            strict=bool(self.settings.strict),
            snapshots=snapshots(records, metrics) if snapshots is not None else None,
        )
        return dataclasses.replace(result, exit_status=1 if failures_before or result.failed else 0)

    def power_forecast(self, cases) -> list[str]:
        """Before anything is paid for (the dry run): the no_regression gates that could not
        decide with the pairs this run would give, if its cases came out as the baseline's
        did (the baseline's cases among those planned, compared with themselves)."""
        from .compare import compare, rows_for
        from .gates import NO_REGRESSION

        regression = [gate for gate in self.gates if gate.kind == NO_REGRESSION]
        if self.baseline is None or not regression:
            return []
        planned = {(case.suite, case.id, case.style or "") for case in cases}
        records = [r for r in self.baseline["cases"] if (r["suite"], r["id"], r.get("style") or "") in planned]
        comparison = compare(records, self.baseline, rows_for(regression, records), {})
        ran = {r["suite"] for r in records}
        out = []
        for verdict in evaluate(regression, [], comparison, ran=ran):
            if (verdict["detail"] or "").startswith("cannot decide"):
                out.append(f"gate {verdict['gate']} would not decide with the cases planned (if they came out as in "
                           f"the baseline): {verdict['detail'].split('; a gate that cannot decide')[0]}")
        return out

    def partial_reasons(self, records) -> list[str]:
        """Why this run measured only part of its suites' cases, in words (empty: all of
        them). A suite file is counted whole by its collector; a case with no record was
        left out by a selection option or by stopping early. A suite none of whose cases
        was selected is not run here (its gates are not evaluated), as if not named."""
        reasons = ["stopped early (-x / --maxfail)"] if self.partial else []
        ran: dict[str, int] = {}
        for record in records:
            ran[record["suite"]] = ran.get(record["suite"], 0) + 1
        short = [f"{suite}: {ran.get(suite, 0)} of {info['cases']} case(s)"
                 for suite, info in sorted(self.suite_files.items()) if 0 < ran.get(suite, 0) < info.get("cases", 0)]
        if short:
            how = f" (selected with {' '.join(self.selection_filters)})" if self.selection_filters else ""
            reasons.append("selected only part of the collected suites' cases" + how + ": " + "; ".join(short))
        return reasons

    def ask_judge(self) -> tuple | None:
        """Label the reference replies with this run's judge: (shown path, items, answers),
        or None (and a note) when the judge cannot be asked."""
        from .judgecheck import BUILTIN_REFERENCE, BUILTIN_REFERENCE_PATH, judge_items

        try:
            answers = self.models.run(judge_items(
                self.models.model("judge"), self.judge_reference, self.judge_check_usage, self.settings.guidance,
            ))
        except ConfigError as exc:
            self.note(f"judge check not run: {exc}")
            return None
        path = self.settings.judge_check
        shown = BUILTIN_REFERENCE if path == BUILTIN_REFERENCE_PATH else shown_path(path)
        return shown, self.judge_reference, answers


def turns_by_suite(records) -> dict:
    """Suite -> the most turns its dialogues were run for (a record's ``turns_planned``,
    else the turns it has)."""
    out: dict[str, int] = {}
    for record in records:
        planned = record.get("turns_planned") or len(record.get("turns") or [])
        out[record["suite"]] = max(out.get(record["suite"], 0), planned)
    return out


def evidence_by_suite(records) -> dict:
    """Suite -> what its cases gave, in words, for a gate that got no number: how many
    were labelled, and the errors of the others by kind."""
    out = {}
    by_suite: dict[str, list] = {}
    for record in records:
        by_suite.setdefault(record["suite"], []).append(record)
    for suite, items in by_suite.items():
        errored = [r for r in items if r.get("outcome") == "error"]
        kinds: dict[str, int] = {}
        for record in errored:
            for kind in sorted({e.get("kind", "error") for e in record.get("errors", [])}):
                kinds[kind] = kinds.get(kind, 0) + 1
        text = f"{len(items) - len(errored)} of {len(items)} case(s) labelled"
        if errored:
            text += "; the others had " + ", ".join(f"{kind} ({count})" for kind, count in sorted(kinds.items()))
        out[suite] = text
    return out


def _adaptations(records) -> dict:
    """Role -> what its endpoint was adapted to, merged over every record (models/adapt.py)."""
    from .models.adapt import merge

    found: dict[str, list] = {}
    for record in records:
        for role, adapted in (record.get("adapted") or {}).items():
            found.setdefault(role, []).append(adapted)
    return {role: merge(items) for role, items in found.items()}
