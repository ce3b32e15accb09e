"""Scripted baseline: five user turns written in advance (one FairMT-style track per case),
the same whatever the target replies; judged like DyMT, coherence included."""

from __future__ import annotations

from .. import prompts
from ..probes import scripted_turns
from ..vocabulary import TRACKS
from . import seeds
from .base import Protocol
from .dialogue import run_dialogue


async def run(case, roles, usage) -> dict:
    if case.user_turns is not None:  # turns given by the source (FairMT release files)
        turns = list(case.user_turns)
        extra = []
    else:
        turns = scripted_turns(case.style, case.statement, case.group, case.category)
        extra = [prompts.load("scripted_tracks").id]
    result = await run_dialogue(case, roles, usage, user_turns=turns, coherence=True)
    result["templates"] = sorted(result["templates"] + extra)
    return result


PROTOCOL = Protocol(
    name="scripted", run=run, load=seeds.load, metrics=("dialogue",), keys=seeds.SCRIPTED_KEYS,
    turns=seeds.SCRIPTED_TURNS, styles=TRACKS,
)
