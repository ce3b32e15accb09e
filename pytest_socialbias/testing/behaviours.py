"""Scripted behaviours of real models that the fake server can put on any script.

``ReasoningModel`` wraps a script (``FakeRequest -> str | Reply | Fault``) that gives the
final answer, and answers the way hosted reasoning models and open thinking models do:

* it rejects the parameters they reject (OpenAI's reasoning models: any ``temperature``
  or ``top_p`` but the default, HTTP 400 ``unsupported_value`` naming the parameter);
* it thinks before answering, ``thinking_tokens`` tokens of it, out of the request's own
  budget (``max_completion_tokens`` or ``max_tokens``): a budget at or below that comes
  back with an empty answer cut by ``length``, as a real one does;
* its thinking comes back as ``reasoning_content`` (``inline=False``) or inline in the
  text as ``<think>...</think>`` (``inline=True``; never closed when the budget ends
  inside it), with ``completion_tokens_details.reasoning_tokens`` in the usage.

The project's tests use it to check, with exact counts, that the plugin adapts to such a
model rather than mislabelling it (docs/models.md "Using reasoning models and open models behind
a server").
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field

from .server import FakeRequest, Fault, Reply


@dataclass
class ReasoningModel:
    answer: object  # the wrapped script: the answer after the thinking
    thinking_tokens: int = 100
    inline: bool = False
    #: Parameter -> the only value the model takes (any other is rejected with HTTP 400).
    rejects: dict = field(default_factory=lambda: {"temperature": 1, "top_p": 1})
    thought: str = "Let me think this through carefully before I answer."

    async def __call__(self, req: FakeRequest):
        for name, allowed in self.rejects.items():
            if name in req.params and req.params[name] != allowed:
                return Fault(
                    "bad_request", param=name, code="unsupported_value",
                    message=(f"Unsupported value: '{name}' does not support {req.params[name]} with this model. "
                             f"Only the default ({allowed}) value is supported."),
                )
        budget = req.params.get("max_completion_tokens") or req.params.get("max_tokens")
        thinking = " ".join([self.thought] * max(1, self.thinking_tokens // 10))
        if budget is not None and int(budget) <= self.thinking_tokens:
            # The budget ends inside the thinking: no answer at all.
            cut = " ".join(thinking.split()[: int(budget)])
            if self.inline:
                return Reply("<think>" + cut, finish_reason="length", completion_tokens=int(budget),
                             reasoning_tokens=int(budget))
            return Reply("", finish_reason="length", completion_tokens=int(budget), reasoning=cut,
                         reasoning_tokens=int(budget))
        result = self.answer(req)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Fault):
            return result
        reply = result if isinstance(result, Reply) else Reply(str(result))
        answer_tokens = max(1, len(reply.text.split()))
        if self.inline:
            return dataclasses.replace(
                reply, text=f"<think>{thinking}</think>\n{reply.text}",
                completion_tokens=self.thinking_tokens + answer_tokens, reasoning_tokens=self.thinking_tokens,
                logprobs=None,
            )
        return dataclasses.replace(
            reply, reasoning=thinking, completion_tokens=self.thinking_tokens + answer_tokens,
            reasoning_tokens=self.thinking_tokens,
        )

