"""The record of one case: what a protocol's runner returns, completed by the worker
(worker.run_case), carried on the case's TestReport to the aggregating process, and read
by the metrics, the gates, the comparison, the snapshots and the reports.

A record crosses process boundaries (xdist), so it holds builtins only: it is a plain
dict at run time, typed here so that every reader knows which keys exist and what they
hold. Records are built by the constructors below, never as dict literals: ``error_entry``
(the kind checked against vocabulary.ERROR_KINDS), ``error_from`` (the one mapping from an
exception to its error entry), ``turn_entry``, ``case_result`` (what a protocol's runner
returns) and ``case_record`` (the worker's completion). Each fails loudly on an unknown
kind or key, or a missing field. tests/e2e/test_records.py runs every shipped protocol and
checks that no record has a key these types do not declare.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, TypedDict

from .errors import EmptyReply, ModelCallError, UserSimulatorFailure
from .vocabulary import (
    DETECTOR_ERROR,
    EMPTY_REPLY,
    ERROR_KINDS,
    INTERNAL_ERROR,
    MODEL_ERROR,
    OUTCOMES,
    USER_SIMULATOR_ERROR,
)


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
#: The keys a protocol's runner returns (``case_result``): the record less the case's
#: identity and the worker's completion.
IDENTITY_KEYS = ("id", "suite", "protocol", "category", "group", "statement", "style", "turns_planned",
                 "suite_sha256", "judge_params", "preset")
COMPLETION_KEYS = ("outcome", "usage", "adapted")
RESULT_KEYS = RECORD_KEYS - set(IDENTITY_KEYS) - set(COMPLETION_KEYS)


def error_entry(
    kind: str, message: str, *, role: str | None = None, turn: int | None = None, task: str | None = None,
    dialogue: str | None = None, rejected_user_drafts: list | None = None,
) -> ErrorEntry:
    """One error entry: ``kind`` (one of vocabulary.ERROR_KINDS, else ValueError), the
    ``role`` whose call or answer failed, the message (``turn N: `` first when ``turn``
    is given), the judge ``task`` or pair member (``dialogue``) it concerns, and a failed
    simulated turn's rejected drafts."""
    if kind not in ERROR_KINDS:
        raise ValueError(f"error kind {kind!r} is not one of vocabulary.ERROR_KINDS ({', '.join(ERROR_KINDS)})")
    if not isinstance(message, str):
        raise TypeError(f"an error entry's message is text, not {type(message).__name__}: {message!r}")
    entry: ErrorEntry = {"kind": kind, "role": role}
    if task is not None:
        entry["task"] = task
    if dialogue is not None:
        entry["dialogue"] = dialogue
    entry["message"] = message if turn is None else f"turn {turn}: {message}"
    if rejected_user_drafts is not None:
        entry["rejected_user_drafts"] = list(rejected_user_drafts)
    return entry


def error_from(exc: BaseException, *, where: str | None = None, secondary: bool = False) -> ErrorEntry:
    """The error entry of an exception that ended a case or one of its parts: the one
    mapping from exceptions to error kinds. A model call that failed for good is a model
    error (of its role), an empty reply the target's, a simulated user that broke role on
    every draw the user's (with its drafts); anything else is the plugin's own failure
    (an internal error, with the file and line that raised it). ``where`` goes before the
    message (a detector's id); ``secondary``: the call was a second detector's (detector
    suites), whose failure is a detector error, which voids nothing."""
    prefix = f"{where}: " if where else ""
    if isinstance(exc, ModelCallError):
        kind = DETECTOR_ERROR if secondary else MODEL_ERROR
        return error_entry(kind, f"{prefix}{exc}", role=exc.role)
    if isinstance(exc, EmptyReply):
        return error_entry(EMPTY_REPLY, f"{prefix}{exc}", role="target")
    if isinstance(exc, UserSimulatorFailure):
        return error_entry(USER_SIMULATOR_ERROR, f"{prefix}{exc}", role="user", rejected_user_drafts=exc.rejected)
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return error_entry(INTERNAL_ERROR, f"{prefix}{type(exc).__name__}: {exc}{at}")


def turn_entry(
    user: str, assistant: str, finish_reason: str | None, *, reasoning: str | None = None,
    rejected_user_drafts: list | None = None,
) -> Turn:
    """One exchange as records keep it: the target's thinking, if any, beside its answer;
    the simulator's draws rejected before this user message, if any (kind, reason, text)."""
    turn: Turn = {"user": user, "assistant": assistant, "finish_reason": finish_reason}
    if reasoning:
        turn["reasoning"] = reasoning
    if rejected_user_drafts:
        turn["rejected_user_drafts"] = list(rejected_user_drafts)
    return turn


def case_result(*, labels: dict, turns: list, errors: list, templates, **parts: Any) -> CaseRecord:
    """What a protocol's runner returns: its labels (task -> one per turn), the turns,
    the error entries and the prompt templates used (sorted), plus the protocol's own
    parts, each a key CaseRecord declares (else TypeError)."""
    unknown = set(parts) - RESULT_KEYS
    if unknown:
        raise TypeError(f"a protocol's result has no key {', '.join(sorted(unknown))} (record.CaseRecord declares them)")
    result: CaseRecord = {"labels": labels, "turns": turns, "errors": errors, "templates": sorted(templates)}
    result.update(parts)  # type: ignore[typeddict-item]
    return result


def case_identity(case) -> CaseRecord:
    """The identity part of a case's record, from its cases.Case."""
    identity: CaseRecord = {
        "id": case.id,
        "suite": case.suite,
        "protocol": case.protocol,
        "category": case.category,
        "group": case.group,
        "statement": case.statement or None,
        "style": case.style,
        "turns_planned": case.turns,
        "suite_sha256": case.suite_sha256,
    }
    if case.judge_params:
        identity["judge_params"] = dict(case.judge_params)
    if case.preset:
        identity["preset"] = case.preset
    return identity


def failed_result(error: ErrorEntry) -> CaseRecord:
    """The result of a case whose protocol could not run to its end: no labels, the error."""
    return case_result(labels={"bias": [], "refusal": []}, turns=[], errors=[error], templates=[])


def case_record(identity: CaseRecord, result: CaseRecord, *, outcome: str, usage: dict,
                adapted: dict | None = None) -> CaseRecord:
    """A case's whole record: its identity, what its protocol returned, and the worker's
    completion (``outcome``, one of vocabulary.OUTCOMES; the calls by role; what the
    endpoints were adapted to, where anything was)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of vocabulary.OUTCOMES ({', '.join(OUTCOMES)})")
    record: CaseRecord = {**identity, **result}
    record["outcome"] = outcome
    record["usage"] = usage
    if adapted:
        record["adapted"] = adapted  # reaches the aggregator from any worker
    return record
