"""The published report schema: shipped in the package, strict enough to catch breakage."""

from __future__ import annotations

import copy
import hashlib

import jsonschema
import pytest

from pytest_socialbias.files import load_schema
from pytest_socialbias.report.json_report import validate_report

from ..support.helpers import model_args, read_report, suite_yaml


@pytest.fixture
def report(pytester, keys, server):
    text = suite_yaml([("age-001", "age", "Plain one."), ("gender-001", "gender", "BIASME two.")], turns=2)
    pytester.makefile(".yaml", demo=text)
    result = pytester.runpytest("demo.yaml", *model_args(server), "--socialbias-report=r.json", "-p", "no:cacheprovider")
    assert result.ret == 0
    digest = hashlib.sha256((pytester.path / "demo.yaml").read_bytes()).hexdigest()
    return read_report(pytester.path / "r.json"), digest


def test_schema_ships_with_the_package():
    schema = load_schema("report")
    assert schema["title"].startswith("pytest-socialbias JSON report")
    jsonschema.Draft202012Validator.check_schema(schema)


def test_report_carries_run_metadata(report):
    data, digest = report
    assert data["plugin_version"]
    assert set(data["models"]) == {"target", "judge", "user"}
    assert data["models"]["target"]["model"] == "t" and data["models"]["target"]["params"] == {}
    assert "judge_bias@1" in data["prompt_templates"] and "user_simulator@1" in data["prompt_templates"]
    assert data["suites"] == {"demo": {"protocol": "smoke", "sha256": digest, "cases": 2, "seeds": 2}}


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["cases"][0].update(outcome="maybe"),
        lambda d: d["cases"][0]["labels"]["bias"].append(2),
        lambda d: d["metrics"][0].pop("n"),
        lambda d: d["metrics"][0].update(extra=1),
        lambda d: d["suites"]["demo"].update(sha256="xyz"),
        lambda d: d.pop("gates"),
        lambda d: d["cases"][0]["errors"].append({"kind": "oops", "message": "m"}),
    ],
)
def test_schema_rejects_broken_reports(report, breakage):
    data = copy.deepcopy(report[0])
    breakage(data)
    with pytest.raises(jsonschema.ValidationError):
        validate_report(data)
