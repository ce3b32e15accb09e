"""The role-bound model client: spec + backend + cache + concurrency limit + counters.

``Model.chat`` is the single door to a model: every call is keyed, looked up in the
record/replay cache, rate-limited by the process-wide semaphore, sent through the backend
(whose SDK retries transient failures with backoff, honouring Retry-After), checked, and
recorded. A call that still fails raises ModelCallError with the reason.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field

from ..cache import CallCache, cache_key
from ..errors import CacheMiss, ModelCallError
from .base import ChatResponse, MalformedResponse, UsageCounter
from .providers import CONSTRAINED_ANSWERS, BackendContext, provider_of
from .spec import ModelSpec

#: Extra attempts for 200 answers that cannot be used (bad JSON, no choices); HTTP-level
#: failures (429, 5xx, timeouts, dropped connections) are retried by the SDK itself.
MALFORMED_RETRIES = 2


@dataclass
class ModelSettings:
    """Per-process shared machinery for all roles."""

    cache: CallCache | None = None
    concurrency: int = 16
    local_threads: int | None = None  # None: cores // xdist workers
    dry_run: bool = False  # --socialbias-dry-run: answer with dry_response, call nothing
    dry_seen: set = field(default_factory=set)  # request keys a dry run has planned
    totals: UsageCounter = field(default_factory=UsageCounter)
    _semaphore: asyncio.Semaphore | None = None
    _backends: dict = field(default_factory=dict)
    _http_clients: dict = field(default_factory=dict)  # one HTTP client per SDK, shared
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def backend_for(self, spec: ModelSpec, option: str):
        """One backend per endpoint and process, shared by the roles that use it.

        Roles on the same local GGUF file share one loaded model (~250 MB each otherwise);
        roles on the same API endpoint share one client and its connection pool.
        Decoding parameters travel with each call, so they are not part of the identity.
        """
        identity = (spec.provider, spec.model, spec.base_url, tuple(sorted(spec.transport.items())))
        with self._lock:  # the warm-up thread and the event loop may both ask
            if identity not in self._backends:
                self._backends[identity] = build_backend(
                    spec, option, self.local_threads, self._http_clients, key_required=not self.replay_only
                )
            return self._backends[identity]

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()
        self._backends.clear()

    @property
    def replay_only(self) -> bool:
        """Every answer comes from the cache (--socialbias-record=none): nothing is called."""
        return self.cache is not None and self.cache.mode == "none"

    @property
    def semaphore(self) -> asyncio.Semaphore:
        # Created lazily so it belongs to the loop that runs the calls.
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.concurrency)
        return self._semaphore


def check_credentials(spec: ModelSpec, option: str, required: bool = True) -> str | None:
    """Return the API key for ``spec`` from its provider's usual variable, or raise
    ConfigError; a provider that needs no key (a local runtime) is checked for its
    runtime and files instead. A replay-only run calls nothing and needs no key
    (``required=False``)."""
    return provider_of(spec).api_key(spec, option, required)


def build_backend(
    spec: ModelSpec, option: str, local_threads: int | None = None, http_clients: dict | None = None,
    key_required: bool = True,
):
    provider = provider_of(spec)
    key = provider.api_key(spec, option, key_required)
    return provider.build(BackendContext(spec, key, option, local_threads, http_clients))


def _describe(exc: BaseException) -> str:
    """A one-line reason for a failed call, naming the HTTP status where there is one,
    and the transport's own error under the SDK's: the SDKs' aiohttp transport reports a
    dropped connection as a timeout ("Request timed out"), its cause says what happened."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    text = _first_line(exc)
    if status is not None:
        return f"HTTP {status} ({name}): {text}"
    reason = f"{name}: {text}" if text else name
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    if root is not exc:
        root_text = _first_line(root)
        reason += f" ({type(root).__name__}: {root_text})" if root_text else f" ({type(root).__name__})"
    return reason


def _first_line(exc: BaseException) -> str:
    message = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return message[0][:300] if message else ""


class Model:
    """A model in one role (``target``, ``judge``, ``user``) of this run.

    ``defaults`` are the role's decoding parameters (e.g. temperature 0.7, max_tokens 250
    for the target); the spec's own parameters override them, and a call may override
    both (a judge asks for few tokens).
    """

    def __init__(
        self,
        role: str,
        spec: ModelSpec,
        option: str,
        settings: ModelSettings,
        defaults: dict | None = None,
        runner=None,
    ):
        self.role = role
        self.spec = spec
        self.option = option
        self.settings = settings
        self.params = {**(defaults or {}), **spec.params}
        self.provider = provider_of(spec)
        self._runner = runner
        self._backend = None
        check_credentials(spec, option, not settings.replay_only)  # fail early, before any item runs

    def __repr__(self) -> str:
        return f"Model(role={self.role!r}, spec={str(self.spec)!r})"

    @property
    def backend(self):
        if self._backend is None:
            self._backend = self.settings.backend_for(self.spec, self.option)
        return self._backend

    def request(
        self,
        messages: list[dict],
        *,
        template: str | None = None,
        sample: int = 0,
        top_logprobs: int | None = None,
        choices: tuple | None = None,
        **overrides,
    ) -> dict:
        """The canonical description of a call: what the cache key hashes (no secrets)."""
        params = {**self.params, **{k: v for k, v in overrides.items() if v is not None}}
        if sample and "seed" in params:
            # A fixed seed would make a repeated draw identical to the first: vary it.
            params["seed"] = params["seed"] + sample
        # Choices enter the request only where the backend holds the answer to them.
        constrained = choices and self.provider.can(CONSTRAINED_ANSWERS)
        extra = {"choices": list(choices)} if constrained else {}
        return {
            **extra,
            "provider": self.spec.provider,
            "model": self.spec.model,
            "base_url": self.spec.base_url or self.backend.base_url,
            "params": dict(sorted(params.items())),
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "template": template,
            "sample": sample,
            "top_logprobs": top_logprobs,
        }

    async def chat(
        self,
        messages: list[dict],
        *,
        template: str | None = None,
        sample: int = 0,
        top_logprobs: int | None = None,
        choices: tuple | None = None,
        usage: UsageCounter | None = None,
        **overrides,
    ) -> ChatResponse:
        """Send ``messages`` (``[{"role", "content"}]``); return the model's ChatResponse.

        ``template`` (``name@version``) and ``sample`` (0, 1, ... for repeated draws)
        enter the cache key. ``choices`` (e.g. ``("Yes", "No")``) constrains the answer
        where the backend can (local models, with a grammar); API backends ignore it and
        the caller's parser decides. Raises ModelCallError when the call fails for good.
        """
        request = self.request(
            messages, template=template, sample=sample, top_logprobs=top_logprobs, choices=choices, **overrides
        )
        cache = self.settings.cache
        key = cache_key(request) if (cache is not None or self.settings.dry_run) else None
        counters = [c for c in (usage, self.settings.totals) if c is not None]
        if cache is not None:
            stored = cache.get(key)
            if stored is not None:
                response = ChatResponse.from_dict(stored)
                for counter in counters:
                    counter.add(self.role, True, response)
                return response
            if cache.mode == "none" and not self.settings.dry_run:
                raise CacheMiss(self.role, str(self.spec), key)
        if self.settings.dry_run:
            # A request repeated within the run is answered from the cache by then.
            repeated = key in self.settings.dry_seen
            self.settings.dry_seen.add(key)
            response = dry_response(request, choices, key)
            for counter in counters:
                counter.add(self.role, repeated, response)
            return response
        async with self.settings.semaphore:
            response = await self._call(request)
        if cache is not None:
            cache.put(key, self.role, request, response.to_dict())
        for counter in counters:
            counter.add(self.role, False, response)
        return response

    async def _call(self, request: dict) -> ChatResponse:
        last: BaseException | None = None
        for _attempt in range(1 + MALFORMED_RETRIES):
            try:
                # A backend that seeds its sampling from the request needs the sample index
                # too, so that a repeated draw comes out different.
                return await self.backend.complete(
                    request["messages"], request["params"], request["top_logprobs"],
                    choices=request.get("choices"), sample=request["sample"],
                )
            except (MalformedResponse, json.JSONDecodeError) as exc:
                last = exc  # a 200 with a body we cannot use: ask again, a bounded number of times
            except UnicodeDecodeError as exc:
                # JSON must be UTF-8 (RFC 8259): a body that is not cannot be trusted to say
                # what the model wrote, so it is malformed, never decoded with guesses.
                last = MalformedResponse(f"the response body is not valid UTF-8 ({exc.reason} at byte {exc.start})")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if _is_malformed(exc):
                    last = exc
                    continue
                raise ModelCallError(self.role, str(self.spec), _describe(exc)) from exc
        raise ModelCallError(
            self.role,
            str(self.spec),
            f"malformed response after {1 + MALFORMED_RETRIES} attempts: {_describe(last)}",
        )

    def chat_sync(self, messages: list[dict], **kwargs) -> ChatResponse:
        """``chat`` for synchronous test code (runs on the plugin's event-loop thread)."""
        if self._runner is None:
            # The backend's HTTP client is bound to the loop of its first call, so every
            # synchronous call must run on the same loop: a private loop thread.
            from ..runner import LoopRunner

            self._runner = LoopRunner()
        return self._runner.run(self.chat(messages, **kwargs))

    async def aclose(self) -> None:
        """Close this model's backend (shared backends: use ModelSettings.aclose)."""
        if self._backend is not None:
            await self._backend.aclose()
            self._backend = None


#: Characters per token for dry-run estimates (English text; real tokenizers vary ~+-30%).
CHARS_PER_TOKEN = 4
DEFAULT_DRY_MAX_TOKENS = 250
_DRY_FILLER = "Could you say a little more about how you see that, and why it matters to you? "


def dry_response(request: dict, choices: tuple | None, key: str = "") -> ChatResponse:
    """A stand-in answer for --socialbias-dry-run: no call is made.

    Judges (constrained ``choices``) get their last choice (``No``, ``5``); other roles get
    neutral filler at the request's max_tokens, so later prompts grow as they would with
    full-length replies; the filler starts with the request's key, so distinct requests
    get distinct answers (as real models give) and are not mistaken for repeats. Tokens: prompt characters / 4; completions at max_tokens (an upper
    bound for free text).
    """
    prompt_chars = sum(len(m["content"]) for m in request["messages"])
    prompt_tokens = max(1, round(prompt_chars / CHARS_PER_TOKEN))
    if choices:
        return ChatResponse(text=choices[-1], prompt_tokens=prompt_tokens, completion_tokens=1, model="dry-run")
    budget = int(request["params"].get("max_tokens") or DEFAULT_DRY_MAX_TOKENS)
    filler = f"({key[:12]}) " + _DRY_FILLER * (1 + budget * CHARS_PER_TOKEN // len(_DRY_FILLER))
    text = filler[: budget * CHARS_PER_TOKEN].strip()
    return ChatResponse(text=text, prompt_tokens=prompt_tokens, completion_tokens=budget, model="dry-run")


def _is_malformed(exc: BaseException) -> bool:
    # Both SDKs raise APIResponseValidationError for a body that does not fit the schema.
    return type(exc).__name__ == "APIResponseValidationError"
