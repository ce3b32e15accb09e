"""What a run learns about an endpoint, and adapts to, rather than failing every call.

Reasoning models reject parameters ordinary models take (OpenAI's reasoning models answer
HTTP 400 ``unsupported_value`` for any temperature but the default) and spend tokens
thinking before they answer, so a judge's 20-token budget can end before any answer.
Endpoints differ in how (and whether) they hold an answer to given labels. An
``Adaptation`` holds, per endpoint (provider, model, base URL):

* ``dropped``: role-default parameters the endpoint rejected, with the reason; they are
  no longer sent. A parameter the spec sets itself is never dropped: its rejection is an
  error naming it (a spec's parameters win).
* ``budgets``: raised token budgets of short-answer calls (judges, guards) whose answer
  came back empty, cut by the budget after reasoning: ``{"20": 320}``, bounded by
  ``MAX_BUDGET``. Never for the target: an empty target reply is an error.
* ``constrain``: the constraint method that holds answers to labels (constrain.py),
  ``none`` where no method does, and ``failed`` the ones the endpoint refused or ignored.

It is found by the endpoint check, one fixed request per role before the endpoint's
first call (models/client.py), never from ordinary answers (whose format varies by judge,
and whose order varies by timing). A rejection that comes later (an endpoint that starts
refusing) still adapts the calls after it. It is kept in the record/replay cache, so
workers, replays and later runs send the same requests; it never enters a cache key (the
key is the request as asked), carried on every record and reported under the role in
the report's ``models``. A budget raised for one call (its answer cut while reasoning
despite the checked budget) stays that call's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .constrain import REJECTION_WORDS
from .providers import known_keys
from .secrets import mask_keys

#: Budget raises: each time x16, never above this many tokens.
BUDGET_FACTOR = 16
MAX_BUDGET = 4096


@dataclass
class Adaptation:
    dropped: dict = field(default_factory=dict)  # parameter -> why
    budgets: dict = field(default_factory=dict)  # str(asked max_tokens) -> raised max_tokens
    constrain: str | None = None
    failed: list = field(default_factory=list)  # constraint methods the endpoint refused

    def to_dict(self) -> dict:
        out: dict = {}
        if self.dropped:
            out["dropped"] = dict(sorted(self.dropped.items()))
        if self.budgets:
            out["max_tokens"] = dict(sorted(self.budgets.items(), key=lambda kv: int(kv[0])))
        if self.constrain:
            out["constrain"] = self.constrain
        if self.failed:
            out["constrain_failed"] = list(self.failed)
        return out

    @classmethod
    def from_dict(cls, data: dict | None) -> "Adaptation":
        data = data or {}
        return cls(
            dropped=dict(data.get("dropped") or {}),
            budgets={str(k): int(v) for k, v in (data.get("max_tokens") or {}).items()},
            constrain=data.get("constrain"),
            failed=list(data.get("constrain_failed") or []),
        )

    def update(self, other: "Adaptation") -> None:
        """Become ``other`` (in place: every holder sees it)."""
        self.dropped, self.budgets = dict(other.dropped), dict(other.budgets)
        self.constrain, self.failed = other.constrain, list(other.failed)

    def works(self, method: str) -> None:
        """``method`` holds answers to their labels: the endpoint's method from now on."""
        self.constrain = method
        self.failed = [m for m in self.failed if m != method]

    def fails(self, method: str) -> None:
        """``method`` was refused, or taken and not honoured: never the endpoint's method."""
        if method not in self.failed:
            self.failed.append(method)
        if self.constrain == method:
            self.constrain = None

    def budget(self, asked: int) -> int:
        return self.budgets.get(str(asked), asked)

    def set_budget(self, asked: int, raised: int) -> None:
        """Calls that ask ``asked`` tokens go out with ``raised`` (never above MAX_BUDGET)."""
        self.budgets[str(asked)] = min(MAX_BUDGET, raised)

    def describe(self) -> list[str]:
        """What was adapted and why, in words, for the summary."""
        out = [f"dropped {name} ({why})" for name, why in sorted(self.dropped.items())]
        out += [
            f"raised max_tokens {asked} -> {raised} (answers came back empty, cut by the budget after reasoning)"
            for asked, raised in sorted(self.budgets.items(), key=lambda kv: int(kv[0]))
        ]
        refused = f" (refused: {', '.join(self.failed)})" if self.failed else ""
        if self.constrain == "none":
            out.append(f"answers not constrained: the endpoint holds them to the labels by no method{refused}")
        elif self.constrain:
            out.append(f"answers constrained with {self.constrain}{refused}")
        return out


def merge(adaptations: list[dict]) -> dict:
    """One adaptation from several (records of several workers): the union, the larger
    budget, the constraint method not refused."""
    out = Adaptation()
    for data in adaptations:
        one = Adaptation.from_dict(data)
        out.dropped.update(one.dropped)
        for asked, raised in one.budgets.items():
            out.budgets[asked] = max(raised, out.budgets.get(asked, 0))
        out.failed = sorted(set(out.failed) | set(one.failed))
    # A method the endpoint refused part-way is no longer its method: records taken before
    # the refusal name it, those after name the next.
    methods = [one.get("constrain") for one in adaptations if one and one.get("constrain")]
    out.constrain = next((m for m in reversed(methods) if m not in out.failed), None)
    return out.to_dict()


# --------------------------------------------------------------------------- rejections


class ParameterRejected(Exception):
    """The endpoint refused a parameter of the request (HTTP 400/422 naming it)."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


class ConstraintRejected(Exception):
    """The endpoint refused the request's constraint fields (HTTP 400/422)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _error_fields(exc: BaseException) -> tuple[str, str | None, str | None]:
    """(message, param, code) of an SDK's HTTP error."""
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or getattr(exc, "message", "") or exc)
        return message, error.get("param"), error.get("code")
    return str(getattr(exc, "message", "") or exc), None, None


def classify_rejection(exc: BaseException, sent: dict, constrained: bool):
    """A ParameterRejected or ConstraintRejected for an HTTP 400/422 that names what it
    refused, else None (a plain error). ``sent``: the parameters the request carried."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 422):
        return None
    message, param, code = _error_fields(exc)
    # Kept in the cache and the reports: a key the server echoes is masked (secrets.py).
    reason = mask_keys(f"HTTP {status}" + (f" {code}" if code else "") + f": {message.strip()[:200]}",
                       known_keys())
    lowered = message.lower()
    if param is not None and param in sent:
        return ParameterRejected(param, reason)
    for name in sent:
        # "'temperature' does not support 0", "`top_k`", "Unsupported parameter: temperature"
        if re.search(rf"(['\"`]{re.escape(name)}['\"`]|parameter:?\s+{re.escape(name)}\b)", message, re.IGNORECASE):
            return ParameterRejected(name, reason)
    if constrained and (status == 422 or any(word in lowered for word in REJECTION_WORDS)):
        return ConstraintRejected(reason)
    return None
