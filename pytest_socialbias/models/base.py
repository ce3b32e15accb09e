"""The one chat interface every backend implements, and its plain-data result."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Protocol

#: Finish reasons are normalised to these where the backend's own name has an equivalent.
FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_CONTENT_FILTER = "content_filter"

#: The model name of a planned call's stand-in answers (models/planner.py dry_response).
DRY_RUN_MODEL = "dry-run"


class MalformedResponse(Exception):
    """The server answered 200 but the body cannot be used (no choices, bad JSON)."""


#: Characters JSON can carry (``"\\ud800"``) that UTF-8 cannot: a lone half of a pair.
_SURROGATE = re.compile("[\ud800-\udfff]")


def readable_text(value: str, field_name: str, repaired: list) -> str:
    """``value`` with any lone surrogate replaced by U+FFFD (noted in ``repaired``): it
    could not be written to the cache or a report otherwise."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        repaired.append(field_name)
        return _SURROGATE.sub("\ufffd", value)
    return value


def token_count(value, field_name: str, repaired: list) -> int | None:
    """A usage count as sent: a whole number >= 0, else None (noted in ``repaired``)."""
    if value is None or (type(value) is int and value >= 0):
        return value
    repaired.append(field_name)
    return None


def optional_text(value, field_name: str, repaired: list) -> str | None:
    """A short text field (a model name): text, else None (noted in ``repaired``)."""
    if value is None or (type(value) is str and value.isascii()):
        return value
    if isinstance(value, str):
        return readable_text(value, field_name, repaired)
    repaired.append(field_name)
    return None


@dataclass
class ChatResponse:
    """What a chat call returns: builtins only, so it can be cached and sent between processes.

    ``text`` is the answer; ``reasoning`` the model's thinking, kept apart (a
    ``reasoning_content`` or ``reasoning`` field, an Anthropic thinking block, or an inline
    ``<think>`` block split off the text; see models/thinking.py), None when there is none.
    ``logprobs`` is a list of ``{"token", "logprob", "top": [{"token", "logprob"}, ...]}``
    per generated token, or None when the backend gives none. ``reasoning_tokens`` counts
    the completion tokens spent on reasoning where the provider says (else None).
    """

    text: str
    finish_reason: str = FINISH_STOP
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    logprobs: list | None = None
    model: str | None = None
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    #: Where the answer is kept (not part of it): its record/replay key, and whether it was
    #: replayed from the cache rather than asked in this run.
    cache_key: str | None = field(default=None, compare=False)
    replayed: bool = field(default=False, compare=False)
    #: Of a spec with several replicas (models/replicas.py): the URL that answered, and
    #: those that failed before it. Not part of the answer: never stored.
    served_by: str | None = field(default=None, compare=False)
    replica_faults: tuple = field(default=(), compare=False)
    #: What of the answer could not be read as sent and was repaired (``text``: lone
    #: surrogates replaced; ``usage``, ``logprobs``, ``model``...: ignored); counted per
    #: role (RoleUsage.repaired), never stored.
    repaired: tuple = field(default=(), compare=False)

    #: Fields every stored response has (``reasoning*`` came later, so older cache entries
    #: lack them; they read as None).
    REQUIRED_FIELDS = ("text", "finish_reason", "prompt_tokens", "completion_tokens", "logprobs", "model")

    def to_dict(self) -> dict:
        out = {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "logprobs": self.logprobs,
            "model": self.model,
        }
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning
        if self.reasoning_tokens is not None:
            out["reasoning_tokens"] = self.reasoning_tokens
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ChatResponse":
        return cls(
            text=data["text"],
            finish_reason=data.get("finish_reason", FINISH_STOP),
            prompt_tokens=data.get("prompt_tokens"),
            completion_tokens=data.get("completion_tokens"),
            logprobs=data.get("logprobs"),
            model=data.get("model"),
            reasoning=data.get("reasoning"),
            reasoning_tokens=data.get("reasoning_tokens"),
        )


class Backend(Protocol):
    """A provider backend: one async call, messages in, ChatResponse out.

    Raises the SDK's own exceptions (after the SDK's retries) or MalformedResponse.
    ``base_url`` names the endpoint in the cache key.
    """

    base_url: str

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0,
        **constrain,
    ) -> ChatResponse:
        """``choices``: the answers a constrained call may give (backends with the
        CONSTRAINED_ANSWERS capability hold the answer to them; others ignore it).
        ``sample``: the draw's index, for backends that seed sampling from the request.
        ``constrain=METHOD`` comes only where the provider lists constraint methods
        (constrain.py): the backend adds that method's fields for ``choices``."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class RoleUsage:
    """Per-role call counters: cache hits, misses (live calls, and the requests a replay
    could not call) and tokens of live calls."""

    calls: int = 0
    hits: int = 0
    misses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of the completion tokens, those spent reasoning
    repaired: int = 0  # live answers with fields that could not be read (ChatResponse.repaired)
    #: A dry run's requests asked earlier in the same plan: not in the cache now, sent
    #: once, the repeats then answered by the cache (neither a hit nor a miss).
    repeated: int = 0
    #: Of the misses, those a replay-only run (--socialbias-record=none) could not call.
    unrecorded: int = 0
    #: Of a spec with several replicas: URL -> {"served": n, "failed": n}.
    replicas: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out: dict = {
            "calls": self.calls,
            "hits": self.hits,
            "misses": self.misses,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
        if self.repaired:
            out["repaired"] = self.repaired
        if self.repeated:
            out["repeated"] = self.repeated
        if self.unrecorded:
            out["unrecorded"] = self.unrecorded
        if self.replicas:
            out["replicas"] = {url: dict(counts) for url, counts in sorted(self.replicas.items())}
        return out


@dataclass
class UsageCounter:
    """Counters by role; one per case (goes into its record) and one per process."""

    roles: dict = field(default_factory=dict)

    def add(self, role: str, hit: bool, response: ChatResponse | None, repeated: bool = False) -> None:
        usage = self.roles.setdefault(role, RoleUsage())
        usage.calls += 1
        if repeated:  # a dry run's repeat within its plan (RoleUsage.repeated)
            usage.repeated += 1
            return
        if hit:
            usage.hits += 1
            return
        usage.misses += 1
        if response is not None:
            usage.prompt_tokens += response.prompt_tokens or 0
            usage.completion_tokens += response.completion_tokens or 0
            usage.reasoning_tokens += response.reasoning_tokens or 0
            if response.repaired:
                usage.repaired += 1
            if response.served_by is not None:
                usage.replicas.setdefault(response.served_by, {"served": 0, "failed": 0})["served"] += 1
            for url in response.replica_faults:
                usage.replicas.setdefault(url, {"served": 0, "failed": 0})["failed"] += 1

    def add_unrecorded(self, role: str) -> None:
        """A miss a replay-only run could not call: counted as a call and a miss, with no
        tokens (RoleUsage.unrecorded)."""
        usage = self.roles.setdefault(role, RoleUsage())
        usage.calls += 1
        usage.misses += 1
        usage.unrecorded += 1

    def to_dict(self) -> dict:
        return {role: usage.to_dict() for role, usage in sorted(self.roles.items())}


def request_seed(messages: list[dict], params: dict, sample: int = 0) -> int:
    """A sampling seed drawn from the request itself (in-process backends, when the spec
    fixes none): the same request gives the same answer, with or without the cache."""
    text = json.dumps([messages, params, sample], sort_keys=True, ensure_ascii=False)
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)
