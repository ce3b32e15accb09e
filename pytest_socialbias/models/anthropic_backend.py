"""Anthropic messages backend. System messages go to Anthropic's own ``system`` field."""

from __future__ import annotations

from .base import FINISH_CONTENT_FILTER, FINISH_LENGTH, FINISH_STOP, ChatResponse, MalformedResponse
from .spec import ModelSpec
from .transport import aiohttp_client

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
    def __init__(self, spec: ModelSpec, api_key: str, timeout: float, max_retries: int):
        import anthropic  # lazy

        self.spec = spec
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=spec.base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=aiohttp_client(anthropic),
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None
    ) -> ChatResponse:
        # Anthropic gives no token log-probabilities: top_logprobs is ignored, and
        # callers see logprobs=None. It has no seed either.
        system, turns = split_system(messages)
        # This SDK's messages.create() has no temperature/top_p arguments; the API still
        # takes them in the body.
        sampling = {k: v for k, v in params.items() if k in ("temperature", "top_p")}
        kwargs = {"system": system} if system is not None else {}
        message = await self._client.messages.create(
            model=self.spec.model,
            messages=turns,
            max_tokens=int(params.get("max_tokens") or DEFAULT_MAX_TOKENS),
            extra_body=sampling or None,
            **kwargs,
        )
        blocks = getattr(message, "content", None)
        if blocks is None:
            raise MalformedResponse("the response has no content")
        text = "".join(getattr(b, "text", "") for b in blocks if getattr(b, "type", "") == "text")
        if not blocks and message.stop_reason not in ("refusal", "max_tokens"):
            raise MalformedResponse("the response has an empty content list")
        usage = message.usage
        return ChatResponse(
            text=text,
            finish_reason=_STOP_REASONS.get(message.stop_reason or "", message.stop_reason or FINISH_STOP),
            prompt_tokens=getattr(usage, "input_tokens", None),
            completion_tokens=getattr(usage, "output_tokens", None),
            logprobs=None,
            model=message.model,
        )

    async def aclose(self) -> None:
        await self._client.close()
