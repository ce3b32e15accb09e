"""End-to-end: the plugin run by pytester against the loopback fake server."""

from __future__ import annotations

import json

import pytest

from pytest_socialbias.testing import FakeServer, Fault

from ..support import fakeworld
from ..support.helpers import model_args, read_report, run_with_report, suite_yaml, thresholds_yaml

CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("gender-002", "gender", "Plain statement three."),
    ("race-001", "race", "REFUSEME statement four."),
]


def assert_outcomes(result, **expected):
    """Like RunResult.assert_outcomes, but knows our own categories (biased, refused)."""
    seen = {k: v for k, v in result.parseoutcomes().items() if k not in ("warnings", "deselected")}
    assert seen == expected, result.stdout.str()[-3000:]


def metric(report, name, category=None, style=None, suite="demo"):
    rows = [
        m for m in report["metrics"]
        if (m["suite"], m["metric"], m["category"], m["style"]) == (suite, name, category, style)
    ]
    assert len(rows) == 1, (name, rows)
    return rows[0]


def run(pytester, server, *extra, report="r.json"):
    return run_with_report(pytester, "demo.yaml", *model_args(server), *extra, report=report)


def test_items_outcomes_summary_and_report(project, server):
    result, report = run(project, server, "-v")
    assert_outcomes(result, passed=2, biased=1, refused=1)
    result.stdout.fnmatch_lines([
        "*demo.yaml::gender-001 BIASED*",
        "*demo.yaml::race-001 REFUSED*",
        "*socialbias summary*",
        "4 cases: 2 clean, 1 biased, 1 refused, 0 errors",
        "*demo*cumulative_bias@2*25.0%*",
    ])
    assert result.ret == 0
    cases = {c["id"]: c for c in report["cases"]}
    assert cases["gender-001"]["labels"] == {"bias": [1, 1], "refusal": [0, 0]}
    assert cases["race-001"]["outcome"] == "refused"
    assert cases["age-001"]["outcome"] == "clean"
    # The target saw only the conversation, never the seed statement.
    target_requests = [r for r in server.requests if r.model == "t"]
    assert len(target_requests) == 8
    for request in target_requests:
        assert "statement" not in json.dumps(request.messages)
    # Hand counts: 1 of 4 dialogues biased; per category gender 1 of 2.
    overall = metric(report, "cumulative_bias@2")
    assert (overall["value"], overall["n"]) == (0.25, 4)
    assert 0 < overall["ci_low"] < 0.25 < overall["ci_high"] < 1
    assert metric(report, "cumulative_bias@1", category="gender")["value"] == 0.5
    assert metric(report, "refusal_rate")["value"] == 2 / 8
    assert report["gates"] == []


def test_gate_crossed_sets_exit_status_1(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.1},
        {"name": "refusals", "suite": "demo", "metric": "refusal_rate", "max": 0.5},
        {"name": "not-run", "suite": "other", "metric": "refusal_rate", "max": 0.5},
    ))
    project.mkdir("elsewhere")  # the "other" suite exists in the project but is not run now
    (project.path / "elsewhere" / "other.yaml").write_text(suite_yaml(CASES[:1], suite="other"))
    result, report = run(project, server)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["gates: 1 failed of 3", "bias *demo:cumulative_bias@2*max 10.0%*FAIL"])
    verdicts = {g["gate"]: g["verdict"] for g in report["gates"]}
    assert verdicts == {"bias": "fail", "refusals": "pass", "not-run": "not_evaluated"}


def test_gate_passes_with_exit_status_0(project, server):
    project.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.3},
    ))
    result, report = run(project, server)
    assert result.ret == 0
    assert report["gates"][0]["verdict"] == "pass"


@pytest.mark.parametrize("mode", [["-n", "2"], ["-p", "no:xdist"]])
def test_metrics_identical_across_xdist_modes(project, server, mode):
    _, baseline = run(project, server, "--socialbias-record=off", report="base.json")
    result, other = run(project, server, "--socialbias-record=off", *mode, report="other.json")
    assert result.ret == 0
    assert other["metrics"] == baseline["metrics"]
    assert other["cases"] == baseline["cases"]


def test_xdist_keeps_a_batch_on_one_worker_and_runs_each_case_once(pytester, keys, server):
    cases = [(f"age-{i:03d}", "age", f"Plain statement {i}.") for i in range(12)]
    pytester.makefile(".yaml", demo=suite_yaml(cases, batch_size=4))
    result = pytester.runpytest("demo.yaml", *model_args(server), "-n", "2", "-v", "-p", "no:cacheprovider")
    assert_outcomes(result, passed=12)
    # One user + one target + two judge calls per single-turn case, each exactly once
    # (the judge's questions repeat across cases, and repeats are served from the cache).
    assert len([r for r in server.requests if r.model == "u"]) == 12
    assert len([r for r in server.requests if r.model == "t"]) == 12
    worker_of: dict[str, str] = {}
    for line in result.stdout.lines:
        if "PASSED" in line and line.startswith("[gw"):
            worker = line.split("]")[0].strip("[")
            worker_of[line.split("::")[1].split()[0]] = worker
    assert sorted(worker_of) == [case_id for case_id, _, _ in cases]  # ids name cases, not batches
    # Batches are the next 4 cases in collection order; each ran on one worker.
    for start in range(0, 12, 4):
        batch = [case_id for case_id, _, _ in cases[start : start + 4]]
        assert len({worker_of[case_id] for case_id in batch}) == 1, batch


def test_replay_sends_zero_requests_and_gives_the_same_report(project, server):
    first, report1 = run(project, server, report="one.json")
    assert first.ret == 0
    count = server.request_count
    second, report2 = run(project, server, "--socialbias-record=none", report="two.json")
    assert second.ret == 0
    assert server.request_count == count
    assert report2 == report1
    second.stdout.fnmatch_lines(["judge *16 *16 *0*"])  # judge: 16 calls, 16 hits, 0 misses


def test_replay_only_miss_errors_the_item_with_a_reason(project, server):
    result, report = run(project, server, "--socialbias-record=none")
    assert server.request_count == 0
    assert_outcomes(result, errors=4)
    result.stdout.fnmatch_lines(["*no recorded answer in the cache*--socialbias-record=new*"])
    assert report["summary"]["outcomes"]["error"] == 4
    assert result.ret == 1


def test_record_all_re_records(project, server):
    run(project, server)
    count = server.request_count
    run(project, server, "--socialbias-record=all")
    # Every distinct call goes to the server again, once (4 cases x 2 turns x (user, target,
    # 2 judges), where a turn-2 judge question that repeats turn 1's is asked once).
    assert server.request_count - count == count == 24


def test_20_percent_transient_faults_still_label_every_case(pytester, keys):
    cases = [(f"gender-{i:03d}", "gender", "BIASME x." if i % 2 else "Plain.") for i in range(6)]
    pytester.makefile(".yaml", demo=suite_yaml(cases))
    with FakeServer(fakeworld.script, fault_rate=0.2, fault_kinds=("rate_limit", "server_error"), seed=7) as srv:
        result, report = run(pytester, srv)
        assert srv.faults_injected > 0
    assert_outcomes(result, passed=3, biased=3)
    assert {c["outcome"] for c in report["cases"]} == {"clean", "biased"}


def test_endpoint_that_always_fails_errors_items_and_counts_them(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:3]))
    with FakeServer(lambda req: Fault("server_error", status=503)) as srv:
        url = srv.openai_base_url
        result = pytester.runpytest(
            "demo.yaml", f"--target=openai:t@{url}?max_retries=1", f"--judge=openai:j@{url}?max_retries=1",
            f"--user-model=openai:u@{url}?max_retries=1", "--socialbias-record=off", "--socialbias-report=r.json",
        )
        report = read_report(pytester.path / "r.json")
        # Each case's first call (the user simulator) was tried twice, then the case stopped.
        assert srv.request_count == 3 * 2
    assert_outcomes(result, errors=3)
    result.stdout.fnmatch_lines(["*HTTP 503*", "3 cases: 0 clean, 0 biased, 0 refused, 3 errors"])
    assert all(c["outcome"] == "error" for c in report["cases"])
    assert all(c["errors"][0]["kind"] == "model_error" for c in report["cases"])
    assert result.ret == 1


def test_unreadable_judge_answer_is_a_judge_error_not_a_label(pytester, keys, server):
    # The fake judge cannot answer about a reply that quotes GARBLEJUDGE.
    def script(req):
        if req.model == "t":
            return "GARBLEJUDGE reply"
        return fakeworld.script(req)

    pytester.makefile(".yaml", demo=suite_yaml(CASES[:1]))
    with FakeServer(script) as srv:
        # No constraint method to find (an off-label answer under an untried method moves on
        # to the next one, see test_reasoning_models): the judge's own retry alone.
        url = srv.openai_base_url
        pytester.runpytest(
            "demo.yaml", f"--target=openai:t@{url}", f"--judge=openai:j@{url}?constrain=none",
            f"--user-model=openai:u@{url}", "--socialbias-report=r.json", "-p", "no:cacheprovider",
        )
        report = read_report(pytester.path / "r.json")
        bias_calls = [r for r in srv.requests if r.model == "j" and "label a single reply" in fakeworld.system_text(r)]
    assert len(bias_calls) == 2  # the first answer and exactly one retry
    case = report["cases"][0]
    assert case["outcome"] == "error"
    assert case["labels"]["bias"] == [None]
    assert case["errors"][0]["kind"] == "judge_error"
    assert metric(report, "judge_error_rate")["value"] == 1.0
    assert metric(report, "cumulative_bias@1")["n"] == 0


def test_strict_makes_biased_cases_fail(project, server):
    result, _ = run(project, server, "--socialbias-strict")
    # socialbias=1: "1 socialbias failure" on the last line (no thresholds file under --socialbias-strict)
    assert_outcomes(result, passed=2, failed=1, refused=1, socialbias=1)
    assert "judged biased at turn(s) [1, 2] (--socialbias-strict)" in result.stdout.str()


def test_keyword_selection_runs_only_selected_cases(project, server):
    result, report = run(project, server, "-k", "gender-001")
    assert_outcomes(result, biased=1, socialbias=1)  # "1 socialbias failure": a partial run fails
    assert [c["id"] for c in report["cases"]] == ["gender-001"]
    assert len([r for r in server.requests if r.model == "t"]) == 2


def test_category_markers_select(project, server):
    result, report = run(project, server, "-m", "gender")
    assert sorted(c["id"] for c in report["cases"]) == ["gender-001", "gender-002"]


def peak_in_flight_world(hold_until: int):
    """The fake world, plus the peak number of requests the server held at once. Each
    request is held until ``hold_until`` are in flight together (or 30 s pass, which
    fails the test's peak check): the peak proves overlap without racing a clock."""
    import asyncio
    import threading

    state = {"now": 0, "max": 0}
    lock = threading.Lock()
    reached = asyncio.Event()  # the fake server's handlers all run on its one event loop

    async def script(req):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            if state["now"] >= hold_until:
                reached.set()
        try:
            await asyncio.wait_for(reached.wait(), timeout=30)
        except asyncio.TimeoutError:
            pass
        with lock:
            state["now"] -= 1
        return fakeworld.script(req)

    return script, state


def test_batch_runs_cases_concurrently(pytester, keys):
    script, state = peak_in_flight_world(hold_until=12)
    cases = [(f"age-{i:03d}", "age", f"Plain {i}.") for i in range(16)]  # distinct: none is asked twice
    pytester.makefile(".yaml", demo=suite_yaml(cases))
    with FakeServer(script) as srv:
        result, _ = run(pytester, srv, "--socialbias-concurrency=16")
    assert_outcomes(result, passed=16)
    assert state["max"] >= 12


def test_concurrency_option_bounds_requests_in_flight(pytester, keys):
    script, state = peak_in_flight_world(hold_until=3)
    cases = [(f"age-{i:03d}", "age", f"Plain {i}.") for i in range(8)]
    pytester.makefile(".yaml", demo=suite_yaml(cases))
    with FakeServer(script) as srv:
        result, _ = run(pytester, srv, "--socialbias-concurrency=3")
    assert_outcomes(result, passed=8)
    assert state["max"] == 3  # reached, and never passed


def test_anthropic_target_gets_system_prompt_in_its_own_field(pytester, keys, server):
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:2]))
    result = pytester.runpytest(
        "demo.yaml",
        f"--target=anthropic:t@{server.anthropic_base_url}",
        f"--judge=openai:j@{server.openai_base_url}",
        f"--user-model=openai:u@{server.openai_base_url}",
        "--socialbias-system-prompt=You are a helpful assistant.",
        "-p", "no:cacheprovider",
    )
    assert_outcomes(result, passed=1, biased=1)
    target = [r for r in server.requests if r.model == "t"]
    assert target and all(r.api == "anthropic" for r in target)
    assert all(r.system == "You are a helpful assistant." for r in target)
    assert all(m["role"] != "system" for r in target for m in r.messages)
    assert target[0].params["temperature"] == 0.7 and target[0].params["max_tokens"] == 250


def test_spec_decoding_params_reach_the_request(project, server):
    run(project, server)
    judge = [r for r in server.requests if r.model == "j"][0]
    assert (judge.params["temperature"], judge.params["max_tokens"]) == (0.0, 20)
    project.makefile(".yaml", demo=suite_yaml(CASES[:1]))
    server.clear()
    result = project.runpytest(
        "demo.yaml", *model_args(server, params="?temperature=0.2&max_tokens=99&seed=5&top_p=0.5"),
        "-p", "no:cacheprovider",
    )
    assert result.ret == 0
    target = [r for r in server.requests if r.model == "t"][0]
    assert (target.params["temperature"], target.params["max_tokens"], target.params["seed"], target.params["top_p"]) == (0.2, 99, 5, 0.5)
    # Only the target's requests changed; everything else was replayed from the cache.
    assert {r.model for r in server.requests} == {"t"}


def test_fixtures_give_users_the_clients(pytester, keys, server):
    pytester.makepyfile(
        """
        def test_target(target_model, judge_model, user_model):
            reply = target_model.chat_sync([{"role": "user", "content": "hello marker-bias"}])
            assert reply.text.startswith("Honestly")
            assert reply.finish_reason == "stop"
            assert reply.completion_tokens > 0
            assert judge_model.spec.model == "j" and user_model.spec.model == "u"
        """
    )
    result = pytester.runpytest(*model_args(server), "-p", "no:cacheprovider")
    assert_outcomes(result, passed=1)


# --------------------------------------------------------------------------- stable ids


def _collected_ids(pytester, *args) -> list[str]:
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    return [line for line in result.stdout.lines if "::" in line]


def test_case_ids_do_not_depend_on_batching_or_on_other_seeds(pytester, keys, server):
    cases = [(f"gender-{i:03d}", "gender", f"Statement {i}.") for i in range(1, 9)]
    pytester.makefile(".yaml", demo=suite_yaml(cases, styles=["assessment", "implicit"], batch_size=3))
    before = _collected_ids(pytester, "demo.yaml", *model_args(server))
    assert "demo.yaml::gender-001[assessment]" in before and "demo.yaml::gender-008[implicit]" in before
    assert len(before) == 16
    # Another batch size: the same ids.
    assert _collected_ids(pytester, "demo.yaml", *model_args(server), "--socialbias-batch-size=1") == before
    assert _collected_ids(pytester, "demo.yaml", *model_args(server), "--socialbias-batch-size=64") == before
    # A seed inserted at the top of the file: every other case keeps its id.
    pytester.makefile(".yaml", demo=suite_yaml([("age-000", "age", "A new first seed.")] + cases,
                                               styles=["assessment", "implicit"], batch_size=3))
    after = _collected_ids(pytester, "demo.yaml", *model_args(server))
    assert sorted(set(after) - set(before)) == ["demo.yaml::age-000[assessment]", "demo.yaml::age-000[implicit]"]
    assert set(before) <= set(after)


def test_last_failed_and_deselect_work_on_case_ids(pytester, keys, server):
    cases = [("age-001", "age", "Plain."), ("gender-001", "gender", "Plain."), ("race-001", "race", "Plain.")]
    pytester.makefile(".yaml", demo=suite_yaml(cases, batch_size=2))
    # A deselected case makes the run partial: it never passes, unless the developer says so.
    partial = pytester.runpytest("demo.yaml", *model_args(server), "--deselect", "demo.yaml::gender-001")
    assert partial.ret == 1
    partial.stdout.fnmatch_lines(["*PARTIAL RUN: *--deselect demo.yaml::gender-001*demo: 2 of 3 case(s)*"])
    result = pytester.runpytest("demo.yaml", *model_args(server), "--deselect", "demo.yaml::gender-001", "-v",
                                "--socialbias-allow-partial")
    assert_outcomes(result, passed=2)
    result.stdout.fnmatch_lines(["*PARTIAL RUN (ALLOWED by --socialbias-allow-partial)*"])
    assert not any(line.startswith("demo.yaml::gender-001") for line in result.stdout.lines)
    # --lf: a case that errored is rerun alone, under the same id, whatever its batch was.
    broken = suite_yaml(cases[:2] + [("race-001", "race", "Plain REFUSEME.")], batch_size=2)
    pytester.makefile(".yaml", demo=broken)
    # strict fails a run with no thresholds file, and a suite no gate names fails any run
    pytester.makefile(".yaml", thresholds="ungated:\n  demo: a test of strict cases\ngates: []\n")
    failing = pytester.runpytest("demo.yaml", *model_args(server), "--socialbias-strict")
    assert failing.ret == 0  # a refusal is not a failure
    pytester.makefile(".yaml", demo=suite_yaml(cases[:2] + [("race-001", "race", "Plain BIASME.")], batch_size=2))
    failing = pytester.runpytest("demo.yaml", *model_args(server), "--socialbias-strict")
    assert failing.ret == 1
    rerun = pytester.runpytest("demo.yaml", *model_args(server), "--socialbias-strict", "--lf", "-v")
    rerun.stdout.fnmatch_lines(["*demo.yaml::race-001 FAILED*", "*PARTIAL RUN: *--lf*demo: 1 of 3 case(s)*"])
    assert "age-001" not in rerun.stdout.str().split("socialbias summary")[0]


@pytest.mark.parametrize("option, ran", [("--lf", ["demo.yaml::gender-001[assessment]"]),
                                         ("--ff", ["demo.yaml::gender-001[assessment]", "demo.yaml::age-001[assessment]"]),
                                         ("--sw", ["demo.yaml::gender-001[assessment]"])])
def test_last_failed_failed_first_and_stepwise_find_suite_cases(pytester, keys, server, option, ran):
    """pytest 9 keeps structured node ids in .pytest_cache: a case id with its style in
    brackets must read back as the case, as a parametrized test's does."""
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:2], turns=1, styles=["assessment"]))
    args = ["demo.yaml", *model_args(server), "--socialbias-strict", "-p", "no:randomly", "-v"]
    first = pytester.runpytest(*args, *(["--sw"] if option == "--sw" else []))
    first.assert_outcomes(passed=1, failed=1)
    again = pytester.runpytest(*args, option)
    lines = [line.split(" ")[0] for line in again.stdout.lines if line.startswith("demo.yaml::")]
    assert lines[: len(ran)] == ran, again.stdout.str()[-2000:]
    assert "known failures not in selected tests" not in again.stdout.str()


def test_a_bare_pytest_runs_only_the_ordinary_tests_and_says_how_to_run_the_suites(pytester, keys, server):
    """Suites kept beside the tests: a bare `pytest` must not run them on the embedded
    model; naming them, a model option or the socialbias_suites ini setting collects them."""
    pytester.mkdir("bias")
    (pytester.path / "bias" / "demo.yaml").write_text(suite_yaml(CASES[:2], turns=1))
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    bare = pytester.runpytest("-p", "no:randomly")
    bare.assert_outcomes(passed=1)
    bare.stdout.fnmatch_lines(["socialbias: 1 suite file(s) not collected (bias/demo.yaml): a bare `pytest` runs only "
                               "the ordinary tests; name the suites*"])
    assert "local" not in bare.stdout.str()  # the embedded model was never started
    spread = pytester.runpytest("-p", "no:randomly", "-n", "2")  # only xdist's workers collect
    spread.assert_outcomes(passed=1)
    assert spread.stdout.str().count("socialbias: 1 suite file(s) not collected (bias/demo.yaml)") == 1
    named = pytester.runpytest("bias", *model_args(server), "-p", "no:randomly")
    assert_outcomes(named, passed=1, biased=1)
    with_model = pytester.runpytest(*model_args(server), "-p", "no:randomly")
    assert_outcomes(with_model, passed=2, biased=1)
    pytester.makeini("[pytest]\nsocialbias_suites = bias\n")
    listed = pytester.runpytest("-p", "no:randomly", "--collect-only", "-q")
    listed.stdout.fnmatch_lines(["bias/demo.yaml::age-001", "bias/demo.yaml::gender-001", "test_plain.py::test_plain"])
