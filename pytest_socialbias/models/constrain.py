"""Constrained answers: a judge's answer held to its labels by the endpoint itself.

A judge asks for one of a few labels (Yes/No, 1-5, N/O/B). Many endpoints can hold the
answer to them, each in its own way; the method is chosen per endpoint (a spec's
``?constrain=METHOD``, else the provider's methods in order, falling back to the next on
the endpoint's 4xx and remembering the one that worked):

``grammar``       a GBNF grammar (``grammar``): llama.cpp servers, llama-cpp-python's own.
``json_schema``   OpenAI structured outputs (``response_format`` type ``json_schema``,
                  strict): OpenAI, vLLM, SGLang, llama.cpp's llama-server, Ollama, LM Studio.
``json_object``   ``response_format`` type ``json_object`` with a ``schema``
                  (llama-cpp-python's server, Anyscale-style endpoints).
``guided_choice`` vLLM's older ``guided_choice`` field.
``tool``          Anthropic: a forced tool whose input is the answer.
``none``          no constraint: the prompt asks, the parser reads.

JSON methods answer ``{"answer": "Yes"}``; the judges' parsers read that as they read a
plain ``Yes``. A method is kept once an answer under it conforms; an endpoint that takes
the fields but answers off the labels (it ignores fields it does not know) moves on to
the next method too.
"""

from __future__ import annotations

import json

ANSWER_TOOL = "answer"


def answer_schema(choices) -> dict:
    return {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": list(choices)}},
        "required": ["answer"],
        "additionalProperties": False,
    }


def gbnf(choices) -> str:
    """A GBNF grammar that admits exactly one of ``choices``."""
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


def openai_fields(method: str, choices) -> dict:
    """The request-body fields of ``method`` for an OpenAI-compatible endpoint."""
    if method == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "strict": True, "schema": answer_schema(choices)}}}
    if method == "json_object":
        return {"response_format": {"type": "json_object", "schema": answer_schema(choices)}}
    if method == "grammar":
        return {"grammar": gbnf(choices)}
    if method == "guided_choice":
        return {"guided_choice": list(choices)}
    return {}


def anthropic_fields(method: str, choices) -> dict:
    if method != "tool":
        return {}
    return {
        "tools": [{"name": ANSWER_TOOL, "description": "Give your answer: exactly one of the allowed labels.",
                   "input_schema": answer_schema(choices)}],
        "tool_choice": {"type": "tool", "name": ANSWER_TOOL},
    }


def conforms(text: str, choices) -> bool:
    """Whether an answer is one of ``choices``, bare or as ``{"answer": ...}``: what an
    endpoint that honours a constraint method gives back."""
    text = (text or "").strip()
    if text in choices:
        return True
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("answer") in choices


#: Words in a 4xx error that point at a constraint field rather than at a parameter.
REJECTION_WORDS = ("response_format", "json_schema", "json_object", "grammar", "guided", "tool", "schema", "structured")
