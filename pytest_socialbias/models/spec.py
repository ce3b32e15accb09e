"""Model spec strings: ``provider:MODEL[@BASE_URL][?param=value&...]``.

Examples::

    openai:gpt-4o-mini
    openai:gpt-4o-mini?temperature=0.7&max_tokens=250
    openai:my-model@http://127.0.0.1:8000/v1        (vLLM, llama.cpp server, Ollama, ...)
    anthropic:claude-sonnet-4-5?max_tokens=400
    local                                           (the embedded SmolLM2-135M-Instruct)
    local:/models/my-model.gguf?temperature=0.2      (any GGUF file, run with llama.cpp)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from ..errors import ConfigError
from . import providers

#: Decoding parameters a spec may set; they all enter the cache key.
DECODING_PARAMS = {
    "temperature": float,
    "max_tokens": int,
    "top_p": float,
    "seed": int,
}
#: Transport settings a spec may set; they do not change answers, so not in the cache key.
TRANSPORT_PARAMS = {
    "timeout": float,
    "max_retries": int,
    "n_ctx": int,  # local models only: context window in tokens
}

_SPEC_RE = re.compile(
    r"^(?P<provider>[A-Za-z0-9_-]+):(?P<model>[^?]+?)"
    r"(?:@(?P<base_url>https?://[^?]+))?"
    r"(?:\?(?P<query>.*))?$"
)

SPEC_HELP = (
    "expected PROVIDER:MODEL[@BASE_URL][?param=value&...], e.g. openai:gpt-4o-mini, "
    "openai:my-model@http://127.0.0.1:8000/v1, anthropic:claude-sonnet-4-5?temperature=0, "
    "local or local:PATH.gguf"
)


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec. ``params`` holds decoding params, ``transport`` the rest."""

    provider: str
    model: str
    base_url: str | None = None
    params: dict = field(default_factory=dict)
    transport: dict = field(default_factory=dict)
    raw: str = ""

    def __str__(self) -> str:
        return self.raw or f"{self.provider}:{self.model}"

    def to_dict(self) -> dict:
        return {
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "params": dict(sorted(self.params.items())),
        }


def _convert(option: str, raw: str, name: str, value: str, kind: type):
    try:
        converted = kind(value)
    except ValueError:
        raise ConfigError(
            f"{option}={raw}: parameter {name}={value!r} is not a valid {kind.__name__}"
        ) from None
    if kind is float and not math.isfinite(converted):
        raise ConfigError(f"{option}={raw}: parameter {name}={value!r} must be a finite number")
    checks = {
        "temperature": (0.0, 2.0),
        "top_p": (0.0, 1.0),
        "max_tokens": (1, 1_000_000),
        "timeout": (0.001, 86_400.0),
        "max_retries": (0, 100),
    }
    if name in checks:
        low, high = checks[name]
        if not low <= converted <= high:
            raise ConfigError(
                f"{option}={raw}: parameter {name}={value} is out of range [{low}, {high}]"
            )
    return converted


def parse_spec(raw: str, option: str = "--target") -> ModelSpec:
    """Parse a spec string; raise ConfigError naming ``option`` and the fix."""
    text = (raw or "").strip()
    bare = text.split("?", 1)[0]
    entry = providers.get(bare)
    if entry is not None and entry.default_model:  # ``local`` alone: the embedded model
        text = f"{bare}:{entry.default_model}" + text[len(bare):]
    match = _SPEC_RE.match(text)
    if not match:
        raise ConfigError(f"{option}={raw!r} is not a model spec: {SPEC_HELP}")
    provider = match["provider"].lower()
    entry = providers.get(provider)
    if entry is None:
        known = ", ".join(providers.names())
        raise ConfigError(
            f"{option}={raw}: unknown provider {provider!r}; known providers: {known} "
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
    if base_url and not entry.takes_url:
        hint = f"; {entry.url_hint.format(url=base_url)}" if entry.url_hint else ""
        raise ConfigError(f"{option}={raw}: a {provider} model has no URL{hint}")
    params: dict = {}
    transport: dict = {}
    query = match["query"]
    if query is not None:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
        if query and not pairs:
            raise ConfigError(f"{option}={raw}: cannot read parameters {query!r}: {SPEC_HELP}")
        for name, value in pairs:
            if name in DECODING_PARAMS:
                params[name] = _convert(option, raw, name, value, DECODING_PARAMS[name])
            elif name in TRANSPORT_PARAMS:
                transport[name] = _convert(option, raw, name, value, TRANSPORT_PARAMS[name])
            else:
                allowed = ", ".join([*DECODING_PARAMS, *TRANSPORT_PARAMS])
                raise ConfigError(
                    f"{option}={raw}: unknown parameter {name!r}; allowed: {allowed}"
                )
    return ModelSpec(provider, model, base_url, params, transport, (raw or "").strip())
