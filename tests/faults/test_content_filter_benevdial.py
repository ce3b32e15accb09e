"""BenevDial: an answer stopped by the provider's content filter is never read as a label
(treatment judge) nor sent on as a simulated message."""

from __future__ import annotations

import asyncio

from pytest_socialbias.judges.treatment import judge_treatment
from pytest_socialbias.models.base import ChatResponse


class FilteredJudge:
    def __init__(self):
        self.calls = 0

    async def chat(self, messages, **kwargs):
        self.calls += 1
        return ChatResponse(text="N", finish_reason="content_filter")


def test_a_filtered_treatment_answer_is_unreadable_after_one_retry():
    judge = FilteredJudge()
    verdict = asyncio.run(judge_treatment(judge, dialogue=[{"user": "hi", "assistant": "hello"}], agent_title="agent", user_label="user"))
    assert verdict.cls is None and judge.calls == 2
    assert "content filter" in verdict.error
