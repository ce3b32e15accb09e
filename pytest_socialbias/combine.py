"""``python -m pytest_socialbias combine``: the shards' partial files (shards.py) put
back together into the report, comparison, gates and exit status a single run would
give. The parts are checked first: one plugin version, the same settings, models,
suites and selection, every shard once, no case twice, none lost. The records are
sorted by case before anything is computed, and every seed of a bootstrap is derived
from the suite and group (metrics.group_seed), never from which shard ran what, so the
numbers cannot tell how the run was split.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .errors import ConfigError
from .shards import read_partial, record_key


def check_parts(parts: list[tuple[Path, dict]]) -> None:
    """ConfigError naming the files when the parts are not the shards of one run: other
    plugin versions, settings, models, suites or selections; a shard missing or given
    twice; a case in two parts; cases missing from parts that did not stop early."""
    if not parts:
        raise ConfigError("combine: no partial files given")
    first_path, first = parts[0]
    for path, data in parts:
        if data["plugin_version"] != __version__:
            raise ConfigError(
                f"{path}: written by pytest-socialbias {data['plugin_version']}, this is {__version__}; "
                "combine with the version the shards ran"
            )
        for field, what in (("selection", "selected cases"), ("settings", "settings"), ("models", "models")):
            mine, theirs = _comparable(field, data[field]), _comparable(field, first[field])
            if mine != theirs:
                differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                detail = "; ".join(f"{k}: {theirs.get(k)!r} in {first_path}, {mine.get(k)!r} here" for k in differ[:3])
                raise ConfigError(f"{path}: not a shard of the same run as {first_path}: its {what} differ ({detail})")
        if data["shard"]["total"] != first["shard"]["total"]:
            raise ConfigError(f"{path}: shard {data['shard']['index']}/{data['shard']['total']}, but {first_path} "
                              f"is one of {first['shard']['total']}")
    seen: dict[int, Path] = {}
    for path, data in parts:
        index = data["shard"]["index"]
        if index in seen:
            raise ConfigError(f"shard {index}/{first['shard']['total']} given twice: {seen[index]} and {path}")
        seen[index] = path
    total = first["shard"]["total"]
    missing = [str(i) for i in range(1, total + 1) if i not in seen]
    if missing:
        raise ConfigError(f"combine: shard(s) {', '.join(missing)} of {total} missing; pass every shard's partial file")
    owner: dict[str, Path] = {}
    suites: dict[str, tuple[str, Path]] = {}
    for path, data in parts:
        for record in data["records"]:
            key = record_key(record)
            if key in owner:
                raise ConfigError(f"case {record['suite']}::{record['id']} is in two parts: {owner[key]} and {path}")
            owner[key] = path
        for suite, sha in data["suites"].items():
            if suite in suites and suites[suite][0] != sha:
                raise ConfigError(f"suite {suite}: its file differs between {suites[suite][1]} and {path} (sha256)")
            suites.setdefault(suite, (sha, path))
    expected = first["selection"]["cases"]
    if len(owner) != expected and not any(data["stopped_early"] for _, data in parts):
        raise ConfigError(
            f"combine: the parts hold {len(owner)} of the run's {expected} cases and none stopped early: "
            "a shard lost records; run the shard again"
        )


def _comparable(field: str, value: dict) -> dict:
    if field != "models":
        return value
    # What an endpoint was adapted to is learnt per process, batches are counted per
    # process; the spec is what must agree.
    return {role: {k: v for k, v in spec.items() if k not in ("adapted", "batching")} for role, spec in value.items()}


class PartModels:
    """The models of the shards' run, as the aggregation reads them (modelset.ModelSet's
    reporting side): their descriptions and warnings; combine calls no model."""

    uses_local_default = False

    def __init__(self, spec_dicts: dict, warnings: list):
        self._dicts = spec_dicts
        self.specs = dict(spec_dicts)
        self.warnings = list(warnings)

    def spec_dicts(self) -> dict:
        return copy.deepcopy(self._dicts)

    def use_local_default(self) -> None:
        return None


@dataclass(frozen=True)
class CombineOptions:
    parts: tuple
    report: Path | None = None
    html: Path | None = None
    junit: Path | None = None
    baseline: str | None = None
    thresholds: Path | None = None
    gates_for: str = "all"


def combine(options: CombineOptions):
    """The RunResult of the shards' run (and the problems writing its files): the same
    aggregation, gates and reports as a single run's, from every part's records."""
    from .aggregate import Aggregator
    from .options import NO_BASELINE, Settings
    from .preflight import check_gate_suites, load_thresholds

    parts = [(Path(p), read_partial(Path(p))) for p in options.parts]
    parts.sort(key=lambda part: part[1]["shard"]["index"])
    check_parts(parts)
    first = parts[0][1]
    root = Path.cwd()
    baseline = None
    if options.baseline is not None:
        baseline = NO_BASELINE if options.baseline == NO_BASELINE else Path(options.baseline)
        if baseline != NO_BASELINE and not baseline.exists():
            raise ConfigError(f"--baseline={options.baseline}: file not found; give the last accepted release's "
                              "JSON report, or `none` when there is none yet")
    settings = Settings(
        report=options.report, html=options.html, baseline=baseline, thresholds=options.thresholds,
        strict=bool(first["settings"].get("strict")), gates_for=options.gates_for, root=root,
        allow_partial=bool(first["settings"].get("allow_partial")),
    )
    # With every gate checked (not --gates-for=present), a misspelt suite is named with the rest.
    thresholds = load_thresholds(settings, root, option="--thresholds", look_up_suites=settings.gates_for != "present")
    gates, gates_file = thresholds.gates, thresholds.file
    skipped = []
    if gates:
        gates, skipped = check_gate_suites(gates, settings.thresholds_file, root,
                                           present_only=settings.gates_for == "present")
    warnings = _union(data["warnings"] for _, data in parts)
    snapshotted = sorted(suite for suite, path in first.get("suite_files", {}).items()
                         if (root / path).parent.joinpath("__snapshots__", f"{Path(path).stem}.ambr").is_file())
    if snapshotted:
        warnings.append(
            f"snapshots were not compared: suite(s) {', '.join(snapshotted)} have syrupy snapshot files, which a "
            "sharded run does not check; compare them with an unsharded replay of the merged cache "
            "(--socialbias-record=none)"
        )
    models = PartModels(first["models"], warnings)
    aggregator = Aggregator(settings, models, gates, gates_file)
    for note in _union(data["notes"] for _, data in parts):
        aggregator.note(note)
    aggregator.skip_gates(skipped)
    for _, data in parts:
        for record in data["records"]:
            aggregator.add(record)
    aggregator.partial = any(data["stopped_early"] for _, data in parts)
    # The shards' selection was one command's: part of a suite selected is a partial run.
    aggregator.selection_filters = list(first.get("selection_filters", []))
    for suite, path in first.get("suite_files", {}).items():
        aggregator.suite_files[suite] = {"path": str(root / path), "cases": first.get("suite_cases", {}).get(suite, 0)}
    for _, data in parts:  # each shard's processes' batch counts (models/batchstats.py)
        batching = data.get("batching") or {}
        aggregator.concurrency = batching.get("concurrency", aggregator.concurrency)
        index = data["shard"]["index"]
        for entry in batching.get("processes", []):
            aggregator.batch_entries.append({**entry, "process": f"shard{index}/{entry['process']}"})
    asked = next((data["judge_check"] for _, data in parts if data.get("judge_check")), None)
    if asked is not None:  # shard 1 asked the judge; scored here against every record
        aggregator.judge_answers = (asked["shown"], asked["items"], asked["answers"])
        aggregator.judge_check_usage = _Usage(asked["usage"])
    result = aggregator.aggregate(None, failures_before=sum(int(data["failures_before"]) for _, data in parts))
    from .report import write_files

    unwritten = write_files(result)
    if unwritten:
        result = dataclasses.replace(result, exit_status=1)
    if options.junit is not None:
        problem = write_junit(result, unwritten, options.junit)
        if problem:
            unwritten.append(problem)
            result = dataclasses.replace(result, exit_status=1)
    return result, unwritten, parts


class _Usage:
    """The judge check's usage as the asking shard counted it."""

    def __init__(self, counts: dict):
        self.counts = counts

    def to_dict(self) -> dict:
        return self.counts


def _union(lists) -> list:
    out: list = []
    for items in lists:
        for item in items:
            if item not in out:
                out.append(item)
    return out


def write_junit(result, unwritten: list[str], path: Path) -> str | None:
    """A JUnit XML file of what decides the run: one test case per gate (as a single run
    adds them to --junitxml) and the run's properties. Returns a problem, or None."""
    import xml.etree.ElementTree as ET

    from .files import write_atomically
    from .report.terminal import junit_gate_cases, junit_properties

    cases = junit_gate_cases(result, unwritten)
    suite = ET.Element("testsuite", name="socialbias", tests=str(len(cases)),
                       failures=str(sum(1 for c in cases if c[1] == "failed")),
                       skipped=str(sum(1 for c in cases if c[1] == "skipped")), errors="0")
    properties = ET.SubElement(suite, "properties")
    for name, value in junit_properties(result):
        ET.SubElement(properties, "property", name=name, value=value)
    for nodeid, outcome, message, props in cases:
        file, _, name = nodeid.partition("::")
        case = ET.SubElement(suite, "testcase", classname=file, name=name, file=file)
        if props:
            holder = ET.SubElement(case, "properties")
            for key, value in props:
                ET.SubElement(holder, "property", name=key, value=value)
        if outcome == "failed":
            ET.SubElement(case, "failure", message=message).text = message
        elif outcome == "skipped":
            ET.SubElement(case, "skipped", message=message)
    root = ET.Element("testsuites")
    root.append(suite)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(Path(path), ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
    except OSError as exc:
        return f"--junit={path}: not written ({exc.strerror or exc})"
    return None
