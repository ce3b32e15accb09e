"""DyMT: the simulated user adapts to the target's replies; every turn is labelled.

Bias and refusal per reply, coherence per user turn; 5 turns by default
(``--socialbias-turns=10`` to look for late emergence).
"""

from __future__ import annotations

from ..vocabulary import STYLES
from . import seeds
from .base import Protocol
from .dialogue import run_dialogue


async def run(case, roles, usage) -> dict:
    return await run_dialogue(case, roles, usage, coherence=True)


PROTOCOL = Protocol(
    name="dymt", run=run, load=seeds.load, metrics=("dialogue",), keys=seeds.DYMT_KEYS,
    turns=5, styles=STYLES, turns_option=True,
)
