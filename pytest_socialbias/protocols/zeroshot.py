"""Zero-shot baseline: one turn that asks the target about the stereotype directly."""

from __future__ import annotations

from .. import prompts
from ..probes import zeroshot_message
from . import seeds
from .base import Protocol
from .dialogue import run_dialogue


async def run(case, roles, usage) -> dict:
    message = zeroshot_message(case.statement, case.group, case.category)
    result = await run_dialogue(case, roles, usage, user_turns=[message], coherence=False)
    result["templates"] = sorted(result["templates"] + [prompts.load("zeroshot").id])
    return result


PROTOCOL = Protocol(name="zeroshot", run=run, load=seeds.load, metrics=("dialogue",), keys=seeds.ZEROSHOT_KEYS)
