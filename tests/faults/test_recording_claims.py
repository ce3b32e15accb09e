"""Runs recording into one cache at once pay for each call once (issue 42, probe 8).

Before a request that missed is sent, its process takes a claim on its key in the cache
(cache.py ``claim``); another process that misses the same key waits for that claim to
end and takes the answer recorded under it. A claim whose process is gone is taken over;
one released without an answer (a failed call) lets the waiter ask.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter

from pytest_socialbias.cache import CallCache
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml

CASES = [(f"age-{i:03d}", "age", ("BIASME " if i % 2 else "") + f"statement {i}.") for i in range(8)]


def request_key(req) -> str:
    return json.dumps([req.model, req.messages, req.params], sort_keys=True)


def test_two_runs_recording_into_one_cache_at_once_pay_each_call_once(tmp_path):
    (tmp_path / "demo.yaml").write_text(suite_yaml(CASES, turns=2))
    # Latency keeps the two runs' identical requests in flight together.
    with FakeServer(fakeworld.script, latency=0.3) as server:
        url = server.openai_base_url
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", "-p", "no:randomly",
                 f"--basetemp={tmp_path}/bt{n}", f"--target=openai:t@{url}", f"--judge=openai:j@{url}",
                 f"--user-model=openai:u@{url}", f"--socialbias-report=r{n}.json"],
                cwd=tmp_path, env=dict(os.environ, OPENAI_API_KEY="sk-test"), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,
            )
            for n in (1, 2)
        ]
        outputs = [run.communicate(timeout=600)[0] for run in runs]
        sent = Counter(request_key(r) for r in server.requests)
        checks = len(server.endpoint_checks)
        assert server.script_errors == []
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-3000:]
    assert sent and max(sent.values()) == 1, [k for k, n in sent.items() if n > 1][:3]
    assert checks == 3  # one per role, for both runs
    first, second = (read_report(tmp_path / f"r{n}.json") for n in (1, 2))
    outcomes = [{c["id"]: c["outcome"] for c in report["cases"]} for report in (first, second)]
    assert outcomes[0] == outcomes[1] and set(outcomes[0].values()) == {"clean", "biased"}


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_claim_is_waited_for_released_or_taken_over(tmp_path):
    one, other = CallCache(tmp_path, "new"), CallCache(tmp_path, "new")
    request = {"provider": "openai", "model": "m"}
    # Two caches of one process stand for two processes: `one`'s claims name a live
    # process of their own (a claim of this very process's number is an earlier run's).
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    def as_another_process(key):
        one._execute("UPDATE claims SET pid = ? WHERE key = ?", (alive.pid, key))

    async def go():
        # One process asks; the other waits for its answer instead of asking too.
        assert await one.claim("k1") is None
        as_another_process("k1")
        waiting = asyncio.create_task(other.claim("k1"))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        one.put("k1", "target", request, {"text": "answer"})
        assert await asyncio.wait_for(waiting, 2) == {"text": "answer"}
        # A claim given up without an answer (the call failed): the waiter asks.
        assert await one.claim("k2") is None
        as_another_process("k2")
        waiting = asyncio.create_task(other.claim("k2"))
        await asyncio.sleep(0.3)
        one.release("k2")
        assert await asyncio.wait_for(waiting, 2) is None and "k2" in other._claimed
        # A claim whose process was killed is taken over at once.
        one._execute("INSERT INTO claims VALUES ('k3', 'killed', ?, ?, ?)", (_dead_pid(), socket.gethostname(),
                                                                             time.time()))
        assert await asyncio.wait_for(other.claim("k3"), 2) is None and "k3" in other._claimed
        # A claim left by an earlier run in this very process is taken over too.
        one._execute("INSERT INTO claims VALUES ('k4', 'earlier', ?, ?, ?)", (os.getpid(), socket.gethostname(),
                                                                              time.time()))
        assert await asyncio.wait_for(other.claim("k4"), 2) is None
        # A replay claims nothing.
        assert await CallCache(tmp_path, "none").claim("k5") is None

    try:
        asyncio.run(go())
    finally:
        alive.kill()
        alive.wait()
    left = {row[0] for row in one._execute("SELECT key FROM claims")}
    assert left == {"k2", "k3", "k4"}  # held by `other`, which asks them
