import asyncio
import json
import os
import textwrap
from pathlib import Path

import anthropic
import openai
import pytest

from pytest_socialbias.report.json_report import validate_report
from pytest_socialbias.testing import FakeServer

from . import fakeworld

#: Imported once here: pytester forgets the modules an in-process run imports, so each run
#: would import the SDKs again (about 1 s each).
PRELOADED_SDKS = (anthropic, openai)


def _preload_extensions() -> None:
    """numpy refuses a second import in one process ("cannot load module more than once
    per process"): when an in-process run was the first to import it (the HTML report's
    figures, through matplotlib), pytester dropped it and the next run's import failed.
    Imported here, before any run, it is never dropped."""
    import importlib

    for name in ("numpy", "matplotlib", "matplotlib.figure"):
        try:
            importlib.import_module(name)
        except ImportError:  # optional extras: tests that need them skip
            pass


_preload_extensions()

pytest_plugins = ["pytester"]


#: Runs a test starts (pytester, subprocesses) keep their items in collection order: this
#: suite runs in random order (pytest-randomly), but what a test checks of an inner run's
#: output must not depend on a shuffle of the inner run's cases.
KEEP_ORDER = "-p no:randomly"


@pytest.fixture(autouse=True)
def inner_runs_keep_their_order(monkeypatch):
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    if KEEP_ORDER not in addopts:
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{addopts} {KEEP_ORDER}".strip())


@pytest.fixture
def pytester(pytester, monkeypatch):
    # Pytester clears PYTEST_ADDOPTS when it starts: set it again for its runs.
    monkeypatch.setenv("PYTEST_ADDOPTS", KEEP_ORDER)
    return pytester


@pytest.fixture
def server():
    with FakeServer(fakeworld.script) as srv:
        yield srv


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")


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
