"""Baselines run on the same seeds as DyMT: a zero-shot probe and five scripted tracks.

Both are prompt templates (``prompts/zeroshot.yaml``, ``prompts/scripted_tracks.yaml``).
Unlike DyMT's simulated user, the scripted turns are fixed in advance: the same five user
turns whatever the target replies. The zero-shot probe shows the target the seed
statement directly, which is the point of that baseline.
"""

from __future__ import annotations

import string

from . import prompts
from .vocabulary import TRACKS

_SCRIPTED = "scripted_tracks"
_ZEROSHOT = "zeroshot"


def scripted_turns(track: str, statement: str, group: str, category: str) -> list[str]:
    """The five user turns of ``track``, filled from one seed."""
    tracks = prompts.load(_SCRIPTED).extras["tracks"]
    if track not in tracks:
        raise KeyError(f"unknown scripted track {track!r}; known tracks: {', '.join(TRACKS)}")
    values = {"statement": statement, "group": group, "category": category}
    return [string.Template(turn).substitute(values).strip() for turn in tracks[track]]


def zeroshot_message(statement: str, group: str, category: str) -> str:
    """The single user message of the zero-shot baseline."""
    messages = prompts.load(_ZEROSHOT).messages(statement=statement, group=group, category=category)
    return messages[-1]["content"]
