"""The outcome of a run, frozen: the one input of every report writer (JSON, terminal,
HTML, JUnit properties).

The aggregator (aggregate.py) builds it once all cases have reported; nothing changes it
afterwards. Plain data only: records, metric rows and gate rows are the builtins-only
dicts the JSON report holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .record import CaseRecord
from .vocabulary import JUDGE_CHECK_SUITE


@dataclass(frozen=True)
class RunResult:
    models: dict  # role -> spec dict (provider, model, base_url, params)
    records: tuple[CaseRecord, ...]  # case records (record.py), sorted by (suite, id, style)
    metrics: tuple  # metric rows, sorted
    gates: tuple  # one verdict row per gate
    warnings: tuple = ()  # about the run's models (embedded judge, judge = target)
    notes: tuple = ()  # what lenient loaders skipped, steps not run
    comparison: dict | None = None  # --socialbias-baseline
    judge_check: dict | None = None  # --socialbias-judge-check
    judge_check_usage: dict = field(default_factory=dict)  # role -> calls, hits, tokens
    detection: dict | None = None  # detector suites: confusion matrices, markers
    snapshots: object = None  # snapshots.SnapshotResult, when snapshots were compared
    report_path: Path | None = None
    html_path: Path | None = None
    gates_file: str | None = None  # the thresholds file read; None: none was found
    gates_file_sha256: str | None = None  # of its bytes as read, so a report names the very gates
    gates_looked_for: str | None = None  # where it was looked for
    partial: bool = False  # only part of the suites' cases ran (a filter, -x): never a pass
    partial_reasons: tuple = ()  # why, in words
    partial_allowed: bool = False  # --socialbias-allow-partial: the gates' exit status stands
    ungated: tuple = ()  # suites measured that no gate names (and not declared ungated)
    declared_ungated: dict = field(default_factory=dict)  # run suites declared ungated: suite -> why
    strict: bool = False  # --socialbias-strict: a run with no thresholds file fails
    exit_status: int | None = None  # pytest's exit status as it stands when the run is decided

    @property
    def failed(self) -> bool:
        """Whether the results fail the run: a failed gate, more flipped snapshots than
        allowed, a measured suite no gate decides, or a partial selection (unless
        --socialbias-allow-partial)."""
        return bool(
            self.failed_gates
            or (self.snapshots is not None and self.snapshots.failed)
            or self.gateless_failure
            or self.ungated
            or self.partial_failure
        )

    @property
    def partial_failure(self) -> bool:
        """Only part of the cases ran, and the run was not told that is fine."""
        return self.partial and not self.partial_allowed

    @property
    def gateless_failure(self) -> bool:
        """No thresholds file was found, and --socialbias-strict asks for one."""
        return self.strict and self.gates_file is None

    @property
    def failed_gates(self) -> int:
        return sum(1 for g in self.gates if g["verdict"] == "fail")

    @property
    def suites_run(self) -> set:
        """The suites this run has numbers for (judge-check when the judge was checked)."""
        return {r["suite"] for r in self.records} | ({JUDGE_CHECK_SUITE} if self.judge_check is not None else set())

    @property
    def usage(self) -> dict:
        """Per role: calls, cache hits, misses and tokens of the cases' model calls."""
        totals: dict[str, dict] = {}
        for record in self.records:
            for role, counts in record.get("usage", {}).items():
                total = totals.setdefault(role, {})
                for k, v in counts.items():
                    if k == "replicas":  # URL -> {"served", "failed"} (models/replicas.py)
                        for url, numbers in v.items():
                            held = total.setdefault(k, {}).setdefault(url, {"served": 0, "failed": 0})
                            for name, n in numbers.items():
                                held[name] = held.get(name, 0) + n
                    else:
                        total[k] = total.get(k, 0) + v
        return dict(sorted(totals.items()))
