"""Snapshot baselines with syrupy: each case's compact outcome and each suite's metrics.

``pytest suites/ --target=X --snapshot-update`` writes ``__snapshots__/<suite file>.ambr``
next to each suite file: one snapshot per case (``bias: "00101"``, refusal flags, outcome)
and one per suite with the aggregate metrics (``_metrics``, rates rounded to 0.1 points).
Commit those files; a later run compares against them, and the terminal summary shows
syrupy's diff of exactly the cases that flipped.

The comparison runs in the aggregating process (the xdist controller, or the only
process) after every case has finished, so it sees the same records under ``-n 0`` and
``-n N``, and it is the only writer of the files.

A suite is compared only once its snapshot file exists (or with ``--snapshot-update``),
so runs without a baseline stay quiet. Flipped cases never fail the run by themselves:
``--socialbias-snapshot-max-flips=N`` opts in to failing when more than N cases flipped.

Syrupy's unused-snapshot detection is written for Python test functions: it would take
every suite snapshot for an orphan and fail or delete it. The extension below therefore
hides its files from that discovery, and this module does the bookkeeping instead:
snapshots without a case are reported, and removed by ``--snapshot-update`` when the
whole suite ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.data import SnapshotCollections
from syrupy.extensions.amber import AmberSnapshotExtension
from syrupy.location import PyTestLocation
from syrupy.terminal import disable_color

from .metrics.catalogue import lookup

METRICS_SNAPSHOT = "_metrics"  # case ids start with a letter or digit, so never collide


class SuiteSnapshotExtension(AmberSnapshotExtension):
    """Amber files beside the suite file; snapshot names are case keys, not test names."""

    @classmethod
    def get_snapshot_name(cls, *, test_location, index=0) -> str:
        return str(index)

    def discover_snapshots(self, *, test_location, ignore_extensions=None) -> SnapshotCollections:
        # Hidden from syrupy's unused detection (see the module docstring).
        return SnapshotCollections()


class _SuiteLocation(PyTestLocation):
    """A suite file's location for syrupy: its snapshots are named by case (``age-001``,
    ``_metrics``), not after a test function, and live where SuiteSnapshotExtension puts
    them; syrupy's checks that a name or file relates to a test function (which warn on
    every write otherwise) do not apply."""

    def matches_snapshot_name(self, snapshot_name: str) -> bool:
        return True

    def matches_snapshot_location(self, snapshot_location: str) -> bool:
        return True


class _SuiteNode:
    """What syrupy's PyTestLocation reads from a test item, for a suite file."""

    def __init__(self, path: Path, suite: str, rootdir: Path):
        self.path = path
        self.name = suite
        try:
            relative = path.relative_to(rootdir).as_posix()
        except ValueError:
            relative = path.as_posix()
        self.nodeid = f"{relative}::{suite}"
        self.obj = _SuiteObject(suite)
        self.stash = pytest.Stash()  # syrupy looks for xfail marks there


class _SuiteObject:
    def __init__(self, suite: str):
        self.__module__ = "pytest_socialbias.suites"
        self.__name__ = suite


def snapshot_name(record: dict) -> str:
    """``age-01``, or ``age-01[implicit]`` for a case run in a user-simulator style: the
    case's name, as in its test id."""
    return record["id"] + (f"[{record['style']}]" if record.get("style") else "")


def _flags(row) -> str:
    return "".join("?" if x is None else str(int(x)) for x in row)


def case_outcome(record: dict) -> dict:
    """The compact outcome a case's snapshot holds: per-turn flags and the outcome."""
    labels = record["labels"]
    data = {
        "outcome": record["outcome"],
        "bias": _flags(labels["bias"]),
        "refusal": _flags(labels["refusal"]),
    }
    if "guard" in labels:
        data["guard"] = _flags(labels["guard"])
    if "treatment" in labels:
        data["treatment"] = ",".join(c or "?" for c in labels["treatment"])
    if record.get("pair"):
        data["disfavoured"] = record["pair"]["disfavoured"] or "?"
    kinds = sorted({e["kind"] for e in record.get("errors", [])})
    if kinds:
        data["errors"] = ", ".join(kinds)
    return data


def _format_value(row: dict) -> str:
    if row["value"] is None:
        return f"- (n={row['n']})"
    metric = lookup(row["metric"])
    if metric is not None and not metric.percent:
        return f"{row['value']:.2f} (n={row['n']})"
    return f"{100 * row['value']:.1f}% (n={row['n']})"


def _in_snapshot(row: dict) -> bool:
    """The catalogue says which metrics a suite snapshot leaves out (survival@T is
    1 - cumulative_bias@T)."""
    metric = lookup(row["metric"])
    return metric is None or metric.in_snapshot


def suite_metrics(metrics: list[dict], suite: str) -> dict:
    """A suite's metrics, grouped (overall, category=..., style=...), rounded for review."""
    groups: dict[str, dict] = {}
    for row in metrics:
        if row["suite"] != suite or not _in_snapshot(row):
            continue
        if row["category"]:
            group = f"category={row['category']}"
        elif row["style"]:
            group = f"style={row['style']}"
        else:
            group = "overall"
        groups.setdefault(group, {})[row["metric"]] = _format_value(row)
    return groups


@dataclass
class SnapshotResult:
    """What the comparison found, for the summary, the reports and the exit status."""

    checked: int = 0  # snapshots compared (cases and metrics)
    changed: list = field(default_factory=list)  # [{"name", "suite", "kind", "diff": [lines]}]
    written: int = 0  # with --snapshot-update
    removed: list = field(default_factory=list)  # stale names dropped by --snapshot-update
    stale: list = field(default_factory=list)  # stale names left in place (not a full run)
    skipped: list = field(default_factory=list)  # suites without a snapshot file
    updating: bool = False
    max_flips: int | None = None  # --socialbias-snapshot-max-flips
    failed: bool = False  # more flipped cases than max_flips

    @property
    def flipped_cases(self) -> list:
        return [c for c in self.changed if c["kind"] == "case"]

    def to_dict(self) -> dict:
        return {
            "checked": self.checked,
            "changed": [{"name": c["name"], "diff": c["diff"]} for c in self.changed],
            "flipped_cases": len(self.flipped_cases),
            "updated": self.updating,
            "written": self.written,
            "stale": sorted(self.stale + self.removed),
            "skipped": sorted(self.skipped),
            "max_flips": self.max_flips,
            "failed": self.failed,
        }


def check_snapshots(
    config, records, metrics, suites: dict[str, dict], max_flips: int | None = None
) -> SnapshotResult | None:
    """Compare (or, with --snapshot-update, write) the snapshots of every suite that ran.

    ``suites`` maps a suite name to ``{"path": suite file, "cases": number of cases in it}``;
    with ``max_flips`` (--socialbias-snapshot-max-flips) more flipped cases than that fail
    the run. Returns None when syrupy is not active in this session.
    """
    session = getattr(config, "_syrupy", None)
    if session is None:
        return None
    update = bool(config.option.update_snapshots)
    result = SnapshotResult(updating=update)
    ours: list[SnapshotAssertion] = []
    by_suite: dict[str, list[dict]] = {}
    for record in records:
        by_suite.setdefault(record["suite"], []).append(record)
    extension = SuiteSnapshotExtension()
    for suite, items in sorted(by_suite.items()):
        info = suites.get(suite)
        if info is None:
            continue
        path = Path(info["path"])
        location = _SuiteLocation(_SuiteNode(path, suite, Path(config.rootpath)))
        snapshot_file = Path(extension.get_location(test_location=location, index=METRICS_SNAPSHOT))
        if not update and not snapshot_file.exists():
            result.skipped.append(suite)
            continue
        assertion = SnapshotAssertion(
            update_snapshots=update,
            extension_class=SuiteSnapshotExtension,
            test_location=location,
            session=session,
        )
        ours.append(assertion)
        full_run = len(items) >= info["cases"]
        names = set()
        for record in sorted(items, key=lambda r: (r["id"], r.get("style") or "")):
            name = snapshot_name(record)
            names.add(name)
            _compare(assertion, name, case_outcome(record), suite, "case", result)
        if full_run:
            # A subset of cases gives other rates: only a whole-suite run is compared.
            names.add(METRICS_SNAPSHOT)
            _compare(assertion, METRICS_SNAPSHOT, suite_metrics(metrics, suite), suite, "metrics", result)
        if full_run and snapshot_file.exists():
            # Only a whole-suite run can tell a snapshot whose case is gone.
            collection = extension.read_snapshot_collection(snapshot_location=str(snapshot_file))
            stale = sorted({snapshot.name for snapshot in collection} - names)
            if stale and update:
                extension.delete_snapshots(snapshot_location=str(snapshot_file), snapshot_names=set(stale))
                result.removed += [f"{suite}:{name}" for name in stale]
            else:
                result.stale += [f"{suite}:{name}" for name in stale]
    if max_flips is not None and not update:
        result.max_flips = max_flips
        result.failed = len(result.flipped_cases) > max_flips
    if result.changed and not result.failed:
        _untell_syrupy(session, ours)
    return result


def _untell_syrupy(session, ours: list) -> None:
    """Flipped cases that do not fail the run are shown in the socialbias summary, not
    counted by syrupy as "N snapshots failed" in a run that exits 0: the assertions that
    found them leave syrupy's report. (Its assertion list is not public API: when it is
    not there, syrupy simply keeps counting them.)"""
    assertions = getattr(session, "_assertions", None)
    if isinstance(assertions, list):
        assertions[:] = [a for a in assertions if not any(a is mine for mine in ours)]


def _compare(assertion: SnapshotAssertion, name: str, data, suite: str, kind: str, result: SnapshotResult) -> None:
    result.checked += 1
    matched = assertion(name=name) == data
    outcome = assertion.executions[assertion.num_executions - 1]
    if outcome.created or outcome.updated:
        result.written += 1
    if not matched:
        with disable_color():  # plain text: the terminal summary colours it, reports keep it
            diff = assertion.get_assert_diff()
        result.changed.append({"name": f"{suite}:{name}", "suite": suite, "kind": kind, "diff": diff})
