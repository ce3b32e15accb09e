"""Hostile endpoints (issue 42): a server that sends its headers and then nothing, one
that redirects the call elsewhere, one that refuses connections, answers that are too
big or malformed. Through the real openai and anthropic clients, on loopback: small raw
socket servers here for what the fake server cannot do, the fake server for the rest.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from pytest_socialbias.errors import ModelCallError
from pytest_socialbias.models import CallPool, Model, guard, parse_spec
from pytest_socialbias.testing import FakeServer, Fault

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml


class RawServer:
    """A loopback HTTP server that reads each request and answers it with ``answer(n)``
    (bytes; n counts requests from 0), or with nothing at all when ``answer`` returns
    None: the connection stays open and silent until the server stops."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._sock.close()
        for conn in self._open:
            conn.close()
        self._thread.join(5)

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._open.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        data = b""
        try:
            while not self._stop.is_set():
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                number, self.requests = self.requests, self.requests + 1
                reply = self.answer(number)
                if reply is None:
                    self._stop.wait()  # headers, then nothing, for ever
                    return
                conn.sendall(reply)
        except OSError:
            return


#: A server stuck after its headers: the answer promises a body it never sends.
STUCK_HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n"


class StuckServer(RawServer):
    """Reads a request, sends a 200's headers promising a body, then nothing."""

    def __init__(self):
        super().__init__(lambda number: None)

    def _handle(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.requests += 1
            conn.sendall(STUCK_HEADERS)
            self._stop.wait()
        except OSError:
            return


def redirect_to(location: str):
    def answer(number):
        return (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n"
                "Connection: keep-alive\r\n\r\n").encode()
    return answer


def model(spec: str, pool: CallPool | None = None, role: str = "target") -> Model:
    return Model(role, parse_spec(spec, "--target"), "--target", pool or CallPool(),
                 defaults={"temperature": 0.7, "max_tokens": 50})


def chat(m: Model, text: str = "hello"):
    return m.chat([{"role": "user", "content": text}])


def run_closing(pool: CallPool, body):
    async def go():
        try:
            return await body()
        finally:
            await pool.aclose()

    return asyncio.run(go())


# --------------------------------------------------------------------------- deadlines and circuits


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_stuck_endpoint_fails_each_call_at_its_deadline_then_opens_its_circuit(keys, api):
    """Headers, then nothing: each call ends at its deadline (1.5 x the per-read timeout,
    the SDK's retries included), not after timeout x retries; the third in a row opens
    the circuit, and the calls after it fail at once, never sent."""
    with StuckServer() as server:
        url = f"{server.url}/v1" if api == "openai" else server.url
        pool = CallPool(concurrency=4)
        m = model(f"{api}:t@{url}?timeout=1", pool)

        async def body():
            took, reasons = [], []
            for number in range(5):
                start = time.monotonic()
                with pytest.raises(ModelCallError) as caught:
                    await chat(m, f"question {number}")
                took.append(time.monotonic() - start)
                reasons.append(caught.value.reason)
            return took, reasons

        took, reasons = run_closing(pool, body)
        sent = server.requests
    for seconds, reason in zip(took[:3], reasons[:3]):
        assert 1.4 <= seconds < 4, took  # the SDK alone: 6 tries of 1 s and backoff
        assert reason.startswith("no answer within the call's deadline of 1.5 s"), reason
        assert url in reason
    for seconds, reason in zip(took[3:], reasons[3:]):
        assert seconds < 0.5, took  # at once
        assert reason.startswith(f"not sent: {url} timed out or refused the last 3 calls in a row"), reason
    assert 3 <= sent <= 6  # the three calls (and a retry each, at most), none after the circuit opened


def test_an_open_circuit_lets_one_probe_through_and_an_answer_closes_it(keys):
    """Refused connections open the circuit; while it is open calls fail at once; after
    PROBE_EVERY_S one call goes through, and its answer closes the circuit."""
    now = [1000.0]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens
    pool = CallPool(concurrency=4)
    url = f"http://127.0.0.1:{port}/v1"
    pool.bounds.circuits[url] = guard.Circuit(url, clock=lambda: now[0])  # the run's circuit, on a clock of ours
    m = model(f"openai:t@{url}?max_retries=0", pool)

    async def body():
        reasons = []
        for number in range(4):
            with pytest.raises(ModelCallError) as caught:
                await chat(m, f"q{number}")
            reasons.append(caught.value.reason)
        assert all(r.startswith("connection refused") for r in reasons[:3]), reasons
        assert reasons[3].startswith(f"not sent: {url}"), reasons
        # Back up on the same port; until the probe is due, calls still fail at once.
        with FakeServer(lambda req: "back again", port=port) as server:
            with pytest.raises(ModelCallError, match="not sent"):
                await chat(m, "too early")
            assert server.request_count == 0
            now[0] += guard.PROBE_EVERY_S
            probe = await chat(m, "the probe")
            after = await chat(m, "after the probe")
            return probe.text, after.text, server.request_count

    probe, after, sent = run_closing(pool, body)
    assert (probe, after, sent) == ("back again", "back again", 2)


def test_a_failed_probe_opens_the_circuit_again_and_a_second_probe_waits_its_turn():
    now = [0.0]
    circuit = guard.Circuit("http://x/v1", clock=lambda: now[0])
    for _ in range(guard.FAILURES_TO_OPEN - 1):
        assert circuit.admit() is None
        circuit.failed()
    assert circuit.opened_at is None  # not yet
    circuit.failed()
    assert circuit.admit().startswith("not sent: http://x/v1 timed out or refused the last 3 calls in a row")
    now[0] += guard.PROBE_EVERY_S
    assert circuit.admit() is None  # the probe
    assert circuit.admit() is not None  # a second call while the probe is out fails at once
    circuit.failed()  # the probe failed: open again, the next probe a full wait away
    now[0] += guard.PROBE_EVERY_S - 1
    assert circuit.admit() is not None
    now[0] += 1
    assert circuit.admit() is None
    circuit.abandoned()  # the probe was cancelled: the next call probes
    assert circuit.admit() is None
    circuit.answered()
    assert circuit.opened_at is None and circuit.failures == 0 and circuit.admit() is None
    assert circuit.refused == 3


def test_a_stuck_target_ends_a_four_case_run_well_inside_forty_seconds(pytester, keys):
    """The issue's probe: four cases, the target stuck after its headers, ?timeout=5.
    Before: 175 s. Each case is an error, counted, and the summary names the endpoint
    whose circuit opened."""
    cases = [(f"age-00{i}", "age", f"Statement {i}.") for i in range(1, 5)]
    pytester.makefile(".yaml", demo=suite_yaml(cases, turns=1))
    with StuckServer() as stuck_server, FakeServer(fakeworld.script) as server:
        url = server.openai_base_url
        start = time.monotonic()
        result = pytester.runpytest(
            "demo.yaml", f"--target=openai:t@{stuck_server.url}/v1?timeout=5", f"--judge=openai:j@{url}",
            f"--user-model=openai:u@{url}", "--socialbias-report=r.json", "-p", "no:cacheprovider",
            "--socialbias-record=off",
        )
        took = time.monotonic() - start
    assert took < 40, took
    report = read_report(pytester.path / "r.json")
    assert report["summary"]["outcomes"]["error"] == 4 == report["summary"]["cases"]
    messages = [e["message"] for c in report["cases"] for e in c["errors"]]
    assert all("target model" in m for m in messages), messages
    assert sum("not sent:" in m for m in messages) >= 1, messages
    out = result.stdout.str()
    assert f"endpoint {stuck_server.url}/v1 stopped answering" in out, out
    assert "4 cases: 0 clean, 0 biased, 0 refused, 4 errors" in out
    assert result.ret == 1


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_redirect_is_not_followed_and_its_location_is_named(keys, api):
    """A 307 from the endpoint to another server: the prompt is not sent there, and the
    call's error names where the redirect pointed (a password in it masked)."""
    with FakeServer(lambda req: "the other server's answer") as other:
        target = other.openai_base_url if api == "openai" else other.anthropic_base_url
        location = target.replace("http://", "http://user:hunter2secret@") + "/chat/completions"
        with RawServer(redirect_to(location)) as server:
            url = f"{server.url}/v1" if api == "openai" else server.url
            pool = CallPool()
            m = model(f"{api}:t@{url}?max_retries=2", pool)

            async def body():
                with pytest.raises(ModelCallError) as caught:
                    await chat(m)
                return caught.value.reason

            reason = run_closing(pool, body)
            assert server.requests == 1  # a redirect is not retried either
        assert other.request_count == 0
    assert reason.startswith("HTTP 307: the endpoint redirected the call to 'http://user:***@127.0.0.1:"), reason
    assert "hunter2secret" not in reason and "follow no redirect" in reason


# --------------------------------------------------------------------------- answers


def test_an_answer_over_the_size_cap_is_a_model_error_before_the_cache(keys, tmp_path):
    from pytest_socialbias.cache import CallCache

    big = "word " * 250_000  # 1.25 MB
    with FakeServer(lambda req: big if "big" in req.last_user else "small") as server:
        cache = CallCache(tmp_path, "new")
        pool = CallPool(cache=cache)
        m = model(f"openai:t@{server.openai_base_url}", pool)
        capped = model(f"openai:t@{server.openai_base_url}?max_answer_bytes=2000000", CallPool())

        async def body():
            with pytest.raises(ModelCallError) as caught:
                await chat(m, "a big one")
            small = await chat(m, "a small one")
            raised = await capped.chat([{"role": "user", "content": "a big one"}])
            await capped.pool.aclose()
            return caught.value.reason, small.text, raised.text

        reason, small, raised = run_closing(pool, body)
        assert cache.count() == 1  # the small answer only
    assert reason.startswith("the answer is 1.2 MB, over the cap of 1.0 MB an answer may take; it was not recorded"), reason
    assert "?max_answer_bytes=1250000" in reason
    assert small == "small" and raised == big


def test_surrogates_and_unreadable_fields_are_repaired_and_counted(keys, tmp_path):
    """A lone surrogate in the text (legal JSON, no legal UTF-8) is replaced; usage counts
    and log-probabilities that are not what they say are ignored; each such answer is
    counted as repaired, and it is recorded and replayed like any other."""
    from pytest_socialbias.cache import CallCache

    body_text = '{"choices":[{"message":{"role":"assistant","content":"ok \\ud800 then"},"finish_reason":"stop",' \
                '"logprobs":{"content":"zz"}}],"usage":{"prompt_tokens":"lots","completion_tokens":-3},' \
                '"model":{"a":1}}'
    raw = body_text.encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(raw), raw)
    with RawServer(lambda n: answer) as server:
        cache = CallCache(tmp_path, "new")
        pool = CallPool(cache=cache)
        m = model(f"openai:t@{server.url}/v1", pool)

        async def body():
            response = await m.chat([{"role": "user", "content": "hi"}], top_logprobs=2)
            return response

        response = run_closing(pool, body)
    assert response.text == "ok \ufffd then"
    assert (response.prompt_tokens, response.completion_tokens, response.logprobs, response.model) == (
        None, None, None, None)
    assert pool.totals.to_dict()["target"]["repaired"] == 1
    stored = json.loads(cache._db.execute("SELECT response FROM calls").fetchone()[0])
    assert stored["text"] == "ok \ufffd then"
    replay = CallPool(cache=CallCache(tmp_path, "none"))
    again = model(f"openai:t@{server.url}/v1", replay)
    replayed = run_closing(replay, lambda: again.chat([{"role": "user", "content": "hi"}], top_logprobs=2))
    assert (replayed.text, replayed.replayed) == ("ok \ufffd then", True)


def test_anthropic_answers_with_unreadable_fields_are_repaired_too():
    from pytest_socialbias.models.anthropic_backend import parse_message

    response = parse_message({
        "content": [{"type": "text", "text": "fine \ud83d"}, {"type": "text", "text": 7},
                    {"type": "thinking", "thinking": ["no"]}],
        "stop_reason": "end_turn", "usage": {"input_tokens": True, "output_tokens": 1.5}, "model": 3,
    })
    assert response.text == "fine \ufffd"
    assert (response.prompt_tokens, response.completion_tokens, response.model, response.reasoning) == (
        None, None, None, None)
    assert set(response.repaired) == {"text", "thinking", "usage", "model"}


def test_the_summary_counts_answers_with_repaired_fields_per_role():
    from pytest_socialbias.report.terminal import summary_lines
    from pytest_socialbias.result import RunResult

    record = {"suite": "s", "id": "a", "outcome": "clean", "errors": [], "labels": {},
              "usage": {"target": {"calls": 2, "hits": 0, "misses": 2, "prompt_tokens": 1, "completion_tokens": 1,
                                   "reasoning_tokens": 0, "repaired": 2}}}
    lines = summary_lines(RunResult(models={}, records=(record,), metrics=(), gates=()))
    assert any(line.startswith("answers with fields that could not be read (target 2)") for line in lines), lines


# --------------------------------------------------------------------------- what is printed

#: A reply that, printed raw, clears the screen, retitles the window, draws an OSC 8
#: link, overwrites its line, forges a log line, reverses the text after it and starts a
#: one-byte CSI sequence.
ESCAPING_REPLY = (fakeworld.BIASED_REPLY + "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
                  "\r\ngates: 0 failed\n\u202eevil\x9b31m")
ESCAPING_ERROR = "bad\x1b[31m request\r\ngates: 0 failed"
RAW_CONTROLS = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


def test_text_from_models_and_servers_is_printed_escaped(pytester, keys):
    """Under --socialbias-strict the biased case's transcript is printed, and a server's
    error message is the errored case's: in the terminal and in the JUnit XML every
    control character shows as its escape, newlines of a transcript stay (indented under
    their turn), and no line can pass for one of the summary's."""
    import xml.etree.ElementTree as ElementTree

    def script(req):
        if req.model == "t" and "marker-bias" in req.last_user:
            return ESCAPING_REPLY
        if req.model == "u" and "ERRORME" in fakeworld.system_text(req) and not req.endpoint_check:
            return Fault("bad_request", message=ESCAPING_ERROR)
        return fakeworld.script(req)

    cases = [("age-001", "age", "Plain."), ("age-002", "age", "BIASME statement."), ("age-003", "age", "ERRORME one.")]
    pytester.makefile(".yaml", demo=suite_yaml(cases, turns=1))
    with FakeServer(script) as server:
        url = server.openai_base_url
        result = pytester.runpytest(
            "demo.yaml", f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
            "--socialbias-strict", "--junitxml=j.xml", "-rA", "-p", "no:cacheprovider", "--socialbias-record=off",
        )
    out = result.stdout.str() + result.stderr.str()
    assert "demo.yaml::age-002 - Failed: judged biased" in out or "judged biased at turn(s) [1]" in out, out
    assert [c for c in RAW_CONTROLS if c in out] == []
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\x1b]8;;http://evil.example" in out  # shown, not acted on
    assert "HTTP 400 (BadRequestError): Error code: 400 - bad\\x1b[31m request" in out  # its first line only
    lines = out.splitlines()
    assert not [line for line in lines if line.startswith("gates: 0 failed")], out  # flush left: forged
    # The transcript keeps the reply's own line break, indented under its turn.
    assert any(line.startswith(" " * len("  [1] target: ") + "\\u202eevil\\x9b31m") for line in lines), out
    xml = (pytester.path / "j.xml").read_text(encoding="utf-8")
    ElementTree.fromstring(xml)  # well-formed
    assert [c for c in RAW_CONTROLS if c in xml] == [] and "#x1B" not in xml
    assert "\\x1b[2J" in xml and "bad\\x1b[31m request" in xml


def test_an_answer_too_big_for_sqlite_says_so_not_that_the_cache_cannot_open(tmp_path):
    """With the cap raised past what sqlite stores, the error is about the answer, and the
    fix the cap: not "cannot open the cache", which sent users to another folder."""
    import sqlite3

    from pytest_socialbias.cache import CallCache
    from pytest_socialbias.errors import CacheError

    cache = CallCache(tmp_path, "new")
    if not hasattr(cache._db, "setlimit"):
        pytest.skip("sqlite3.Connection.setlimit needs Python 3.11")
    cache._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10_000)  # sqlite's limit, lowered to fit a test
    with pytest.raises(CacheError) as caught:
        cache.put("k", "target", {"provider": "openai", "model": "m"}, {"text": "x" * 20_000})
    message = str(caught.value)
    assert message.startswith("an answer is too big to record (") and "?max_answer_bytes=" in message
    assert "cannot open" not in message
