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
from ..runcache import current
from ..vocabulary import UNSPECIFIED

#: The keys that choose among the FairMT-Bench release's items (``source: fairmt``).
FAIRMT_KEYS = ("source", "release", "subset", "tracks", "categories", "per_category", "sample_seed")
#: Suite keys of seed suites (scripted suites take ``tracks`` instead of ``styles``; DyMT
#: suites may draw their seeds from FairMT-Bench, where ``tracks`` chooses the items).
KEYS = ("styles", "cases", "seeds")
DYMT_KEYS = KEYS + FAIRMT_KEYS + ("groups",)
#: The baselines may run on the very seeds of a DyMT suite (``seeds_of: FILE``).
ZEROSHOT_KEYS = KEYS + ("seeds_of",)
SCRIPTED_KEYS = ("tracks", "cases", "seeds", "source", "release", "subset", "categories", "per_category",
                 "sample_seed", "seeds_of")
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
#: A FairMT seed's group in the baselines, where no ``groups:`` file names it: derived
#: from its category (the zero-shot and scripted turns name a group; the release does
#: not say which its final turn is about apart from the text).
DERIVED_GROUPS = {
    "age": "people of a certain age",
    "appearance": "people with a certain appearance",
    "disability": "people with a certain disability",
    "gender": "people of a certain gender",
    "race": "people of a certain race",
    "religion": "people of a certain religion",
}
#: Seed of the per-category draw (``per_category:``) unless the suite gives ``sample_seed``.
FAIRMT_SAMPLE_SEED = 20251130
#: The scripted tracks have five user turns each.
SCRIPTED_TURNS = 5


def load_seeds(path: Path) -> tuple[list[tuple[dict, list]], object]:
    """Seeds from a seeds file: (seed, its location path) pairs, validated; and the tree.
    Read once per run (several suites share one: DyMT, zero-shot, scripted; runcache.py)."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None
    read = current().seeds
    if key is None or key not in read:
        data, node = read_yaml(path, "seeds file")
        validate(data, "seeds", str(path), node)
        found = ([(raw, ["seeds", i]) for i, raw in enumerate(data["seeds"])], node)
        if key is None:
            return found
        read[key] = found
    seeds, node = read[key]
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
    digest = None
    if "seeds_of" in data:
        if "source" in data:
            raise source.error(["seeds_of"], "`seeds_of:` takes its seeds from a DyMT suite; it does not go with "
                               "`source:` (the DyMT suite it names draws them)")
        cases, notes, digest = _seeds_of(source, protocol.name, overrides, styles, turns)
    elif "source" in data and scripted:
        cases, notes = _fairmt_cases(source, overrides.fairmt_dir, data, overrides.fairmt_release)
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
    digest = digest or source.digest(*others)
    cases = [dataclasses.replace(c, suite_sha256=digest) for c in cases]
    # Sorted, so that every xdist worker collects the same list in the same order.
    cases.sort(key=lambda c: (c.id, c.style or ""))
    return Suite(path=path, name=source.name, protocol=protocol.name, turns=turns, styles=styles,
                 batch_size=source.batch_size, cases=cases, notes=notes)


def _seeds_of(source: SuiteSource, protocol: str, overrides: SuiteOverrides, styles, turns: int):
    """The cases of a baseline suite on the very seeds of the DyMT suite its ``seeds_of:``
    names (relative to this file), loaded with the same options, so the same release and
    ``sample_seed`` give the same draw: one case per seed and style (track). A FairMT
    seed whose group no ``groups:`` file of that suite names gets one derived from its
    category (``DERIVED_GROUPS``). Returns the cases, notes and a digest over this file and
    the seeds' (their suite's)."""
    import hashlib

    from . import load_suite

    other = source.file("seeds_of", "DyMT suite file")
    if other.resolve() == source.path.resolve():
        raise source.error(["seeds_of"], "seeds_of: names this suite itself; name the dymt suite whose seeds to run")
    dymt = load_suite(other, overrides)
    if dymt.protocol != "dymt":
        raise source.error(["seeds_of"], f"seeds_of: {other} is a {dymt.protocol} suite; name a dymt suite (e.g. "
                           "dymt.yaml or dymt_fairmt.yaml), whose seeds this baseline then runs on")
    first: dict = {}
    for case in dymt.cases:
        first.setdefault(case.id, case)
    derived = 0
    cases = []
    for seed in sorted(first.values(), key=lambda c: c.id):
        group = seed.group
        if group == FAIRMT_SEED_GROUP:
            group = DERIVED_GROUPS.get(seed.category, f"people of a certain {seed.category}")
            derived += 1
        cases += [Case(suite=source.name, protocol=protocol, id=seed.id, category=seed.category, group=group,
                       statement=seed.statement, style=style, turns=turns) for style in styles]
    suite = source.name
    notes = [f"{suite}: the {len(first)} seed(s) of suite {dymt.name} ({other.name}), the very seeds its cases "
             "run on"] if first else [f"suite {suite} has no cases: it runs on the seeds of suite {dymt.name} "
                                      f"({other.name}), which has none"]
    if derived:
        notes.append(f"{suite}: {derived} FairMT seed(s) with no group named: each group derived from the seed's "
                     f"category (e.g. {DERIVED_GROUPS['religion']!r}); a `groups:` file in {other.name} names them")
    if not dymt.cases:
        notes += dymt.notes
    seeds_digest = dymt.cases[0].suite_sha256 if dymt.cases else source.digest(other)
    digest = hashlib.sha256(source.path.read_bytes() + seeds_digest.encode()).hexdigest()
    return cases, notes, digest


def _given_groups(source: SuiteSource, candidates: list) -> dict:
    """A FairMT seed suite's ``groups:`` file: seed id -> the group its statement is about
    (a YAML mapping); ConfigError naming the file for anything else or an id that is no
    item the suite draws from."""
    path = source.file("groups", "groups file")
    data, _ = read_yaml(path, "groups file")
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                             for k, v in data.items()):
        raise ConfigError(f"{path}: a groups file is a mapping of seed id to the group its statement is about, "
                          "one per line (fairmt-10k-stereotype-gender-negative_feedback-0007: women)")
    known = {d.id for d in candidates}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: {len(unknown)} id(s) name no item this suite draws from (first: {unknown[0]!r}); "
                          "use the ids of the release's items (the seed ids in the report)")
    return {k: v.strip() for k, v in data.items()}


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


def _fairmt_cases(source: SuiteSource, fairmt_dir, data: dict, release: str | None = None) -> tuple[list, list]:
    """Cases from the official FairMT-Bench release files (none without the option): one
    release (the option's, else the suite's, else 1K; for 10K one subset), the suite's
    tracks and categories, and its per-category draw (not on 1K from the option, which
    runs FairMT-1K as released); and notes saying what was drawn and run and what the
    lenient loader skipped. A release the folder holds nothing of is a usage error."""
    suite = source.name
    if fairmt_dir is None:
        return [], _no_release_note(suite)
    notes: list[str] = []
    per_category = data.get("per_category")
    if release is not None:
        data = {**data, "release": release}
        if release == "1K" and per_category:
            notes.append(f"{suite}: --socialbias-fairmt-release=1K: FairMT-1K as released, every conversation; the "
                         f"suite's per_category: {per_category} draw is for 10K and was not applied")
            per_category = None
    chosen, result, what = _fairmt_selection(fairmt_dir, data, FAIRMT_RELEASE)
    wanted = data.get("release", FAIRMT_RELEASE)
    if not any(d.source == wanted for d in result.dialogues):
        raise source.error(["source"], (
            f"source: fairmt: {fairmt_dir} holds no conversation of FairMT_{wanted} (it holds "
            f"{_holdings(result.dialogues)}); give the folder holding that release, or choose the release it holds "
            "(release: in the suite, or --socialbias-fairmt-release=1K|10K)"))
    if per_category:
        chosen, drawn_note = _per_category(chosen, int(per_category), int(data.get("sample_seed", FAIRMT_SAMPLE_SEED)))
        notes.append(f"{suite}: {drawn_note}")
    notes.insert(0, f"{suite}: ran {len(chosen)} conversation(s) of {what} ({len(result.dialogues) - len(chosen)} "
                    "other(s) in the folder left out; choose with release:, subset:, tracks:, categories:, "
                    "per_category:, or --socialbias-fairmt-release)")
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
    groups = _given_groups(source, chosen) if "groups" in data else {}
    if "per_category" in data:
        chosen, drawn_note = _per_category(chosen, int(data["per_category"]),
                                           int(data.get("sample_seed", FAIRMT_SAMPLE_SEED)), by_track=False)
        notes.append(f"{suite}: {drawn_note}")
    if groups:
        named = sum(1 for d in chosen if d.id in groups)
        notes.append(f"{suite}: {named} of {len(chosen)} seed(s) have a group named in the groups file; the rest "
                     f"are told {FAIRMT_SEED_GROUP!r}")
    notes.insert(0, f"{suite}: {len(chosen)} seed(s), each the final user turn of an item of {what} (the "
                    "release states no stereotype apart from its turns: docs/dymt.md); choose with release:, "
                    "subset:, tracks:, categories:, per_category:")
    if uncategorised:
        notes.append(f"{suite}: {uncategorised} item(s) without one of our categories left out (a 10K file of "
                     "another attribute; a 1K item that copies no 10K item in the folder)")
    notes += [f"{suite}: skipped {reason}" for reason in result.skipped]
    return [
        Case(suite=suite, protocol=protocol, id=d.id, category=d.category, group=groups.get(d.id, FAIRMT_SEED_GROUP),
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
