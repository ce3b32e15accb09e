"""OpenAI chat-completions backend: api.openai.com or any OpenAI-compatible server."""

from __future__ import annotations

from .base import FINISH_CONTENT_FILTER, ChatResponse, MalformedResponse
from .spec import ModelSpec
from .transport import aiohttp_client

#: Placeholder key for OpenAI-compatible servers that need none (vLLM, llama.cpp, Ollama).
NO_KEY_PLACEHOLDER = "not-needed"


class OpenAIBackend:
    def __init__(self, spec: ModelSpec, api_key: str, timeout: float, max_retries: int):
        import openai  # lazy: a missing SDK costs nothing until used

        self.spec = spec
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=spec.base_url,  # None: the SDK's default or OPENAI_BASE_URL
            timeout=timeout,
            max_retries=max_retries,
            http_client=aiohttp_client(openai),
        )
        # OpenAI's own API wants max_completion_tokens (reasoning models reject max_tokens);
        # compatible servers (vLLM, llama.cpp, Ollama) all understand max_tokens.
        self._max_tokens_field = "max_tokens" if spec.base_url else "max_completion_tokens"

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None
    ) -> ChatResponse:
        kwargs = dict(params)
        if "max_tokens" in kwargs:
            kwargs[self._max_tokens_field] = kwargs.pop("max_tokens")
        if top_logprobs is not None:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = top_logprobs
        completion = await self._client.chat.completions.create(
            model=self.spec.model, messages=messages, **kwargs
        )
        if not getattr(completion, "choices", None):
            raise MalformedResponse("the response has no choices")
        choice = completion.choices[0]
        message = choice.message
        if message is None:
            raise MalformedResponse("the response's first choice has no message")
        text = message.content or ""
        finish_reason = choice.finish_reason or "stop"
        if not text and getattr(message, "refusal", None):
            text = message.refusal
            finish_reason = FINISH_CONTENT_FILTER
        usage = completion.usage
        return ChatResponse(
            text=text,
            finish_reason=finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            logprobs=_logprobs(choice),
            model=completion.model,
        )

    async def aclose(self) -> None:
        await self._client.close()


def _logprobs(choice) -> list | None:
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return [
        {
            "token": item.token,
            "logprob": float(item.logprob),
            "top": [
                {"token": alt.token, "logprob": float(alt.logprob)}
                for alt in (item.top_logprobs or [])
            ],
        }
        for item in content
    ]
