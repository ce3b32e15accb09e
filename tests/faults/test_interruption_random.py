"""Runs interrupted by SIGKILL or SIGINT at seeded random points, then rerun.

For each kill point: the rerun sends no request the interrupted run had an answer for
(only the few in flight at the kill may go again), the cache left behind passes
``python -m pytest_socialbias cache verify``, and the rerun's JSON report equals an
uninterrupted run's byte for byte. SIGINT must end pytest cleanly (exit status 2).

The fake server's script takes the latency itself and notes when each answer leaves, so
"answered before the kill" is measured at the server, not guessed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from pytest_socialbias.cache import CACHE_FILE
from pytest_socialbias.cachecheck import verify_cache
from pytest_socialbias.testing import FakeServer

from ..e2e.test_dymt_e2e import dymt_yaml, plan_statement
from ..support.dymtworld import DymtWorld
from ..support.fakeworld import HeldAfter

LATENCY = 0.05
CONCURRENCY = 6
POINTS = 3  # kill points per signal

ROLES = ("target", "judge", "user")
PLANS = ["000", "100", "010", "011", "111", "0R0"]
CASES = [(f"c-{i:02d}", ("age", "gender", "race")[i % 3], plan) for i, plan in enumerate(PLANS)]


class TimedWorld(HeldAfter):
    """DymtWorld answering after LATENCY, logging (request key, time the answer left);
    held from ``hold_after`` requests on until ``released`` (fakeworld.HeldAfter)."""

    def __init__(self):
        super().__init__()
        self.world = DymtWorld()
        self.answered: list[tuple[str, float]] = []

    async def __call__(self, req):
        await self.hold()
        await asyncio.sleep(LATENCY)
        answer = self.world(req)
        self.answered.append((request_key(req), time.monotonic()))
        return answer


def request_key(req) -> str:
    # Model and messages tell every request of this suite apart (the clean run checks it),
    # and the cache stores both as sent, so server log and cache rows compare.
    return json.dumps([req.model, req.messages], sort_keys=True)


def cached_keys(path) -> set[str]:
    """The cache's rows as request keys, but the endpoint checks' (the fake server answers
    those itself: they are not in its request log)."""
    with sqlite3.connect(path / ".socialbias" / CACHE_FILE) as db:
        requests = [json.loads(row[0]) for row in db.execute("SELECT request FROM calls")]
    db.close()
    return {json.dumps([r["model"], r["messages"]], sort_keys=True) for r in requests if not is_check(r)}


def is_check(request: dict) -> bool:
    return (request.get("template") or "").startswith("endpoint_check@")


@pytest.fixture(scope="module")
def timed():
    return TimedWorld()


@pytest.fixture(scope="module")
def server(timed):
    # One server for every run of the module: its URL is part of every cache key and of
    # the report, so the interrupted runs must share it with the uninterrupted one.
    with FakeServer(timed) as srv:
        yield srv
        assert srv.script_errors == []


def project(path):
    path.mkdir()
    (path / "demo.yaml").write_text(
        dymt_yaml([(i, c, plan_statement(i, p)) for i, c, p in CASES], turns=len(PLANS[0]))
    )
    return path


def pytest_command(server, path):
    url = server.openai_base_url
    return [
        sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", "-q",
        f"--basetemp={path}/bt", f"--target=openai:t@{url}", f"--judge=openai:j@{url}",
        f"--user-model=openai:u@{url}", f"--socialbias-concurrency={CONCURRENCY}",
        "--socialbias-report=r.json",
    ]


def env():
    return dict(os.environ, OPENAI_API_KEY="sk-test")


def verify(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_socialbias", "cache", "verify", "--cache-dir", str(path / ".socialbias")],
        capture_output=True, text=True,
    )


@pytest.fixture(scope="module")
def clean(server, tmp_path_factory):
    """An uninterrupted run: its report bytes and the requests it sent."""
    path = project(tmp_path_factory.mktemp("interrupt") / "clean")
    server.clear()
    done = subprocess.run(pytest_command(server, path), cwd=path, env=env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    keys = [request_key(r) for r in server.requests]
    assert len(keys) == len(set(keys))  # every request of the run is distinct
    return (path / "r.json").read_bytes(), set(keys)


@pytest.mark.parametrize("point", range(POINTS))
@pytest.mark.parametrize("signame", ["SIGKILL", "SIGINT"])
def test_interrupted_run_then_rerun(server, timed, clean, tmp_path, signame, point):
    expected_report, clean_keys = clean
    rng = random.Random(f"{signame}-{point}")
    # Somewhere between 10% and 85% of the run's requests, plus a random part of a call.
    wait_for = max(1, round(rng.uniform(0.10, 0.85) * len(clean_keys)))
    delay = rng.uniform(0, 2 * LATENCY)
    path = project(tmp_path / "run")

    server.clear()
    timed.answered.clear()
    timed.received, timed.hold_after = 0, wait_for  # requests past the kill point wait for the signal
    timed.released.clear()
    proc = subprocess.Popen(pytest_command(server, path), cwd=path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # A shell in the background starts children with SIGINT ignored,
                            # and Python then installs no KeyboardInterrupt: restore it.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120  # a bound for a stuck run, not a wait
        while server.request_count < wait_for and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay)  # a random part of a call: the answers in flight may or may not be back
        assert proc.poll() is None, "the run ended before the signal"
        killed_at = time.monotonic()
        proc.send_signal(getattr(signal, signame))
    finally:
        timed.released.set()
        timed.hold_after = None
    out, err = proc.communicate(timeout=120)
    first = {request_key(r) for r in server.requests}
    answered = {key for key, at in timed.answered if at < killed_at}
    assert 0 < len(first) < len(clean_keys)

    if signame == "SIGINT":
        # pytest's own KeyboardInterrupt handling: a clean exit, no stray thread errors.
        assert proc.returncode == 2, out[-3000:] + err[-3000:]
        assert "KeyboardInterrupt" in out
        assert "Traceback" not in err and "Exception" not in err, err[-3000:]
    else:
        assert proc.returncode == -signal.SIGKILL

    checked = verify(path)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stdout + checked.stderr
    assert checked.stdout.endswith(" entries OK\n")
    # Every answer the run had before the signal is in the cache, but for those in flight
    # in the client (at most one per concurrency slot).
    cached = cached_keys(path)
    assert cached <= first
    assert len(answered - cached) <= CONCURRENCY

    server.clear()
    rerun = subprocess.run(pytest_command(server, path), cwd=path, env=env(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    second = [request_key(r) for r in server.requests]

    # Answers the first run had recorded came from the cache; only requests in flight at
    # the kill (at most one per concurrency slot) are asked again.
    assert not cached & set(second)
    assert len(first & set(second)) <= CONCURRENCY
    assert len(second) == len(set(second))
    assert first | set(second) == clean_keys
    assert (path / "r.json").read_bytes() == expected_report
    assert verify_cache(path / ".socialbias") == (len(clean_keys) + len(ROLES), [])  # + one check per role
