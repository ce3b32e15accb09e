"""Unit tests for model spec strings (models/spec.py) and credential checks (models/client.py)."""

from __future__ import annotations

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.models import CallPool, Model, providers
from pytest_socialbias.models.client import check_credentials
from pytest_socialbias.models.providers import NO_KEY_PLACEHOLDER
from pytest_socialbias.models.spec import parse_spec

# --------------------------------------------------------------------------- valid forms


def test_plain_openai_spec():
    spec = parse_spec("openai:gpt-4o-mini")
    assert spec.provider == "openai"
    assert spec.model == "gpt-4o-mini"
    assert spec.base_url is None
    assert spec.params == {}
    assert spec.transport == {}
    assert str(spec) == "openai:gpt-4o-mini"


def test_spec_with_base_url():
    spec = parse_spec("openai:m@http://h:1/v1")
    assert spec.provider == "openai"
    assert spec.model == "m"
    assert spec.base_url == "http://h:1/v1"
    assert spec.params == {}


def test_base_url_trailing_slash_is_stripped():
    assert parse_spec("openai:m@https://example.test/v1/").base_url == "https://example.test/v1"


def test_spec_with_decoding_params_converts_types():
    spec = parse_spec("openai:m?temperature=0.7&max_tokens=250&top_p=0.9&seed=3")
    assert spec.params == {"temperature": 0.7, "max_tokens": 250, "top_p": 0.9, "seed": 3}
    assert isinstance(spec.params["temperature"], float)
    assert isinstance(spec.params["max_tokens"], int)
    assert isinstance(spec.params["top_p"], float)
    assert isinstance(spec.params["seed"], int)
    assert spec.base_url is None
    assert spec.model == "m"


def test_spec_with_base_url_and_params():
    spec = parse_spec("openai:m@http://127.0.0.1:8000/v1?temperature=0&max_tokens=5")
    assert spec.model == "m"
    assert spec.base_url == "http://127.0.0.1:8000/v1"
    assert spec.params == {"temperature": 0.0, "max_tokens": 5}


def test_anthropic_spec():
    spec = parse_spec("anthropic:claude-sonnet-4-5?max_tokens=400", option="--judge")
    assert spec.provider == "anthropic"
    assert spec.model == "claude-sonnet-4-5"
    assert spec.params == {"max_tokens": 400}


def test_provider_is_case_insensitive():
    assert parse_spec("OpenAI:gpt-x").provider == "openai"


def test_model_name_containing_colon():
    spec = parse_spec("openai:llama3:8b")
    assert spec.provider == "openai"
    assert spec.model == "llama3:8b"


def test_model_name_containing_colon_with_url_and_params():
    spec = parse_spec("openai:llama3:8b@http://127.0.0.1:11434/v1?temperature=0.2")
    assert spec.model == "llama3:8b"
    assert spec.base_url == "http://127.0.0.1:11434/v1"
    assert spec.params == {"temperature": 0.2}


def test_surrounding_whitespace_is_ignored():
    spec = parse_spec("  openai:gpt-x  ")
    assert spec.model == "gpt-x"
    assert str(spec) == "openai:gpt-x"


def test_transport_params_go_to_transport_not_params():
    spec = parse_spec("openai:m@http://h:1/v1?timeout=2.5&max_retries=0&temperature=1")
    assert spec.transport == {"timeout": 2.5, "max_retries": 0}
    assert spec.params == {"temperature": 1.0}
    # to_dict feeds metadata / the cache key: transport settings do not change answers
    as_dict = spec.to_dict()
    assert "timeout" not in as_dict["params"] and "max_retries" not in as_dict["params"]
    assert "transport" not in as_dict
    assert as_dict == {
        "provider": "openai",
        "model": "m",
        "base_url": "http://h:1/v1",
        "params": {"temperature": 1.0},
    }


def test_to_dict_params_are_sorted():
    spec = parse_spec("openai:m?top_p=0.5&max_tokens=9&seed=1")
    assert list(spec.to_dict()["params"]) == ["max_tokens", "seed", "top_p"]


def test_boundary_values_are_accepted():
    spec = parse_spec("openai:m?temperature=2&top_p=0&max_tokens=1&max_retries=0")
    assert spec.params == {"temperature": 2.0, "top_p": 0.0, "max_tokens": 1}
    assert spec.transport == {"max_retries": 0}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("raw", ["", "   ", "openai", "my-model", "openai:", ":model"])
def test_not_a_spec_is_config_error(raw):
    with pytest.raises(ConfigError) as info:
        parse_spec(raw, option="--target")
    message = str(info.value)
    assert "--target" in message
    assert "PROVIDER:MODEL" in message  # says what is expected


def test_none_is_config_error():
    with pytest.raises(ConfigError, match="--judge"):
        parse_spec(None, option="--judge")


def test_unknown_provider_names_option_and_lists_providers():
    with pytest.raises(ConfigError) as info:
        parse_spec("gemini:gemini-pro", option="--socialbias-judge")
    message = str(info.value)
    assert "--socialbias-judge" in message
    assert "'gemini'" in message
    for provider in providers.names():
        assert provider in message
    assert "openai" in message and "anthropic" in message


def test_unknown_parameter():
    with pytest.raises(ConfigError) as info:
        parse_spec("openai:m?temprature=0.5", option="--user-model")
    message = str(info.value)
    assert "--user-model" in message
    assert "'temprature'" in message
    assert "temperature" in message  # lists what is allowed
    assert "max_retries" in message


@pytest.mark.parametrize(
    "query, name",
    [
        ("temperature=hot", "temperature"),
        ("max_tokens=2.5", "max_tokens"),
        ("seed=abc", "seed"),
        ("top_p=", "top_p"),
        ("temperature", "temperature"),
        ("max_retries=1.5", "max_retries"),
    ],
)
def test_bad_number(query, name):
    with pytest.raises(ConfigError) as info:
        parse_spec(f"openai:m?{query}", option="--target")
    message = str(info.value)
    assert "--target" in message
    assert name in message
    assert "not a valid" in message


@pytest.mark.parametrize(
    "query",
    [
        "temperature=2.5",
        "temperature=-0.1",
        "top_p=1.5",
        "max_tokens=0",
        "timeout=0",
        "max_retries=-1",
        "max_retries=101",
    ],
)
def test_out_of_range(query):
    with pytest.raises(ConfigError) as info:
        parse_spec(f"openai:m?{query}", option="--target")
    message = str(info.value)
    assert "out of range" in message
    assert query.split("=")[0] in message
    assert "--target" in message


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_non_finite_numbers(value):
    with pytest.raises(ConfigError) as info:
        parse_spec(f"openai:m?temperature={value}", option="--target")
    assert "finite" in str(info.value)
    assert "--target" in str(info.value)


def test_non_finite_timeout():
    with pytest.raises(ConfigError, match="finite"):
        parse_spec("openai:m?timeout=nan")


# --------------------------------------------------------------------------- credentials


@pytest.fixture
def no_keys(monkeypatch):
    for env in (p.key_env for p in map(providers.get, providers.names()) if p.key_env):
        monkeypatch.delenv(env, raising=False)
    return monkeypatch


def test_missing_openai_key(no_keys):
    spec = parse_spec("openai:gpt-4o-mini")
    with pytest.raises(ConfigError) as info:
        check_credentials(spec, "--target")
    message = str(info.value)
    assert "--target" in message
    assert "OPENAI_API_KEY" in message


def test_missing_anthropic_key(no_keys):
    spec = parse_spec("anthropic:claude-x")
    with pytest.raises(ConfigError) as info:
        check_credentials(spec, "--judge")
    message = str(info.value)
    assert "--judge" in message
    assert "ANTHROPIC_API_KEY" in message


def test_blank_key_counts_as_missing(no_keys):
    no_keys.setenv("OPENAI_API_KEY", "   ")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        check_credentials(parse_spec("openai:gpt-x"), "--target")


def test_openai_with_base_url_and_no_key_gets_placeholder(no_keys):
    spec = parse_spec("openai:m@http://127.0.0.1:9/v1")
    assert check_credentials(spec, "--target") == NO_KEY_PLACEHOLDER


def test_anthropic_with_base_url_still_needs_a_key(no_keys):
    spec = parse_spec("anthropic:claude-x@http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        check_credentials(spec, "--judge")


def test_keys_come_from_the_environment(no_keys):
    no_keys.setenv("OPENAI_API_KEY", " sk-from-env ")
    no_keys.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    assert check_credentials(parse_spec("openai:gpt-x"), "--target") == "sk-from-env"
    assert check_credentials(parse_spec("anthropic:claude-x"), "--judge") == "sk-ant-env"
    # an explicit key wins over the local-server placeholder
    assert check_credentials(parse_spec("openai:m@http://127.0.0.1:9/v1"), "--target") == "sk-from-env"


def test_model_constructor_fails_early_without_key(no_keys):
    with pytest.raises(ConfigError) as info:
        Model("judge", parse_spec("anthropic:claude-x"), "--judge", CallPool())
    assert "--judge" in str(info.value)
    assert "ANTHROPIC_API_KEY" in str(info.value)


def test_base_url_without_scheme_is_rejected_not_sent_to_the_public_api():
    with pytest.raises(ConfigError) as info:
        parse_spec("openai:m@localhost:8000/v1", option="--judge")
    assert "--judge=openai:m@localhost:8000/v1" in str(info.value)
    assert "openai:m@http://localhost:8000/v1" in str(info.value)


def test_model_names_with_at_sign_stay_allowed():
    assert parse_spec("anthropic:claude-x@20240620").model == "claude-x@20240620"


def test_local_specs():
    default = parse_spec("local")
    assert (default.provider, default.model, default.base_url) == ("local", "smollm2-135m-instruct", None)
    assert str(default) == "local"
    tuned = parse_spec("local?temperature=0.2&n_ctx=2048")
    assert tuned.params == {"temperature": 0.2} and tuned.transport == {"n_ctx": 2048}
    path = parse_spec("local:/models/x.gguf?max_tokens=50")
    assert (path.model, path.params) == ("/models/x.gguf", {"max_tokens": 50})
    with pytest.raises(ConfigError, match="a local model has no URL"):
        parse_spec("local:x@http://127.0.0.1:8080/v1")
