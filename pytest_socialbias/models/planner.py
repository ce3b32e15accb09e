"""The planning backend: what answers every call of a run that only plans.

A dry run (--socialbias-dry-run, the ``init`` command's cost line) and the planning of a
sharded run's calls (shards.py) run the cases' protocols as a real run would, with one
difference: the pool's ``planner`` (CallPool.planner) answers each call at once with a
stand-in (``dry_response``) and nothing is sent. The requests, and so the calls counted,
are those a real run would make with answers of full length. A pool without a planner
(every real run) sends its calls.
"""

from __future__ import annotations

from .base import DRY_RUN_MODEL, ChatResponse

#: Characters per token for dry-run estimates (English text; real tokenizers vary ~+-30%).
CHARS_PER_TOKEN = 4
DEFAULT_DRY_MAX_TOKENS = 250
_DRY_FILLER = "Could you say a little more about how you see that, and why it matters to you? "


class Planner:
    """Answers every call with ``dry_response`` and counts it: a request asked earlier in
    the same plan is counted as a repeat (a real run sends it once, the cache answers the
    repeats), apart from what the cache holds now."""

    def __init__(self) -> None:
        self.seen: set = set()  # request keys planned so far

    def answer(self, role: str, request: dict, choices: tuple | None, key: str, counters: list) -> ChatResponse:
        repeated = key in self.seen
        self.seen.add(key)
        response = dry_response(request, choices, key)
        for counter in counters:
            counter.add(role, False, response, repeated=repeated)
        return response


def dry_response(request: dict, choices: tuple | None, key: str = "") -> ChatResponse:
    """A stand-in answer for a planned call: no call is made.

    Judges (constrained ``choices``) get their last choice (``No``, ``5``); other roles get
    neutral filler at the request's max_tokens, so later prompts grow as they would with
    full-length replies; the filler starts with the request's key, so distinct requests
    get distinct answers (as real models give) and are not mistaken for repeats. Tokens: prompt characters / 4; completions at max_tokens (an upper
    bound for free text).
    """
    prompt_chars = sum(len(m["content"]) for m in request["messages"])
    prompt_tokens = max(1, round(prompt_chars / CHARS_PER_TOKEN))
    if choices:
        return ChatResponse(text=choices[-1], prompt_tokens=prompt_tokens, completion_tokens=1, model=DRY_RUN_MODEL)
    budget = int(request["params"].get("max_tokens") or DEFAULT_DRY_MAX_TOKENS)
    filler = f"({key[:12]}) " + _DRY_FILLER * (1 + budget * CHARS_PER_TOKEN // len(_DRY_FILLER))
    text = filler[: budget * CHARS_PER_TOKEN].strip()
    return ChatResponse(text=text, prompt_tokens=prompt_tokens, completion_tokens=budget, model=DRY_RUN_MODEL)
