"""What a run's terminal output says: a failed gate on pytest's last line and in its
colour, the summary under -q and -qq, the dry run's columns, a replay's misses."""

from __future__ import annotations

import re

import pytest

from ..support.helpers import model_args, run_with_report, suite_yaml, thresholds_yaml

CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("gender-002", "gender", "Plain statement three."),
    ("race-001", "race", "REFUSEME statement four."),
]
RED = "\x1b[31m"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def gate(bound):
    return thresholds_yaml({"name": "bias", "suite": "demo", "metric": "cumulative_bias@2", "max": bound})


def last_line(result) -> str:
    return [line for line in result.stdout.lines if line.strip()][-1]


def plain(text: str) -> str:
    return ANSI.sub("", text)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_a_failed_gate_is_on_pytests_last_line_in_red(project, server, xdist):
    project.makefile(".yaml", thresholds=gate(0.1))
    result, report = run_with_report(project, "demo.yaml", *model_args(server), "--color=yes", *xdist)
    assert result.ret == 1
    assert [g["verdict"] for g in report["gates"]] == ["fail"]
    last = last_line(result)
    assert re.search(r"=+ 2 passed, 1 biased, 1 refused, 1 failed gate in [\d.]+s =+$", plain(last)), last
    # The line's own colour (its '=' bars) is red, and so is its "1 failed gate" part.
    assert last.startswith(RED), repr(last)
    assert re.search(re.escape(RED) + r"(\x1b\[1m)?1 failed gate", last), repr(last)
    # The short test summary names the gate and its numbers; no test counts as failed.
    assert any(plain(line).startswith("FAILED thresholds.yaml::bias - gate bias FAIL: cumulative_bias@2 = 0.25")
               for line in result.stdout.lines)
    assert " failed," not in plain(last) and "1 failed in" not in plain(last)


def test_a_gate_that_cannot_decide_fails_on_the_last_line(project, server):
    # A replay of an empty cache: no case is labelled, the gate has no evidence.
    project.makefile(".yaml", thresholds=gate(0.1))
    result, report = run_with_report(project, "demo.yaml", *model_args(server), "--socialbias-record=none")
    assert report["gates"][0]["verdict"] == "fail" and "no evidence" in report["gates"][0]["detail"]
    assert re.search(r"=+ 4 errors, 1 failed gate in ", last_line(result)), last_line(result)


def test_a_passing_run_has_no_failed_gate_and_is_not_red(project, server):
    project.makefile(".yaml", thresholds=gate(0.5))
    result, _ = run_with_report(project, "demo.yaml", *model_args(server), "--color=yes")
    assert result.ret == 0
    last = last_line(result)
    assert "failed" not in plain(last) and RED not in last, repr(last)
    assert re.search(r"=+ 2 passed, 1 biased, 1 refused in ", plain(last))


def test_an_ungated_suite_is_a_socialbias_failure_on_the_last_line(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "other", "suite": "other", "metric": "refusal_rate", "max": 0.5}))
    (project.path / "sub").mkdir()
    (project.path / "sub" / "other.yaml").write_text(suite_yaml(CASES[:1], suite="other"))
    result, _ = run_with_report(project, "demo.yaml", *model_args(server))
    assert result.ret == 1
    assert re.search(r"=+ 2 passed, 1 biased, 1 refused, 1 socialbias failure in ", last_line(result))
    result.stdout.fnmatch_lines(["FAILED socialbias::ungated - UNGATED: suite(s) demo ran*"])


def test_quiet_shortens_the_summary_and_very_quiet_makes_it_one_line(project, server):
    project.makefile(".yaml", thresholds=gate(0.1))
    full, _ = run_with_report(project, "demo.yaml", *model_args(server), report="full.json")
    quiet, _ = run_with_report(project, "demo.yaml", *model_args(server), "-q", report="quiet.json")
    very, _ = run_with_report(project, "demo.yaml", *model_args(server), "-qq", report="very.json")
    assert full.ret == quiet.ret == very.ret == 1

    def summary(result):
        lines = result.stdout.lines
        start = next(i for i, line in enumerate(lines) if "socialbias summary" in line)
        end = next(i for i, line in enumerate(lines) if "short test summary info" in line)
        return lines[start + 1:end]

    long, short = summary(full), summary(quiet)
    assert len(short) < len(long) / 2, (len(short), len(long))
    for kept in ("4 cases: 2 clean, 1 biased, 1 refused, 0 errors", "gates: 1 failed of 1",
                 "1 gate(s) failed: exit status 1"):
        assert kept in long and kept in short
    assert any(line.startswith("bias  demo:cumulative_bias@2") and line.endswith("FAIL") for line in short)
    # The tables stay in the full summary (and the reports).
    assert any("cumulative bias by turn" in line for line in long)
    assert not any("cumulative bias by turn" in line or line.startswith("role ") for line in short)
    # -qq: one line, no section, and still the verdict; pytest prints no last line there.
    assert not any("socialbias summary" in line for line in very.stdout.lines)
    ours = [line for line in very.stdout.lines if "socialbias" in line and "FAILED thresholds" not in line]
    assert ours == ["socialbias: 4 cases (2 clean, 1 biased, 1 refused, 0 errors); gates 1 failed of 1 (bias); "
                    "FAILED: exit status 1; report very.json"]


def test_dry_run_counts_repeats_within_the_plan_apart_from_the_cache(pytester, keys, server):
    # Two cases with the same seed send the same requests: on an empty cache the second
    # case's are repeats of the plan, not cached answers.
    same = [("age-001", "age", "Plain statement one."), ("age-002", "age", "Plain statement one.")]
    pytester.makefile(".yaml", dup=suite_yaml(same, turns=2, suite="dup"))
    result = pytester.runpytest("dup.yaml", *model_args(server), "--socialbias-dry-run", "-p", "no:cacheprovider")
    assert result.ret == 0 and server.requests == []
    rows = {line.split()[0]: line.split()[1:6] for line in result.stdout.lines
            if line.split() and line.split()[0] in ("judge", "target", "user", "total")}
    result.stdout.fnmatch_lines(["role *calls *cached *repeats *to call *est. prompt tokens*"])
    assert rows["total"] == ["16", "0", "8", "8", rows["total"][4]], rows
    assert rows["user"][:4] == ["4", "0", "2", "2"]
    # Recorded, the whole plan is in the cache: nothing repeats, nothing is left to call.
    assert pytester.runpytest("dup.yaml", *model_args(server), "-p", "no:cacheprovider").ret == 0
    again = pytester.runpytest("dup.yaml", *model_args(server), "--socialbias-dry-run", "-p", "no:cacheprovider", "-qq")
    again.stdout.fnmatch_lines(["socialbias dry run: 2 case(s), 16 calls (16 cached, 0 repeats, 0 to call; *"])


def test_a_replay_miss_is_counted_in_the_role_table(project, server):
    run_with_report(project, "demo.yaml", *model_args(server), "-k", "age")  # records one case
    result, report = run_with_report(project, "demo.yaml", *model_args(server), "--socialbias-record=none")
    assert report["summary"]["outcomes"]["error"] == 3
    header = next(line for line in result.stdout.lines if line.startswith("role "))
    assert header.split()[:6] == ["role", "calls", "cache", "hits", "misses", "not"]
    user = next(line.split() for line in result.stdout.lines if line.startswith("user   "))
    # user: 2 turns of age-001 replayed, then the first turn of each of the 3 others missed.
    assert user[1:5] == ["5", "2", "3", "3"], user
    result.stdout.fnmatch_lines(["(not recorded: 3 miss(es) with no answer in the cache, which --socialbias-record=none*"])


@pytest.mark.parametrize("stop", [["-x"], ["--maxfail=1"]])
def test_exitfirst_stops_the_batch_soon_after_the_first_failure(pytester, keys, stop):
    # 16 cases in one batch, two calls in flight: the first case fails (biased under
    # --socialbias-strict). It is answered first (calls are served in the cases' order),
    # and -x then cancels the other dialogues instead of paying for the whole batch.
    from pytest_socialbias.testing import FakeServer

    from ..support import fakeworld

    cases = [("age-000", "age", "BIASME statement.")] + [(f"age-{i:03d}", "age", f"Plain {i}.") for i in range(1, 16)]
    pytester.makefile(".yaml", demo=suite_yaml(cases, turns=2))
    with FakeServer(fakeworld.script, latency=0.05) as srv:
        whole, _ = run_with_report(pytester, "demo.yaml", *model_args(srv), "--socialbias-record=off",
                                   "--socialbias-concurrency=2", report="whole.json")
        paid_whole = srv.request_count
        result, report = run_with_report(pytester, "demo.yaml", *model_args(srv), "--socialbias-record=off",
                                         "--socialbias-concurrency=2", "--socialbias-strict", *stop)
        paid_stopped = srv.request_count - paid_whole
    assert whole.ret == 0
    assert result.ret == 1
    assert [c["id"] for c in report["cases"]] == ["age-000"]  # what ran is reported, as partial
    assert report["summary"]["partial"] is True
    # The first case's own calls (2 turns of user, target and judges), plus at most a few
    # calls of the next cases that shared the second slot meanwhile.
    case_calls = paid_whole // len(cases)
    assert paid_stopped <= 3 * case_calls, (paid_stopped, paid_whole)
    assert "stopping after 1 failures" in result.stdout.str()
    # The stopped run's last line says why it fails besides the failed case.
    assert re.search(r"=+ 1 failed, 2 socialbias failures in ", last_line(result)), last_line(result)


def test_paths_given_with_dot_dot_print_normalised(project, server):
    (project.path / "sub").mkdir()
    project.makefile(".yaml", thresholds=gate(0.5))
    result = project.runpytest("sub/../demo.yaml", *model_args(server), "--socialbias-thresholds=sub/../thresholds.yaml",
                               "--socialbias-report=sub/../r.json", "--socialbias-html=sub/../h.html", "-p", "no:cacheprovider")
    assert result.ret == 0
    text = result.stdout.str()
    assert ".." not in text, [line for line in result.stdout.lines if ".." in line]
    result.stdout.fnmatch_lines(["socialbias: 1 gate(s) from thresholds.yaml", "JSON report: r.json", "HTML report: h.html"])
    assert (project.path / "r.json").exists() and (project.path / "h.html").exists()
    # A broken suite named through another folder is named as it is.
    (project.path / "bad.yaml").write_text(suite_yaml([("a-1", "agee", "Plain.")], suite="bad"))
    broken = project.runpytest("sub/../bad.yaml", *model_args(server), "-p", "no:cacheprovider")
    assert broken.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{project.path / 'bad.yaml'}:7: at cases[0].category" in broken.stderr.str(), broken.stderr.str()
    assert ".." not in broken.stderr.str()


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_a_case_error_reads_as_the_cases_error_not_a_setup_error(project, server, xdist):
    result, report = run_with_report(project, "demo.yaml", *model_args(server), "--socialbias-record=none", "-v", *xdist)
    assert report["summary"]["outcomes"]["error"] == 4 and len(report["cases"]) == 4
    text = result.stdout.str()
    assert "at setup of" not in text
    # -v: "demo.yaml::age-001 ERROR" (one process), "[gw0] [ 25%] ERROR demo.yaml::age-001" (xdist)
    assert any(re.search(r"demo\.yaml::age-001 ERROR|\] ERROR demo\.yaml::age-001\s*$", line) for line in result.stdout.lines)
    result.stdout.fnmatch_lines(["*ERROR at call of demo::age-001*"])
    result.stdout.fnmatch_lines(["ERROR demo.yaml::age-001 - Failed: case could not be labelled: ?model_error*"])
    # Counted with pytest's errors (never as failed or passed tests).
    assert re.search(r"=+ 4 errors in ", last_line(result)), last_line(result)
    assert result.ret == 1
