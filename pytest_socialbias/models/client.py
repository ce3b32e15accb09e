"""The role-bound model client: spec + backend + cache + concurrency limit + counters.

``Model.chat`` is the single door to a model: every call is keyed, looked up in the
record/replay cache (and claimed there, so that another process asking it at once waits
for its answer), rate-limited by the process-wide semaphore, sent through the backend
(whose SDK retries transient failures with backoff, honouring Retry-After) within the
bounds of guard.py (a deadline, the endpoint's circuit, a size cap), checked, and
recorded. A call that still fails raises ModelCallError with the reason.

Endpoint checks: before the first request of a run goes to an HTTP endpoint, each role
that uses the endpoint sends it one fixed request (the ``endpoint_check`` prompt, with the
parameters the role's calls carry), in a fixed order of roles, whichever call comes
first. The endpoints of the roles the selected cases need (``CallPool.check_ahead``, set
after collection) are checked at once when the first call of the process is about to be
sent, not each before its own first call, so that a run waits one check's latency, not
one per role, before its dialogues start. Its answers decide what the run adapts to (models/adapt.py): a parameter the
endpoint rejects, the budget a reasoning model's short answers need, and for judges the
constraint method (the first one under which the check's free-text question comes back
as one of the labels). So the same command sends the same requests whatever order
answers come back in. The findings go into the cache with the run that found them, and
one process at a time checks (a lock file beside the cache): the other xdist workers,
the controller and later runs take them from there. Adaptations found later (an
endpoint that starts refusing) apply to later calls; none enters a cache key (cache.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
from dataclasses import dataclass, field

from ..cache import CallCache, cache_key, canonical_json, take_lock
from ..errors import CacheError, CacheMiss, ModelCallError
from ..prompts import load as load_template
from .adapt import BUDGET_FACTOR, MAX_BUDGET, Adaptation, ConstraintRejected, ParameterRejected, classify_rejection
from .base import FINISH_LENGTH, ChatResponse, MalformedResponse, UsageCounter
from .constrain import conforms
from .guard import RunBounds, guard_for
from .planner import Planner
from .priority import PrioritySemaphore
from .providers import ADAPTS, CONSTRAINED_ANSWERS, LOGPROBS, BackendContext, provider_of
from .spec import ModelSpec
from .thinking import split_thinking
from .transport import redirect_refused

#: Extra attempts for 200 answers that cannot be used (bad JSON, no choices); HTTP-level
#: failures (429, 5xx, timeouts, dropped connections) are retried by the SDK itself.
MALFORMED_RETRIES = 2
#: Adaptations one call may go through (dropped parameters, constraint fallbacks, budgets).
MAX_ADAPTATIONS = 8


class _Stale(Exception):
    """A call built before the endpoint was adapted to: build it again."""


class _MethodRefused(Exception):
    """An endpoint check's constraint method was refused (HTTP 4xx): try the next."""


#: The fixed request of an endpoint check: a free-text question, so only an endpoint that
#: holds answers to the labels answers a judge's check with one of them.
ENDPOINT_CHECK_TEMPLATE = "endpoint_check"


@dataclass(frozen=True)
class EndpointCheck:
    """What a role's endpoint check sends: the parameters its ordinary calls carry
    (``params``), the labels a judge's answers are held to (``choices``), whether its
    short answers get a larger budget when reasoning eats it (``adaptive_budget``).
    Roles of one endpoint are checked by ``order``, whichever of them calls first."""

    order: tuple = (0,)
    params: tuple = ()  # (name, value) pairs
    choices: tuple | None = None
    adaptive_budget: bool = False


@dataclass
class CallPool:
    """What every model call of one process shares, whatever its role: the record/replay
    cache, the limit of requests in flight, the backends and HTTP clients, the usage
    totals (ModelSet builds one per process; the generate command its own)."""

    cache: CallCache | None = None
    concurrency: int = 16
    local_threads: int | None = None  # None: cores // xdist workers
    gpus: str | None = None  # --socialbias-gpus: in-process models pick theirs from it
    #: The planning backend of a run that only plans (a dry run, shard planning): it
    #: answers every call, nothing is sent (planner.py). None: calls are sent.
    planner: Planner | None = None
    #: Specs a dry run or --collect-only stands in for a model this machine cannot run (the
    #: embedded model without the `local` extra): never checked or built, only planned.
    placeholders: set = field(default_factory=set)
    miss_hint: str | None = None  # --socialbias-miss-hint: what a replay miss tells the reader to do
    totals: UsageCounter = field(default_factory=UsageCounter)
    _semaphore: PrioritySemaphore | None = None
    _backends: dict = field(default_factory=dict)
    _http_clients: dict = field(default_factory=dict)  # one HTTP client per SDK, shared
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _adaptations: dict = field(default_factory=dict)  # endpoint JSON -> Adaptation
    adapted_version: int = 0  # counts the changes learnt, so a waiting call can tell
    _checks: dict = field(default_factory=dict)  # endpoint JSON -> {role: Model with a check}
    _checked: set = field(default_factory=set)  # (endpoint JSON, role) checked in this process
    _check_locks: dict = field(default_factory=dict)  # endpoint JSON -> asyncio.Lock
    #: Roles whose endpoints are checked ahead, all at once, when the first call of this
    #: process is about to be sent: the roles the selected cases' protocols need (the
    #: plugin sets them after collection). Another role's endpoint is checked before its
    #: own first call.
    check_ahead: frozenset = frozenset()
    _ahead: list | None = None  # the tasks checking ahead (kept until they end); None: not sent yet
    _ahead_failed: dict = field(default_factory=dict)  # endpoint JSON -> the failure of its check sent ahead
    in_flight: dict = field(default_factory=dict)  # cache key -> future of the call sending it
    bounds: RunBounds = field(default_factory=RunBounds)  # circuits and deadlines of the calls (guard.py)

    def adaptation(self, key: str) -> Adaptation:
        """What this run learnt about an endpoint (adapt.py), read from the cache first.
        ``key`` is the endpoint's canonical JSON (Model.endpoint_key)."""
        found = self._adaptations.get(key)
        if found is None:
            stored = self.cache.get_adaptation(key) if self.cache is not None else None
            found = self._adaptations[key] = Adaptation.from_dict(stored)
        return found

    def learn(self, key: str, change) -> None:
        """Apply ``change(adaptation)`` to an endpoint's adaptation and keep it; with a
        cache, to the stored one in one transaction (what another process learnt at the
        same time is kept too), which then becomes this process's."""
        adaptation = self.adaptation(key)
        before = adaptation.to_dict()
        change(adaptation)
        if self.cache is not None:

            def apply(stored: dict) -> dict:
                merged = Adaptation.from_dict(stored)
                change(merged)
                return merged.to_dict()

            adaptation.update(Adaptation.from_dict(self.cache.update_adaptation(key, apply)))
        if adaptation.to_dict() != before:
            self.adapted_version += 1

    def reload(self, key: str) -> None:
        """Take the endpoint's adaptation as stored (another process checked it)."""
        if self.cache is None:
            return
        stored = Adaptation.from_dict(self.cache.get_adaptation(key))
        adaptation = self.adaptation(key)
        if stored.to_dict() != adaptation.to_dict():
            adaptation.update(stored)
            self.adapted_version += 1

    # ---- endpoint checks ---------------------------------------------------------------

    def register_check(self, model: "Model") -> None:
        self._checks.setdefault(model.endpoint_key, {})[model.role] = model

    async def ensure_checked(self, model: "Model") -> None:
        """Check every role registered on ``model``'s endpoint that is not checked yet,
        in their fixed order, before anything else is sent to it (module docstring). The
        first time, the endpoints of ``check_ahead``'s roles are checked at once with it."""
        endpoint = model.endpoint_key
        if self.check_ahead and self._ahead is None:
            self._ahead = [
                asyncio.ensure_future(self._check_endpoint(other, ahead=True))
                for other, roles in self._checks.items()
                if other != endpoint and not self.check_ahead.isdisjoint(roles)
            ]
        await self._check_endpoint(endpoint)

    async def _check_endpoint(self, endpoint: str, ahead: bool = False) -> None:
        roles = self._checks.get(endpoint)
        if not roles or all((endpoint, role) in self._checked for role in roles):
            return
        lock = self._check_locks.setdefault(endpoint, asyncio.Lock())
        async with lock:
            if endpoint in self._ahead_failed:
                # The check sent ahead failed: the first call that needs the endpoint takes
                # that failure as its own check's (one attempt, as if it had sent it);
                # later calls check again, as after any failed check.
                raise self._ahead_failed.pop(endpoint)
            try:
                for checked in sorted(roles.values(), key=lambda m: (m.check.order, m.role)):
                    if (endpoint, checked.role) not in self._checked:
                        await self._check_role(checked)
                        self._checked.add((endpoint, checked.role))
            except Exception as exc:
                if not ahead:
                    raise
                self._ahead_failed[endpoint] = exc

    async def _check_role(self, model: "Model") -> None:
        if self.cache is None:
            await model.run_check()
            return
        lock = self.cache.check_lock(model.endpoint_key)
        await take_lock(lock)
        try:
            self.reload(model.endpoint_key)  # what another process found is this one's too
            # With --socialbias-record=all, checked again once per run, not once per cache.
            run = self.cache.checked_by(model.endpoint_key, model.role)
            if run is not None and (self.cache.mode != "all" or run == self.cache.run):
                return
            if self.cache.mode == "all" and not self.cache.checked_in(model.endpoint_key, self.cache.run):
                # Re-recorded from scratch: what earlier runs found is found again.
                self.learn(model.endpoint_key, lambda adaptation: adaptation.update(Adaptation()))
            await model.run_check()
            self.cache.put_check(model.endpoint_key, model.role, self.cache.run)
        finally:
            lock.release()

    def adaptations(self) -> dict:
        """Endpoint JSON -> what was adapted, for the endpoints this process adapted to."""
        return {key: a.to_dict() for key, a in self._adaptations.items() if a.to_dict()}

    def backend_for(self, spec: ModelSpec, option: str):
        """One backend per endpoint and process, shared by the roles that use it.

        Roles on the same local GGUF file share one loaded model (~250 MB each otherwise);
        roles on the same API endpoint share one client and its connection pool.
        Decoding parameters travel with each call, so they are not part of the identity.
        """
        identity = self._identity(spec)
        if self.is_placeholder(spec):
            return PlaceholderBackend(spec)
        with self._lock:  # the warm-up thread and the event loop may both ask
            if identity not in self._backends:
                self._backends[identity] = build_backend(
                    spec, option, self.local_threads, self._http_clients, key_required=not self.calls_nothing,
                    gpus=self.gpus,
                )
            return self._backends[identity]

    @staticmethod
    def _identity(spec: ModelSpec) -> tuple:
        return (spec.provider, spec.model, spec.base_url, tuple(sorted(spec.transport.items())),
                canonical_json(spec.runtime))

    def is_placeholder(self, spec: ModelSpec) -> bool:
        """Whether ``spec`` only stands in for a model this machine lacks (a dry run
        plans with it; nothing can call it)."""
        return bool(self.placeholders) and self._identity(spec) in self.placeholders

    def built_backend(self, spec: ModelSpec):
        """The backend of ``spec`` if this process built it, else None (builds nothing)."""
        with self._lock:
            return self._backends.get(self._identity(spec))

    async def aclose(self) -> None:
        for task in self._ahead or ():
            if not task.done():
                task.cancel()  # an endpoint checked ahead that no call came to need
        for backend in self._backends.values():
            await backend.aclose()
        self._backends.clear()

    @property
    def calls_nothing(self) -> bool:
        """A replay (--socialbias-record=none) or a dry run calls no model: no key needed."""
        return self.planner is not None or (self.cache is not None and self.cache.mode == "none")

    @property
    def semaphore(self) -> PrioritySemaphore:
        # Created lazily so it belongs to the loop that runs the calls; slots go to the
        # earliest case waiting (priority.py).
        if self._semaphore is None:
            self._semaphore = PrioritySemaphore(self.concurrency)
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
    from .transport import keep_loopback_off_proxies

    keep_loopback_off_proxies()  # a machine's proxy never carries calls to its own servers
    if spec.replicas:
        from .replicas import ReplicaBackend

        return ReplicaBackend(spec.replicas, [
            provider.build(BackendContext(dataclasses.replace(spec, base_url=url, replicas=()), key, option,
                                          local_threads, http_clients, gpus))
            for url in spec.replicas
        ])
    return provider.build(BackendContext(spec, key, option, local_threads, http_clients, gpus))


def _describe(exc: BaseException) -> str:
    """A one-line reason for a failed call, naming the HTTP status where there is one,
    and the transport's own error under the SDK's: the SDKs' aiohttp transport reports a
    dropped connection as a timeout ("Request timed out"), its cause says what happened.
    A refused connection and a host that does not resolve are named as such, with what to
    check, wherever the transport keeps them in the chain."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    text = _first_line(exc)
    if isinstance(status, int) and 300 <= status < 400:
        return redirect_refused(status, exc)
    if status is not None:
        return f"HTTP {status} ({name}): {text}"
    reason = f"{name}: {text}" if text else name
    for cause in _causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            # Not a timeout, whatever the SDK calls it: nothing listens at that address.
            return (f"connection refused ({_first_line(cause) or 'ECONNREFUSED'}): nothing is listening at the "
                    "model's base URL; is the server running, and are the host and port right?")
        if isinstance(cause, socket.gaierror):
            return (f"cannot resolve the host of the model's base URL ({_first_line(cause)}); check the URL's "
                    "spelling and this machine's DNS")
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    if root is not exc:
        root_text = _first_line(root)
        reason += f" ({type(root).__name__}: {root_text})" if root_text else f" ({type(root).__name__})"
    return reason


def _causes(exc: BaseException, limit: int = 30) -> list[BaseException]:
    """``exc`` and what lies under it, through both ``__cause__`` and ``__context__``
    (httpx and httpx2 keep the refused socket's error under a context, aiohttp under a cause)."""
    out: list[BaseException] = []
    seen: set[int] = set()
    todo = [exc]
    while todo and len(out) < limit:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        todo += [link for link in (current.__cause__, current.__context__) if link is not None]
    return out


def _first_line(exc: BaseException) -> str:
    message = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return message[0][:300] if message else ""


class PlaceholderBackend:
    """What a dry run plans with in place of a model this machine cannot run: it names
    the model in the cache key (``placeholder://``, so no recorded answer is taken for
    it) and answers nothing (a dry run never sends a call)."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.base_url = f"placeholder://{spec.provider}/{spec.model}"

    async def complete(self, *args, **kwargs):
        raise RuntimeError(f"{self.spec}: a placeholder of a dry run cannot be called")

    async def aclose(self) -> None:
        return None


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
        pool: CallPool,
        defaults: dict | None = None,
        runner=None,
        check: EndpointCheck | None = None,
    ):
        self.role = role
        self.spec = spec
        self.option = option
        self.pool = pool  # the calls this model shares with the run's others: cache, limits, endpoint checks
        self.defaults = dict(defaults or {})
        self.provider = provider_of(spec)
        self._runner = runner
        self._owns_runner = False  # chat_sync started a private loop (close() stops it)
        self._closed = False
        self._backend = None
        self._guard = None  # the bounds of this role's calls (guard.py), made at the first call
        # What the run learns about the endpoint is filed under this (read on every call).
        self.endpoint_key = canonical_json(self.endpoint)
        #: Whether a call of this role asked for answers held to labels (judges, guards):
        #: the endpoint's constraint method is reported only under such roles.
        self.asks_constrained = False
        if not pool.is_placeholder(spec):
            check_credentials(spec, option, not pool.calls_nothing)  # fail early, before any item runs
        # The endpoint check (module docstring): HTTP endpoints only; an in-process runtime
        # rejects nothing and holds answers to labels itself.
        self.check = check if check is not None and self.provider.can(ADAPTS) else None
        if self.check is not None:
            pool.register_check(self)

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
            self._backend = self.pool.backend_for(self.spec, self.option)
        return self._backend

    @property
    def endpoint(self) -> dict:
        return {"provider": self.spec.provider, "model": self.spec.model, "base_url": self.spec.base_url}

    @property
    def adaptation(self) -> Adaptation:
        return self.pool.adaptation(self.endpoint_key)

    def _params(self, call: dict) -> dict:
        # A call's None is no parameter of its own; the spec's None drops the parameter.
        call = {k: v for k, v in call.items() if v is not None}
        params = {**self.defaults, **call, **self.spec.params}
        return {k: v for k, v in params.items() if v is not None}

    def constrain_method(self, choices) -> str | None:
        """How this call's answer is held to ``choices`` on this endpoint (constrain.py):
        the spec's method, else the one the endpoint check found, else the provider's
        first that the endpoint has not refused; None when it is not constrained over HTTP."""
        named = self.named_constrain_method(choices)
        if named is not None or not choices or not self._constrainable:
            return None if named in (None, "none") else named
        adaptation = self.adaptation
        if adaptation.constrain:
            return None if adaptation.constrain == "none" else adaptation.constrain
        for method in self._methods:
            if method not in adaptation.failed:
                return None if method == "none" else method
        return None

    def named_constrain_method(self, choices) -> str | None:
        """The spec's ``?constrain=METHOD`` where it applies to this call (it then enters
        the cache key, as any spec setting does), else None."""
        if choices and self._constrainable and self.spec.constrain:
            return self.spec.constrain
        return None

    @property
    def _constrainable(self) -> bool:
        """Whether answers can be held to labels over HTTP here (the plugin's business):
        not where the backend does it itself, the spec sends its own ``response_format``,
        or Anthropic thinks (no forced tool beside extended thinking)."""
        return not (
            self.provider.can(CONSTRAINED_ANSWERS) or "response_format" in self.spec.params
            or self.spec.params.get("thinking_budget")
        )

    @property
    def _methods(self) -> tuple:
        if self.spec.base_url is None and self.provider.api_constrain_methods is not None:
            return self.provider.api_constrain_methods
        return self.provider.constrain_methods

    def request(
        self,
        messages: list[dict],
        *,
        template: str | None = None,
        sample: int = 0,
        top_logprobs: int | None = None,
        choices: tuple | None = None,
        constrain: str | None = None,
        **call_params,
    ) -> dict:
        """The canonical description of a call as asked: what the cache key hashes (no
        secrets). What the run learns about the endpoint (a dropped parameter, a raised
        budget, the constraint method) is not in it: ``sent_request`` adds that. The
        constraint method is in it only where it was named (the spec's ``constrain=``,
        or ``constrain`` here: an endpoint check trying one)."""
        params = self._params(call_params)
        if sample and "seed" in params:
            # A fixed seed would make a repeated draw identical to the first: vary it.
            params["seed"] = params["seed"] + sample
        extra: dict = {}
        if choices:
            extra["choices"] = list(choices)
            named = constrain or self.named_constrain_method(choices)
            if named is not None:
                extra["constrain"] = named
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

    def sent_request(self, request: dict, adaptive_budget: bool = False, budget: int | None = None) -> dict:
        """``request`` (as asked) as it goes to this endpoint now: parameters it rejects
        dropped (unless the spec sets them), a short answer's budget as the endpoint
        check found it (or ``budget``, this call's own raise), the constraint method."""
        params = dict(request["params"])
        adaptation = self.adaptation
        for name in adaptation.dropped:
            if name not in self.spec.params:
                params.pop(name, None)
        if adaptive_budget and "max_tokens" not in self.spec.params and params.get("max_tokens"):
            params["max_tokens"] = budget or adaptation.budget(params["max_tokens"])
        sent = {**request, "params": dict(sorted(params.items()))}
        sent.pop("constrain", None)
        choices = request.get("choices")
        if choices and not self.provider.can(CONSTRAINED_ANSWERS):
            method = request.get("constrain") or self.constrain_method(choices)
            if method is None or method == "none":
                sent.pop("choices")  # nothing holds the answer: the parser reads it
            else:
                sent["constrain"] = method
        return sent

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
        budget (x16, at most MAX_BUDGET). An endpoint that rejects a role-default
        parameter is asked again without it, remembered (adapt.py). Raises
        ModelCallError when the call fails for good.
        """
        if choices:
            self.asks_constrained = True  # this role's answers are held to labels: its summary says how
        if top_logprobs and not self.provider.can(LOGPROBS):
            # The provider gives no log-probabilities (Anthropic): not asked, not in the
            # key; the caller sees logprobs=None and reads the answer's text alone.
            top_logprobs = None
        return await self._chat(
            messages, template=template, sample=sample, top_logprobs=top_logprobs, choices=choices, usage=usage,
            adaptive_budget=adaptive_budget, **call_params,
        )

    async def _chat(
        self, messages, *, template, sample, top_logprobs, choices, usage, adaptive_budget,
        constrain: str | None = None, checking: bool = False, **call_params,
    ) -> ChatResponse:
        request = self.request(
            messages, template=template, sample=sample, top_logprobs=top_logprobs, choices=choices,
            constrain=constrain, **call_params,
        )
        cache = self.pool.cache
        key = cache_key(request) if (cache is not None or self.pool.planner is not None) else None
        try:
            return await self._answer(request, key, choices, usage, adaptive_budget, checking)
        except CacheError as exc:
            raise ModelCallError(self.role, str(self.spec), str(exc)) from exc

    async def _answer(self, request: dict, key, choices, usage, adaptive_budget: bool, checking: bool) -> ChatResponse:
        """The answer to ``request``: recorded, planned (the pool's planning backend,
        planner.py), being asked by another call, or asked now (and recorded)."""
        counters = [c for c in (usage, self.pool.totals) if c is not None]
        cache, planner = self.pool.cache, self.pool.planner
        if cache is not None:
            stored = cache.get(key)
            if stored is not None:
                response = dataclasses.replace(
                    split_thinking(ChatResponse.from_dict(stored)), cache_key=key, replayed=True
                )
                for counter in counters:
                    counter.add(self.role, True, response)
                return response
            if cache.mode == "none" and planner is None:
                for counter in counters:
                    counter.add_unrecorded(self.role)
                raise CacheMiss(self.role, str(self.spec), key, legacy=cache.recorded_by < 2,
                                hint=self.pool.miss_hint)
        if planner is not None:
            return planner.answer(self.role, request, choices, key, counters)
        # The same request asked twice at once (two cases whose dialogues start alike) is
        # sent once and answered to both, so how many are sent never depends on timing.
        in_flight = self.pool.in_flight
        if key is not None and key in in_flight:
            response = await asyncio.shield(in_flight[key])
            for counter in counters:
                counter.add(self.role, True, response)
            return split_thinking(response)
        answered = asyncio.get_running_loop().create_future()
        if key is not None:
            in_flight[key] = answered
        try:
            if not checking:
                await self.pool.ensure_checked(self)
            # Another process asking it now (a second run or worker on this cache): its answer.
            recorded = await cache.claim(key) if cache is not None else None
            if recorded is not None:
                response = dataclasses.replace(ChatResponse.from_dict(recorded), cache_key=key, replayed=True)
                for counter in counters:
                    counter.add(self.role, True, response)
            else:
                response, sent = await self._send(request, adaptive_budget, counters, learn_budget=checking)
                if cache is not None:
                    cache.put(key, self.role, request, response.to_dict(), sent)  # ends the claim
                    response = dataclasses.replace(response, cache_key=key)
            answered.set_result(response)
        except asyncio.CancelledError:
            answered.cancel()
            raise
        except BaseException as exc:
            answered.set_exception(exc)
            answered.exception()  # retrieved: nobody else may be waiting for it
            raise
        finally:
            if key is not None:
                in_flight.pop(key, None)
            if cache is not None:
                cache.release(key)  # a failed or cancelled call's claim
        return split_thinking(response)

    async def _send(self, request: dict, adaptive_budget: bool, counters, learn_budget: bool = False):
        """Send ``request`` as the endpoint takes it now, adapting as it answers: a
        rejected parameter is dropped (for the endpoint), a refused constraint method is
        left for the next (for the endpoint), an answer cut while reasoning is asked again
        with a larger budget (for this call; for the endpoint when ``learn_budget``: the
        endpoint check). Returns (response, the request as last sent)."""
        budget = None  # this call's own raised budget
        for _attempt in range(MAX_ADAPTATIONS + 1):
            sent = self.sent_request(request, adaptive_budget, budget)
            version = self.pool.adapted_version
            try:
                async with self.pool.semaphore:
                    if self.pool.adapted_version != version and self.sent_request(request, adaptive_budget, budget) != sent:
                        raise _Stale()
                    response = await self._call(sent)
            except _Stale:
                continue  # the endpoint was adapted to while this call waited: build it again
            except ParameterRejected as exc:
                self._drop(exc)
                continue
            except ConstraintRejected as exc:
                self._refused(request, sent["constrain"], exc)
                continue
            for counter in counters:
                counter.add(self.role, False, response)
            if adaptive_budget and self._cut_while_reasoning(response) and "max_tokens" not in self.spec.params:
                current = sent["params"].get("max_tokens")
                if current and current < MAX_BUDGET:
                    budget = min(MAX_BUDGET, current * BUDGET_FACTOR)
                    if learn_budget:
                        asked = request["params"]["max_tokens"]
                        self.pool.learn(self.endpoint_key, lambda a, asked=asked, budget=budget: a.set_budget(asked, budget))
                    continue
            return response, sent
        raise ModelCallError(self.role, str(self.spec), f"gave up after {MAX_ADAPTATIONS} adaptations to the endpoint")

    def _refused(self, request: dict, method: str, exc: ConstraintRejected) -> None:
        if request.get("constrain"):  # named: by the spec, or a check trying it
            if self.spec.constrain == method:
                raise ModelCallError(
                    self.role, str(self.spec),
                    f"the endpoint refuses constrain={method} ({exc.reason}); name another method or "
                    "?constrain=none",
                )
            self.pool.learn(self.endpoint_key, lambda a: a.fails(method))
            raise _MethodRefused(method)

        def move_on(adaptation) -> None:  # to the next method the endpoint has not refused
            adaptation.fails(method)
            if adaptation.constrain is None:
                adaptation.works(next((m for m in self._methods if m not in adaptation.failed), "none"))

        self.pool.learn(self.endpoint_key, move_on)

    async def run_check(self) -> None:
        """This role's endpoint check (module docstring): one fixed request with the
        role's parameters; for a judge, once per constraint method until one holds the
        answer to the labels. What it finds is learnt for the endpoint."""
        check = self.check
        if check is None:  # only a role with a check is registered for one (Settings.register_check)
            return
        messages = load_template(ENDPOINT_CHECK_TEMPLATE).messages()
        template = load_template(ENDPOINT_CHECK_TEMPLATE).id
        ask = dict(
            template=template, sample=0, top_logprobs=None, usage=None, adaptive_budget=check.adaptive_budget,
            checking=True, **dict(check.params),
        )
        choices = check.choices
        try:
            if not choices or not self._constrainable or self.spec.constrain or self.adaptation.constrain:
                # No method to find (or another role of the endpoint found it): one request.
                await self._chat(messages, choices=choices, **ask)
                return
            for method in self._methods:
                if method == "none":
                    break
                if method in self.adaptation.failed:
                    continue
                try:
                    response = await self._chat(messages, choices=choices, constrain=method, **ask)
                except _MethodRefused:
                    continue
                if conforms(response.text, choices):
                    self.pool.learn(self.endpoint_key, lambda a, method=method: a.works(method))
                    return
                # Taken but not honoured: the endpoint ignores fields it does not know.
                self.pool.learn(self.endpoint_key, lambda a, method=method: a.fails(method))
            self.pool.learn(self.endpoint_key, lambda a: a.works("none"))
        except ModelCallError as exc:
            raise ModelCallError(self.role, str(self.spec), f"endpoint check failed: {exc.reason}") from exc

    def answer_unreadable(self, response: ChatResponse) -> None:
        """``response`` could not be read (a judge's or guard's answer off its labels):
        it stays an error of this run, and the next recording run asks it again (cache.py)."""
        cache = self.pool.cache
        if cache is not None and response.cache_key is not None:
            try:
                cache.mark_unreadable(response.cache_key)
            except CacheError:
                pass  # the answer is an error either way; a full disk is said where it writes

    @staticmethod
    def _cut_while_reasoning(response: ChatResponse) -> bool:
        return not response.text.strip() and response.finish_reason == FINISH_LENGTH

    def _drop(self, exc: ParameterRejected) -> None:
        if exc.name in self.spec.params:
            raise ModelCallError(
                self.role, str(self.spec),
                f"the endpoint rejects {exc.name}={self.spec.params[exc.name]!r}, which the spec sets ({exc.reason}); "
                f"drop it with ?{exc.name}=none or give a value it takes",
            )
        self.pool.learn(self.endpoint_key, lambda a: a.dropped.setdefault(exc.name, exc.reason))

    async def _call(self, request: dict) -> ChatResponse:
        last: BaseException | None = None
        guard = self._guard or self._make_guard()
        for _attempt in range(1 + MALFORMED_RETRIES):
            try:
                # A backend that seeds its sampling from the request needs the sample index
                # too, so that a repeated draw comes out different.
                constrain = {"constrain": request["constrain"]} if "constrain" in request else {}
                return await guard.send(self.backend.complete(
                    request["messages"], request["params"], request["top_logprobs"],
                    choices=request.get("choices"), sample=request["sample"], **constrain,
                ))
            except ModelCallError:
                raise  # the guard's: an open circuit, a deadline passed, an answer over the cap
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
                raise ModelCallError(self.role, str(self.spec), guard.mask(_describe(exc))) from exc
        assert last is not None  # every attempt that did not return or raise kept its fault
        raise ModelCallError(
            self.role,
            str(self.spec),
            guard.mask(f"malformed response after {1 + MALFORMED_RETRIES} attempts: {_describe(last)}"),
        )

    def _make_guard(self):
        """The bounds of this role's calls (guard.py): an HTTP endpoint's deadline and
        circuit (by the URL the calls go to), the answer size cap, known keys masked."""
        url = None
        if self.provider.can(ADAPTS):
            url = self.spec.base_url or self.provider.known_url(self.spec) or self.backend.base_url
        self._guard = guard_for(self.role, self.spec, url, self.pool.bounds)
        return self._guard

    def chat_sync(self, messages: list[dict], **kwargs) -> ChatResponse:
        """``chat`` for synchronous test code (runs on the plugin's event-loop thread)."""
        if self._closed:
            raise RuntimeError(f"{self.role} model {str(self.spec)!r} was closed; build a new one to call it again")
        if self._runner is None:
            # The backend's HTTP client is bound to the loop of its first call, so every
            # synchronous call must run on the same loop: a private loop thread.
            from ..runner import LoopRunner

            self._runner = LoopRunner()
            self._owns_runner = True
        return self._runner.run(self.chat(messages, **kwargs))

    def close(self) -> None:
        """Close what ``chat_sync`` opened on a model built outside a run: the backend's
        connections and the private loop thread they belong to. The fixtures' models
        share the run's loop and are closed by the plugin when the session ends; for them
        this does nothing. A closed model takes no more ``chat_sync`` calls."""
        if self._owns_runner and self._runner is not None:
            self._runner.close(self.aclose)
            self._runner, self._owns_runner, self._closed = None, False, True

    async def aclose(self) -> None:
        """Close this model's backend (shared backends: use CallPool.aclose)."""
        if self._backend is not None:
            await self._backend.aclose()
            self._backend = None


def _is_malformed(exc: BaseException) -> bool:
    # Both SDKs raise APIResponseValidationError for a body that does not fit the schema.
    return type(exc).__name__ == "APIResponseValidationError"
