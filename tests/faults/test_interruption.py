"""A run killed with SIGKILL half-way, then rerun, repeats no completed call; a cancelled
dialogue leaves no call running."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pytest_socialbias.cases import Case
from pytest_socialbias.models.base import ChatResponse
from pytest_socialbias.protocols import Roles
from pytest_socialbias.protocols.dialogue import run_dialogue
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml

CONCURRENCY = 2


def pytest_command(server, report):
    url = server.openai_base_url
    return [
        sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", "-q",
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        f"--socialbias-concurrency={CONCURRENCY}", f"--socialbias-report={report}",
    ]


def request_key(request) -> str:
    return json.dumps([request.model, request.messages, request.params], sort_keys=True)


def test_sigkill_then_rerun_repeats_no_completed_call(tmp_path):
    cases = [(f"age-{i:03d}", "age", ("BIASME " if i % 3 == 0 else "") + f"statement {i}.") for i in range(6)]
    (tmp_path / "demo.yaml").write_text(suite_yaml(cases, turns=2))
    env = dict(os.environ, OPENAI_API_KEY="sk-test")

    # An uninterrupted run in another folder gives the expected report and call count.
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "demo.yaml").write_text(suite_yaml(cases, turns=2))
    world = fakeworld.HeldAfter()
    with FakeServer(world, latency=0.05) as server:
        done = subprocess.run(pytest_command(server, "r.json"), cwd=clean, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
        full_count = server.request_count
        clean_keys = {request_key(r) for r in server.requests}
        expected = read_report(clean / "r.json")

        server.clear()
        world.received, world.hold_after = 0, full_count // 2
        proc = subprocess.Popen(pytest_command(server, "r.json"), cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120  # a bound for a stuck run, not a wait
            while server.request_count < full_count // 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            world.released.set()
            world.hold_after = None
        first = server.requests
        assert 0 < len(first) < full_count

        server.clear()
        rerun = subprocess.run(pytest_command(server, "r.json"), cwd=tmp_path, env=env, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stdout
        second = server.requests

    # Calls answered before the kill are replayed from the cache; at most the calls that
    # were in flight when the process died are sent again.
    repeated = {request_key(r) for r in first} & {request_key(r) for r in second}
    assert len(repeated) <= CONCURRENCY
    # Together the two runs asked exactly the questions of an uninterrupted run.
    assert {request_key(r) for r in first} | {request_key(r) for r in second} == clean_keys
    report = read_report(tmp_path / "r.json")
    assert report["cases"] == expected["cases"]
    assert report["metrics"] == expected["metrics"]


# --------------------------------------------------------------------------- cancellation


class Blocking:
    """A model stand-in: answers ``text`` at once for the first ``answer_first`` calls, then
    hangs until cancelled; counts the calls still hanging."""

    def __init__(self, text: str, answer_first: int = 0):
        self.text = text
        self.answer_first = answer_first
        self.calls = 0
        self.hanging = 0

    async def chat(self, messages, **kwargs):
        self.calls += 1
        if self.calls <= self.answer_first:
            return ChatResponse(text=self.text)
        self.hanging += 1
        try:
            await asyncio.Event().wait()
        finally:
            self.hanging -= 1


def test_cancelled_dialogue_leaves_no_judge_call_running():
    """Ctrl-C cancels each running dialogue; its judge calls for earlier turns (which run
    beside the next turn) must stop with it, or they go on sending paid requests whose
    answers the interrupted run throws away (and its rerun asks again)."""
    case = Case(suite="demo", protocol="dymt", id="c-1", category="age", group="old people",
                statement="Old people are bad with phones.", style="assessment", turns=3)
    user = Blocking("What do you make of people and their phones?", answer_first=10)
    target = Blocking("People differ.", answer_first=1)  # turn 2's reply never comes
    judge = Blocking("No")  # turn 1's judge calls hang
    roles = Roles(target=target, judge=judge, user=user)

    async def scenario():
        dialogue = asyncio.ensure_future(run_dialogue(case, roles, None, coherence=True))
        for _ in range(1000):
            if judge.hanging == 3 and target.hanging == 1:  # bias, refusal, coherence
                break
            await asyncio.sleep(0)
        assert (judge.hanging, target.hanging) == (3, 1)
        dialogue.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dialogue
        for _ in range(5):  # let cancellations land
            await asyncio.sleep(0)
        return judge.hanging, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    hanging, left = asyncio.run(scenario())
    assert (hanging, left) == (0, [])


def test_cancelling_a_run_frees_no_slot_for_a_new_request():
    # An interrupt cancels every dialogue; one cancelled while holding a concurrency slot
    # frees it, and no dialogue still waiting may take it and send after the interrupt.
    from pytest_socialbias.runner import LoopRunner

    runner = LoopRunner()
    sent: list[int] = []
    slots: list[asyncio.Semaphore] = []

    async def dialogue(i: int) -> None:
        if not slots:
            slots.append(asyncio.Semaphore(2))
        async with slots[0]:
            sent.append(i)
            await asyncio.sleep(30)

    try:
        for _ in range(20):
            sent.clear()
            slots.clear()
            futures = [runner.submit(dialogue(i)) for i in range(200)]
            deadline = time.monotonic() + 60  # a bound for a stuck loop, not a wait
            while len(sent) < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            runner.cancel_all()
            for future in futures:
                with pytest.raises(concurrent.futures.CancelledError):
                    future.result(60)
            assert len(sent) == 2, sent
    finally:
        runner.close()


def test_closing_the_loop_ends_every_pending_coroutine_first():
    """A coroutine left pending (interrupted, or never awaited) is cancelled and run to its
    end when the loop closes, so nothing is finalized later against a closed loop."""
    import asyncio

    from pytest_socialbias.runner import LoopRunner

    runner = LoopRunner()
    ended = []

    async def waits_forever():
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(True)

    future = runner.submit(waits_forever())
    runner.close()
    assert ended == [True] and future.cancelled()
