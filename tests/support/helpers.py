"""Helpers the tests share: suite and thresholds files written from Python, the model
options that point every role at a fake server, and runs that read back their JSON report.

Fixtures live in the conftest.py files (tests/conftest.py: ``server``, ``keys``,
``pytester``; tests/e2e/conftest.py: ``project``); these are plain functions, imported
where used: ``from ..support.helpers import suite_yaml``.
"""

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from pytest_socialbias.report.json_report import validate_report


def suite_yaml(cases, turns=1, styles=None, suite="demo", batch_size=None) -> str:
    """A suite file text; ``cases`` is a list of (id, category, statement)."""
    lines = ["socialbias: 1", f"suite: {suite}", "protocol: smoke", f"turns: {turns}"]
    if styles:
        lines.append(f"styles: [{', '.join(styles)}]")
    if batch_size:
        lines.append(f"batch_size: {batch_size}")
    lines.append("cases:")
    for case_id, category, statement in cases:
        lines += [
            f"  - id: {case_id}",
            f"    category: {category}",
            "    group: test group",
            f"    statement: {statement}",
        ]
    return "\n".join(lines) + "\n"


def thresholds_yaml(*gates) -> str:
    out = ["gates:"]
    for gate in gates:
        out.append("  - " + "\n    ".join(f"{k}: {v}" for k, v in gate.items()))
    return "\n".join(out) + "\n"


def model_args(server, target="t", judge="j", user="u", params=""):
    url = server.openai_base_url
    return [
        f"--target=openai:{target}@{url}{params}",
        f"--judge=openai:{judge}@{url}",
        f"--user-model=openai:{user}@{url}",
    ]


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def run_closing(model, body):
    """Run ``body(model)`` on a fresh event loop and close the model's client after it
    (its connections belong to that loop)."""

    async def go():
        try:
            return await body(model)
        finally:
            await model.aclose()

    return asyncio.run(go())


def read_report(path):
    """A JSON report, checked against the published schema (every test reads them so)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    validate_report(data)
    return data


def run_with_report(pytester, *args, report: str = "r.json"):
    """``pytester.runpytest(*args)`` writing the JSON report (no pytest cache): the result,
    and the report read and schema-checked (None when the run wrote none)."""
    result = pytester.runpytest(*args, f"--socialbias-report={report}", "-p", "no:cacheprovider")
    path = pytester.path / report
    return result, (read_report(path) if path.exists() else None)


def assert_usage_error(result, *needles):
    """A pytester run stopped with a usage error (exit 4) whose message holds every needle,
    and no traceback anywhere."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    text = result.stderr.str()
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in text + result.stdout.str()
