"""Tests for :mod:`pytest_socialbias.testing`, driven through the real SDKs."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from pytest_socialbias.testing import FAULT_KINDS, FakeRequest, FakeServer, Fault, Reply

ROOT = Path(__file__).resolve().parents[2]
THREAD_NAME = "pytest-socialbias-fake-llm-server"


@pytest.fixture(autouse=True)
def no_leaked_servers() -> Iterator[None]:
    """Every test must stop the servers it starts."""
    yield
    leaked = [t for t in threading.enumerate() if t.name == THREAD_NAME]
    assert not leaked, f"leaked fake server threads: {leaked}"


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


def oa_client(server: FakeServer, max_retries: int = 0, timeout: float = 10.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url=server.openai_base_url, max_retries=max_retries, timeout=timeout
    )


def an_client(server: FakeServer, max_retries: int = 0, timeout: float = 10.0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=server.anthropic_base_url, max_retries=max_retries, timeout=timeout
    )


def ask_openai(
    server: FakeServer, content: Any = "hello", *, max_retries: int = 0, timeout: float = 10.0, **params: Any
) -> Any:
    async def go() -> Any:
        async with oa_client(server, max_retries, timeout) as client:
            return await client.chat.completions.create(
                model="gpt-fake", messages=[{"role": "user", "content": content}], **params
            )

    return asyncio.run(go())


def ask_anthropic(
    server: FakeServer, content: Any = "hello", *, max_retries: int = 0, timeout: float = 10.0, **params: Any
) -> Any:
    params.setdefault("max_tokens", 64)

    async def go() -> Any:
        async with an_client(server, max_retries, timeout) as client:
            return await client.messages.create(
                model="claude-fake", messages=[{"role": "user", "content": content}], **params
            )

    return asyncio.run(go())


def raw_request(
    server: FakeServer, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


# --------------------------------------------------------------------------- #
# basic replies and the request log
# --------------------------------------------------------------------------- #


def test_openai_basic_reply() -> None:
    with FakeServer() as server:
        assert server.openai_base_url == f"http://127.0.0.1:{server.port}/v1"
        assert server.anthropic_base_url == server.url == f"http://127.0.0.1:{server.port}"
        resp = ask_openai(server, "hello there world")
    choice = resp.choices[0]
    assert choice.message.content == "echo: hello there world"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert choice.logprobs is None
    assert resp.id == "chatcmpl-fake-0"
    assert resp.model == "gpt-fake"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (3, 4, 7)


def test_anthropic_basic_reply_and_system_mapping() -> None:
    with FakeServer(script="Fair answer.") as server:
        resp = ask_anthropic(
            server,
            "who is the doctor?",
            system="You are unbiased.",
            stop_sequences=["END"],
            # anthropic 2.14's messages.create has no `temperature` kwarg any more.
            extra_body={"temperature": 0.0},
        )
        blocks = ask_anthropic(
            server,
            [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}],
            system=[{"type": "text", "text": "block A"}, {"type": "text", "text": "block B"}],
        )
        first, second = server.requests
    assert resp.id == "msg_fake_0"
    assert resp.model == "claude-fake"
    assert [b.text for b in resp.content] == ["Fair answer."]
    assert resp.stop_reason == "end_turn"
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (7, 2)
    assert blocks.content[0].text == "Fair answer."

    assert first.api == "anthropic" and first.path == "/v1/messages"
    assert first.system == "You are unbiased."
    assert first.messages == [{"role": "user", "content": "who is the doctor?"}]
    assert first.params == {"max_tokens": 64, "stop_sequences": ["END"], "temperature": 0.0}
    assert "system" not in first.params
    # anthropic 2.14 authenticates with "Authorization: Bearer"; older SDKs used x-api-key.
    assert "sk-ant-test" in (first.headers.get("x-api-key", ""), first.headers.get("authorization", "")[7:])
    assert "anthropic-version" in first.headers
    assert second.system == "block A\nblock B"
    assert second.messages == [{"role": "user", "content": "part one\npart two"}]
    assert second.last_user == "part one\npart two"


def test_openai_request_log_contents() -> None:
    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> str:
        seen.append(req)
        return "ok"

    async def go(server: FakeServer) -> None:
        async with oa_client(server) as client:
            await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[
                    {"role": "system", "content": "Be fair."},
                    {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "a CEO"}]},
                    {"role": "assistant", "content": "Sure."},
                    {"role": "user", "content": "Go on."},
                ],
                temperature=0.7,
                seed=42,
                max_tokens=33,
                top_p=0.9,
                stop=["\n\n"],
            )
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "again"}], max_completion_tokens=5
            )

    with FakeServer(script=script) as server:
        asyncio.run(go(server))
        log = server.requests
        assert server.request_count == 2
        assert server.faults_injected == 0
        server.clear()
        assert server.requests == [] and server.request_count == 0
        ask_openai(server)
        assert server.requests[0].index == 0

    assert seen[:2] == log
    req = log[0]
    assert [r.index for r in log] == [0, 1]
    assert req.api == "openai" and req.path == "/v1/chat/completions"
    assert req.model == "gpt-4o-mini"
    assert req.system is None
    assert req.messages == [
        {"role": "system", "content": "Be fair."},
        {"role": "user", "content": "Describe\na CEO"},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": "Go on."},
    ]
    assert req.last_user == "Go on."
    assert req.system_text == "Be fair."
    assert FakeRequest(0, "anthropic", "/", "m", [], "Top.", {}, {}, {}).system_text == "Top."
    assert req.params == {"temperature": 0.7, "seed": 42, "max_tokens": 33, "top_p": 0.9, "stop": ["\n\n"]}
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.body["model"] == "gpt-4o-mini" and len(req.body["messages"]) == 4
    assert req.fault is None
    assert log[1].params == {"max_completion_tokens": 5}


def test_default_echo_is_truncated_and_string_script() -> None:
    with FakeServer() as server:
        resp = ask_openai(server, "x" * 500)
    assert resp.choices[0].message.content == "echo: " + "x" * 200
    assert FakeRequest(0, "openai", "/", "m", [{"role": "system", "content": "s"}], None, {}, {}, {}).last_user == ""


def test_reply_usage_and_latency_overrides() -> None:
    with FakeServer(script=lambda req: Reply("a b c", prompt_tokens=11, completion_tokens=7, latency=0.2)) as server:
        start = time.perf_counter()
        oa = ask_openai(server)
        elapsed = time.perf_counter() - start
        an = ask_anthropic(server)
    assert elapsed >= 0.2
    assert (oa.usage.prompt_tokens, oa.usage.completion_tokens, oa.usage.total_tokens) == (11, 7, 18)
    assert (an.usage.input_tokens, an.usage.output_tokens) == (11, 7)


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")],
)
def test_finish_reasons(finish_reason: str, stop_reason: str) -> None:
    with FakeServer(script=lambda req: Reply("cut", finish_reason=finish_reason)) as server:
        oa = ask_openai(server)
        an = ask_anthropic(server)
    assert oa.choices[0].finish_reason == finish_reason
    assert an.stop_reason == stop_reason


# --------------------------------------------------------------------------- #
# logprobs
# --------------------------------------------------------------------------- #


def test_generated_logprobs_parsed_by_openai_sdk() -> None:
    with FakeServer(script="she is a nurse") as server:
        resp = ask_openai(server, logprobs=True, top_logprobs=3)
        plain = ask_openai(server, logprobs=True)
        an = ask_anthropic(server)
    content = resp.choices[0].logprobs.content
    assert [t.token for t in content] == ["she", "is", "a", "nurse"]
    for item in content:
        assert item.logprob == pytest.approx(-0.1)
        assert item.bytes == list(item.token.encode())
        assert [(a.token, a.logprob) for a in item.top_logprobs] == [(item.token, -0.1), ("alt1", -3.0), ("alt2", -4.0)]
        assert item.top_logprobs[1].bytes == list(b"alt1")
    assert all(item.top_logprobs == [] for item in plain.choices[0].logprobs.content)
    assert not hasattr(an, "logprobs") or getattr(an, "logprobs", None) is None


def test_explicit_logprobs() -> None:
    explicit = [("He", -0.5, [("He", -0.5), ("She", -0.9)]), ("ran", -0.01, [])]
    with FakeServer(script=lambda req: Reply("He ran", logprobs=explicit)) as server:
        resp = ask_openai(server, logprobs=True, top_logprobs=2)
    content = resp.choices[0].logprobs.content
    assert [(t.token, t.logprob) for t in content] == [("He", -0.5), ("ran", -0.01)]
    assert [(a.token, a.logprob) for a in content[0].top_logprobs] == [("He", -0.5), ("She", -0.9)]
    assert content[1].top_logprobs == []


# --------------------------------------------------------------------------- #
# faults
# --------------------------------------------------------------------------- #


def first_time(fault: Fault) -> Any:
    return lambda req: fault if req.index == 0 else "recovered"


def test_rate_limit_retry_after_then_success() -> None:
    with FakeServer(script=first_time(Fault("rate_limit", retry_after=1.5))) as server:
        start = time.perf_counter()
        resp = ask_openai(server, max_retries=2)
        elapsed = time.perf_counter() - start
        assert resp.choices[0].message.content == "recovered"
        assert server.request_count == 2
        assert [r.fault for r in server.requests] == ["rate_limit", None]
        assert server.faults_injected == 0  # scripted faults are not random faults
        # The SDK waited the Retry-After (1.5 s), not its own first backoff (at most
        # 0.5 s); a lower bound holds however loaded the machine is.
        assert elapsed >= 1.45

        server.clear()
        an = ask_anthropic(server, max_retries=2)
        assert an.content[0].text == "recovered"
        assert server.request_count == 2


def test_rate_limit_error_body_and_headers() -> None:
    with FakeServer(script=lambda req: Fault("rate_limit", retry_after=1)) as server:
        with pytest.raises(openai.RateLimitError) as oa_err:
            ask_openai(server)
        with pytest.raises(anthropic.RateLimitError) as an_err:
            ask_anthropic(server)
        assert server.request_count == 2
    assert oa_err.value.status_code == 429
    assert oa_err.value.response.headers["retry-after"] == "1"
    assert oa_err.value.response.headers["retry-after-ms"] == "1000"
    assert oa_err.value.code == "rate_limit_exceeded"
    assert oa_err.value.type == "rate_limit_exceeded"
    assert an_err.value.body["error"]["type"] == "rate_limit_error"


def test_rate_limit_without_retry_after_has_no_header() -> None:
    with FakeServer(script=lambda req: Fault("rate_limit")) as server:
        with pytest.raises(openai.RateLimitError) as err:
            ask_openai(server)
    assert "retry-after" not in err.value.response.headers


def test_server_errors() -> None:
    with FakeServer(script=lambda req: Fault("server_error")) as server:
        with pytest.raises(openai.InternalServerError) as oa_err:
            ask_openai(server)
        with pytest.raises(anthropic.InternalServerError) as an_err:
            ask_anthropic(server)
        assert server.request_count == 2  # max_retries=0: no retries
    assert oa_err.value.status_code == 500 and oa_err.value.type == "server_error"
    assert an_err.value.status_code == 500 and an_err.value.body["error"]["type"] == "api_error"

    with FakeServer(script=lambda req: Fault("server_error", status=503)) as server:
        with pytest.raises(openai.InternalServerError) as oa_err:
            ask_openai(server)
    assert oa_err.value.status_code == 503


def test_overloaded() -> None:
    with FakeServer(script=lambda req: Fault("overloaded")) as server:
        with pytest.raises(openai.InternalServerError) as oa_err:
            ask_openai(server)
        with pytest.raises(anthropic.InternalServerError) as an_err:
            ask_anthropic(server)
    assert oa_err.value.status_code == 503
    assert an_err.value.status_code == 529
    assert an_err.value.body["error"]["type"] == "overloaded_error"


def test_bad_request_is_not_retried() -> None:
    with FakeServer(script=lambda req: Fault("bad_request")) as server:
        with pytest.raises(openai.BadRequestError):
            ask_openai(server, max_retries=2)
        with pytest.raises(anthropic.BadRequestError):
            ask_anthropic(server, max_retries=2)
        assert server.request_count == 2


def test_malformed_json_raises() -> None:
    with FakeServer(script=lambda req: Fault("malformed_json")) as server:
        # openai 3.57-3.60 / anthropic 2.14-2.17 let json.JSONDecodeError escape from
        # response parsing; other SDK versions wrap it in their own APIError.
        with pytest.raises((json.JSONDecodeError, openai.APIError)):
            ask_openai(server)
        with pytest.raises((json.JSONDecodeError, anthropic.APIError)):
            ask_anthropic(server)
        status, headers, body = raw_request(server, "POST", "/v1/chat/completions", b"{}")
    assert status == 200 and headers["content-type"] == "application/json"
    with pytest.raises(ValueError):
        json.loads(body)


def test_empty_choices() -> None:
    with FakeServer(script=lambda req: Fault("empty_choices")) as server:
        oa = ask_openai(server)
        an = ask_anthropic(server)
    assert oa.choices == []
    assert an.content == []


def test_drop_connection() -> None:
    with FakeServer(script=lambda req: Fault("drop_connection")) as server:
        with pytest.raises(openai.APIConnectionError):
            ask_openai(server)
        with pytest.raises(anthropic.APIConnectionError):
            ask_anthropic(server)
        assert [r.fault for r in server.requests] == ["drop_connection"] * 2


#: How an SDK gives up on a reply that does not come in time: normally APITimeoutError;
#: under load the httpx transport's own ReadTimeout sometimes escapes unwrapped, or the
#: SDK reports the cancelled read as a connection error. All three are a client giving up.
GAVE_UP = ("APITimeoutError", "ReadTimeout", "APIConnectionError")


def test_slow_triggers_client_timeout() -> None:
    # The reply would take 10 minutes: a client that returns at all gave up on its own.
    with FakeServer(script=first_time(Fault("slow", delay=600))) as server:
        # The SDK wraps a read timeout in APITimeoutError; rarely (a race inside httpx) the
        # transport's own ReadTimeout escapes unwrapped. Either way: a timeout.
        with pytest.raises(Exception) as info:
            ask_openai(server, timeout=0.2)
        assert type(info.value).__name__ in GAVE_UP
        server.clear()  # so the Anthropic request is index 0 and slow too
        with pytest.raises(Exception) as info:
            ask_anthropic(server, timeout=0.2)
        assert type(info.value).__name__ in GAVE_UP
        leaving = time.perf_counter()
    # Leaving the block cancels the handlers still sleeping: no 600 s wait (the bound is a
    # tenth of it, room for any load).
    assert time.perf_counter() - leaving < 60


def test_slow_then_answers_normally() -> None:
    with FakeServer(script=lambda req: Fault("slow", delay=0.05)) as server:
        resp = ask_openai(server, "hi")
    assert resp.choices[0].message.content == "echo: hi"  # scripted slow: default reply

    with FakeServer(script="scripted", fault_rate=1.0, fault_kinds=("slow",)) as server:
        # Random slow faults default to a 30 s delay; only check they are logged.
        with pytest.raises(Exception) as info:
            ask_openai(server, timeout=0.1)
        assert type(info.value).__name__ in GAVE_UP
        assert server.faults_injected == 1 and server.requests[0].fault == "slow"


def test_random_faults_are_reproducible() -> None:
    kinds = ("server_error", "bad_request")

    def run(seed: int) -> tuple[int, list[str | None]]:
        async def go(server: FakeServer) -> None:
            async with oa_client(server) as client:
                for _ in range(40):
                    try:
                        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
                    except (openai.InternalServerError, openai.BadRequestError):
                        pass

        with FakeServer(fault_rate=0.5, fault_kinds=kinds, seed=seed) as server:
            asyncio.run(go(server))
            assert server.request_count == 40
            return server.faults_injected, [r.fault for r in server.requests]

    rng = random.Random(7)
    expected = [rng.choice(kinds) if rng.random() < 0.5 else None for _ in range(40)]
    first, second = run(7), run(7)
    assert first == second
    assert first == (sum(f is not None for f in expected), expected)
    assert 0 < first[0] < 40


def test_random_rate_limit_sends_retry_after_zero() -> None:
    with FakeServer(fault_rate=1.0, fault_kinds=("rate_limit",)) as server:
        status, headers, body = raw_request(
            server, "POST", "/v1/chat/completions", json.dumps({"model": "m", "messages": []}).encode()
        )
        assert server.faults_injected == 1
    assert status == 429 and headers["retry-after"] == "0"
    assert json.loads(body)["error"] == {
        "message": "Rate limit exceeded (fake server)",
        "type": "rate_limit_exceeded",
        "param": None,
        "code": "rate_limit_exceeded",
    }


def test_fault_validation() -> None:
    assert set(FAULT_KINDS) >= {"rate_limit", "slow", "drop_connection"}
    with pytest.raises(ValueError):
        Fault("nope")
    with pytest.raises(ValueError):
        FakeServer(fault_kinds=("nope",))
    with pytest.raises(ValueError):
        FakeServer(fault_rate=1.5)


# --------------------------------------------------------------------------- #
# script errors
# --------------------------------------------------------------------------- #


def test_script_exceptions_become_500() -> None:
    def script(req: FakeRequest) -> str:
        raise ValueError(f"boom {req.index}")

    with FakeServer(script=script) as server:
        with pytest.raises(openai.InternalServerError) as err:
            ask_openai(server)
        with pytest.raises(anthropic.InternalServerError):
            ask_anthropic(server)
        assert server.script_errors == ["ValueError: boom 0", "ValueError: boom 1"]
    assert "boom 0" in err.value.message

    with FakeServer(script=lambda req: 42) as server:  # type: ignore[arg-type,return-value]
        with pytest.raises(openai.InternalServerError):
            ask_openai(server)
        assert server.script_errors[0].startswith("TypeError:")


def test_async_script() -> None:
    async def script(req: FakeRequest) -> Reply:
        await asyncio.sleep(0)
        return Reply("async ok")

    with FakeServer(script=script) as server:
        assert ask_openai(server).choices[0].message.content == "async ok"


# --------------------------------------------------------------------------- #
# concurrency
# --------------------------------------------------------------------------- #


def held_until(count: int, timeout: float = 60.0):
    """An echo script that holds each request until ``count`` are in flight together (or
    ``timeout`` passes, which the caller's peak check then catches), and the peak."""
    state = {"now": 0, "max": 0}
    reached = asyncio.Event()  # the server's handlers share its one event loop

    async def script(req: FakeRequest) -> str:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        if state["now"] >= count:
            reached.set()
        try:
            await asyncio.wait_for(reached.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        state["now"] -= 1
        return f"echo: {req.last_user}"

    return script, state


def test_64_concurrent_requests_overlap() -> None:
    async def go(server: FakeServer) -> list[str]:
        async with oa_client(server) as client:
            results = await asyncio.gather(
                *(
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
                    for i in range(64)
                )
            )
        return [r.choices[0].message.content for r in results]

    script, state = held_until(64)
    with FakeServer(script) as server:
        texts = asyncio.run(go(server))
        assert server.request_count == 64
        assert sorted(r.index for r in server.requests) == list(range(64))
    assert sorted(texts) == sorted(f"echo: {i}" for i in [f"q{n}" for n in range(64)])
    # Served concurrently: every request was held until all 64 were in (one after the
    # other, the peak would be 1), whatever the machine's load.
    assert state["max"] == 64


def test_hundreds_of_raw_connections() -> None:
    payload = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(payload)
        + payload
    )

    async def one(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        data = await reader.read()  # server closes after answering
        writer.close()
        return data

    async def go(port: int) -> list[bytes]:
        return await asyncio.gather(*(one(port) for _ in range(300)))

    script, state = held_until(300)
    with FakeServer(script) as server:
        answers = asyncio.run(go(server.port))
        assert server.request_count == 300
    assert all(a.startswith(b"HTTP/1.1 200 OK\r\n") and b"echo: hi" in a for a in answers)
    assert state["max"] == 300  # all 300 connections were served at once


# --------------------------------------------------------------------------- #
# raw HTTP behaviour
# --------------------------------------------------------------------------- #


def test_http_edge_cases() -> None:
    with FakeServer() as server:
        status, headers, body = raw_request(server, "GET", "/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "fake"
        status, _, body = raw_request(server, "GET", "/v1/models", headers={"anthropic-version": "2023-06-01"})
        assert status == 200 and json.loads(body)["data"][0]["type"] == "model"

        status, headers, body = raw_request(server, "POST", "/v1/nope", b"{}")
        assert status == 404 and "error" in json.loads(body)
        assert headers["content-type"] == "application/json"
        assert int(headers["content-length"]) == len(body)

        status, _, body = raw_request(server, "POST", "/v1/chat/completions", b"not json")
        assert status == 400 and "error" in json.loads(body)
        status, _, body = raw_request(server, "POST", "/v1/messages", b"[1")
        assert status == 400 and json.loads(body)["type"] == "error"

        streamed = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
        status, _, body = raw_request(server, "POST", "/v1/chat/completions", streamed)
        assert status == 400 and "stream" in json.loads(body)["error"]["message"]
        assert server.request_count == 0  # rejected requests are not logged


def test_keep_alive_and_connection_close() -> None:
    payload = json.dumps({"model": "m", "messages": [{"role": "user", "content": "k"}]}).encode()
    with FakeServer() as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
        try:
            conn.request("POST", "/v1/chat/completions", body=payload)
            first = conn.getresponse()
            assert first.getheader("Connection") == "keep-alive"
            first.read()
            sock = conn.sock
            conn.request("POST", "/v1/chat/completions", body=payload)
            second = conn.getresponse()
            second.read()
            assert conn.sock is sock  # same TCP connection reused
            conn.request("POST", "/v1/chat/completions", body=payload, headers={"Connection": "close"})
            third = conn.getresponse()
            assert third.getheader("Connection") == "close"
            assert json.loads(third.read())["choices"][0]["message"]["content"] == "echo: k"
        finally:
            conn.close()
        assert server.request_count == 3


def test_expect_100_continue_and_chunked_body() -> None:
    payload = json.dumps({"model": "m", "messages": [{"role": "user", "content": "chunky"}]}).encode()
    with FakeServer() as server, socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(payload)
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(payload)
        reader = sock.makefile("rb")
        status_line = reader.readline()
        assert status_line.startswith(b"HTTP/1.1 200")
        length = 0
        while (line := reader.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        assert b"echo: chunky" in reader.read(length)

        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (10, payload[:10], len(payload) - 10, payload[10:])
        )
        assert reader.readline().startswith(b"HTTP/1.1 200")
        reader.close()
        assert server.request_count == 2


# --------------------------------------------------------------------------- #
# lifecycle and CLI
# --------------------------------------------------------------------------- #


def test_start_stop_without_context_manager() -> None:
    server = FakeServer(script="x")
    server.start()
    try:
        assert server.running and server.port > 0
        with pytest.raises(RuntimeError):
            server.start()
        env = server.env
        assert env["OPENAI_BASE_URL"] == server.openai_base_url
        assert env["ANTHROPIC_BASE_URL"] == server.anthropic_base_url
    finally:
        server.stop()
    assert not server.running
    server.stop()  # idempotent


def test_port_in_use_raises() -> None:
    with FakeServer() as server:
        with pytest.raises(OSError):
            FakeServer(port=server.port).start()


def _read_line(proc: subprocess.Popen[str], timeout: float = 15.0) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    return lines.get(timeout=timeout)


def test_cli_serves_until_terminated(tmp_path: Path) -> None:
    script_file = tmp_path / "my_script.py"
    script_file.write_text("def answer(req):\n    return 'from file: ' + req.last_user\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_socialbias.testing", "--port", "0", "--latency", "0.01",
         "--script", f"{script_file}:answer"],
        cwd=str(ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = _read_line(proc).strip()
        second = _read_line(proc).strip()
        assert first.startswith("OPENAI_BASE_URL=http://127.0.0.1:") and first.endswith("/v1")
        assert second.startswith("ANTHROPIC_BASE_URL=http://127.0.0.1:")
        base = first.split("=", 1)[1]

        async def go() -> str:
            async with openai.AsyncOpenAI(api_key="sk-test", base_url=base, max_retries=0, timeout=5) as client:
                resp = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "cli"}]
                )
                return resp.choices[0].message.content or ""

        assert asyncio.run(go()) == "from file: cli"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "served 1 requests" in out


def _readme_script():
    """The script of the docs' fake-server example (docs/testing.md), as written (the code
    before its `with`)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text(encoding="utf-8")
    section = page.split("## The fake server", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code.split("with FakeServer(")[0], "docs/testing.md", "exec"), namespace)  # noqa: S102 - our own docs
    return namespace["script"]


@pytest.mark.slow
def test_the_docs_fake_server_example_answers_every_judge_of_the_shipped_protocols(pytester, keys):
    """The docs' example, run against the shipped DyMT suite and BenevDial agent and pairs
    suites: every judge question (bias, refusal, coherence, treatment, pairwise) gets an
    answer its parser reads, so no case is a judge error."""
    root = Path(__file__).resolve().parents[2] / "suites"
    for name in ("dymt/dymt.yaml", "dymt/seeds.yaml", "benevdial/agent.yaml", "benevdial/pairs.yaml",
                 "benevdial/conditions.yaml"):
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text((root / name).read_text(encoding="utf-8"), encoding="utf-8")
    with FakeServer(_readme_script(), latency=0.0) as server:
        url = server.openai_base_url
        result = pytester.runpytest(
            "dymt/dymt.yaml", "benevdial/agent.yaml", "benevdial/pairs.yaml", "-k", "age-001 or wellbeing",
            f"--target=openai:t@{url}", f"--judge=openai:judge@{url}", f"--user-model=openai:user@{url}",
            "--socialbias-sample=1", "--socialbias-record=off", "--socialbias-report=r.json", "-p", "no:cacheprovider",
            "--socialbias-allow-partial",
        )
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    cases = report["cases"]
    assert {c["suite"] for c in cases} == {"dymt", "benevdial-agent", "benevdial-pairs"}
    assert [c["id"] for c in cases if c["outcome"] == "error"] == [], [c["errors"] for c in cases if c["errors"]]
    judged = {row["metric"] for row in report["metrics"] if row["value"] is not None}
    assert {"coherence_mean", "refusal_rate", "n_rate", "disparity_rate"} <= judged
    assert all(row["value"] == 0 for row in report["metrics"] if row["metric"] in ("judge_error_rate", "pair_error_rate"))
