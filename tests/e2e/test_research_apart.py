"""The research tooling (pytest_socialbias/research/: data set generation and description,
training of the learned readings) stays out of a pytest run: a run never imports it, and
the ``python -m pytest_socialbias`` subcommands still reach it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_socialbias.__main__ import SUBCOMMANDS, main
from pytest_socialbias.testing import FakeServer

from ..support import benevworld

SUITES = Path(__file__).resolve().parents[2] / "suites"

#: Written into the inner run's folder: at the inner interpreter's exit, the package's
#: modules it imported.
MODULES_CONFTEST = """
import atexit, json, os, sys

@atexit.register
def _write_modules():
    with open(os.environ["SOCIALBIAS_MODULES_OUT"], "w", encoding="utf-8") as f:
        json.dump(sorted(m for m in sys.modules if m.startswith("pytest_socialbias")), f)
"""


@pytest.fixture
def server():
    benevworld.reset()
    with FakeServer(benevworld.script) as srv:
        yield srv


@pytest.mark.slow
def test_a_run_never_imports_the_research_tooling(pytester, server, keys, monkeypatch):
    """A BenevDial agent suite (simulated users checked by the learned reading, the
    treatment judge) and the detector suite (variants, surface markers) with both reports:
    the run passes and no module of pytest_socialbias.research was imported."""
    shutil.copytree(SUITES / "benevdial", pytester.path / "benevdial")
    shutil.copytree(SUITES / "benevdial-detect", pytester.path / "benevdial-detect")
    (pytester.path / "conftest.py").write_text(MODULES_CONFTEST, encoding="utf-8")
    out = pytester.path / "modules.json"
    monkeypatch.setenv("SOCIALBIAS_MODULES_OUT", str(out))
    url = server.openai_base_url
    result = pytester.runpytest_subprocess(
        "benevdial/agent.yaml", "benevdial-detect/detect.yaml", "--socialbias-sample=2",
        f"--target=openai:tb@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        "--socialbias-report=r.json", "--socialbias-html=r.html", "-p", "no:cacheprovider",
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert {c["suite"] for c in report["cases"]} == {"benevdial-agent", "benevdial-detect"}
    assert report["detection"]["markers"]["benevdial-detect"]  # the markers' table, at run time
    modules = json.loads(out.read_text(encoding="utf-8"))
    # The inner run did read the learned reading and the markers: the check sees what it ran.
    assert {"pytest_socialbias.plugin", "pytest_socialbias.protocols.turn_model",
            "pytest_socialbias.benevdial.markers"} <= set(modules)
    assert [m for m in modules if m.split(".")[:2] == ["pytest_socialbias", "research"]] == []


def test_every_subcommand_and_training_command_answers_help(capsys):
    """Each subcommand's parser is built by the module behind it (imported lazily): --help
    of every one of them, of the whole command and of the two training commands."""
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SUBCOMMANDS)
    for name in SUBCOMMANDS:
        assert main([name, "--help"]) == 0, name
        assert capsys.readouterr().out.startswith(f"usage: python -m pytest_socialbias {name}"), name
    for module in ("train_turn_model", "train_turn_embed"):
        done = subprocess.run([sys.executable, "-m", f"pytest_socialbias.research.{module}", "train", "--help"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "model file" in done.stdout, done.stderr
