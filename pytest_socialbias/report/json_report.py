"""The JSON report: deterministic (sorted keys, sorted cases, no timings, no cache counts).

A replayed run (``--socialbias-record=none``) and runs with ``-n 0``, ``-n 2`` or
``-p no:xdist`` give the same file for the same answers. One exception: the batch
statistics of in-process models (``models.ROLE.batching`` of ``hf:`` and ``hfcls:``
roles, models/batchstats.py) depend on how calls gathered in time; nothing compares them.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import __version__
from ..metrics import outcome_counts, simulator_findings, simulator_summary

REPORT_FORMAT = 1

#: Record fields that go into the report's ``cases`` (``usage`` counts cache hits, which
#: differ between a first and a replayed run, so it stays in the terminal summary only).
CASE_FIELDS = (
    "id", "suite", "protocol", "category", "group", "statement", "style", "outcome", "labels", "errors", "turns",
    "turns_planned", "role_breaks", "simulator", "guard",
)


def run_metadata(models: dict, records) -> dict:
    """What makes two runs comparable: models, prompt templates, suite files."""
    return {
        "models": dict(sorted(models.items())),
        "prompt_templates": sorted({t for record in records for t in record.get("templates", [])}),
        "suites": suite_metadata(records),
    }


#: BenevDial record fields, in the report only for the cases that have them.
BENEVDIAL_FIELDS = (
    "role", "need", "profile", "persona", "treatment", "pair",
    "truth", "variant", "primary", "detections", "user", "agent",
)


def build_report(result) -> dict:
    """The report of a RunResult (result.py), as the JSON file holds it."""
    cases = [
        {**{k: record.get(k) for k in CASE_FIELDS}, **{k: record[k] for k in BENEVDIAL_FIELDS if k in record}}
        for record in result.records
    ]
    warnings = list(result.warnings)
    if result.comparison is not None:
        warnings += [f"baseline comparison: {w}" for w in result.comparison["warnings"]]
    report = {
        "format": REPORT_FORMAT,
        "plugin_version": __version__,
        **run_metadata(result.models, result.records),
        "summary": {
            "cases": len(cases),
            "outcomes": outcome_counts(result.records),
            "verdict": "fail" if result.failed else "pass",
            "gates_file": result.gates_file,
            "gates_file_sha256": result.gates_file_sha256,
            "partial": result.partial,
            "partial_reasons": list(result.partial_reasons),
            "partial_allowed": result.partial_allowed,
            "ungated_suites": list(result.ungated),
            "declared_ungated": dict(sorted(result.declared_ungated.items())),
            **({"exit_status": result.exit_status} if result.exit_status is not None else {}),
        },
        "warnings": warnings,
        "notes": sorted(result.notes),
        "cases": cases,
        "metrics": list(result.metrics),
        "gates": list(result.gates),
    }
    simulated = simulator_summary(result.records)
    if simulated:
        report["simulator"] = simulated
    findings = simulator_findings(result.records)
    if findings:
        report["simulator_findings"] = findings
    if result.comparison is not None:
        report["comparison"] = result.comparison
    if result.judge_check is not None:
        report["judge_check"] = result.judge_check
    if result.detection is not None:
        report["detection"] = result.detection
    if result.snapshots is not None and (result.snapshots.checked or result.snapshots.stale):
        report["snapshots"] = result.snapshots.to_dict()
    return report


def suite_metadata(records: list[dict]) -> dict:
    """Per suite: protocol, the sha256 of its suite (and seeds) file, cases and seeds run,
    and the judge parameters (``judge_params:``) and preset (``preset:``) the suite set, if any."""
    suites: dict[str, dict] = {}
    for record in records:
        entry = suites.setdefault(
            record["suite"],
            {"protocol": record["protocol"], "sha256": record.get("suite_sha256") or "0" * 64, "cases": 0, "ids": set()},
        )
        entry["cases"] += 1
        entry["ids"].add(record["id"])
        if record.get("judge_params"):
            entry["judge_params"] = dict(sorted(record["judge_params"].items()))
        if record.get("preset"):
            entry["preset"] = record["preset"]
    out = {}
    for name, e in sorted(suites.items()):
        out[name] = {"protocol": e["protocol"], "sha256": e["sha256"], "cases": e["cases"], "seeds": len(e["ids"])}
        for key in ("judge_params", "preset"):
            if key in e:
                out[name][key] = e[key]
    return out


def validate_report(data: dict) -> None:
    """Raise jsonschema.ValidationError if ``data`` does not fit schemas/report.schema.json."""
    import jsonschema

    from ..files import load_schema

    jsonschema.Draft202012Validator(load_schema("report")).validate(data)


def write_json(report: dict, path: Path) -> None:
    from ..files import write_atomically

    write_atomically(path, json.dumps(report, sort_keys=True, indent=2, ensure_ascii=False) + "\n")
