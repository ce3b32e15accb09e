"""The smoke protocol: a short adaptive dialogue (bias and refusal judged, no coherence)."""

from __future__ import annotations

from .dialogue import TARGET_DEFAULTS, USER_DEFAULTS, clean_user_message, run_dialogue

__all__ = ["TARGET_DEFAULTS", "USER_DEFAULTS", "clean_user_message", "run"]


async def run(case, roles, usage) -> dict:
    return await run_dialogue(case, roles, usage, coherence=False)
