"""OpenAI chat-completions backend: api.openai.com or any OpenAI-compatible server."""

from __future__ import annotations

import math

from .base import FINISH_CONTENT_FILTER, ChatResponse, MalformedResponse, optional_text, readable_text, token_count
from .constrain import openai_fields
from .transport import EndpointURL, aiohttp_client


class OpenAIBackend:
    def __init__(self, spec, api_key: str | None, timeout: float, max_retries: int, http_clients=None):
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
        self._url = EndpointURL(self._client, "/chat/completions")

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
        # client's CPU per call (py-spy), and we read a handful of fields anyway. The URL
        # is the one the SDK builds from the path, built once (transport.EndpointURL).
        data = await self._client.post(str(self._url), body=body, cast_to=object)
        return parse_completion(data)

    async def aclose(self) -> None:
        await self._client.close()


def parse_completion(data) -> ChatResponse:
    """A chat-completions JSON body -> ChatResponse; MalformedResponse if unusable. Fields
    that are there but cannot be read (a token count that is no number, log-probabilities
    of another shape, a lone surrogate in the text) are repaired and named in
    ``repaired``: the answer itself stands."""
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
    repaired: list = []
    text = readable_text(text, "text", repaired)
    # Thinking in a field of its own: vLLM/SGLang/DeepSeek say reasoning_content, Ollama
    # and others reasoning.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    reasoning = readable_text(reasoning, "reasoning", repaired) if isinstance(reasoning, str) and reasoning else None
    finish_reason = optional_text(choice.get("finish_reason"), "finish_reason", repaired) or "stop"
    if not text and message.get("refusal"):
        text = readable_text(str(message["refusal"]), "text", repaired)
        finish_reason = FINISH_CONTENT_FILTER
    raw_usage = data.get("usage")
    usage: dict = raw_usage if isinstance(raw_usage, dict) else {}
    raw_details = usage.get("completion_tokens_details")
    details: dict = raw_details if isinstance(raw_details, dict) else {}
    return ChatResponse(
        text=text,
        finish_reason=finish_reason,
        prompt_tokens=token_count(usage.get("prompt_tokens"), "usage", repaired),
        completion_tokens=token_count(usage.get("completion_tokens"), "usage", repaired),
        logprobs=_logprobs(choice, repaired),
        model=optional_text(data.get("model"), "model", repaired),
        reasoning=reasoning,
        reasoning_tokens=token_count(details.get("reasoning_tokens"), "usage", repaired) or None,
        repaired=tuple(dict.fromkeys(repaired)) if repaired else (),
    )


def _logprobs(choice: dict, repaired: list) -> list | None:
    """The first choice's token log-probabilities, or None: none sent, or sent in a shape
    that cannot be read (then noted in ``repaired``: readers fall back on the text)."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not content:
        if logprobs not in (None, {}) and not isinstance(logprobs, dict):
            repaired.append("logprobs")
        return None
    try:
        return [
            {
                "token": _token(item["token"]),
                "logprob": _logprob(item["logprob"]),
                "top": [{"token": _token(alt["token"]), "logprob": _logprob(alt["logprob"])}
                        for alt in (item.get("top_logprobs") or [])],
            }
            for item in content
        ]
    except (TypeError, KeyError, ValueError, AttributeError):
        repaired.append("logprobs")
        return None


def _token(value) -> str:
    if not isinstance(value, str):
        raise TypeError("a token is not text")
    return readable_text(value, "logprobs", [])


def _logprob(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("a log-probability is not a finite number")
    return float(value)
