"""The URL a model call is posted to is the one the SDK builds from its base URL and the
path, built once per client instead of on every call (models/transport.EndpointURL), and
built again when the client's base URL changes. Through the real openai and anthropic
clients against the loopback fake server."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from pytest_socialbias.models import CallPool, Model, parse_spec
from pytest_socialbias.models.transport import EndpointURL
from pytest_socialbias.testing import FakeServer


@pytest.mark.parametrize(("base", "expected"), [
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/chat/completions"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1/chat/completions"),
    ("https://gateway.example.com/team/openai/v1", "https://gateway.example.com/team/openai/v1/chat/completions"),
    (None, "https://api.openai.com/v1/chat/completions"),
])
def test_the_url_is_the_base_url_and_the_path(base, expected, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=base)
    assert str(EndpointURL(client, "/chat/completions")) == expected


def test_the_url_follows_a_change_of_the_base_url():
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9000")
    url = EndpointURL(client, "/v1/messages")
    assert str(url) == "http://127.0.0.1:9000/v1/messages"
    client.base_url = "http://127.0.0.1:9001/proxy"
    assert str(url) == "http://127.0.0.1:9001/proxy/v1/messages"


def test_a_client_without_the_sdks_merge_gets_the_path_as_it_is():
    class Bare:
        base_url = "http://127.0.0.1:1/v1/"

    assert str(EndpointURL(Bare(), "/chat/completions")) == "/chat/completions"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_calls_reach_the_servers_path(provider, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with FakeServer(lambda req: "fine") as server:
        url = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url + "/"
        model = Model("target", parse_spec(f"{provider}:m@{url}", "--target"), "--target", CallPool())

        async def calls():
            try:
                return [await model.chat([{"role": "user", "content": f"hello {i}"}]) for i in range(3)]
            finally:
                await model.aclose()

        answers = asyncio.run(calls())
        paths = [request.path for request in server.requests]
    assert [answer.text for answer in answers] == ["fine"] * 3
    assert paths == ["/v1/messages" if provider == "anthropic" else "/v1/chat/completions"] * 3
