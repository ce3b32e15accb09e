"""Several replicas of one model behind one spec (models/replicas.py): calls spread over the
healthy replicas, a replica that fails taken out and its calls asked of the others, a
cache key that never names the replica, and the summary's count of what each served."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.models.base import ChatResponse
from pytest_socialbias.models.replicas import ReplicaBackend
from pytest_socialbias.models.spec import parse_spec
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml

CASES = [(f"age-{i:03d}", "age", f"Statement {i}.") for i in range(6)]


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_spec_names_several_replicas():
    spec = parse_spec("openai:m@http://b:8000/v1/,http://a:8000/v1?temperature=0")
    assert spec.replicas == ("http://b:8000/v1", "http://a:8000/v1")
    assert spec.base_url == "http://a:8000/v1,http://b:8000/v1"  # what the cache key names: sorted
    assert spec.to_dict()["base_url"] == "http://a:8000/v1,http://b:8000/v1"
    with pytest.raises(ConfigError, match="listed twice"):
        parse_spec("openai:m@http://a:1/v1,http://a:1/v1")


class Replica:
    def __init__(self, name, fault=None):
        self.name, self.fault, self.calls = name, fault, 0

    async def complete(self, *args, **kwargs):
        self.calls += 1
        await asyncio.sleep(0)
        if self.fault is not None:
            raise self.fault
        return ChatResponse(text=self.name)

    async def aclose(self):
        pass


class Status(Exception):
    def __init__(self, status_code):
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def test_failover_cooldown_and_the_request_s_own_faults():
    now = [0.0]
    a, b, c = Replica("a", ConnectionRefusedError("refused")), Replica("b"), Replica("c")
    backend = ReplicaBackend(("A", "B", "C"), [a, b, c], cooldown=30, clock=lambda: now[0])

    async def calls(n):
        return await asyncio.gather(*(backend.complete([], {}, None) for _ in range(n)))

    first = asyncio.run(calls(1))[0]
    assert first.served_by == "B" and first.replica_faults == ("A",)  # A was first in line, failed
    answers = asyncio.run(calls(6))
    assert a.calls == 1 and b.calls + c.calls == 7  # A stayed out
    assert {r.served_by for r in answers} == {"B", "C"} and all(r.replica_faults == () for r in answers)
    assert backend.failed == [1, 0, 0] and sum(backend.served) == 7 and abs(b.calls - c.calls) <= 1
    now[0] = 31.0  # the cooldown is over: A is tried again
    asyncio.run(calls(1))
    assert a.calls == 2
    # A 4xx is the request's fault: every replica would refuse it, so it is not asked again.
    backend = ReplicaBackend(("A", "B"), [Replica("a", Status(400)), Replica("b")])
    with pytest.raises(Status):
        asyncio.run(backend.complete([], {}, None))
    assert backend.failed == [0, 0]
    # Every replica down: each is tried once, then the last fault is raised.
    down = [Replica("a", Status(503)), Replica("b", Status(502))]
    backend = ReplicaBackend(("A", "B"), down)
    with pytest.raises(Status, match="502"):
        asyncio.run(backend.complete([], {}, None))
    assert [r.calls for r in down] == [1, 1]
    # No replica at all, or a URL without its backend: refused when built, naming the fix.
    for urls, backends in (((), []), (("A", "B"), [Replica("a")])):
        with pytest.raises(ValueError, match="one backend per URL.*M@http://a/v1,http://b/v1"):
            ReplicaBackend(urls, backends)


def test_a_run_spreads_calls_over_replicas_survives_a_dead_one_and_replays_without_them(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=2))
    dead = closed_port_url()
    with FakeServer(fakeworld.script, latency=0.02) as one, FakeServer(fakeworld.script, latency=0.02) as two:
        urls = f"{one.openai_base_url},{two.openai_base_url},{dead}"
        args = ["demo.yaml", f"--target=openai:t@{urls}?max_retries=0", f"--judge=openai:j@{urls}?max_retries=0",
                f"--user-model=openai:u@{urls}?max_retries=0", "-p", "no:cacheprovider"]
        result = pytester.runpytest(*args, "--socialbias-report=live.json")
        assert result.ret == 0, result.stdout.str()[-3000:]
        served = one.request_count, two.request_count
    assert min(served) > 0, served  # both live replicas took calls
    lines = {line.split(":")[0]: line for line in result.stdout.lines if line.startswith("replicas of the ")}
    assert set(lines) == {"replicas of the judge", "replicas of the target", "replicas of the user"}
    for line in lines.values():
        # The calls in flight when it first failed each failed once; then it stayed out.
        failed = int(re.search(rf"{re.escape(dead)}: 0 served, (\d+) failed", line).group(1))
        assert 1 <= failed <= 6, line
        assert re.search(rf"{re.escape(one.openai_base_url)}: [1-9]\d* served", line), line
    live = read_report(pytester.path / "live.json")
    assert {c["outcome"] for c in live["cases"]} == {"clean"}
    # Every server gone: the replay finds every answer, whichever replica gave it.
    result = pytester.runpytest(*args, "--socialbias-record=none", "--socialbias-report=replayed.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert read_report(pytester.path / "replayed.json") == live
