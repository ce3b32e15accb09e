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

from ..cache import CallCache, cache_key, canonical_json
from ..errors import CacheMiss, ModelCallError
from .adapt import Adaptation, ConstraintRejected, ParameterRejected, classify_rejection
from .constrain import conforms
from .base import FINISH_LENGTH, ChatResponse, MalformedResponse, UsageCounter
from .providers import CONSTRAINED_ANSWERS, BackendContext, provider_of
from .spec import ModelSpec
from .thinking import split_thinking

#: Extra attempts for 200 answers that cannot be used (bad JSON, no choices); HTTP-level
#: failures (429, 5xx, timeouts, dropped connections) are retried by the SDK itself.
MALFORMED_RETRIES = 2
#: Adaptations one call may go through (dropped parameters, constraint fallbacks, budgets).
MAX_ADAPTATIONS = 8


class _Stale(Exception):
    """A call built before the endpoint was adapted to: build it again."""


@dataclass
class ModelSettings:
    """Per-process shared machinery for all roles."""

    cache: CallCache | None = None
    concurrency: int = 16
    local_threads: int | None = None  # None: cores // xdist workers
    gpus: str | None = None  # --socialbias-gpus: in-process models pick theirs from it
    dry_run: bool = False  # --socialbias-dry-run: answer with dry_response, call nothing
    dry_seen: set = field(default_factory=set)  # request keys a dry run has planned
    totals: UsageCounter = field(default_factory=UsageCounter)
    _semaphore: asyncio.Semaphore | None = None
    _backends: dict = field(default_factory=dict)
    _http_clients: dict = field(default_factory=dict)  # one HTTP client per SDK, shared
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _adaptations: dict = field(default_factory=dict)  # endpoint JSON -> Adaptation
    adapted_version: int = 0  # counts the changes learnt, so a waiting call can tell

    def adaptation(self, key: str) -> Adaptation:
        """What this run learnt about an endpoint (adapt.py), read from the cache first.
        ``key`` is the endpoint's canonical JSON (Model.endpoint_key)."""
        found = self._adaptations.get(key)
        if found is None:
            stored = self.cache.get_adaptation(key) if self.cache is not None else None
            found = self._adaptations[key] = Adaptation.from_dict(stored)
        return found

    def learn(self, key: str, change) -> None:
        """Apply ``change(adaptation)`` to an endpoint's adaptation and keep it."""
        adaptation = self.adaptation(key)
        before = adaptation.to_dict()
        change(adaptation)
        if adaptation.to_dict() == before:
            return
        self.adapted_version += 1
        if self.cache is not None:
            self.cache.put_adaptation(key, adaptation.to_dict())

    def adaptations(self) -> dict:
        """Endpoint JSON -> what was adapted, for the endpoints this process adapted to."""
        return {key: a.to_dict() for key, a in self._adaptations.items() if a.to_dict()}

    def backend_for(self, spec: ModelSpec, option: str):
        """One backend per endpoint and process, shared by the roles that use it.

        Roles on the same local GGUF file share one loaded model (~250 MB each otherwise);
        roles on the same API endpoint share one client and its connection pool.
        Decoding parameters travel with each call, so they are not part of the identity.
        """
        identity = (spec.provider, spec.model, spec.base_url, tuple(sorted(spec.transport.items())),
                    canonical_json(spec.runtime))
        with self._lock:  # the warm-up thread and the event loop may both ask
            if identity not in self._backends:
                self._backends[identity] = build_backend(
                    spec, option, self.local_threads, self._http_clients, key_required=not self.calls_nothing,
                    gpus=self.gpus,
                )
            return self._backends[identity]

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()
        self._backends.clear()

    @property
    def calls_nothing(self) -> bool:
        """A replay (--socialbias-record=none) or a dry run calls no model: no key needed."""
        return self.dry_run or (self.cache is not None and self.cache.mode == "none")

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
    key_required: bool = True, gpus: str | None = None,
):
    provider = provider_of(spec)
    key = provider.api_key(spec, option, key_required)
    return provider.build(BackendContext(spec, key, option, local_threads, http_clients, gpus))


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

    Parameters, lowest precedence first: the role's defaults (``defaults``: temperature
    0.7 and 250 new tokens for the target), the call's own (a judge asks for temperature 0
    and few tokens), the spec's (which always win; ``None`` there drops the parameter).
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
        self.defaults = dict(defaults or {})
        self.provider = provider_of(spec)
        self._runner = runner
        self._backend = None
        # What the run learns about the endpoint is filed under this (read on every call).
        self.endpoint_key = canonical_json(self.endpoint)
        check_credentials(spec, option, not settings.calls_nothing)  # fail early, before any item runs

    def __repr__(self) -> str:
        return f"Model(role={self.role!r}, spec={str(self.spec)!r})"

    @property
    def params(self) -> dict:
        """The parameters of a call that sets none of its own."""
        return self._params({})

    @property
    def max_tokens(self) -> int | None:
        return self.params.get("max_tokens")

    @property
    def backend(self):
        if self._backend is None:
            self._backend = self.settings.backend_for(self.spec, self.option)
        return self._backend

    @property
    def endpoint(self) -> dict:
        return {"provider": self.spec.provider, "model": self.spec.model, "base_url": self.spec.base_url}

    @property
    def adaptation(self) -> Adaptation:
        return self.settings.adaptation(self.endpoint_key)

    def _params(self, call: dict, adaptive_budget: bool = False) -> dict:
        # A call's None is no parameter of its own; the spec's None drops the parameter.
        call = {k: v for k, v in call.items() if v is not None}
        params = {**self.defaults, **call, **self.spec.params}
        adaptation = self.adaptation
        for name in adaptation.dropped:
            if name not in self.spec.params:
                params.pop(name, None)
        if adaptive_budget and "max_tokens" not in self.spec.params and params.get("max_tokens"):
            params["max_tokens"] = adaptation.budget(params["max_tokens"])
        return {k: v for k, v in params.items() if v is not None}

    def constrain_method(self, choices) -> str | None:
        """How this call's answer is held to ``choices`` on this endpoint (constrain.py):
        the spec's method, else the endpoint's learnt one, else the provider's first
        that the endpoint has not refused; None when it is not constrained over HTTP."""
        if not choices or self.provider.can(CONSTRAINED_ANSWERS) or "response_format" in self.spec.params:
            return None
        if self.spec.constrain:
            return None if self.spec.constrain == "none" else self.spec.constrain
        if self.spec.params.get("thinking_budget"):
            return None  # Anthropic takes no forced tool beside extended thinking
        adaptation = self.adaptation
        if adaptation.constrain:
            return None if adaptation.constrain == "none" else adaptation.constrain
        methods = self.provider.constrain_methods
        if self.spec.base_url is None and self.provider.api_constrain_methods is not None:
            methods = self.provider.api_constrain_methods
        for method in methods:
            if method not in adaptation.failed:
                return None if method == "none" else method
        return None

    def request(
        self,
        messages: list[dict],
        *,
        template: str | None = None,
        sample: int = 0,
        top_logprobs: int | None = None,
        choices: tuple | None = None,
        adaptive_budget: bool = False,
        **call_params,
    ) -> dict:
        """The canonical description of a call: what the cache key hashes (no secrets).
        It describes the request actually sent, adaptations included."""
        params = self._params(call_params, adaptive_budget)
        if sample and "seed" in params:
            # A fixed seed would make a repeated draw identical to the first: vary it.
            params["seed"] = params["seed"] + sample
        # Choices enter the request only where the answer is held to them: by the local
        # backend's grammar, or by a constraint method of the endpoint.
        extra = {}
        method = self.constrain_method(choices)
        if choices and self.provider.can(CONSTRAINED_ANSWERS):
            extra = {"choices": list(choices)}
        elif method is not None:
            extra = {"choices": list(choices), "constrain": method}
        if self.provider.cache_identity is not None:
            model, base_url = self.provider.cache_identity(self.spec)
        else:
            model, base_url = self.spec.model, self.provider.known_url(self.spec) or self.backend.base_url
        return {
            **extra,
            "provider": self.spec.provider,
            "model": model,
            "base_url": base_url,
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
        adaptive_budget: bool = False,
        **call_params,
    ) -> ChatResponse:
        """Send ``messages`` (``[{"role", "content"}]``); return the model's ChatResponse,
        its answer in ``text`` and any thinking in ``reasoning``.

        ``template`` (``name@version``) and ``sample`` (0, 1, ... for repeated draws)
        enter the cache key. ``choices`` (e.g. ``("Yes", "No")``) holds the answer to those
        labels where the endpoint can (constrain.py); elsewhere the caller's parser
        decides. ``adaptive_budget`` (short answers: judges, guards): an answer that comes
        back empty, cut by the budget after reasoning, is asked again with a larger
        budget (bounded). An endpoint that rejects a role-default parameter is asked
        again without it. Both are remembered (adapt.py). Raises ModelCallError when the
        call fails for good.
        """
        counters = [c for c in (usage, self.settings.totals) if c is not None]

        def build() -> dict:
            return self.request(
                messages, template=template, sample=sample, top_logprobs=top_logprobs, choices=choices,
                adaptive_budget=adaptive_budget, **call_params,
            )

        for _attempt in range(MAX_ADAPTATIONS + 1):
            request = build()
            try:
                response = await self._answer(request, build, choices, counters)
            except _Stale:
                continue  # the endpoint was adapted to while this call waited: build it again
            except ParameterRejected as exc:
                self._drop(exc)
                continue
            except ConstraintRejected:
                self._constraint_failed(request["constrain"])
                continue
            if "constrain" in request and self.adaptation.constrain is None and response.text.strip():
                if not conforms(response.text, choices):
                    # The endpoint took the fields but did not hold the answer to them
                    # (it ignores what it does not know): not a method that works here.
                    self._constraint_failed(request["constrain"])
                    continue
                self.settings.learn(self.endpoint_key, lambda a: a.works(request["constrain"]))
            if adaptive_budget and self._cut_while_reasoning(response, request):
                asked = self._params(call_params).get("max_tokens")
                if asked and "max_tokens" not in self.spec.params:
                    sent = request["params"].get("max_tokens", asked)
                    raised: list = []
                    self.settings.learn(self.endpoint_key, lambda a: raised.append(a.raise_budget(asked, sent)))
                    if raised[0] is not None:
                        continue
            return response
        raise ModelCallError(self.role, str(self.spec), f"gave up after {MAX_ADAPTATIONS} adaptations to the endpoint")

    @staticmethod
    def _cut_while_reasoning(response: ChatResponse, request: dict) -> bool:
        return not response.text.strip() and response.finish_reason == FINISH_LENGTH

    def _constraint_failed(self, method: str) -> None:
        self.settings.learn(self.endpoint_key, lambda a: a.fails(method))

    def _drop(self, exc: ParameterRejected) -> None:
        if exc.name in self.spec.params:
            raise ModelCallError(
                self.role, str(self.spec),
                f"the endpoint rejects {exc.name}={self.spec.params[exc.name]!r}, which the spec sets ({exc.reason}); "
                f"drop it with ?{exc.name}=none or give a value it takes",
            )
        self.settings.learn(self.endpoint_key, lambda a: a.dropped.setdefault(exc.name, exc.reason))

    async def _answer(self, request: dict, build, choices, counters) -> ChatResponse:
        """The answer to ``request``: from the cache, the dry-run stand-in, or the endpoint.
        ``build`` makes the request afresh: when the endpoint was adapted to while this
        call waited for its turn, the call is built again (_Stale) rather than sent as it
        was."""
        cache = self.settings.cache
        key = cache_key(request) if (cache is not None or self.settings.dry_run) else None
        if cache is not None:
            stored = cache.get(key)
            if stored is not None:
                response = split_thinking(ChatResponse.from_dict(stored))
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
        version = self.settings.adapted_version
        async with self.settings.semaphore:
            if self.settings.adapted_version != version and build() != request:
                raise _Stale()
            response = await self._call(request)
        if cache is not None:
            cache.put(key, self.role, request, response.to_dict())
        for counter in counters:
            counter.add(self.role, False, response)
        return split_thinking(response)

    async def _call(self, request: dict) -> ChatResponse:
        last: BaseException | None = None
        for _attempt in range(1 + MALFORMED_RETRIES):
            try:
                # A backend that seeds its sampling from the request needs the sample index
                # too, so that a repeated draw comes out different.
                constrain = {"constrain": request["constrain"]} if "constrain" in request else {}
                return await self.backend.complete(
                    request["messages"], request["params"], request["top_logprobs"],
                    choices=request.get("choices"), sample=request["sample"], **constrain,
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
                rejection = classify_rejection(exc, request["params"], "constrain" in request)
                if rejection is not None:
                    raise rejection from exc
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
