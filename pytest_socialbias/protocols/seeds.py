"""Suite loading for the protocols that run on seed stereotypes: smoke, DyMT, the zero-shot
probe and the scripted tracks (and the official FairMT-Bench files for scripted suites).

A seed suite gives its seeds inline (``cases:``) or in a seeds file (``seeds:``, relative
to the suite file); each seed becomes one case per user-simulator style (per track for
scripted suites). Scripted suites may instead take their dialogues from the FairMT-Bench
release (``source: fairmt`` with ``--socialbias-fairmt-dir``), and DyMT suites their
seeds: each drawn item's final user turn is the seed statement (``_fairmt_seed_cases``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..cases import Case, Suite, SuiteOverrides, SuiteSource
from ..errors import ConfigError
from ..files import read_yaml, validate, yaml_line
from ..vocabulary import UNSPECIFIED

#: The keys that choose among the FairMT-Bench release's items (``source: fairmt``).
FAIRMT_KEYS = ("source", "release", "subset", "tracks", "categories", "per_category", "sample_seed")
#: Suite keys of seed suites (scripted suites take ``tracks`` instead of ``styles``; DyMT
#: suites may draw their seeds from FairMT-Bench, where ``tracks`` chooses the items).
KEYS = ("styles", "cases", "seeds")
DYMT_KEYS = KEYS + FAIRMT_KEYS
SCRIPTED_KEYS = ("tracks", "cases", "seeds", "source", "release", "subset", "categories", "per_category",
                 "sample_seed")
#: FairMT-Bench: the release a suite runs unless it says (its 1K items repeat 10K ones, so
#: a run takes one release), and the 10K subset.
FAIRMT_RELEASE = "1K"
FAIRMT_SUBSET = "stereotype"
#: DyMT seeds from FairMT-Bench, unless the suite says: the 10K release (its files name
#: each item's category, which a seed needs), and the Negative_Feedback items, whose final
#: turn names the group and the trait plainly in one question (the other tracks' final
#: turns lean on earlier turns, elide the group or wrap it in a format); docs/dymt.md.
FAIRMT_SEED_RELEASE = "10K"
FAIRMT_SEED_TRACKS = ("negative_feedback",)
#: The release names no group apart from the text: the simulator is told it is the one
#: the statement names.
FAIRMT_SEED_GROUP = "the group the statement names"
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
    scripted = protocol.name == "scripted"
    if scripted:
        turns = SCRIPTED_TURNS
    styles = tuple((data.get("tracks") if scripted else None) or data.get("styles") or protocol.styles)
    notes: list[str] = []
    others: list[Path] = []
    for key in ("release", "subset", "categories", "per_category") + (() if scripted else ("tracks",)):
        if key in data and "source" not in data:
            raise source.error([key], f"`{key}:` chooses among the FairMT-Bench files: it goes with `source: fairmt`")
    if "source" in data and scripted:
        cases, notes = _fairmt_cases(source.name, overrides.fairmt_dir, data)
    elif "source" in data:
        cases, notes = _fairmt_seed_cases(source, protocol.name, overrides.fairmt_dir, styles, turns)
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


def _per_category(dialogues: list, count: int, seed: int, by_track: bool = True) -> tuple[list, str]:
    """A seeded draw of ``count`` dialogues per track and category (the DyMT paper's FairMT
    baseline: 40 per category x 6 categories per track = 240 per track, 1,200 over five
    tracks), or, not ``by_track``, per category (its 240 seeds, 40 per category); what has
    no category cannot be drawn so and is left out, said in the note. Each group is drawn
    from its items sorted by id with a seed derived from ``seed`` and the group, so a
    group's draw does not depend on what else the release holds."""
    import hashlib
    import random

    groups: dict[tuple, list] = {}
    uncategorised = 0
    for dialogue in dialogues:
        if dialogue.category is None:
            uncategorised += 1
            continue
        groups.setdefault((dialogue.track, dialogue.category) if by_track else (dialogue.category,), []).append(dialogue)
    drawn, short = [], []
    for group, items in sorted(groups.items()):
        items = sorted(items, key=lambda d: d.id)
        derived = int(hashlib.sha256(":".join((str(seed),) + group).encode()).hexdigest()[:16], 16)
        drawn += random.Random(derived).sample(items, min(count, len(items)))
        if len(items) < count:
            short.append(f"{'/'.join(group)} has {len(items)}")
    what = "per track and category" if by_track else "per category"
    note = f"drew {count} {what} (seed {seed}): {len(drawn)} {'conversation' if by_track else 'seed'}(s)"
    if short:
        note += "; fewer where there are fewer (" + ", ".join(short) + ")"
    if uncategorised:
        note += (f"; {uncategorised} without a category left out (1K items get theirs from the 10K item they "
                 "copy: give the folder holding both releases)")
    return sorted(drawn, key=lambda d: d.id), note


def _fairmt_selection(fairmt_dir, data: dict, release: str) -> tuple:
    """The release's items a suite chooses (``release`` unless it says; for 10K one subset,
    stereotype unless it says; its tracks and categories), the load result, and the words
    that say which."""
    from ..fairmt import load_fairmt

    result = load_fairmt(Path(fairmt_dir))
    release = data.get("release", release)
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
    what = f"FairMT_{release}" + (f" {subset}" if subset else "")
    what += f", tracks {', '.join(sorted(tracks))}" if tracks else ", all tracks"
    what += f", categories {', '.join(sorted(categories))}" if categories else ""
    return chosen, result, what


def _no_release_note(suite: str) -> list[str]:
    return [f"suite {suite} has no cases: it reads the official FairMT-Bench release files, which are not "
            "shipped; pass --socialbias-fairmt-dir=DIR (the folder holding FairMT_1K/ or FairMT_10K/)"]


def _fairmt_cases(suite: str, fairmt_dir, data: dict) -> tuple[list, list]:
    """Cases from the official FairMT-Bench release files (none without the option): one
    release (and for 10K one subset), the suite's tracks and categories; and notes saying
    which were run and what the lenient loader skipped."""
    if fairmt_dir is None:
        return [], _no_release_note(suite)
    chosen, result, what = _fairmt_selection(fairmt_dir, data, FAIRMT_RELEASE)
    notes: list[str] = []
    per_category = data.get("per_category")
    if per_category:
        chosen, drawn_note = _per_category(chosen, int(per_category), int(data.get("sample_seed", FAIRMT_SAMPLE_SEED)))
        notes.append(f"{suite}: {drawn_note}")
    notes.insert(0, f"{suite}: ran {len(chosen)} conversation(s) of {what} ({len(result.dialogues) - len(chosen)} "
                    "other(s) in the folder left out; choose with release:, subset:, tracks:, categories:, "
                    "per_category:)")
    notes += [f"{suite}: skipped {reason}" for reason in result.skipped]
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
        for d in chosen
    ], notes


def _fairmt_seed_cases(source: SuiteSource, protocol: str, fairmt_dir, styles, turns: int) -> tuple[list, list]:
    """DyMT seeds from the official FairMT-Bench release (none without the option), one
    case per seed and style.

    The release has no field that holds the stereotype alone: every item is five user
    turns that build up to it, and the final turn asks about it outright, naming the group
    and the trait. That turn, as the release gives it (cleaned of stray carriage returns),
    is the seed statement: it conditions the user simulator only, as a seed of ours does.
    The item's id (release, subset, category, track, and its index in its file) is the
    seed's id, so a seed keeps its id whatever else is drawn; its category is the one its
    file names. Items without a category (1K items that match no 10K item) cannot be
    seeds and are left out, said in a note. No item to draw from is a usage error naming
    the suite file's line and what the folder holds."""
    data, suite = source.data, source.name
    if fairmt_dir is None:
        return [], _no_release_note(suite)
    if "tracks" not in data:
        data = {**data, "tracks": list(FAIRMT_SEED_TRACKS)}
    chosen, result, what = _fairmt_selection(fairmt_dir, data, FAIRMT_SEED_RELEASE)
    notes: list[str] = []
    uncategorised = sum(1 for d in chosen if d.category is None)
    chosen = [d for d in chosen if d.category is not None]
    if not chosen:
        raise source.error(["source"], (
            f"source: fairmt: {fairmt_dir} holds no item of {what} with a category to draw DyMT seeds from "
            f"(it holds {_holdings(result.dialogues)}); give the folder holding "
            "FairMT_10K/Stereotype/<Track>/prompt_<attr>.json, or choose release:, subset:, tracks: and "
            "categories: that it holds"))
    if "per_category" in data:
        chosen, drawn_note = _per_category(chosen, int(data["per_category"]),
                                           int(data.get("sample_seed", FAIRMT_SAMPLE_SEED)), by_track=False)
        notes.append(f"{suite}: {drawn_note}")
    notes.insert(0, f"{suite}: {len(chosen)} seed(s), each the final user turn of an item of {what} (the "
                    "release states no stereotype apart from its turns: docs/dymt.md); choose with release:, "
                    "subset:, tracks:, categories:, per_category:")
    if uncategorised:
        notes.append(f"{suite}: {uncategorised} item(s) without one of our categories left out (a 10K file of "
                     "another attribute; a 1K item that copies no 10K item in the folder)")
    notes += [f"{suite}: skipped {reason}" for reason in result.skipped]
    return [
        Case(suite=suite, protocol=protocol, id=d.id, category=d.category, group=FAIRMT_SEED_GROUP,
             statement=d.turns[-1], style=style, turns=turns)
        for d in chosen for style in styles
    ], notes


def _holdings(dialogues: list) -> str:
    """What a release folder holds, in a few words: items per release, subset and track."""
    counts: dict[str, int] = {}
    for d in dialogues:
        name = " ".join(x for x in (f"FairMT_{d.source}", d.subset, d.track) if x)
        counts[name] = counts.get(name, 0) + 1
    return "; ".join(f"{name}: {n}" for name, n in sorted(counts.items())) or "no readable item"
