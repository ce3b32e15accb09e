"""Fixtures of the end-to-end tests (the root tests/conftest.py adds ``server``, ``keys``
and ``pytester``)."""

import pytest

from ..support.helpers import suite_yaml


@pytest.fixture
def project(request, pytester, keys):
    """A project for pytester: ``demo.yaml``, a smoke suite of the test module's ``CASES``
    (a list of (id, category, statement)), two turns each. A module whose project holds
    more defines its own ``project`` fixture, which takes precedence."""
    pytester.makefile(".yaml", demo=suite_yaml(request.module.CASES, turns=2))
    return pytester
