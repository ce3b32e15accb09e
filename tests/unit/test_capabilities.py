"""A provider's capabilities are behaviour the core acts on, not labels.

log-probabilities: a call that asks for the top alternatives' log-probabilities (the
treatment judge, log-probability guards) asks them only of a provider that gives them;
elsewhere nothing is asked and the request (and its cache key) says so. seed: a spec's
``seed=`` is refused, naming the fix, for a provider that takes none, instead of being
dropped without a word. Both tested through the real SDK clients against the loopback
fake server.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from pytest_socialbias.cache import CallCache
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.models import CallPool, Model, parse_spec
from pytest_socialbias.models.providers import LOGPROBS, SEED, get
from pytest_socialbias.testing import FakeServer


def _ask(spec: str, cache_dir) -> tuple[dict, dict]:
    """One judge call asking for 5 log-probabilities: (the request the server saw, the
    request the cache keyed)."""
    with FakeServer(lambda req: "N") as server:
        url = server.anthropic_base_url if spec == "anthropic" else server.openai_base_url
        cache = CallCache(cache_dir, "new")
        judge = Model("judge", parse_spec(f"{spec}:j@{url}", "--judge"), "--judge", CallPool(cache=cache))

        async def call():
            try:
                return await judge.chat([{"role": "user", "content": "Classify: N, O or B?"}], top_logprobs=5)
            finally:
                await judge.aclose()

        response = asyncio.run(call())
        sent = server.requests[-1].body
    keyed = json.loads(cache._db.execute("SELECT request FROM calls").fetchone()[0])
    cache.close()
    assert response.text == "N"
    return sent, keyed


def test_log_probabilities_are_asked_only_of_a_provider_that_gives_them(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert get("openai").can(LOGPROBS) and not get("anthropic").can(LOGPROBS)
    sent, keyed = _ask("openai", tmp_path / "o")
    assert sent.get("logprobs") is True and sent.get("top_logprobs") == 5 and keyed["top_logprobs"] == 5
    sent, keyed = _ask("anthropic", tmp_path / "a")
    assert keyed["top_logprobs"] is None and not any("logprob" in key for key in sent)


@pytest.mark.parametrize("provider", ["openai", "local", "hf", "server", "vllm"])
def test_a_seed_is_taken_where_the_provider_honours_one(provider):
    assert get(provider).can(SEED)


def test_a_seed_given_to_a_provider_without_one_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"--judge=anthropic:claude-x\?seed=3: anthropic takes no sampling seed; "
                                          r"remove seed="):
        parse_spec("anthropic:claude-x?seed=3", "--judge")
    assert parse_spec("openai:gpt-x?seed=3", "--judge").params["seed"] == 3


def test_what_a_provider_can_do_is_one_set_of_capabilities():
    """No booleans beside the set: every builtin provider's abilities are its capabilities,
    and one registered without any is an HTTP endpoint (a base URL, checked and adapted to)."""
    from dataclasses import fields

    from pytest_socialbias.models.providers import (
        ADAPTS,
        HTTP_ENDPOINT,
        KEYLESS_WITH_URL,
        MANAGED,
        RUNTIME_SETTINGS,
        TAKES_URL,
        Provider,
    )

    assert not [f.name for f in fields(Provider) if f.type in ("bool", bool) and f.name != "build_early"]
    assert Provider("x", build=lambda ctx: None).capabilities == HTTP_ENDPOINT == {TAKES_URL, ADAPTS}
    assert get("openai").can(KEYLESS_WITH_URL) and not get("anthropic").can(KEYLESS_WITH_URL)
    assert get("vllm").can(MANAGED) and get("server").can(MANAGED) and not get("vllm").can(TAKES_URL)
    assert get("hf").can(RUNTIME_SETTINGS) and not get("hf").can(ADAPTS) and not get("local").can(ADAPTS)
