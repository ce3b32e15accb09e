"""Anthropic messages backend. System messages go to Anthropic's own ``system`` field."""

from __future__ import annotations

import json

from .base import (
    FINISH_CONTENT_FILTER,
    FINISH_LENGTH,
    FINISH_STOP,
    ChatResponse,
    MalformedResponse,
    optional_text,
    readable_text,
    token_count,
)
from .constrain import ANSWER_TOOL, anthropic_fields
from .transport import EndpointURL, aiohttp_client

#: Anthropic requires max_tokens; used when neither the spec nor the caller sets it.
DEFAULT_MAX_TOKENS = 1024

_STOP_REASONS = {
    "end_turn": FINISH_STOP,
    "stop_sequence": FINISH_STOP,
    "max_tokens": FINISH_LENGTH,
    "refusal": FINISH_CONTENT_FILTER,
}


def split_system(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """Move system messages into one system string; keep user/assistant turns in order."""
    system_parts = [m["content"] for m in messages if m["role"] == "system"]
    turns = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
    return ("\n\n".join(system_parts) if system_parts else None), turns


class AnthropicBackend:
    def __init__(self, spec, api_key: str | None, timeout: float, max_retries: int, http_clients=None):
        import anthropic  # lazy

        self.spec = spec
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=spec.base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=aiohttp_client(anthropic, http_clients),
        )
        self._url = EndpointURL(self._client, "/v1/messages")

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0,
        constrain: str | None = None,
    ) -> ChatResponse:
        # Anthropic gives no token log-probabilities: top_logprobs is ignored, and
        # callers see logprobs=None (the provider lacks the capability, so Model.chat asks
        # none). It has no seed either (a spec with seed= is refused by parse_spec).
        system, turns = split_system(messages)
        max_tokens = int(params.get("max_tokens") or DEFAULT_MAX_TOKENS)
        body = {"model": self.spec.model, "messages": turns}
        # Every other parameter passes through (temperature, top_p, top_k, ...).
        body.update({k: v for k, v in params.items() if k not in ("max_tokens", "seed", "thinking_budget")})
        budget = params.get("thinking_budget")
        if budget:
            # Extended thinking: the budget comes on top of the answer's max_tokens, and
            # Anthropic takes no temperature or top_p beside it.
            body["thinking"] = {"type": "enabled", "budget_tokens": int(budget)}
            max_tokens += int(budget)
            body.pop("temperature", None)
            body.pop("top_p", None)
        body["max_tokens"] = max_tokens
        if constrain and choices and not budget:  # a forced tool cannot go with thinking
            body.update(anthropic_fields(constrain, choices))
        if system is not None:
            body["system"] = system
        # The SDK's low-level post: its auth, retries and error types, without the typed
        # transform and model construction (see openai_backend).
        data = await self._client.post(str(self._url), body=body, cast_to=object)
        return parse_message(data)

    async def aclose(self) -> None:
        await self._client.close()


def parse_message(data) -> ChatResponse:
    """An Anthropic messages JSON body -> ChatResponse; MalformedResponse if unusable.
    Fields that cannot be read are repaired and named in ``repaired`` (openai_backend)."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise MalformedResponse("the response has no content list")
    blocks = data["content"]
    stop_reason = data.get("stop_reason") or ""
    if not isinstance(stop_reason, str):
        raise MalformedResponse("the response's stop_reason is not text")
    if not blocks and stop_reason not in ("refusal", "max_tokens"):
        raise MalformedResponse("the response has an empty content list")
    blocks = [b for b in blocks if isinstance(b, dict)]
    repaired: list = []
    text = readable_text("".join(_texts(blocks, "text", "text", repaired)), "text", repaired)
    # The answer tool's input is the answer (a constrained judge, see constrain.py).
    tool = next((b for b in blocks if b.get("type") == "tool_use" and b.get("name") == ANSWER_TOOL), None)
    if tool is not None and isinstance(tool.get("input"), dict):
        text = json.dumps(tool["input"], sort_keys=True)  # ASCII: any surrogate is escaped
    thinking = "\n\n".join(t for t in _texts(blocks, "thinking", "thinking", repaired) if t)
    if any(b.get("type") == "redacted_thinking" for b in blocks):
        thinking = (thinking + "\n\n" if thinking else "") + "(redacted thinking)"
    raw_usage = data.get("usage")
    usage: dict = raw_usage if isinstance(raw_usage, dict) else {}
    stop = _STOP_REASONS.get(stop_reason, stop_reason or FINISH_STOP)
    return ChatResponse(
        text=text,
        finish_reason=FINISH_STOP if stop == "tool_use" else stop,
        prompt_tokens=token_count(usage.get("input_tokens"), "usage", repaired),
        completion_tokens=token_count(usage.get("output_tokens"), "usage", repaired),
        logprobs=None,
        model=optional_text(data.get("model"), "model", repaired),
        reasoning=readable_text(thinking, "reasoning", repaired) or None,
        repaired=tuple(dict.fromkeys(repaired)) if repaired else (),
    )


def _texts(blocks: list, kind: str, key: str, repaired: list) -> list[str]:
    """The ``key`` texts of the blocks of type ``kind``; one that is not text is left out
    (noted in ``repaired``)."""
    out = []
    for block in blocks:
        if block.get("type") == kind:
            value = block.get(key, "")
            if isinstance(value, str):
                out.append(value)
            else:
                repaired.append(kind)
    return out
