"""What a failed call says: the transport's failure under the SDK's name for it.

The real SDK clients (httpx and aiohttp transports) are pointed at a loopback port where
nothing listens: the SDKs call that a timeout ("Request timed out", APITimeoutError);
the reason the plugin reports names the refused connection and what to check.
"""

from __future__ import annotations

import asyncio
import socket

import anthropic
import openai
import pytest

from pytest_socialbias.models.client import _describe


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


async def _openai_failure(transport: str) -> BaseException:
    http = openai.DefaultAioHttpClient() if transport == "aiohttp" else None
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="sk-test", max_retries=0,
                                http_client=http)
    try:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    except Exception as exc:  # noqa: BLE001 - the failure is the subject
        return exc
    finally:
        await client.close()
    raise AssertionError("a call to a closed port succeeded")


async def _anthropic_failure() -> BaseException:
    client = anthropic.AsyncAnthropic(base_url=f"http://127.0.0.1:{_closed_port()}", api_key="sk-ant-test",
                                      max_retries=0)
    try:
        await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    except Exception as exc:  # noqa: BLE001
        return exc
    finally:
        await client.close()
    raise AssertionError("a call to a closed port succeeded")


@pytest.mark.parametrize("make", [
    lambda: _openai_failure("httpx"), lambda: _openai_failure("aiohttp"), _anthropic_failure,
], ids=["openai-httpx", "openai-aiohttp", "anthropic"])
def test_a_refused_connection_is_named_as_such_not_as_a_timeout(make):
    exc = asyncio.run(make())
    reason = _describe(exc)
    assert reason.startswith("connection refused"), reason
    assert "nothing is listening at the model's base URL" in reason and "timed out" not in reason


def _sdk_request():
    """A request as the installed SDK's HTTP library builds it (httpx2 from openai 3.60,
    httpx before): the SDK's errors read the request's headers when they are made."""
    try:
        import httpx2 as http
    except ImportError:  # an older SDK
        import httpx as http
    return http.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def test_an_unresolvable_host_is_named():
    exc = openai.APIConnectionError(request=_sdk_request())
    exc.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert _describe(exc).startswith("cannot resolve the host of the model's base URL (")


def test_a_real_timeout_stays_a_timeout():
    exc = openai.APITimeoutError(request=_sdk_request())
    exc.__cause__ = TimeoutError("read timed out")
    assert _describe(exc) == "APITimeoutError: Request timed out. (TimeoutError: read timed out)"
