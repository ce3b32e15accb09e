"""Fixtures every test folder shares (tests/README.md has the map). Plain helpers are in
tests/support/helpers.py; the end-to-end folder adds its own in tests/e2e/conftest.py."""

import os

import anthropic
import openai
import pytest

from pytest_socialbias.testing import FakeServer

from .support import fakeworld

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
def server(request):
    """The loopback fake server (pytest_socialbias.testing) playing the test module's
    ``SERVER_SCRIPT`` (a function of the request: the module's scripted world), or
    support/fakeworld.script where the module sets none."""
    with FakeServer(getattr(request.module, "SERVER_SCRIPT", fakeworld.script)) as srv:
        yield srv


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
