"""OpenAI chat-completions backend: api.openai.com or any OpenAI-compatible server."""

from __future__ import annotations

from .base import FINISH_CONTENT_FILTER, ChatResponse, MalformedResponse
from .constrain import openai_fields
from .transport import aiohttp_client


class OpenAIBackend:
    def __init__(self, spec, api_key: str, timeout: float, max_retries: int, http_clients=None):
        import openai  # lazy: a missing SDK costs nothing until used

        self.spec = spec
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=spec.base_url,  # None: the SDK's default or OPENAI_BASE_URL
            timeout=timeout,
            max_retries=max_retries,
            http_client=aiohttp_client(openai, http_clients),
        )
        # OpenAI's own API wants max_completion_tokens (reasoning models reject max_tokens);
        # compatible servers (vLLM, llama.cpp, Ollama) all understand max_tokens.
        self._max_tokens_field = "max_tokens" if spec.base_url else "max_completion_tokens"

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    async def complete(
        self, messages: list[dict], params: dict, top_logprobs: int | None, choices: list | None = None, sample: int = 0,
        constrain: str | None = None,
    ) -> ChatResponse:
        body = {"model": self.spec.model, "messages": messages}
        for name, value in params.items():
            body[self._max_tokens_field if name == "max_tokens" else name] = value
        if top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = top_logprobs
        if constrain and choices:
            body.update(openai_fields(constrain, choices))
        # The SDK's low-level post keeps its auth, retries (429 with Retry-After, 5xx,
        # timeouts, dropped connections) and error types, but skips the typed transform
        # of the request and the model construction of the answer: together 3/4 of the
        # client's CPU per call (py-spy), and we read a handful of fields anyway.
        data = await self._client.post("/chat/completions", body=body, cast_to=object)
        return parse_completion(data)

    async def aclose(self) -> None:
        await self._client.close()


def parse_completion(data) -> ChatResponse:
    """A chat-completions JSON body -> ChatResponse; MalformedResponse if unusable."""
    if not isinstance(data, dict):
        raise MalformedResponse(f"the response body is {type(data).__name__}, not a JSON object")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise MalformedResponse("the response has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedResponse("the response's first choice has no message")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise MalformedResponse("the response's message content is not text")
    # Thinking in a field of its own: vLLM/SGLang/DeepSeek say reasoning_content, Ollama
    # and others reasoning.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
    finish_reason = choice.get("finish_reason") or "stop"
    if not text and message.get("refusal"):
        text = str(message["refusal"])
        finish_reason = FINISH_CONTENT_FILTER
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("completion_tokens_details") if isinstance(usage.get("completion_tokens_details"), dict) else {}
    return ChatResponse(
        text=text,
        finish_reason=finish_reason,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        logprobs=_logprobs(choice),
        model=data.get("model"),
        reasoning=reasoning,
        reasoning_tokens=details.get("reasoning_tokens") or None,
    )


def _logprobs(choice: dict) -> list | None:
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if not content:
        return None
    return [
        {
            "token": item.get("token"),
            "logprob": float(item.get("logprob")),
            "top": [
                {"token": alt.get("token"), "logprob": float(alt.get("logprob"))}
                for alt in (item.get("top_logprobs") or [])
            ],
        }
        for item in content
    ]
