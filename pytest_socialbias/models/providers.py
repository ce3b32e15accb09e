"""The providers a model spec can name, one entry each.

An entry says where the provider's API key comes from, whether it works keyless with a
base URL (OpenAI-compatible servers), what its backend can do (constrain an answer to
given choices, return log-probabilities, honour a seed) and how to build the backend;
the SDK or runtime behind it is imported only when the backend is built. Adding a
provider = one ``register`` call with its backend (see the Backend protocol in base.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from ..registry import Registry
from .local_backend import DEFAULT_NAME as EMBEDDED_MODEL

#: What a provider can do, each a behaviour the core acts on (``Provider.can``).
CONSTRAINED_ANSWERS = "constrained answers"  # holds an answer to given choices itself (a grammar)
LOGPROBS = "log-probabilities"  # returns token log-probabilities: asked only of such providers
SEED = "seed"  # honours a sampling seed: a spec's seed= is refused elsewhere
TAKES_URL = "takes a base URL"  # a spec may give @BASE_URL
KEYLESS_WITH_URL = "keyless with a base URL"  # a spec with @URL needs no key (a placeholder is sent)
ADAPTS = "adapts to its endpoint"  # an HTTP endpoint: checked once per role, adapted to (adapt.py)
MANAGED = "managed server"  # a server the run starts and stops (managed.py); other spec parameters are its arguments
RUNTIME_SETTINGS = "runtime settings"  # non-decoding spec parameters configure the runtime (hf: device, dtype)
CLASSIFIER = "classifier head"  # scores labels, writes nothing: a detector only (--socialbias-guard)
#: A provider registered without saying: an HTTP endpoint at a base URL, like most.
HTTP_ENDPOINT = frozenset({TAKES_URL, ADAPTS})

#: Placeholder key for OpenAI-compatible servers that need none (vLLM, llama.cpp, Ollama).
NO_KEY_PLACEHOLDER = "not-needed"
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 5


@dataclass(frozen=True)
class BackendContext:
    """What a backend is built from."""

    spec: Any  # a spec.ModelSpec (spec.py imports this module, so it is not imported back)
    key: str | None  # None: the SDK reads its own environment variable
    option: str  # the option that named the model, for error messages
    local_threads: int | None = None
    http_clients: dict | None = None  # one shared HTTP client per SDK
    gpus: str | None = None  # --socialbias-gpus, for in-process models

    @property
    def timeout(self) -> float:
        return self.spec.transport.get("timeout", DEFAULT_TIMEOUT)

    @property
    def max_retries(self) -> int:
        return self.spec.transport.get("max_retries", DEFAULT_MAX_RETRIES)


@dataclass(frozen=True)
class Provider:
    name: str
    build: Callable  # (BackendContext) -> backend; imports its SDK or runtime itself
    key_env: str | None = None  # environment variable that holds the API key
    default_model: str | None = None  # the model of the bare spec ``NAME``
    check: Callable | None = None  # (spec, option) -> None; ConfigError when it cannot run
    capabilities: frozenset = HTTP_ENDPOINT  # what it can do (the constants above)
    #: Build the backend in the background while pytest collects (an SDK import and a
    #: client whose TLS set-up costs about a second); in-process runtimes load on first use.
    build_early: bool = True
    #: Shown in the summary and the report when a judge runs on this provider.
    judge_warning: str | None = None
    url_hint: str = ""  # how to reach such a model through a server instead
    #: Bare model names that mean this provider (``gpt-4o`` -> openai), matched in full.
    bare_names: re.Pattern | None = None
    #: How its endpoints can hold a judge's answer to its labels, tried in order
    #: (constrain.py); CONSTRAINED_ANSWERS backends do it themselves. ``api_constrain_methods``
    #: are for the provider's own API (a spec without @URL), when they differ.
    constrain_methods: tuple = ("none",)
    api_constrain_methods: tuple | None = None
    #: Named spec parameters it cannot take, with what to write instead.
    unsupported: tuple = ()
    #: (spec) -> (model, base_url) as the cache key names them, where the spec's own do
    #: not (a managed checkpoint: its content hash, not its path or port).
    cache_identity: Callable | None = None
    #: (environment variable, URL): where the SDK sends a spec without @URL, unless the
    #: variable is set. The cache key names it without importing the SDK (a replay calls
    #: nothing; openai costs 1.4 s of CPU to import, anthropic 3 s); when the variable is
    #: set the SDK itself is asked, so the key always names the URL the SDK would use.
    default_url: tuple[str, str] | None = None
    #: (max_batch, batch_wait_ms) by default, for a backend run in this process that
    #: gathers the calls in flight into batches (models/batcher.py); a spec's own
    #: ``max_batch=`` and ``batch_wait_ms=`` win. Such roles get batch statistics in the
    #: report and the summary (models/batchstats.py).
    batch_defaults: tuple | None = None

    def can(self, capability: str) -> bool:
        return capability in self.capabilities

    def known_url(self, spec) -> str | None:
        """The base URL a spec's requests go to, where it is known without the SDK."""
        if spec.base_url:
            return spec.base_url
        if self.default_url is not None and not os.environ.get(self.default_url[0]):
            return self.default_url[1]
        return None

    def api_key(self, spec, option: str, required: bool = True) -> str | None:
        """The API key from the provider's usual variable, or ConfigError naming it.

        Not ``required`` (a replay-only run, which calls nothing): a placeholder stands in
        for a key that is not set."""
        if self.check is not None:
            self.check(spec, option)
        if self.default_url is not None and not spec.base_url:
            _refuse_url_credentials(self.default_url[0], os.environ.get(self.default_url[0], ""))
        if self.key_env is None:
            return None
        key = os.environ.get(self.key_env, "").strip()
        if key:
            return key
        if (self.can(KEYLESS_WITH_URL) and spec.base_url) or not required:
            return NO_KEY_PLACEHOLDER
        raise ConfigError(
            f"{option}={spec}: no API key: set the environment variable {self.key_env} "
            "(keys are read only from the environment)"
        )


def _refuse_url_credentials(variable: str, url: str) -> None:
    """The SDK's base URL variable (``OPENAI_BASE_URL``) may not carry credentials either:
    the URL it names is printed, reported and recorded with every call (spec.py)."""
    from .secrets import MASK, userinfo_of

    found = userinfo_of(url.strip())
    if found is not None:
        user, has_password = found
        written = f"{user}:{MASK}@" if has_password else f"{user}@"
        raise ConfigError(f"{variable} carries credentials ({written}); the base URL is printed, reported and "
                          f"recorded with every call, so it carries none: remove {written} from {variable}")


#: Keys shorter than this are not looked for in text (a placeholder, a test's ``x``).
MIN_KEY_LENGTH = 8


def known_keys(environ=None) -> tuple[str, ...]:
    """The values of the API keys this process knows (every provider's ``key_env`` that is
    set), longest first, placeholders and very short values left out: masked wherever
    they show up in what a server sends back (secrets.py)."""
    environ = os.environ if environ is None else environ
    found = {environ.get(p.key_env, "").strip() for p in PROVIDERS.values() if p.key_env}
    return tuple(sorted((k for k in found if len(k) >= MIN_KEY_LENGTH and k != NO_KEY_PLACEHOLDER),
                        key=lambda k: (-len(k), k)))


#: Every provider a spec can name (registry.py): the plugin's below, and any a project's
#: conftest.py registers.
PROVIDERS: Registry[Provider] = Registry("provider")


def register(provider: Provider) -> Provider:
    """Add (or replace) a provider; its name becomes valid in model specs."""
    return PROVIDERS.register(provider)


def unregister(name: str) -> None:
    PROVIDERS.unregister(name)


def names() -> tuple[str, ...]:
    return PROVIDERS.names()


def get(name: str) -> Provider | None:
    return PROVIDERS.get(name)


def resolve_bare(name: str, option: str, raw: str) -> str:
    """``PROVIDER:MODEL`` for a bare model name, when exactly one provider claims it; a
    path to a .gguf file is a local model. ConfigError listing the spellings otherwise."""
    path = Path(name).expanduser()
    if name.endswith(".gguf") or path.suffix == ".gguf":
        return f"local:{name}"
    if path.is_dir():
        raise ConfigError(
            f"{option}={raw}: {name} is a folder (a checkpoint?); write vllm:{name} to have the run "
            f"start a vLLM server for it, server:{name}?command=... for another server, or "
            "openai:MODEL@http://HOST:PORT/v1 for one you started"
        )
    claims = [p.name for p in PROVIDERS.values() if p.bare_names is not None and p.bare_names.fullmatch(name)]
    if len(claims) == 1:
        return f"{claims[0]}:{name}"
    spellings = ", ".join(f"{p}:{name}" for p in (claims or [p.name for p in PROVIDERS.values() if p.can(TAKES_URL)]))
    why = "several providers serve it" if claims else "no provider claims the name"
    raise ConfigError(
        f"{option}={raw!r} is not a model spec ({why}); write PROVIDER:MODEL, e.g. {spellings}, "
        f"or openai:{name}@http://HOST:PORT/v1 for a server"
    )


def provider_of(spec) -> Provider:
    provider = PROVIDERS.get(spec.provider)
    if provider is None:
        raise ConfigError(f"{spec}: {PROVIDERS.unknown(spec.provider)}")
    return provider


# --------------------------------------------------------------------------- the built-in three


def _build_openai(ctx: BackendContext):
    from .openai_backend import OpenAIBackend

    return OpenAIBackend(ctx.spec, ctx.key, ctx.timeout, ctx.max_retries, ctx.http_clients)


def _build_anthropic(ctx: BackendContext):
    from .anthropic_backend import AnthropicBackend

    return AnthropicBackend(ctx.spec, ctx.key, ctx.timeout, ctx.max_retries, ctx.http_clients)


def _build_local(ctx: BackendContext):
    from .local_backend import LocalBackend

    return LocalBackend(ctx.spec, ctx.option, threads=ctx.local_threads)


def _check_local(spec, option: str) -> None:
    from . import local_backend

    local_backend.check_available(option)
    local_backend.resolve_model_path(spec.model, option)


#: The judge warning of the embedded model.
EMBEDDED_JUDGE_WARNING = (
    "the judge is the small embedded model (SmolLM2-135M): it is not a reliable judge "
    "(its labels barely depend on the reply), so these rates and gates mean little. "
    "Pass --judge=PROVIDER:MODEL with a capable model for real measurements."
)

OPENAI = register(Provider(
    name="openai", build=_build_openai, key_env="OPENAI_API_KEY",
    capabilities=HTTP_ENDPOINT | {KEYLESS_WITH_URL, LOGPROBS, SEED},
    bare_names=re.compile(r"(gpt-|chatgpt-|o[1-9]|codex-|computer-use-|text-embedding-)[A-Za-z0-9._-]*"),
    # A server's grammar first: llama.cpp servers honour it (and their answers stay one
    # token, whose log-probabilities the treatment judge reads); servers that do not
    # refuse it or ignore it, and a non-conforming answer moves on to the next method.
    constrain_methods=("grammar", "json_schema", "json_object", "none"),
    api_constrain_methods=("json_schema", "none"),
    default_url=("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    unsupported=(("thinking_budget", "thinking_budget is Anthropic's; OpenAI reasoning models take reasoning_effort"),),
))
ANTHROPIC = register(Provider(
    name="anthropic", build=_build_anthropic, key_env="ANTHROPIC_API_KEY",
    bare_names=re.compile(r"claude-[A-Za-z0-9._-]+"),
    constrain_methods=("tool", "none"),
    default_url=("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    unsupported=(("reasoning_effort", "reasoning_effort is OpenAI's; Anthropic takes thinking_budget=N (tokens)"),),
))
LOCAL = register(Provider(
    name="local", build=_build_local, default_model=EMBEDDED_MODEL, check=_check_local,
    capabilities=frozenset({CONSTRAINED_ANSWERS, LOGPROBS, SEED}), build_early=False,
    judge_warning=EMBEDDED_JUDGE_WARNING, url_hint="to use a llama.cpp server, write openai:MODEL@{url}",
    unsupported=(("reasoning_effort", "the embedded llama.cpp runtime has no reasoning_effort"),
                 ("continuation", "continuation is no spec setting: the embedded user simulator's requests set it "
                                  "themselves (docs/running-dymt.md); remove continuation="),
                 ("thinking_budget", "the embedded llama.cpp runtime has no thinking_budget")),
))


# --------------------------------------------------------------------------- managed servers


def _build_managed(ctx: BackendContext):
    import dataclasses

    from .managed import urls_for
    from .openai_backend import OpenAIBackend

    urls = urls_for(ctx.spec)
    backends = [OpenAIBackend(dataclasses.replace(ctx.spec, base_url=url), NO_KEY_PLACEHOLDER, ctx.timeout,
                              ctx.max_retries, ctx.http_clients) for url in urls]
    if len(backends) == 1:
        return backends[0]
    from .replicas import ReplicaBackend

    return ReplicaBackend(tuple(urls), backends)


def _managed_identity(spec) -> tuple:
    from .managed import checkpoint_identity

    return checkpoint_identity(spec.model), "managed"


#: A checkpoint the run serves with vLLM: ``vllm:PATH_OR_NAME?tensor_parallel_size=2&...``.
VLLM = register(Provider(
    name="vllm", build=_build_managed, build_early=False,
    capabilities=frozenset({MANAGED, ADAPTS, LOGPROBS, SEED}), cache_identity=_managed_identity,
    constrain_methods=("guided_choice", "json_schema", "json_object", "none"),
    url_hint="for a vLLM server you started, write openai:MODEL@{url}",
    unsupported=(("thinking_budget", "thinking_budget is Anthropic's; a vLLM server takes chat_template_kwargs"),),
))
#: Any OpenAI-compatible server the run starts from a command template:
#: ``server:MODEL?command=llama-server -m {model} --host {host} --port {port}``.
SERVER = register(Provider(
    name="server", build=_build_managed, build_early=False,
    capabilities=frozenset({MANAGED, ADAPTS, LOGPROBS, SEED}), cache_identity=_managed_identity,
    constrain_methods=("grammar", "json_schema", "json_object", "none"),
    url_hint="for a server you started, write openai:MODEL@{url}",
    unsupported=(("thinking_budget", "thinking_budget is Anthropic's; an OpenAI-compatible server takes chat_template_kwargs"),),
))


# --------------------------------------------------------------------------- in-process GPU models


def _build_hf(ctx: BackendContext):
    from .hf_backend import HFBackend

    return HFBackend(ctx.spec, ctx.option, gpus=ctx.gpus)


def _check_hf(spec, option: str) -> None:
    from . import hf_backend

    hf_backend.check_available(option)
    hf_backend.check_spec(spec, option)


def _hf_identity(spec) -> tuple:
    from .managed import checkpoint_identity

    return checkpoint_identity(spec.model), "in-process"


#: A transformers causal LM run in this process with batched generation: ``hf:PATH_OR_NAME``.
HF = register(Provider(
    name="hf", build=_build_hf, build_early=False, check=_check_hf,
    capabilities=frozenset({RUNTIME_SETTINGS, CONSTRAINED_ANSWERS, LOGPROBS, SEED}), cache_identity=_hf_identity,
    batch_defaults=(16, 5.0),  # hf_backend.DEFAULT_MAX_BATCH, DEFAULT_BATCH_WAIT_MS
    url_hint="for a server, write openai:MODEL@{url} or vllm:MODEL",
    unsupported=(("reasoning_effort", "the hf backend has no reasoning_effort"),
                 ("thinking_budget", "the hf backend has no thinking_budget")),
))


# --------------------------------------------------------------------------- in-process classifier heads


def _build_hfcls(ctx: BackendContext):
    from .hf_classifier import HFClassifierBackend

    return HFClassifierBackend(ctx.spec, ctx.option, gpus=ctx.gpus)


def _check_hfcls(spec, option: str) -> None:
    from . import hf_classifier

    where = f"{option}={spec}"
    hf_classifier.check_spec(spec, option)
    hf_classifier.read_head(hf_classifier.locate(spec.model, where), where)
    hf_classifier.check_available(option)


def _hfcls_identity(spec) -> tuple:
    from . import hf_classifier

    folder = hf_classifier.locate(spec.model, str(spec))
    return hf_classifier.checkpoint_fingerprint(folder), "in-process"


_NO_DECODING = "a classifier head does not decode: hfcls takes no {}"
#: A transformers sequence classifier run in this process, as a detector:
#: ``hfcls:PATH_OR_ID?labels=LABEL:CLASS,...`` (models/hf_classifier.py, judges/classifier.py).
HFCLS = register(Provider(
    name="hfcls", build=_build_hfcls, build_early=False, check=_check_hfcls,
    capabilities=frozenset({RUNTIME_SETTINGS, CLASSIFIER}), cache_identity=_hfcls_identity,
    batch_defaults=(32, 5.0),  # hf_classifier.DEFAULT_MAX_BATCH, DEFAULT_BATCH_WAIT_MS
    url_hint="a classifier head runs in this process: give its folder, hfcls:PATH",
    unsupported=tuple((name, _NO_DECODING.format(name)) for name in
                      ("temperature", "top_p", "max_tokens", "seed", "reasoning_effort", "thinking_budget")),
))
