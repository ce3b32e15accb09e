"""What the run adds to pytest's own reporting, as pytest reports: the failures that fail
the run counted on pytest's last line (``1 failed gate``), and the gate verdicts and key
numbers as ``--junitxml`` test cases and properties. Each takes the run's RunResult
(result.py) and pytest's terminal reporter or config (plugin.AggregatingHooks)."""

from __future__ import annotations

import pytest


class _UncountedReport(pytest.TestReport):
    """A failed report that pytest's last line does not count (count_failures)."""

    count_towards_summary = False


def count_failures(terminalreporter, gates: list[tuple[str, str]], others: list[tuple[str, str]]) -> None:
    """What fails the run, on pytest's last line and in its colour: ``1 failed gate``
    (a gate that failed or cannot decide) and ``1 socialbias failure`` (an ungated suite,
    a partial run, flipped snapshots, a report not written), in red.

    pytest builds that line from ``terminalreporter.stats``: one part per key, counting
    its reports; the line is red when a ``failed`` key is there. So each failure goes in
    twice: under our key, counted, and under ``failed``, not counted
    (``count_towards_summary``), which makes the line red and lists the failure in the
    short test summary (``FAILED thresholds.yaml::bias - ...``) without calling it a
    failed test. A part's own colour comes from a table private to pytest: set for our
    keys when it is there (without it the part is yellow, the line still red). pytest
    also keeps the list of keys it shows from its last progress line when the run stopped
    early (-x): that list is dropped so it is made again with ours."""
    if gates or others:
        if getattr(terminalreporter, "_known_types", None) is not None:
            terminalreporter._known_types = None
    for key, failures in (("failed gate", gates), ("socialbias failure", others)):
        if not failures:
            continue
        key = key if len(failures) == 1 else key + "s"
        try:
            from _pytest import terminal

            terminal._color_for_type.setdefault(key, "red")
        except (ImportError, AttributeError):  # pragma: no cover - pytest moved it
            pass
        for nodeid, message in failures:
            location = (nodeid.split("::")[0], None, nodeid)
            counted = pytest.TestReport(nodeid=nodeid, location=location, keywords={}, outcome="failed",
                                        longrepr=message, when="call")
            red = _UncountedReport(nodeid=nodeid, location=location, keywords={}, outcome="failed",
                                   longrepr=message, when="call")
            terminalreporter.stats.setdefault(key, []).append(counted)
            terminalreporter.stats.setdefault("failed", []).append(red)


def add_junit_verdicts(config: pytest.Config, result, unwritten: list[str]) -> None:
    """What decides the run, as JUnit test cases, so that a CI test view (GitLab's merge
    request widget, GitHub's test reporters) says what the exit status says: one case per
    gate (``thresholds.yaml::NAME``: failed with its numbers and reason, skipped when not
    evaluated), plus a failed case for a run that fails without any gate failing (no
    thresholds file under --socialbias-strict, flipped snapshots, a report not written)."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    from .terminal import junit_gate_cases

    for nodeid, outcome, message, properties in junit_gate_cases(result, unwritten):
        location = (nodeid.split("::")[0], None, nodeid)
        longrepr = (location[0], 0, message) if outcome == "skipped" else message
        for when, phase_outcome in (("call", outcome), ("teardown", "passed")):
            report = pytest.TestReport(
                nodeid=nodeid, location=location, keywords={}, outcome=phase_outcome,
                longrepr=longrepr if when == "call" else None, when=when, user_properties=list(properties),
            )
            xml.pytest_runtest_logreport(report)


def add_junit_properties(config: pytest.Config, result) -> None:
    """Gate verdicts, key metrics and comparison verdicts as ``--junitxml`` properties."""
    try:
        from _pytest.junitxml import xml_key  # no public API for suite-level properties
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    from .terminal import junit_properties

    for name, value in junit_properties(result):
        xml.add_global_property(name, value)
