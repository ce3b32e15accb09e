"""The JSON report: deterministic (sorted keys, sorted cases, no timings, no cache counts).

A replayed run (``--socialbias-record=none``) and runs with ``-n 0``, ``-n 2`` or
``-p no:xdist`` give the same file for the same answers.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import __version__
from ..metrics import outcome_counts

REPORT_FORMAT = 1

#: Record fields that go into the report's ``cases`` (``usage`` counts cache hits, which
#: differ between a first and a replayed run, so it stays in the terminal summary only).
CASE_FIELDS = (
    "id", "suite", "protocol", "category", "group", "style", "outcome", "labels", "errors", "turns",
    "turns_planned", "role_breaks", "guard",
)


def run_metadata(run) -> dict:
    """What makes two runs comparable: models, prompt templates, suite files."""
    return {
        "models": {role: spec.to_dict() for role, spec in sorted(run.specs.items())},
        "prompt_templates": sorted({t for record in run.records for t in record.get("templates", [])}),
        "suites": suite_metadata(run.records),
    }


#: BenevDial record fields, in the report only for the cases that have them.
BENEVDIAL_FIELDS = (
    "role", "need", "profile", "persona", "treatment", "pair",
    "truth", "variant", "primary", "detections", "user", "agent",
)


def build_report(run) -> dict:
    cases = [
        {**{k: record.get(k) for k in CASE_FIELDS}, **{k: record[k] for k in BENEVDIAL_FIELDS if k in record}}
        for record in run.records
    ]
    warnings = list(run.warnings)
    if run.comparison is not None:
        warnings += [f"baseline comparison: {w}" for w in run.comparison["warnings"]]
    report = {
        "format": REPORT_FORMAT,
        "plugin_version": __version__,
        **run_metadata(run),
        "summary": {"cases": len(cases), "outcomes": outcome_counts(run.records)},
        "warnings": warnings,
        "notes": sorted(run.notes),
        "cases": cases,
        "metrics": run.metrics,
        "gates": run.gate_results,
    }
    if run.comparison is not None:
        report["comparison"] = run.comparison
    if run.judge_check is not None:
        report["judge_check"] = run.judge_check
    if getattr(run, "detection", None) is not None:
        report["detection"] = run.detection
    if run.snapshots is not None and (run.snapshots.checked or run.snapshots.stale):
        report["snapshots"] = run.snapshots.to_dict()
    return report


def suite_metadata(records: list[dict]) -> dict:
    """Per suite: protocol, the sha256 of its suite (and seeds) file, cases and seeds run."""
    suites: dict[str, dict] = {}
    for record in records:
        entry = suites.setdefault(
            record["suite"],
            {"protocol": record["protocol"], "sha256": record.get("suite_sha256") or "0" * 64, "cases": 0, "ids": set()},
        )
        entry["cases"] += 1
        entry["ids"].add(record["id"])
    return {
        name: {"protocol": e["protocol"], "sha256": e["sha256"], "cases": e["cases"], "seeds": len(e["ids"])}
        for name, e in sorted(suites.items())
    }


def validate_report(data: dict) -> None:
    """Raise jsonschema.ValidationError if ``data`` does not fit schemas/report.schema.json."""
    import jsonschema

    from ..cases import load_schema

    jsonschema.Draft202012Validator(load_schema("report")).validate(data)


def write_report(run, path: Path) -> None:
    write_json(build_report(run), path)


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, sort_keys=True, indent=2, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
