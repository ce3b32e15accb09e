"""Labelled BenevDial dialogues (JSONL, docs/dialogues-format.md): the loader.

Every line is validated against ``schemas/dialogue.schema.json``; an error names the file,
the line, the field and the fix. A file with no dialogues, duplicate ids, or a dialogue
without an agent turn is refused: nothing is skipped silently.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema

from ..errors import ConfigError
from ..files import first_problem, load_schema, read_jsonl


def load_dialogues(path: str | Path, option: str = "--socialbias-dialogues") -> list[dict]:
    path = Path(path)
    validator = jsonschema.Draft202012Validator(load_schema("dialogue"))
    dialogues, ids = [], {}
    for place, number, data in read_jsonl(path, option, "give a JSONL file of labelled dialogues"):
        problem = first_problem(validator, data)
        if problem is not None:
            raise ConfigError(f"{place}: {problem}; see docs/dialogues-format.md for the fields")
        if data["id"] in ids:
            raise ConfigError(f"{place}: duplicate dialogue id {data['id']!r} (first on line {ids[data['id']]}); ids must be unique")
        speakers = {turn["speaker"] for turn in data["turns"]}
        if speakers != {"user", "agent"}:
            raise ConfigError(f"{place}: dialogue {data['id']!r} needs at least one user turn and one agent turn")
        ids[data["id"]] = number
        dialogues.append(data)
    if not dialogues:
        raise ConfigError(f"{path}: no dialogues in the file; write one JSON object per line (docs/dialogues-format.md)")
    return dialogues


def as_turn_pairs(turns: list[dict]) -> list[dict]:
    """Speaker turns as ``{user, assistant}`` exchanges (the report's transcript shape)."""
    out: list[dict] = []
    for turn in turns:
        if turn["speaker"] == "user" or not out or out[-1]["assistant"] is not None:
            out.append({"user": turn["text"] if turn["speaker"] == "user" else "", "assistant": None, "finish_reason": "stop"})
            if turn["speaker"] == "user":
                continue
        out[-1]["assistant"] = turn["text"]
    for exchange in out:
        if exchange["assistant"] is None:
            exchange["assistant"] = ""
    return out
