"""Model spec strings: ``provider:MODEL[@BASE_URL][?param=value&...]``, or a bare model name.

Examples::

    openai:gpt-4o-mini
    openai:gpt-4o-mini?temperature=0.7&max_tokens=250
    openai:my-model@http://127.0.0.1:8000/v1        (vLLM, llama.cpp server, Ollama, ...)
    openai:qwen3@http://127.0.0.1:8000/v1?chat_template_kwargs={"enable_thinking":false}
    openai:o4-mini?reasoning_effort=low&temperature=none
    anthropic:claude-sonnet-4-5?max_tokens=400&thinking_budget=2048
    gpt-4o-mini, claude-sonnet-4-5, models/my-model.gguf   (bare names, when unambiguous)
    local                                           (the embedded SmolLM2-135M-Instruct)
    local:/models/my-model.gguf?temperature=0.2      (any GGUF file, run with llama.cpp)

A spec's parameters always win over a role's defaults. ``NAME=none`` drops a parameter the
role would send. Parameters that are not named below pass through in the request body as
they are (a JSON value where the text is one: numbers, true/false, objects), and enter the
cache key like every parameter.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from ..errors import ConfigError
from . import providers
from .secrets import MASK, mask_spec, secret_param, userinfo_of

#: Decoding parameters a spec may set, checked; they all enter the cache key.
DECODING_PARAMS = {
    "temperature": float,
    "max_tokens": int,
    "top_p": float,
    "seed": int,
    "reasoning_effort": str,  # OpenAI reasoning models: minimal, low, medium, high
    "thinking_budget": int,  # Anthropic extended thinking: budget_tokens (>= 1024)
}
#: How a judge's answer is held to its labels (docs/models.md, "constrained answers"); in the
#: cache key, never sent as a body field of its own.
CONSTRAIN_METHODS = ("json_schema", "json_object", "grammar", "guided_choice", "tool", "none")
#: Parameters that commonly pass through to a server: known, so a misspelling of one is
#: caught (``top_kk``), while any other name passes through unchecked.
PASS_THROUGH_KNOWN = (
    "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "stop",
    "chat_template_kwargs", "logit_bias", "stop_token_ids", "skip_special_tokens", "n_predict",
    "mirostat", "typical_p", "num_ctx", "response_format",
)
#: A guard's own settings (``--socialbias-guard`` only; never sent): the unit it judges of
#: a dialogue, the risk criterion a Granite Guardian is asked about.
GUARD_SPEC_PARAMS = ("unit", "risk")
#: Transport settings a spec may set; they do not change answers, so not in the cache key.
TRANSPORT_PARAMS = {
    "timeout": float,  # seconds per read (the SDK's)
    "max_retries": int,
    "deadline": float,  # seconds for a whole call, retries included (guard.py)
    "max_answer_bytes": int,  # the largest answer a call takes (guard.py)
    "n_ctx": int,  # local models only: context window in tokens
}

_SPEC_RE = re.compile(
    r"^(?P<provider>[A-Za-z0-9_-]+):(?P<model>[^?]+?)"
    r"(?:@(?P<base_url>https?://[^?]+))?"
    r"(?:\?(?P<query>.*))?$"
)

SPEC_HELP = (
    "expected PROVIDER:MODEL[@BASE_URL[,BASE_URL...]][?param=value&...], e.g. openai:gpt-4o-mini, "
    "openai:my-model@http://127.0.0.1:8000/v1, anthropic:claude-sonnet-4-5?temperature=0, "
    "local or local:PATH.gguf"
)


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec. ``params`` holds decoding params, ``transport`` the rest."""

    provider: str
    model: str
    base_url: str | None = None
    params: dict = field(default_factory=dict)  # None as a value: drop the role's default
    transport: dict = field(default_factory=dict)
    raw: str = ""
    constrain: str | None = None  # how judge answers are held to their labels
    guard: dict = field(default_factory=dict)  # GUARD_SPEC_PARAMS given (guards only)
    #: A managed server's own arguments (vllm:, server:) or an in-process runtime's
    #: settings (hf:): every parameter that is not a decoding or transport parameter;
    #: never sent in a request.
    runtime: dict = field(default_factory=dict)
    #: Several base URLs of one model (``@URL1,URL2``), in the order given: the calls are
    #: spread over them (models/replicas.py); ``base_url`` is then all of them, sorted.
    replicas: tuple = ()

    def __str__(self) -> str:
        return self.raw or f"{self.provider}:{self.model}"

    @property
    def resolved(self) -> str:
        """The spec written out in full (a bare name shows the provider it resolved to)."""
        text = f"{self.provider}:{self.model}" + (f"@{self.base_url}" if self.base_url else "")
        query = [f"{k}={_shown(v)}" for k, v in sorted(self.params.items())]
        query += [f"{k}={v}" for k, v in sorted(self.transport.items())]
        query += [f"constrain={self.constrain}"] if self.constrain else []
        query += [f"{k}={v}" for k, v in sorted(self.guard.items())]
        query += [f"{k}={_shown(v)}" for k, v in sorted(self.runtime.items())]
        return text + ("?" + "&".join(query) if query else "")

    def to_dict(self) -> dict:
        out = {
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "params": dict(sorted(self.params.items())),
        }
        if self.constrain:
            out["constrain"] = self.constrain
        out.update(sorted(self.guard.items()))
        if self.runtime:
            out["runtime"] = dict(sorted(self.runtime.items()))
        return out


def _shown(value) -> str:
    return "none" if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)


#: Allowed ranges of the named numeric parameters.
RANGES = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "max_tokens": (1, 1_000_000),
    "thinking_budget": (1024, 1_000_000),
    "timeout": (0.001, 86_400.0),
    "deadline": (0.001, 86_400.0),
    "max_answer_bytes": (1_000, 2_000_000_000),
    "max_retries": (0, 100),
}


def check_param(name: str, value):
    """A named parameter's value converted to its type and checked against its range
    (``DECODING_PARAMS``, ``TRANSPORT_PARAMS``); ValueError saying what is wrong."""
    kind = DECODING_PARAMS.get(name) or TRANSPORT_PARAMS[name]
    if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{name}={value!r} is not a valid {kind.__name__}")
    try:
        converted = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a valid {kind.__name__}") from None
    if kind is float and not math.isfinite(converted):
        raise ValueError(f"{name}={value!r} must be a finite number")
    if name in RANGES:
        low, high = RANGES[name]
        if not low <= converted <= high:
            raise ValueError(f"{name}={value} is out of range [{low}, {high}]")
    return converted


def _convert(option: str, raw: str, name: str, value: str, kind: type):
    try:
        return check_param(name, value)
    except ValueError as exc:
        message = str(exc).replace(f"{name}=", f"parameter {name}=", 1)
        raise ConfigError(f"{option}={raw}: {message}") from None


def _pass_through_value(value: str):
    """A pass-through parameter's value: JSON where the text is JSON, else the text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_spec(given: str, option: str = "--target") -> ModelSpec:
    """Parse a spec string; raise ConfigError naming ``option`` and the fix. Messages show
    the spec with any secret in it masked (secrets.py); a spec that carries one (a
    password in the base URL, a parameter named like a key) is refused."""
    text = (given or "").strip()
    raw = mask_spec(given or "")  # what messages show
    bare = text.split("?", 1)[0]
    entry = providers.get(bare)
    if entry is not None and entry.default_model:  # ``local`` alone: the embedded model
        text = f"{bare}:{entry.default_model}" + text[len(bare):]
    elif bare and ":" not in bare.split("@", 1)[0]:
        text = providers.resolve_bare(bare.split("@", 1)[0], option, raw) + text[len(bare.split("@", 1)[0]):]
    match = _SPEC_RE.match(text)
    if not match:
        raise ConfigError(f"{option}={raw!r} is not a model spec: {SPEC_HELP}")
    provider = match["provider"].lower()
    entry = providers.get(provider)
    if entry is None:
        known_providers = ", ".join(providers.names())
        close = difflib.get_close_matches(provider, [str(n) for n in providers.names()], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"{option}={raw}: unknown provider {provider!r}{hint}; known providers: {known_providers} "
            "(use openai:MODEL@URL for any OpenAI-compatible server)"
        )
    model = match["model"].strip()
    if not model:
        raise ConfigError(f"{option}={raw!r}: empty model name: {SPEC_HELP}")
    if match["base_url"] is None and re.search(r"@(localhost|[\w.-]+:\d+)(/|$)", model):
        # Without a scheme the URL would be read as part of the model name and the call
        # would go to the provider's public API instead.
        raise ConfigError(
            f"{option}={raw}: the base URL needs its scheme, e.g. "
            f"{provider}:{model.split('@')[0]}@http://{model.split('@', 1)[1]}"
        )
    base_url = match["base_url"].rstrip("/") if match["base_url"] else None
    for url in re.split(r",\s*(?=https?://)", base_url or ""):
        _refuse_userinfo(url, option, raw, entry)
    replicas: tuple = ()
    if base_url and re.search(r",\s*https?://", base_url):
        replicas = tuple(url.strip().rstrip("/") for url in re.split(r",\s*(?=https?://)", base_url))
        if len(set(replicas)) < len(replicas):
            raise ConfigError(f"{option}={raw}: a replica URL is listed twice; list each replica once")
        if any("," in url for url in replicas):
            raise ConfigError(f"{option}={raw}: replicas are separated by commas, each with its scheme: "
                              "@http://host-a:8000/v1,http://host-b:8000/v1")
        base_url = ",".join(sorted(replicas))
    if base_url and not entry.can(providers.TAKES_URL):
        hint = f"; {entry.url_hint.format(url=base_url)}" if entry.url_hint else ""
        raise ConfigError(f"{option}={raw}: a {provider} model has no URL{hint}")
    params: dict = {}
    transport: dict = {}
    guard: dict = {}
    runtime: dict = {}
    constrain = None
    query = match["query"]
    if query is not None:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
        if query and not pairs:
            raise ConfigError(f"{option}={raw}: cannot read parameters {mask_spec(query)!r}: {SPEC_HELP}")
        for name, _value in pairs:
            if secret_param(name):
                raise ConfigError(
                    f"{option}={raw}: parameter {name}= looks like a secret; a spec is printed, reported and "
                    f"recorded, so it carries none: remove {name}= and {_key_source(entry)}"
                )
        known = [*DECODING_PARAMS, *TRANSPORT_PARAMS, "constrain", *GUARD_SPEC_PARAMS, *PASS_THROUGH_KNOWN]
        for name, value in pairs:
            if name in GUARD_SPEC_PARAMS:
                if option != "--socialbias-guard":
                    raise ConfigError(f"{option}={raw}: {name}= is a guard's setting; give it in --socialbias-guard")
                if not value.strip():
                    raise ConfigError(f"{option}={raw}: {name}= needs a value")
                guard[name] = value.strip()
            elif name == "constrain":
                if value not in CONSTRAIN_METHODS:
                    raise ConfigError(
                        f"{option}={raw}: constrain={value!r}: expected one of {', '.join(CONSTRAIN_METHODS)}"
                    )
                constrain = value
            elif name in TRANSPORT_PARAMS:
                transport[name] = _convert(option, raw, name, value, TRANSPORT_PARAMS[name])
            elif value.strip().lower() == "none":
                params[name] = None  # drop what the role would send
            elif name in DECODING_PARAMS:
                params[name] = _convert(option, raw, name, value, DECODING_PARAMS[name])
            elif (entry.can(providers.MANAGED) or entry.can(providers.RUNTIME_SETTINGS)) and name not in PASS_THROUGH_KNOWN:
                runtime[name] = _pass_through_value(value)  # an argument of the server or runtime
            else:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
                if close and name not in PASS_THROUGH_KNOWN:
                    raise ConfigError(
                        f"{option}={raw}: unknown parameter {name!r} (did you mean {close[0]}?); named "
                        f"ones: {', '.join([*DECODING_PARAMS, *TRANSPORT_PARAMS, 'constrain'])}; any other "
                        "name passes through to the server"
                    )
                params[name] = _pass_through_value(value)
    for name, hint in entry.unsupported:
        if params.get(name) is not None:
            raise ConfigError(f"{option}={raw}: {hint}")
    if params.get("seed") is not None and not entry.can(providers.SEED):
        raise ConfigError(f"{option}={raw}: {provider} takes no sampling seed; remove seed= (its answers vary "
                          "from call to call; the record/replay cache is what makes a run repeatable)")
    return ModelSpec(provider, model, base_url, params, transport, (given or "").strip(), constrain, guard, runtime,
                     replicas)


def _key_source(entry) -> str:
    """Where a provider's key comes from, as a fix says it."""
    if entry.key_env:
        return f"set the key in the environment variable {entry.key_env} (keys are read only from the environment)"
    return "give the server its credentials another way (keys are read only from the environment)"


def _refuse_userinfo(url: str, option: str, shown: str, entry) -> None:
    """A base URL with a user name (and password) in it is refused: the URL is printed,
    reported and recorded with every call."""
    found = userinfo_of(url)
    if found is None:
        return
    user, has_password = found
    written = f"{user}:{MASK}@" if has_password else f"{user}@"
    raise ConfigError(
        f"{option}={shown}: the base URL carries credentials ({written}); a base URL is printed, reported and "
        f"recorded with every call, so it carries none: remove {written} from it and {_key_source(entry)}"
    )
