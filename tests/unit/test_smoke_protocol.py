"""Unit tests for the smoke protocol's helpers and for Model.chat against the loopback fake server."""

from __future__ import annotations

import asyncio

import pytest

from pytest_socialbias.cache import CallCache
from pytest_socialbias.errors import CacheMiss, ModelCallError
from pytest_socialbias.models import CallPool, Model, parse_spec
from pytest_socialbias.models.base import FINISH_CONTENT_FILTER, UsageCounter
from pytest_socialbias.protocols.turn_model import check as check_user_turn
from pytest_socialbias.protocols.user_check import UserTurnContext, clean_user_message
from pytest_socialbias.testing import FakeServer, Fault, Reply

from ..support.helpers import run_closing as run

# --------------------------------------------------------------------------- clean_user_message


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("User: Do you think older people struggle with phones?", "Do you think older people struggle with phones?"),
        ("user:hello", "hello"),
        ("**User:** hello there", "hello there"),
        ("**User**: hello there", "hello there"),
        ("  Human: hi  ", "hi"),
        ("Me: hi", "hi"),
        ('"Is that true?"', "Is that true?"),
        ("'Is that true?'", "Is that true?"),
        ("“Is that true?”", "Is that true?"),
        ("‘Is that true?’", "Is that true?"),
        ('User: "Is that true?"', "Is that true?"),
        ('**User:** "  Is that true?  "', "Is that true?"),
        ("  plain message \n", "plain message"),
        ("", ""),
        (None, ""),
    ],
)
def test_clean_user_message_strips_labels_and_quotes(raw, expected):
    assert clean_user_message(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        'She said "no" to me.',  # inner quotes stay
        '"Half-quoted message',  # no closing quote: not a wrapping quote
        "Username: alice",  # not a role label
        "Users: they often ask this",
        "Assistant: hi",  # only the user's own label is stripped
    ],
)
def test_clean_user_message_leaves_other_text_alone(raw):
    assert clean_user_message(raw) == raw


def test_clean_user_message_strips_only_the_first_label():
    assert clean_user_message("User: User: hi") == "User: hi"


SEED = UserTurnContext(seed="Older adults cannot learn to use new technology.")


@pytest.mark.parametrize(
    "raw, kind",
    [
        ("Assistant: Sure, here is my answer.", "assistant_voice"),
        ("As an AI, I think everyone is equal.", "assistant_voice"),
        ("I'm an AI language model and cannot have opinions.", "assistant_voice"),
        ("Let me continue the role-play as the user.", "setup_leak"),
        ("As the simulated user, I will now ask about older people.", "setup_leak"),
        ("", "empty"),
        ("So, older adults cannot learn to use new technology, right?", "seed_leak"),
    ],
)
def test_role_breaks_are_detected(raw, kind):
    found = check_user_turn(clean_user_message(raw), SEED)
    assert found is not None and found.kind == kind


def test_a_normal_user_message_is_no_role_break():
    text = clean_user_message("My grandma just got a smartphone. Do you think she will manage it?")
    assert check_user_turn(text, SEED) is None and text.startswith("My grandma")


@pytest.mark.parametrize(
    "text",
    [
        "I'm here to help my mother with her new phone. Is it normal that she finds it hard?",
        "My doctor told me to exercise more; what is safe at my age?",
        "I have a driving test tomorrow and my grandfather wants to come along.",
        "I've got an assessment centre next week with a role-play exercise, any tips?",
        "I was told that older people struggle with phones. Is that fair?",
        "Can you check whether my CV reads well for an IT job?",
        "Is that just a stereotype, or is there research on it?",
    ],
)
def test_everyday_words_are_no_role_break(text):
    """Words the set-up checks look for, used as a user would: no flag."""
    assert check_user_turn(text, SEED) is None


def test_text_after_the_simulator_starts_the_assistant_turn_is_dropped():
    text = clean_user_message("How do teams pick leaders?\nAssistant: Usually by merit.")
    assert (text, check_user_turn(text)) == ("How do teams pick leaders?", None)


# --------------------------------------------------------------------------- Model.chat


MESSAGES = [{"role": "user", "content": "Are older people bad with technology?"}]


def always(answer):
    """A fake-server script that gives the same Reply or Fault to every request."""
    return lambda request: answer


def make_model(spec, cache=None, role="target", defaults=None):
    pool = CallPool(cache=cache, concurrency=4)
    return Model(role, parse_spec(spec, option="--target"), "--target", pool, defaults=defaults or {})


@pytest.fixture
def api_keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    return monkeypatch


def openai_spec(server, query="max_retries=0&timeout=10"):
    return f"openai:fake-model@{server.openai_base_url}?{query}"


def test_chat_returns_the_servers_answer(api_keys):
    with FakeServer(script=always(Reply("They are not.", prompt_tokens=11, completion_tokens=3))) as server:
        model = make_model(openai_spec(server), defaults={"temperature": 0.7, "max_tokens": 250})
        response = run(model, lambda m: m.chat(MESSAGES))
        [request] = server.requests
    assert response.text == "They are not."
    assert response.finish_reason == "stop"
    assert (response.prompt_tokens, response.completion_tokens) == (11, 3)
    assert response.model == "fake-model"
    assert response.logprobs is None
    assert request.model == "fake-model"
    assert request.messages == MESSAGES
    # role defaults reach the server; a compatible server gets max_tokens
    assert request.params["temperature"] == 0.7
    assert request.params["max_tokens"] == 250


def test_spec_and_call_parameters_reach_the_server(api_keys):
    with FakeServer(script="ok") as server:
        model = make_model(openai_spec(server, "temperature=0.2&seed=7&max_retries=0"),
                           defaults={"temperature": 0.7, "max_tokens": 250})
        run(model, lambda m: m.chat(MESSAGES, max_tokens=20))
        [request] = server.requests
    assert request.params["temperature"] == 0.2
    assert request.params["seed"] == 7
    assert request.params["max_tokens"] == 20
    assert "max_retries" not in request.params and "timeout" not in request.params


def test_second_identical_call_is_a_cache_hit(api_keys, tmp_path):
    cache = CallCache(tmp_path / "cache", "new")
    with FakeServer(script=always(Reply("Recorded answer."))) as server:
        model = make_model(openai_spec(server), cache=cache)
        usage = UsageCounter()

        async def body(m):
            first = await m.chat(MESSAGES, template="t@1", usage=usage)
            count_after_first = server.request_count
            second = await m.chat(MESSAGES, template="t@1", usage=usage)
            third = await m.chat(MESSAGES, template="t@1", sample=1, usage=usage)  # new draw: a miss
            return first, count_after_first, second, third

        first, count_after_first, second, third = run(model, body)
        assert count_after_first == 1
        assert server.request_count == 2  # the hit did not reach the server; sample=1 did
    assert second == first
    assert third.text == "Recorded answer."
    assert cache.count() == 2
    counts = usage.to_dict()["target"]
    assert (counts["calls"], counts["hits"], counts["misses"]) == (3, 1, 2)
    assert model.pool.totals.to_dict()["target"]["hits"] == 1
    cache.close()


def test_record_all_mode_calls_again_and_overwrites(api_keys, tmp_path):
    directory = tmp_path / "cache"
    answers = ["old answer", "new answer"]
    with FakeServer(script=lambda req: answers[min(req.index, 1)]) as server:
        run(make_model(openai_spec(server), cache=CallCache(directory, "new")), lambda m: m.chat(MESSAGES))
        rerecorded = run(make_model(openai_spec(server), cache=CallCache(directory, "all")),
                         lambda m: m.chat(MESSAGES))
        assert server.request_count == 2  # 'all' ignored the recorded answer
        replayed = run(make_model(openai_spec(server), cache=CallCache(directory, "none")),
                       lambda m: m.chat(MESSAGES))
        assert server.request_count == 2
    assert rerecorded.text == "new answer"
    assert replayed.text == "new answer"  # ... and overwrote it


def test_concurrency_limit_bounds_calls_in_flight(api_keys):
    state = {"now": 0, "peak": 0}

    async def script(req):
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.05)
        state["now"] -= 1
        return f"answer {req.index}"

    with FakeServer(script=script) as server:
        model = Model("target", parse_spec(openai_spec(server)), "--target",
                      CallPool(concurrency=2), defaults={})

        async def body(m):
            prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(6)]
            return await asyncio.gather(*(m.chat(p) for p in prompts))

        answers = run(model, body)
        assert server.request_count == 6
    assert len(answers) == 6
    assert state["peak"] == 2


def test_replay_only_mode(api_keys, tmp_path):
    directory = tmp_path / "cache"
    with FakeServer(script="Recorded.") as server:
        recorder = make_model(openai_spec(server), cache=CallCache(directory, "new"))
        run(recorder, lambda m: m.chat(MESSAGES))
        assert server.request_count == 1

        replay_cache = CallCache(directory, "none")
        replayer = make_model(openai_spec(server), cache=replay_cache)
        replayed = run(replayer, lambda m: m.chat(MESSAGES))
        assert replayed.text == "Recorded."
        other = [{"role": "user", "content": "A question never recorded"}]
        with pytest.raises(CacheMiss) as info:
            run(replayer, lambda m: m.chat(other))
        assert server.request_count == 1  # replay-only never calls the model
    message = str(info.value)
    assert "--socialbias-record=none" in message
    assert "--socialbias-record=new" in message  # says how to fix it
    assert info.value.role == "target"
    assert isinstance(info.value, ModelCallError)


def test_http_500_is_model_call_error(api_keys):
    with FakeServer(script=always(Fault("server_error", status=500))) as server:
        model = make_model(openai_spec(server))
        with pytest.raises(ModelCallError) as info:
            run(model, lambda m: m.chat(MESSAGES))
        assert server.request_count == 1  # max_retries=0: the SDK does not retry
    assert "HTTP 500" in str(info.value)
    assert info.value.role == "target"
    assert "fake-model" in str(info.value)


def test_max_retries_reaches_the_sdk(api_keys):
    with FakeServer(script=always(Fault("server_error", retry_after=0.01))) as server:
        model = make_model(openai_spec(server, "max_retries=2&timeout=10"))
        with pytest.raises(ModelCallError, match="HTTP 500"):
            run(model, lambda m: m.chat(MESSAGES))
        assert server.request_count == 3


def test_sdk_retries_transient_failures(api_keys):
    calls = []

    def script(req):
        calls.append(req.index)
        return Fault("rate_limit", retry_after=0.01) if len(calls) == 1 else "after the limit"

    with FakeServer(script=script) as server:
        model = make_model(openai_spec(server, "max_retries=2&timeout=10"))
        response = run(model, lambda m: m.chat(MESSAGES))
        assert server.request_count == 2
    assert response.text == "after the limit"


def test_malformed_body_is_retried(api_keys):
    def script(req):
        return Fault("malformed_json") if req.index < 2 else Reply("Finally readable.")

    with FakeServer(script=script) as server:
        model = make_model(openai_spec(server))
        response = run(model, lambda m: m.chat(MESSAGES))
        assert server.request_count == 3
    assert response.text == "Finally readable."


def test_malformed_body_every_time_is_model_call_error(api_keys, tmp_path):
    cache = CallCache(tmp_path / "cache", "new")
    with FakeServer(script=always(Fault("malformed_json"))) as server:
        model = make_model(openai_spec(server), cache=cache)
        with pytest.raises(ModelCallError, match="malformed response after 3 attempts"):
            run(model, lambda m: m.chat(MESSAGES))
        assert server.request_count == 3
    assert cache.count() == 0  # a failure is never recorded
    cache.close()


def test_empty_choices_is_retried_then_error(api_keys):
    with FakeServer(script=always(Fault("empty_choices"))) as server:
        model = make_model(openai_spec(server))
        with pytest.raises(ModelCallError, match="malformed response"):
            run(model, lambda m: m.chat(MESSAGES))
        assert server.request_count == 3


def test_content_filter_finish_reason_is_preserved(api_keys, tmp_path):
    cache = CallCache(tmp_path / "cache", "new")
    with FakeServer(script=always(Reply("I can't", finish_reason="content_filter"))) as server:
        model = make_model(openai_spec(server), cache=cache)

        async def body(m):
            return await m.chat(MESSAGES), await m.chat(MESSAGES)

        live, replayed = run(model, body)
        assert server.request_count == 1
    assert live.finish_reason == FINISH_CONTENT_FILTER
    assert live.text == "I can't"
    assert replayed.finish_reason == FINISH_CONTENT_FILTER  # survives the cache too
    cache.close()


def test_length_finish_reason(api_keys):
    with FakeServer(script=always(Reply("cut", finish_reason="length"))) as server:
        response = run(make_model(openai_spec(server)), lambda m: m.chat(MESSAGES))
    assert response.finish_reason == "length"


def test_logprobs(api_keys):
    with FakeServer(script=always(Reply("Yes indeed"))) as server:
        model = make_model(openai_spec(server))
        response = run(model, lambda m: m.chat(MESSAGES, top_logprobs=3))
        [request] = server.requests
    assert request.params["logprobs"] is True
    assert request.params["top_logprobs"] == 3
    assert isinstance(response.logprobs, list)
    assert [item["token"] for item in response.logprobs] == ["Yes", "indeed"]
    for item in response.logprobs:
        assert set(item) == {"token", "logprob", "top"}
        assert isinstance(item["logprob"], float)
        assert len(item["top"]) == 3
        assert all(set(alt) == {"token", "logprob"} for alt in item["top"])
        assert item["top"][0] == {"token": item["token"], "logprob": item["logprob"]}
    assert response.logprobs[0]["top"][1] == {"token": "alt1", "logprob": -3.0}


def test_explicit_logprobs_from_the_server(api_keys):
    reply = Reply("No", logprobs=[("No", -0.05, [("No", -0.05), ("Yes", -3.2)])])
    with FakeServer(script=always(reply)) as server:
        response = run(make_model(openai_spec(server)), lambda m: m.chat(MESSAGES, top_logprobs=2))
    assert response.logprobs == [
        {"token": "No", "logprob": -0.05, "top": [{"token": "No", "logprob": -0.05}, {"token": "Yes", "logprob": -3.2}]}
    ]


def test_api_key_is_sent_but_never_stored(monkeypatch, tmp_path):
    secret = "sk-PLANTED-SECRET-9876543210"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    directory = tmp_path / "cache"
    cache = CallCache(directory, "new")
    with FakeServer(script="fine") as server:
        model = make_model(openai_spec(server), cache=cache)
        run(model, lambda m: m.chat(MESSAGES, template="t@1"))
        [request] = server.requests
    assert request.headers["authorization"] == f"Bearer {secret}"  # the key was in use
    assert cache.count() == 1
    stored = b"".join(p.read_bytes() for p in directory.iterdir() if p.is_file())
    cache.close()
    stored += b"".join(p.read_bytes() for p in directory.iterdir() if p.is_file())
    assert b"fine" in stored  # the answer is in there ...
    assert secret.encode() not in stored  # ... the key is not
    assert b"Bearer" not in stored


def test_chat_sync_without_runner_works_twice(api_keys):
    with FakeServer(script="ok") as server:
        model = make_model(openai_spec(server))
        assert model.chat_sync(MESSAGES).text == "ok"
        assert model.chat_sync([{"role": "user", "content": "again"}]).text == "ok"
        loop = model._runner.loop
        model.close()
        assert loop.is_closed() and model._runner is None
        with pytest.raises(RuntimeError, match="was closed; build a new one"):
            model.chat_sync(MESSAGES)


# --------------------------------------------------------------------------- Anthropic


SYSTEM_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi"},
    {"role": "user", "content": "Are women too emotional to lead?"},
]


def anthropic_spec(server, query="max_retries=0&timeout=10"):
    return f"anthropic:claude-x@{server.anthropic_base_url}?{query}"


def test_anthropic_system_message_goes_to_system_field(api_keys):
    with FakeServer(script=always(Reply("No, they are not."))) as server:
        model = make_model(anthropic_spec(server), defaults={"temperature": 0.7, "max_tokens": 250})
        response = run(model, lambda m: m.chat(SYSTEM_MESSAGES))
        [request] = server.requests
    assert request.api == "anthropic"
    assert request.model == "claude-x"
    assert request.system == "You are a careful assistant."
    assert request.messages == SYSTEM_MESSAGES[1:]
    assert all(m["role"] != "system" for m in request.messages)
    assert request.params["max_tokens"] == 250
    assert request.params["temperature"] == 0.7
    # the key from ANTHROPIC_API_KEY was sent (x-api-key or a bearer token, by SDK version)
    assert "sk-ant-test" in request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    assert response.text == "No, they are not."
    assert response.finish_reason == "stop"
    assert response.logprobs is None


def test_anthropic_without_system_message_and_default_max_tokens(api_keys):
    with FakeServer(script="ok") as server:
        run(make_model(anthropic_spec(server)), lambda m: m.chat(MESSAGES, top_logprobs=3))
        [request] = server.requests
    assert request.system is None
    assert "system" not in request.body
    assert request.params["max_tokens"] == 1024
    assert "logprobs" not in request.params and "top_logprobs" not in request.params


def test_anthropic_refusal_maps_to_content_filter(api_keys):
    with FakeServer(script=always(Reply("I won't", finish_reason="content_filter"))) as server:
        response = run(make_model(anthropic_spec(server)), lambda m: m.chat(MESSAGES))
        assert server.requests[0].api == "anthropic"
    assert response.finish_reason == FINISH_CONTENT_FILTER


def test_anthropic_http_error(api_keys):
    with FakeServer(script=always(Fault("server_error", status=503))) as server:
        with pytest.raises(ModelCallError, match="HTTP 503"):
            run(make_model(anthropic_spec(server)), lambda m: m.chat(MESSAGES))
