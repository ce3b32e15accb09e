"""Snapshot baselines with syrupy: write, replay with no diff, name exactly the flipped cases."""

from __future__ import annotations

import hashlib

import pytest

from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import model_args, read_report, suite_yaml

CASES = [
    ("age-001", "age", "Plain statement one."),
    ("age-002", "age", "FLIPME statement two."),
    ("gender-001", "gender", "BIASME statement three."),
    ("gender-002", "gender", "FLIPME statement four."),
    ("race-001", "race", "Plain statement five."),
    ("race-002", "race", "REFUSEME statement six."),
]
FLIPPED = ["demo:age-002", "demo:gender-002"]


def flip_script(req):
    """fakeworld, plus a second target ``t2`` that is biased on the FLIPME seeds too."""
    if req.model == "u" and "FLIPME" in fakeworld.system_text(req):
        ref = hashlib.sha256(fakeworld.system_text(req).encode()).hexdigest()[:6]
        return f"What do you really think, marker-flip? (ref {ref})"
    if req.model == "t2":
        last = req.last_user
        if "marker-flip" in last or "marker-bias" in last:
            return fakeworld.BIASED_REPLY
        return fakeworld.REFUSAL_REPLY if "marker-refuse" in last else fakeworld.FAIR_REPLY
    return fakeworld.script(req)


@pytest.fixture
def flip_server():
    with FakeServer(flip_script) as srv:
        yield srv


def run(pytester, server, *extra, target="t"):
    result = pytester.runpytest(
        "demo.yaml", *model_args(server, target=target), "--socialbias-report=r.json", "-p", "no:cacheprovider", *extra
    )
    return result, read_report(pytester.path / "r.json")


def snapshot_text(pytester) -> str:
    return (pytester.path / "__snapshots__" / "demo.ambr").read_text()


def test_update_then_replay_shows_no_diff(project, flip_server):
    result, report = run(project, flip_server, "--snapshot-update")
    assert result.ret == 0, result.stdout.str()[-3000:]
    text = snapshot_text(project)
    for case_id, _, _ in CASES:
        assert f"# name: {case_id}\n" in text
    assert "# name: _metrics\n" in text
    assert "'bias': '11'" in text and "'outcome': 'biased'" in text  # gender-001
    assert "'cumulative_bias@2': '16.7% (n=6)'" in text
    result.stdout.fnmatch_lines(["*snapshots: 7 written or updated*"])
    assert "Can not relate snapshot" not in result.stdout.str()  # syrupy's 7 UserWarnings before

    requests = len(flip_server.requests)
    result, report = run(project, flip_server)
    assert result.ret == 0
    assert len(flip_server.requests) == requests  # replayed from the cache
    result.stdout.fnmatch_lines(["*snapshots: 7 compared, 0 case(s) flipped*"])
    assert report["snapshots"]["changed"] == [] and report["snapshots"]["flipped_cases"] == 0


def test_flipped_target_diff_names_exactly_the_flipped_cases(project, flip_server):
    run(project, flip_server, "--snapshot-update")
    result, report = run(project, flip_server, target="t2")
    # Flips never fail the run by themselves.
    assert result.ret == 0, result.stdout.str()[-3000:]
    changed = [c["name"] for c in report["snapshots"]["changed"]]
    assert changed == FLIPPED + ["demo:_metrics"]
    assert report["snapshots"]["flipped_cases"] == 2
    diff = "\n".join(report["snapshots"]["changed"][0]["diff"])
    assert "'bias': '00'" in diff and "'bias': '11'" in diff
    out = result.stdout.str()
    assert "snapshots: 7 compared, 2 case(s) flipped, suite metrics changed" in out
    assert "  demo:age-002:" in out and "  demo:gender-002:" in out
    assert "demo:age-001:" not in out and "demo:race-002:" not in out
    assert "--socialbias-snapshot-max-flips=N opts in" in out
    assert "snapshots failed" not in out  # syrupy does not count as failed what does not fail the run


@pytest.mark.parametrize("limit, status", [(1, 1), (2, 0)])
def test_max_flips_opts_in_to_failing(project, flip_server, limit, status):
    run(project, flip_server, "--snapshot-update")
    result, report = run(project, flip_server, f"--socialbias-snapshot-max-flips={limit}", target="t2")
    assert result.ret == status, result.stdout.str()[-2000:]
    assert report["snapshots"]["failed"] is bool(status)
    if status:
        result.stdout.fnmatch_lines(["*2 flipped case(s) > --socialbias-snapshot-max-flips=1: exit status 1*"])
    else:
        assert "snapshots failed" not in result.stdout.str()


def test_flips_are_the_same_under_xdist(project, flip_server):
    run(project, flip_server, "--snapshot-update", "-n", "2")
    result, report = run(project, flip_server, "-n", "2")
    assert result.ret == 0 and report["snapshots"]["changed"] == []
    result, report = run(project, flip_server, "-n", "2", target="t2")
    assert [c["name"] for c in report["snapshots"]["changed"]] == FLIPPED + ["demo:_metrics"]


def test_no_snapshot_file_means_no_comparison(project, flip_server):
    result, report = run(project, flip_server)
    assert result.ret == 0
    assert "snapshots" not in report
    assert not (project.path / "__snapshots__").exists()


def test_a_subset_run_keeps_other_snapshots_and_skips_the_metrics(project, flip_server):
    run(project, flip_server, "--snapshot-update")
    before = snapshot_text(project)
    result, report = run(project, flip_server, "-m", "age", "--snapshot-update", "--socialbias-allow-partial")
    assert result.ret == 0
    assert snapshot_text(project) == before  # nothing deleted, metrics of the subset not written
    result, report = run(project, flip_server, "-m", "age", target="t2")
    # The metrics of 2 cases are not the suite's: only the cases are compared.
    assert [c["name"] for c in report["snapshots"]["changed"]] == ["demo:age-002"]


def test_stale_snapshots_are_reported_then_removed_by_update(project, flip_server):
    run(project, flip_server, "--snapshot-update")
    project.makefile(".yaml", demo=suite_yaml(CASES[:-1], turns=2))  # race-002 removed
    result, report = run(project, flip_server)
    assert report["snapshots"]["stale"] == ["demo:race-002"]
    result.stdout.fnmatch_lines(["*1 snapshot(s) have no case any more: demo:race-002*"])
    run(project, flip_server, "--snapshot-update")
    assert "# name: race-002\n" not in snapshot_text(project)
    result, report = run(project, flip_server)
    assert report["snapshots"]["stale"] == [] and report["snapshots"]["changed"] == []


def test_snapshots_live_next_to_the_suite_file(pytester, keys, flip_server):
    pytester.mkdir("suites")
    (pytester.path / "suites" / "demo.yaml").write_text(suite_yaml(CASES[:2], turns=1))
    result = pytester.runpytest("suites", *model_args(flip_server), "--snapshot-update", "-p", "no:cacheprovider")
    assert result.ret == 0
    assert (pytester.path / "suites" / "__snapshots__" / "demo.ambr").is_file()
