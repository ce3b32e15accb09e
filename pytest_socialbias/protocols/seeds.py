"""Suite loading for the protocols that run on seed stereotypes: smoke, DyMT, the zero-shot
probe and the scripted tracks (and the official FairMT-Bench files for scripted suites).

A seed suite gives its seeds inline (``cases:``) or in a seeds file (``seeds:``, relative
to the suite file); each seed becomes one case per user-simulator style (per track for
scripted suites). Scripted suites may instead take their dialogues from the FairMT-Bench
release (``source: fairmt`` with ``--socialbias-fairmt-dir``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..cases import Case, Suite, SuiteOverrides, SuiteSource
from ..errors import ConfigError
from ..files import read_yaml, validate, yaml_line
from ..vocabulary import UNSPECIFIED

#: Suite keys of seed suites (scripted suites take ``tracks`` instead of ``styles``).
KEYS = ("styles", "cases", "seeds")
SCRIPTED_KEYS = ("tracks", "cases", "seeds", "source", "release", "subset", "categories", "per_category",
                 "sample_seed")
#: FairMT-Bench: the release a suite runs unless it says (its 1K items repeat 10K ones, so
#: a run takes one release), and the 10K subset.
FAIRMT_RELEASE = "1K"
FAIRMT_SUBSET = "stereotype"
#: Seed of the per-category draw (``per_category:``) unless the suite gives ``sample_seed``.
FAIRMT_SAMPLE_SEED = 20251130
#: The scripted tracks have five user turns each.
SCRIPTED_TURNS = 5


#: Seeds files read in this session (several suites share one: DyMT, zero-shot, scripted);
#: emptied with the suites when a session starts (protocols.forget_suites).
SEEDS_READ: dict = {}


def load_seeds(path: Path) -> tuple[list[tuple[dict, list]], object]:
    """Seeds from a seeds file: (seed, its location path) pairs, validated; and the tree."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None
    if key is None or key not in SEEDS_READ:
        data, node = read_yaml(path, "seeds file")
        validate(data, "seeds", str(path), node)
        found = ([(raw, ["seeds", i]) for i, raw in enumerate(data["seeds"])], node)
        if key is None:
            return found
        SEEDS_READ[key] = found
    seeds, node = SEEDS_READ[key]
    return list(seeds), node


def load(source: SuiteSource, protocol, overrides: SuiteOverrides) -> Suite:
    data, path = source.data, source.path
    turns = data.get("turns", protocol.turns)
    if protocol.turns_option and overrides.turns is not None:
        turns = overrides.turns
    if protocol.name == "zeroshot" and turns != 1:
        raise source.error(["turns"], "the zero-shot probe has exactly one turn")
    if protocol.name == "scripted":
        turns = SCRIPTED_TURNS
    styles = tuple(data.get("tracks") or data.get("styles") or protocol.styles)
    notes: list[str] = []
    others: list[Path] = []
    for key in ("release", "subset", "categories", "per_category"):
        if key in data and "source" not in data:
            raise source.error([key], f"`{key}:` chooses among the FairMT-Bench files: it goes with `source: fairmt`")
    if "source" in data:
        cases, notes = _fairmt_cases(source.name, overrides.fairmt_dir, data)
    else:
        if "seeds" in data:
            seeds_path = source.file("seeds", "seeds file")
            entries, entries_node = load_seeds(seeds_path)
            where, others = seeds_path, [seeds_path]
        else:
            entries = [(raw, ["cases", i]) for i, raw in enumerate(data["cases"])]
            entries_node, where = source.node, path
        cases = _seed_cases(entries, entries_node, where, source.name, protocol.name, styles, turns)
    digest = source.digest(*others)
    cases = [dataclasses.replace(c, suite_sha256=digest) for c in cases]
    # Sorted, so that every xdist worker collects the same list in the same order.
    cases.sort(key=lambda c: (c.id, c.style or ""))
    return Suite(path=path, name=source.name, protocol=protocol.name, turns=turns, styles=styles,
                 batch_size=source.batch_size, cases=cases, notes=notes)


def _seed_cases(entries, node, source: Path, suite: str, protocol: str, styles, turns: int) -> list:
    seen: dict[str, list] = {}
    cases = []
    for raw, where in entries:
        if raw["id"] in seen:
            line = yaml_line(node, where + ["id"])
            raise ConfigError(
                f"{source}:{line}: duplicate case id {raw['id']!r} (first at line "
                f"{yaml_line(node, seen[raw['id']] + ['id'])}); case ids must be unique within a suite"
            )
        seen[raw["id"]] = where
        for style in styles:
            cases.append(
                Case(
                    suite=suite,
                    protocol=protocol,
                    id=raw["id"],
                    category=raw["category"],
                    group=raw["group"],
                    statement=raw["statement"],
                    style=style,
                    turns=turns,
                )
            )
    return cases


def _per_category(dialogues: list, count: int, seed: int) -> tuple[list, str]:
    """A seeded draw of ``count`` dialogues per track and category (the DyMT paper's FairMT
    baseline: 40 per category x 6 categories per track = 240 per track, 1,200 over five
    tracks); what has no category cannot be drawn so and is left out, said in the note."""
    import hashlib
    import random

    groups: dict[tuple, list] = {}
    uncategorised = 0
    for dialogue in dialogues:
        if dialogue.category is None:
            uncategorised += 1
            continue
        groups.setdefault((dialogue.track, dialogue.category), []).append(dialogue)
    drawn, short = [], []
    for (track, category), items in sorted(groups.items()):
        items = sorted(items, key=lambda d: d.id)
        derived = int(hashlib.sha256(f"{seed}:{track}:{category}".encode()).hexdigest()[:16], 16)
        drawn += random.Random(derived).sample(items, min(count, len(items)))
        if len(items) < count:
            short.append(f"{track}/{category} has {len(items)}")
    note = f"drew {count} per track and category (seed {seed}): {len(drawn)} conversation(s)"
    if short:
        note += "; fewer where there are fewer (" + ", ".join(short) + ")"
    if uncategorised:
        note += (f"; {uncategorised} without a category left out (1K items get theirs from the 10K item they "
                 "copy: give the folder holding both releases)")
    return sorted(drawn, key=lambda d: d.id), note


def _fairmt_cases(suite: str, fairmt_dir, data: dict) -> tuple[list, list]:
    """Cases from the official FairMT-Bench release files (none without the option): one
    release (and for 10K one subset), the suite's tracks and categories; and notes saying
    which were run and what the lenient loader skipped."""
    if fairmt_dir is None:
        return [], [f"suite {suite} has no cases: it reads the official FairMT-Bench release files, which are not "
                    "shipped; pass --socialbias-fairmt-dir=DIR (the folder holding FairMT_1K/ or FairMT_10K/)"]
    from ..fairmt import load_fairmt

    result = load_fairmt(Path(fairmt_dir))
    release = data.get("release", FAIRMT_RELEASE)
    # 10K: one subset (stereotype unless told); 1K: its items take the subset of the 10K
    # item they copy (fairmt.py), so a subset given filters them, and none takes them all.
    subset = data.get("subset", FAIRMT_SUBSET if release == "10K" else None)
    tracks = set(data.get("tracks") or ())
    categories = set(data.get("categories") or ())
    chosen = [
        d for d in result.dialogues
        if d.source == release and (subset is None or d.subset == subset)
        and (not tracks or d.track in tracks)
        and (not categories or (d.category or UNSPECIFIED) in categories)
    ]
    notes: list[str] = []
    per_category = data.get("per_category")
    if per_category:
        chosen, drawn_note = _per_category(chosen, int(per_category), int(data.get("sample_seed", FAIRMT_SAMPLE_SEED)))
        notes.append(f"{suite}: {drawn_note}")
    what = f"FairMT_{release}" + (f" {subset}" if subset else "")
    what += f", tracks {', '.join(sorted(tracks))}" if tracks else ", all tracks"
    what += f", categories {', '.join(sorted(categories))}" if categories else ""
    notes.insert(0, f"{suite}: ran {len(chosen)} conversation(s) of {what} ({len(result.dialogues) - len(chosen)} "
                    "other(s) in the folder left out; choose with release:, subset:, tracks:, categories:, "
                    "per_category:)")
    notes += [f"{suite}: skipped {reason}" for reason in result.skipped]
    result.dialogues = chosen
    return [
        Case(
            suite=suite,
            protocol="scripted",
            id=d.id,
            category=d.category or UNSPECIFIED,
            group="",
            statement="",
            style=d.track,
            turns=len(d.turns),
            user_turns=tuple(d.turns),
        )
        for d in result.dialogues
    ], notes
