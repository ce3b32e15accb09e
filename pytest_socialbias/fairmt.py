"""Lenient loader for the official FairMT-Bench release files (which we do not ship).

Layout (docs/dymt.md describes the release):
- ``FairMT_1K/<Track>.json``: a JSON list of dicts keyed "0".."4", one user turn each;
- ``FairMT_10K/{Stereotype,Toxicity}/<Track>/prompt_<attr>.json``: a JSON list of dicts
  keyed "0-turn Conv".."4-turn Conv"; ``disable`` in a file name means disability.

The real files carry stray carriage returns and some truncated text, so bad items and
files are skipped and reported, never fatal. Truncated-looking text is kept: judging
what a truncated turn meant is not the loader's job. Scattered_Questions is dropped, as
DyMT does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .vocabulary import TRACKS

TURNS = 5
DROPPED_TRACK = "scattered_questions"
SUBSETS = ("stereotype", "toxicity")
# FairMT-Bench attribute in file names -> our category name.
ATTRIBUTES = {
    "age": "age",
    "appearance": "appearance",
    "disable": "disability",
    "disability": "disability",
    "gender": "gender",
    "race": "race",
    "religion": "religion",
}
_KEYS = {
    "1K": tuple(str(i) for i in range(TURNS)),
    "10K": tuple(f"{i}-turn Conv" for i in range(TURNS)),
}
_DIRS = {"fairmt_1k": "1K", "fairmt_10k": "10K"}
EXPECTED_LAYOUT = (
    "FairMT_1K/<Track>.json and/or FairMT_10K/{Stereotype,Toxicity}/<Track>/prompt_<attr>.json"
)


@dataclass(frozen=True)
class FairMTDialogue:
    """One scripted five-turn dialogue from the release."""

    id: str
    source: str  # "1K" | "10K"
    track: str  # our snake_case track name, one of vocabulary.TRACKS
    category: str | None  # our category name; None where the file does not say
    subset: str | None  # "stereotype" | "toxicity" for 10K; None for 1K
    turns: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "source": self.source,
            "track": self.track,
            "category": self.category,
            "subset": self.subset,
            "turns": list(self.turns),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "FairMTDialogue":
        return cls(
            id=data["id"],
            source=data["source"],
            track=data["track"],
            category=data.get("category"),
            subset=data.get("subset"),
            turns=list(data["turns"]),
        )


@dataclass
class LoadResult:
    dialogues: list[FairMTDialogue] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one human-readable reason each


def clean_turn(text: str) -> str:
    """Normalise line endings and trim. The files carry stray carriage returns (every
    Jailbreak_Tips final turn has one before its question mark): a CR-LF is a line break,
    a lone CR before a word a space, any other lone CR is dropped ("innocent\r?" ->
    "innocent?")."""
    text = text.replace("\r\n", "\n")
    text = re.sub(r"\r(?=\w)", " ", text)
    return text.replace("\r", "").strip()


def load_fairmt(root: Path) -> LoadResult:
    """Load every usable dialogue under ``root``.

    ``root`` is the directory holding FairMT_1K/FairMT_10K, or one of those two.
    """
    root = Path(root)
    if not root.exists():
        raise ConfigError(
            f"FairMT-Bench release not found: {root} does not exist; "
            f"expected a directory with {EXPECTED_LAYOUT}"
        )
    if not root.is_dir():
        raise ConfigError(
            f"FairMT-Bench release: {root} is not a directory; expected a directory with {EXPECTED_LAYOUT}"
        )

    if root.name.lower() in _DIRS:
        parts = [(_DIRS[root.name.lower()], root)]
    else:
        parts = sorted(
            (_DIRS[child.name.lower()], child)
            for child in root.iterdir()
            if child.is_dir() and child.name.lower() in _DIRS
        )

    loader = _Loader(base=root.parent if root.name.lower() in _DIRS else root)
    for source, directory in parts:
        if source == "1K":
            loader.load_1k(directory)
        else:
            loader.load_10k(directory)

    if loader.files_seen == 0:
        raise ConfigError(
            f"no FairMT-Bench files found under {root}; expected {EXPECTED_LAYOUT} "
            "(point at the release folder, or at FairMT_1K or FairMT_10K itself)"
        )
    if loader.dropped_files:
        loader.skipped.append(
            f"Scattered_Questions: dropped by DyMT ({loader.dropped_files} "
            f"file{'s' if loader.dropped_files != 1 else ''})"
        )
    _match_1k(loader)
    loader.dialogues.sort(key=_sort_key)
    return LoadResult(dialogues=loader.dialogues, skipped=loader.skipped)


def _match_1k(loader: "_Loader") -> None:
    """Give each 1K dialogue the subset and category of the 10K dialogue it copies (in the
    official release every 1K item is a verbatim copy of a 10K one), where both releases
    were loaded; say how many matched, and why the rest have no category."""
    ones = [d for d in loader.dialogues if d.source == "1K"]
    if not ones:
        return
    tens = {(d.track, tuple(d.turns)): d for d in loader.dialogues if d.source == "10K"}
    if not tens:
        loader.skipped.append(f"FairMT_1K: {len(ones)} dialogues without subset or category (they are copies of "
                              "10K items; give the folder holding FairMT_10K too and they are matched)")
        return
    matched = 0
    for index, dialogue in enumerate(loader.dialogues):
        if dialogue.source != "1K":
            continue
        twin = tens.get((dialogue.track, tuple(dialogue.turns)))
        if twin is not None:
            loader.dialogues[index] = FairMTDialogue(dialogue.id, dialogue.source, dialogue.track, twin.category,
                                                     twin.subset, dialogue.turns)
            matched += 1
    if matched < len(ones):
        loader.skipped.append(f"FairMT_1K: {len(ones) - matched} of {len(ones)} dialogues match no 10K item; "
                              "they keep no subset or category")


def _sort_key(dialogue: FairMTDialogue) -> tuple:
    # Split off the item number so item 10000 sorts after item 9999.
    prefix, _, index = dialogue.id.rpartition("-")
    return (prefix, int(index))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


class _Loader:
    """Walks the release, collecting dialogues and skip reasons."""

    def __init__(self, base: Path):
        self.base = base
        self.dialogues: list[FairMTDialogue] = []
        self.skipped: list[str] = []
        self.files_seen = 0
        self.dropped_files = 0

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.base).as_posix()
        except ValueError:
            return str(path)

    def track_of(self, name: str, where: Path) -> str | None:
        """Our track name for a file/folder name; None (reported) if it is not used."""
        track = _slug(name)
        if track == DROPPED_TRACK:
            return None
        if track not in TRACKS:
            self.skipped.append(
                f"{self.rel(where)}: unknown track {name!r} (known: {', '.join(TRACKS)}); skipped"
            )
            return None
        return track

    def load_1k(self, directory: Path) -> None:
        for path in sorted(directory.glob("*.json")):
            self.files_seen += 1
            if _slug(path.stem) == DROPPED_TRACK:
                self.dropped_files += 1
                continue
            track = self.track_of(path.stem, path)
            if track is not None:
                self.load_file(path, source="1K", track=track, subset=None, category=None,
                               id_prefix=f"fairmt-1k-{track}")

    def load_10k(self, directory: Path) -> None:
        for subset_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
            files = sorted(subset_dir.rglob("*.json"))
            subset = _slug(subset_dir.name)
            if subset not in SUBSETS:
                if files:
                    self.files_seen += len(files)
                    self.skipped.append(
                        f"{self.rel(subset_dir)}: unknown subset folder (expected Stereotype or "
                        f"Toxicity); {len(files)} file{'s' if len(files) != 1 else ''} skipped"
                    )
                continue
            for track_dir in sorted(p for p in subset_dir.iterdir() if p.is_dir()):
                track_files = sorted(track_dir.glob("*.json"))
                if not track_files:
                    continue
                self.files_seen += len(track_files)
                if _slug(track_dir.name) == DROPPED_TRACK:
                    self.dropped_files += len(track_files)
                    continue
                track = self.track_of(track_dir.name, track_dir)
                if track is None:
                    continue
                for path in track_files:
                    self.load_10k_file(path, subset=subset, track=track)

    def load_10k_file(self, path: Path, subset: str, track: str) -> None:
        attr = _slug(path.stem)
        if attr.startswith("prompt_"):
            attr = attr[len("prompt_"):]
        category = ATTRIBUTES.get(attr)
        # The category (or the file's own attribute where unknown) keeps ids unique per file.
        label = category or attr or "unknown"
        self.load_file(path, source="10K", track=track, subset=subset, category=category,
                       id_prefix=f"fairmt-10k-{subset}-{label}-{track}")

    def load_file(self, path: Path, *, source: str, track: str, subset: str | None,
                  category: str | None, id_prefix: str) -> None:
        where = self.rel(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except UnicodeDecodeError as exc:
            self.skipped.append(f"{where}: not UTF-8 text ({exc}); file skipped")
            return
        except json.JSONDecodeError as exc:
            self.skipped.append(f"{where}: not valid JSON ({exc}); file skipped")
            return
        except OSError as exc:
            self.skipped.append(f"{where}: unreadable ({exc.strerror or exc}); file skipped")
            return
        if not isinstance(data, list):
            self.skipped.append(
                f"{where}: expected a JSON list of dialogues, got {type(data).__name__}; file skipped"
            )
            return
        if not data:
            self.skipped.append(f"{where}: holds no dialogue (an empty list); 0 cases from it")
            return
        keys = _KEYS[source]
        for index, item in enumerate(data):
            turns = self.turns_of(item, keys, f"{where} item {index}")
            if turns is not None:
                self.dialogues.append(
                    FairMTDialogue(
                        id=f"{id_prefix}-{index:04d}",
                        source=source,
                        track=track,
                        category=category,
                        subset=subset,
                        turns=turns,
                    )
                )

    def turns_of(self, item, keys: tuple[str, ...], where: str) -> list[str] | None:
        if not isinstance(item, dict):
            self.skipped.append(f"{where}: expected an object with keys {keys[0]!r}..{keys[-1]!r}, "
                                f"got {type(item).__name__}")
            return None
        turns = []
        for key in keys:
            if key not in item:
                self.skipped.append(f"{where}: turn {key!r} missing")
                return None
            value = item[key]
            if not isinstance(value, str):
                self.skipped.append(f"{where}: turn {key!r} is {type(value).__name__}, not text")
                return None
            text = clean_turn(value)
            if not text:
                self.skipped.append(f"{where}: turn {key!r} empty")
                return None
            turns.append(text)
        return turns
