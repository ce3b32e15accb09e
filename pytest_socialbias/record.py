"""The record of one case: what a protocol's runner returns, completed by the worker
(worker.run_case), carried on the case's TestReport to the aggregating process, and read
by the metrics, the gates, the comparison, the snapshots and the reports.

A record crosses process boundaries (xdist), so it holds builtins only: it is a plain
dict at run time, typed here so that every reader knows which keys exist and what they
hold. tests/e2e/test_records.py runs every shipped protocol and checks that no record has a
key these types do not declare.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ErrorEntry(TypedDict, total=False):
    """What kept a case, or one of its parts, from being measured."""

    kind: str  # vocabulary.ERROR_KINDS
    role: str | None  # the role whose call or answer failed (target, judge, user, guard)
    message: str
    task: str  # judge errors: bias, refusal, coherence, reveals, follows
    dialogue: str  # BenevDial pairs: the member (a or b) whose judgement failed
    rejected_user_drafts: list[str]  # user simulator errors: every draw, each broke role


class Turn(TypedDict, total=False):
    """One exchange of a dialogue."""

    user: str
    assistant: str
    finish_reason: str | None
    reasoning: str  # a reasoning model's thinking (shown, never judged)
    rejected_user_drafts: list[str]  # simulated-user drafts drawn again before this turn


class CaseRecord(TypedDict, total=False):
    # identity (worker.run_case, from the Case)
    id: str
    suite: str
    protocol: str
    category: str
    group: str
    statement: str | None  # the seed stereotype probed (test data); None where there is none
    style: str | None  # user-simulator style, scripted track, detector variant or BenevDial role
    turns_planned: int
    suite_sha256: str
    judge_params: dict[str, Any]  # the suite's judge_params, where it has any
    preset: str  # the suite's preset (paper), where it has one
    # what the protocol's runner returned
    labels: dict[str, list]  # task -> one label per turn (bias, refusal, coherence, guard, treatment)
    turns: list[Turn]
    errors: list[ErrorEntry]
    templates: list[str]  # name@version of every prompt used
    role_breaks: int  # simulated-user drafts that broke role
    simulator: dict[str, Any] | None  # protocols.user_check.SimulatorRecord.to_dict()
    guard: dict[str, Any] | None  # a guard's screening of the replies
    # BenevDial (target mode, pairs, detector mode)
    role: str
    need: str
    profile: dict[str, Any]
    persona: dict[str, Any] | None
    treatment: dict[str, Any]
    pair: dict[str, Any]
    truth: str  # detector suites: the dialogue's labelled class
    dialogue_turns: list[dict[str, str]]  # detector suites: the labelled dialogue as given (speaker, text)
    variant: str
    primary: str
    detections: dict[str, Any]
    user: dict[str, Any]
    agent: dict[str, Any]
    generator: str
    # the worker's completion
    outcome: str  # vocabulary.OUTCOMES
    usage: dict[str, dict[str, int]]  # role -> calls, cache hits, tokens
    adapted: dict[str, Any]  # what the run adapted to at each role's endpoint


#: Every key a record may hold (the test holds records to it).
RECORD_KEYS = frozenset(CaseRecord.__annotations__)
