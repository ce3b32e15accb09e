"""The smoke protocol: a short adaptive dialogue (bias and refusal judged, no coherence)."""

from __future__ import annotations

from . import seeds
from .base import Protocol
from .dialogue import run_dialogue


async def run(case, roles, usage) -> dict:
    return await run_dialogue(case, roles, usage, coherence=False)


PROTOCOL = Protocol(name="smoke", run=run, load=seeds.load, metrics=("dialogue",), keys=seeds.KEYS)
