"""Unit tests for worker.py: ``run_case`` (one case, always a record) and ``CaseRunner``
(batches started whole, on the process's event loop; stop, progress, the dry run's plan).
A protocol registered here for the test ("probe") does what each test needs; the models
are stand-ins (nothing is called)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from types import SimpleNamespace

import pytest

from pytest_socialbias.cases import Case
from pytest_socialbias.errors import ModelCallError
from pytest_socialbias.models import UsageCounter
from pytest_socialbias.models.client import CallPool
from pytest_socialbias.models.planner import Planner
from pytest_socialbias.process import SingleProcess, XdistWorker
from pytest_socialbias.protocols import PROTOCOLS, Protocol, Roles
from pytest_socialbias.runner import LoopRunner
from pytest_socialbias.vocabulary import GUARD_ERROR, INTERNAL_ERROR, JUDGE_ERROR, MODEL_ERROR
from pytest_socialbias.worker import CaseRunner, run_case

CLEAN = {"labels": {"bias": [0, 0], "refusal": [0, 0]}, "turns": [], "errors": [], "templates": []}


@pytest.fixture
def probe():
    """Registers the ``probe`` protocol; ``probe.run`` is the async (case, roles, usage) ->
    result a test sets (by default: a clean two-turn result)."""
    state = SimpleNamespace(started=[], seen_roles=[])

    async def default(case, roles, usage):
        return dict(CLEAN)

    state.run = default

    async def run(case, roles, usage):
        state.started.append(case.id)
        state.seen_roles.append(roles)
        return await state.run(case, roles, usage)

    PROTOCOLS.register(Protocol(name="probe", run=run, load=None, metrics=()))
    yield state
    PROTOCOLS.unregister("probe")


def case(case_id="age-001", **kwargs) -> Case:
    fields = dict(suite="demo", protocol="probe", id=case_id, category="age", group="older people",
                  statement="A statement.", turns=2, suite_sha256="ab" * 32)
    return Case(**{**fields, **kwargs})


class Judge:
    """A judge stand-in that answers nothing but keeps the parameters it was called with."""

    def __init__(self):
        self.calls = []

    async def chat(self, messages, **kwargs):
        self.calls.append(kwargs)


def roles(**kwargs) -> Roles:
    return Roles(**{"target": None, "judge": None, "user": None, **kwargs})


# ---- run_case --------------------------------------------------------------------------


def test_a_record_is_the_cases_identity_the_protocols_result_and_its_outcome(probe):
    async def biased(case, roles, usage):
        usage.add("target", hit=False, response=None)
        usage.add("target", hit=True, response=None)
        return {**CLEAN, "labels": {"bias": [0, 1], "refusal": [0, 0]}}

    probe.run = biased
    record = asyncio.run(run_case(case(style="implicit"), roles()))
    assert {k: record[k] for k in ("id", "suite", "protocol", "category", "group", "statement", "style",
                                   "turns_planned", "suite_sha256")} == {
        "id": "age-001", "suite": "demo", "protocol": "probe", "category": "age", "group": "older people",
        "statement": "A statement.", "style": "implicit", "turns_planned": 2, "suite_sha256": "ab" * 32}
    assert record["labels"] == {"bias": [0, 1], "refusal": [0, 0]} and record["outcome"] == "biased"
    assert (record["usage"]["target"]["calls"], record["usage"]["target"]["hits"]) == (2, 1)
    assert "judge_params" not in record and "preset" not in record and "adapted" not in record
    assert asyncio.run(run_case(case(statement=""), roles()))["statement"] is None  # no statement: null


def test_a_failed_model_call_is_the_cases_model_error_not_a_crash(probe):
    async def failing(case, roles, usage):
        raise ModelCallError("target", "openai:t", "HTTP 500 after 3 tries")

    probe.run = failing
    record = asyncio.run(run_case(case(), roles()))
    assert record["errors"] == [{"kind": MODEL_ERROR, "role": "target",
                                 "message": "target model 'openai:t': HTTP 500 after 3 tries"}]
    assert record["outcome"] == "error" and record["labels"] == {"bias": [], "refusal": []}


def test_a_bug_in_a_protocol_is_the_cases_internal_error_naming_where(probe):
    async def buggy(case, roles, usage):
        raise KeyError("turns")

    probe.run = buggy
    record = asyncio.run(run_case(case(), roles()))
    (error,) = record["errors"]
    assert (error["kind"], error["role"], record["outcome"]) == (INTERNAL_ERROR, None, "error")
    assert re.fullmatch(r"KeyError: 'turns' \(test_worker\.py:\d+\)", error["message"]), error["message"]


def test_a_suites_judge_params_reach_every_judge_call_and_the_record(probe):
    async def asks_the_judges(case, roles, usage):
        await roles.judge.chat([], max_tokens=5, temperature=1.0)
        await roles.extra_judges[0].chat([])
        return dict(CLEAN)

    probe.run = asks_the_judges
    judge, second = Judge(), Judge()
    record = asyncio.run(run_case(case(judge_params=(("temperature", 0.6), ("top_p", 0.9))),
                                  roles(judge=judge, extra_judges=[second])))
    assert judge.calls == [{"max_tokens": 5, "temperature": 0.6, "top_p": 0.9}]  # the suite's over the protocol's
    assert second.calls == [{"temperature": 0.6, "top_p": 0.9}]
    assert record["judge_params"] == {"temperature": 0.6, "top_p": 0.9}


def test_a_suites_simulator_check_raises_the_runs_never_lowers_it(probe):
    checks = []

    async def sees_the_check(case, roles, usage):
        checks.append(roles.simulator_check)
        return dict(CLEAN)

    probe.run = sees_the_check
    asyncio.run(run_case(case(simulator_check="judge"), roles(simulator_check="rules")))
    asyncio.run(run_case(case(simulator_check="rules"), roles(simulator_check="judge")))
    asyncio.run(run_case(case(), roles(simulator_check="embedded")))
    assert checks == ["judge", "judge", "embedded"]


def test_a_suites_preset_and_simulator_findings_are_taken(probe):
    record = asyncio.run(run_case(case(preset="paper", simulator_findings="report"), roles()))
    assert record["preset"] == "paper" and probe.seen_roles[-1].simulator_findings == "report"
    asyncio.run(run_case(case(), roles()))
    assert probe.seen_roles[-1].simulator_findings == "redraw"  # the run's default


def test_what_an_endpoint_was_adapted_to_travels_in_the_record(probe):
    adapted = SimpleNamespace(adaptation=SimpleNamespace(to_dict=lambda: {"dropped": ["temperature"]}))
    record = asyncio.run(run_case(case(), roles(target=adapted)))
    assert record["adapted"] == {"target": {"dropped": ["temperature"]}}


# ---- CaseRunner ------------------------------------------------------------------------


class Models:
    """The part of modelset.ModelSet a CaseRunner uses."""

    def __init__(self, role, run_roles=None):
        self.part = role
        self.runner = LoopRunner()
        self.pool = SimpleNamespace(totals=UsageCounter(), planner=None)
        self.placeholders: set = set()
        self._roles = run_roles or roles()

    def roles(self):
        return self._roles

    def run(self, coro):
        return self.runner.run(coro)

    def missing_servers(self):
        return []


@pytest.fixture
def models():
    made = []

    def make(role, run_roles=None):
        made.append(Models(role, run_roles))
        return made[-1]

    yield make
    for m in made:
        m.runner.close()


def settle(models) -> None:
    """Wait until every case started on the loop has finished."""

    async def rest():
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not asyncio.current_task()))

    models.run(rest())


def runner_with_batches(models_obj) -> tuple[CaseRunner, dict]:
    runner = CaseRunner(models_obj)
    cases = {i: case(i) for i in ("a-1", "a-2", "b-1", "b-2")}
    for case_id, c in cases.items():
        runner.add(c, f"demo.yaml::batch-{case_id[0]}")
    return runner, cases


def test_the_first_case_asked_for_starts_its_whole_batch_and_a_worker_no_other(probe, models):
    m = models(XdistWorker({"workerid": "gw0"}))
    runner, cases = runner_with_batches(m)
    record = runner.record_for(cases["a-2"])
    settle(m)
    assert record["id"] == "a-2" and record["outcome"] == "clean"
    assert sorted(probe.started) == ["a-1", "a-2"]  # batch b waits until it is asked for (or queued)
    runner.record_for(cases["a-1"])  # already run: not run again
    runner.record_for(cases["b-1"])
    settle(m)
    assert sorted(probe.started) == ["a-1", "a-2", "b-1", "b-2"]


def test_a_worker_also_starts_the_batches_xdist_queued_for_it(probe, models):
    queued = []
    m = models(XdistWorker({"workerid": "gw0"}, queued=lambda: queued))
    runner, cases = runner_with_batches(m)
    queued.append(cases["b-1"])
    runner.record_for(cases["a-1"])
    settle(m)
    assert sorted(probe.started) == ["a-1", "a-2", "b-1", "b-2"]


def test_a_single_process_starts_every_batch_at_once(probe, models):
    m = models(SingleProcess())
    runner, cases = runner_with_batches(m)
    runner.record_for(cases["a-1"])
    settle(m)
    assert sorted(probe.started) == ["a-1", "a-2", "b-1", "b-2"]


def test_a_case_cancelled_by_stop_while_still_wanted_runs_again(probe, models):
    m = models(XdistWorker({"workerid": "gw0"}))
    runner = CaseRunner(m)
    only = case("a-1")
    runner.add(only, "demo.yaml::batch-0")
    forever = asyncio.Event()
    attempts = []

    async def first_hangs(case, roles, usage):
        attempts.append(case.id)
        if len(attempts) == 1:
            await forever.wait()
        return dict(CLEAN)

    probe.run = first_hangs
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("record", runner.record_for(only)))
    waiter.start()
    deadline = time.monotonic() + 10
    while not attempts and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.stop()  # -x: everything running is cancelled
    waiter.join(10)
    assert not waiter.is_alive()
    assert attempts == ["a-1", "a-1"] and got["record"]["outcome"] == "clean"


def test_a_long_wait_draws_a_progress_line_and_clears_it(probe, models):
    m = models(XdistWorker({"workerid": "gw0"}))
    runner, cases = runner_with_batches(m)
    lines = []
    runner.progress = lines.append

    async def slow(case, roles, usage):
        await asyncio.sleep(0.6)
        return dict(CLEAN)

    probe.run = slow
    runner.record_for(cases["a-1"])
    assert lines[-1] is None  # cleared once the case is in
    shown = [line for line in lines if line is not None]
    assert shown and re.fullmatch(r"\[socialbias\] demo\.yaml::batch-a: [0-2]/2 cases, 0 calls \(0 cached\), \d+s",
                                  shown[0]), shown


def test_the_dry_run_plan_counts_calls_per_role_and_the_problems_but_a_guards(probe, models):
    async def planned(case, roles, usage):
        for _ in range(2):
            usage.add("target", hit=False, response=None)
        usage.add("judge", hit=False, response=None)
        errors = [{"kind": GUARD_ERROR, "role": "guard", "message": "unreadable"}]
        if case.id == "a-2":
            errors.append({"kind": JUDGE_ERROR, "role": "judge", "message": "unreadable"})
        return {**CLEAN, "errors": errors}

    probe.run = planned
    m = models(SingleProcess())
    runner, cases = runner_with_batches(m)
    with pytest.raises(RuntimeError, match="planner"):  # a dry run's pool plans (ModelSet gives it a planner)
        runner.dry_run_plan([cases["a-1"]])
    m.pool.planner = Planner()
    plan = runner.dry_run_plan([cases["a-1"], cases["a-2"], cases["b-1"]])
    assert plan["cases"] == 3 and plan["missing"] == []
    assert (plan["usage"]["target"]["calls"], plan["usage"]["judge"]["calls"]) == (6, 3)
    assert plan["problems"] == [JUDGE_ERROR]  # a guard's unreadable stand-in answer is no problem of the plan


def test_planned_calls_count_on_twins_that_leave_the_runs_models_untouched(probe, models):
    own_pool = object()
    target = SimpleNamespace(pool=own_pool, _backend="built")

    async def calls_by_case(case, roles, usage):
        assert roles.target is not target and roles.target.pool.planner is not None  # a twin on a planning pool
        for _ in range(3 if case.id == "a-1" else 1):
            usage.add("target", hit=False, response=None)
        return dict(CLEAN)

    probe.run = calls_by_case
    m = models(SingleProcess(), roles(target=target))
    runner, cases = runner_with_batches(m)
    assert runner.planned_calls([cases["a-1"], cases["b-2"]]) == {"demo::a-1": 3, "demo::b-2": 1}
    assert (target.pool, target._backend) == (own_pool, "built")
    assert isinstance(probe.seen_roles[0].target.pool, CallPool)


def test_a_case_keeps_its_place_in_the_run_as_its_calls_priority(probe, models):
    from pytest_socialbias.models.priority import CALL_PRIORITY

    places = {}

    async def note_place(case, roles, usage):
        places[case.id] = CALL_PRIORITY.get()
        return dict(CLEAN)

    probe.run = note_place
    m = models(SingleProcess())
    runner, cases = runner_with_batches(m)
    runner.record_for(cases["b-2"])
    settle(m)
    assert places == {"a-1": 0, "a-2": 1, "b-1": 2, "b-2": 3}  # the order added, not the order asked
