"""benchmarks/call_path.py (docs/performance.md): the figures against the reference, the
flag over 1.25 (any change in calls), and its options' errors. The jobs themselves are
measured by running the script, not here: it is a benchmark, not a timed test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "benchmarks" / "call_path.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("call_path_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    path, modules = list(sys.path), set(sys.modules)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        # It puts benchmarks/ on sys.path (where coverage.py would shadow the package) and
        # imports dymt_latency: both undone, for the tests after these.
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if name == spec.name or str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(TOOL.parent)):
                del sys.modules[name]


def test_a_ratio_over_the_flag_is_a_regression(tool):
    reference = {"calls": 2000, "cpu_ms_per_call": 1.0, "wall_over_bound": 1.2}
    lines = tool.compare("dymt-500ms", {"calls": 2000, "cpu_ms_per_call": 1.3, "wall_over_bound": 1.44}, reference)
    cpu = next(line for line in lines if "cpu_ms_per_call" in line)
    wall = next(line for line in lines if "wall_over_bound" in line)
    assert "ratio  1.30" in cpu and "REGRESSION" in cpu
    assert "ratio  1.20" in wall and "REGRESSION" not in wall
    assert lines[-1] == "  FLAGGED: cpu_ms_per_call"


def test_any_change_in_calls_is_flagged_and_no_reference_is_said(tool):
    lines = tool.compare("dymt-0ms", {"calls": 2002, "cpu_ms_per_call": 0.5}, {"calls": 2000, "cpu_ms_per_call": 1.0})
    assert "REGRESSION" in lines[0] and "REGRESSION" not in lines[1]
    assert lines[-1] == "  FLAGGED: calls"
    assert "(no reference)" in tool.compare("user-check", {"check_ms_per_turn": 0.2}, None)[0]


def test_cpu_figures_are_flagged_by_their_ratio_scaled_to_the_machines_speed(tool):
    reference = {"calls": 2000, "cpu_ms_per_call": 1.0, "wall_over_bound": 1.2}
    now = {"calls": 2000, "cpu_ms_per_call": 1.4, "wall_over_bound": 1.56}
    # A machine 1.4x slower at plain Python: 1.4 ms is the reference's 1.0 ms, not a regression.
    slower = tool.compare("dymt-500ms", now, reference, speed=1.4)
    cpu = next(line for line in slower if "cpu_ms_per_call" in line)
    assert "ratio  1.40  scaled  1.00" in cpu and "REGRESSION" not in cpu
    # Wall over bound is not scaled: 1.3x its reference is flagged on any machine.
    wall = next(line for line in slower if "wall_over_bound" in line)
    assert "scaled" not in wall and "REGRESSION" in wall
    # On a machine 1.2x faster, the same 1.0 ms of the reference read as 0.85 is fine but 1.1 is not.
    faster = tool.compare("user-check", {"check_ms_per_turn": 0.11}, {"check_ms_per_turn": 0.1}, speed=1 / 1.2)
    assert "scaled  1.32" in faster[0] and "REGRESSION" in faster[0]


def test_the_machines_speed_is_a_steady_positive_figure(tool):
    first, second = tool.machine_speed(repeats=3), tool.machine_speed(repeats=3)
    assert first > 0 and second > 0
    assert 0.5 < first / second < 2  # the best of a few repetitions: not a timing assertion, a sanity bound


def test_checkout_without_the_plugin_is_refused(tool, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        tool.main(["--checkout", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--checkout {tmp_path}: no pytest_socialbias package there" in err and "git worktree add" in err


def test_reference_is_written_from_this_checkout_only(tool, tmp_path, capsys):
    (tmp_path / "pytest_socialbias").mkdir()
    (tmp_path / "pytest_socialbias" / "__init__.py").write_text("")
    with pytest.raises(SystemExit):
        tool.main(["--checkout", str(tmp_path), "--write-reference"])
    assert "--write-reference measures this checkout only" in capsys.readouterr().err


def test_profile_needs_py_spy(tool, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tool.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit):
        tool.main(["--profile", str(tmp_path)])
    assert "--profile needs py-spy on PATH: pip install py-spy" in capsys.readouterr().err


def test_the_reference_file_holds_every_figure_and_its_load(tool):
    import json

    reference = json.loads(tool.REFERENCE.read_text())
    assert "load average" in reference["measured"] and "others_busy_max" in reference["load"]
    assert reference["machine_speed_ms"] > 0  # what the CPU figures are scaled by
    for job in tool.JOBS:
        figures = reference["jobs"][job.name]
        assert figures["calls"] > 0 and figures["cpu_ms_per_call"] > 0
        assert ("wall_over_bound" in figures) == bool(job.latency)
    assert reference["jobs"]["user-check"]["check_ms_per_turn"] > 0
