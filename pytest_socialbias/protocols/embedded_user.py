"""The embedded model as DyMT's user simulator: how its requests are made.

The embedded model (``local``: SmolLM2-135M-Instruct in-process, or a GGUF of one's own)
asked through its chat template to play the user answers as what it was tuned to be, the
assistant: through the chat template it broke role on 67% of its draws in the README's
main job (the checks of ``user_check`` refused them: the assistant's voice, copies of the
reply, the seed or the set-up repeated), so most of those runs ended with a case
unmeasured. Asked instead to continue a transcript after its last ``User:`` line
(``prompts/user_simulator_continuation.yaml``: two example chats, the belief in mind, the
conversation so far), it writes a user's line far more often (docs/models.md gives the
measured rates; ``benchmarks/embedded_simulator.py`` measures them again).

Only the user simulator of DyMT-style dialogues (smoke, dymt) on the ``local`` provider is
asked this way; every other model (an API, a server, ``hf:``), role and protocol is asked
as before, with the same requests. The checks are the same for every simulator: the
continuation prompt's instructions and examples are the hidden text a turn must not echo.
The request is a function of the case, the style and the conversation, and its sampling
seed of the request (``local_backend``), so runs stay deterministic; a repeated draw
differs by its sample index, as for every simulator.

The embedded simulator also gets more draws per turn (EMBEDDED_ATTEMPTS) than an API one
(dialogue.USER_SIMULATOR_ATTEMPTS): a draw costs a fraction of a second on the embedded
model and nothing to pay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import prompts

#: The provider whose user simulator continues a transcript (models/providers.py).
EMBEDDED_PROVIDER = "local"
#: The prompt file (prompts/NAME.yaml) of the embedded simulator.
TEMPLATE = "user_simulator_continuation"
#: Draws per user turn for the embedded simulator before the turn is an error.
EMBEDDED_ATTEMPTS = 5
#: Where a continuation stops: the end of the user's line (the next speaker's label would
#: start on the next line).
STOP = ("\n",)
#: Longest user message, in tokens (one to three sentences).
MAX_TOKENS = 120


@dataclass(frozen=True)
class SimulatorRequest:
    """What the simulator is sent for one user turn: ``messages`` (for the embedded model,
    one message whose content is the text to continue), the template id (in the cache key),
    ``hidden`` (the instructions a turn must not echo), the call parameters of its own
    (``continuation``, ``stop``, ``max_tokens``) and the draws it gets."""

    messages: list
    template_id: str
    hidden: str
    params: dict = field(default_factory=dict)
    attempts: int = EMBEDDED_ATTEMPTS


def applies(user_model) -> bool:
    """Whether this simulator is the embedded model (its requests are continuations)."""
    spec = getattr(user_model, "spec", None)
    return getattr(spec, "provider", None) == EMBEDDED_PROVIDER


def transcript(turns: list[dict]) -> str:
    """The conversation so far as the continuation shows it, ending with the open
    ``User:`` line: one line per message (a reply's line breaks become spaces, so that a
    line starting ``User:`` is always the user's)."""
    lines = []
    for turn in turns:
        lines.append("User: " + " ".join(turn["user"].split()))
        lines.append("Assistant: " + " ".join((turn.get("assistant") or "").split()))
    lines.append("User:")
    return "\n".join(lines)


def request(case, style: str, turns: list[dict]) -> SimulatorRequest:
    """The embedded simulator's request for the next user turn of ``case``'s dialogue."""
    template = prompts.load(TEMPLATE)
    values = {"statement": case.statement, "style_text": template.extras[f"style_{style}"].strip()}
    # The instructions and examples, without the conversation: what a turn must not echo
    # (a turn that reuses the conversation's words is the copy check's business).
    hidden = template.text(**values, transcript="").rstrip()
    text = template.text(**values, transcript=transcript(turns)).rstrip()
    from ..models.local_backend import CONTINUATION

    return SimulatorRequest(
        messages=[{"role": "user", "content": text}],
        template_id=template.id,
        hidden=hidden,
        params={CONTINUATION: True, "stop": list(STOP), "max_tokens": MAX_TOKENS},
    )
