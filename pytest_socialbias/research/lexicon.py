"""Two tools for a labelled BenevDial file (docs/dialogues-format.md), beside the detector
suites: a class-balanced annotation sample, and cue words derived per class.

``annotation-sample``: a seeded draw of the same number of dialogues from each class (100
per class gives a 300-dialogue sample, the size the BenevDial paper had a person label),
written as JSONL, and optionally a blind copy without the class and where each dialogue
came from, for the annotator. ``agreement`` then scores the annotator's labels against
the file's.

``cue-words``: the words of agent turns that mark each class, for the detector suites'
``cues:`` file (the mask variants). The BenevDial paper ranked words by what its
fine-tuned classifier attended to (attribution); without a classifier we rank them by a
statistic of the text itself, as a documented stand-in: the weighted log-odds ratio with
an informative Dirichlet prior (Monroe, Colaresi and Quinn, 2008), each class against the
other two, the prior being the whole file's counts. A word's z-score is its log-odds
difference over its standard error, so frequent words do not win by frequency alone and
rare ones are shrunk toward the file's rate. The top words per class (z > 0, at least
``min_count`` uses) form its list; the union is the cue file. What the two rankings share
is the aim (words that tell a class apart), not the method: a classifier can lean on a
word for reasons its counts do not show, and the reverse.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter
from pathlib import Path

from ..benevdial.dialogues import load_dialogues
from ..errors import ConfigError
from ..vocabulary import CLASSES

#: Fields a blind copy leaves out: the label and anything that would give it away.
BLIND_DROPPED = ("class", "source", "generator", "prompt")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


# --------------------------------------------------------------------------- sampling


def balanced_sample(dialogues: list[dict], per_class: int, seed: int) -> tuple[list[dict], dict]:
    """``per_class`` dialogues of each class, drawn with ``seed`` (each class from its
    dialogues in id order, with a seed derived from ``seed`` and the class, so a class's
    draw does not depend on the others); and the count per class available. A class
    with fewer than ``per_class`` is a ConfigError (the sample would not be balanced)."""
    by_class: dict[str, list[dict]] = {cls: [] for cls in CLASSES}
    for dialogue in dialogues:
        if dialogue.get("class") in by_class:
            by_class[dialogue["class"]].append(dialogue)
    available = {cls: len(items) for cls, items in by_class.items()}
    short = {cls: n for cls, n in available.items() if n < per_class}
    if short:
        raise ConfigError(
            f"--per-class {per_class}: too few labelled dialogues for a balanced sample ("
            + ", ".join(f"{cls} has {n}" for cls, n in short.items())
            + f"); ask for at most {min(available.values())} per class")
    drawn: list[dict] = []
    for cls in CLASSES:
        items = sorted(by_class[cls], key=lambda d: d["id"])
        derived = int(hashlib.sha256(f"{seed}:{cls}".encode()).hexdigest()[:16], 16)
        drawn += random.Random(derived).sample(items, per_class)
    return sorted(drawn, key=lambda d: d["id"]), available


def blind(dialogue: dict) -> dict:
    """The dialogue as an annotator sees it: no class, source, generator or prompt."""
    return {k: v for k, v in dialogue.items() if k not in BLIND_DROPPED}


def _write_jsonl(path: Path, records: list[dict]) -> None:
    from ..files import write_atomically

    write_atomically(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records))


def run_sample(args) -> int:
    dialogues = load_dialogues(args.file, "annotation-sample FILE")
    if args.per_class < 1:
        raise ConfigError(f"--per-class {args.per_class}: give a whole number of dialogues per class, 1 or more")
    drawn, available = balanced_sample(dialogues, args.per_class, args.seed)
    _write_jsonl(args.output, drawn)
    if args.blind is not None:
        _write_jsonl(args.blind, [blind(d) for d in drawn])
    counts = Counter(d["class"] for d in drawn)
    print(f"drew {args.per_class} per class (seed {args.seed}): "
          + ", ".join(f"{cls} {counts[cls]} of {available[cls]}" for cls in CLASSES)
          + f"; {len(drawn)} of {len(dialogues)} dialogues")
    print(f"sample: {args.output}" + (f"; blind copy (no class, source or generator): {args.blind}" if args.blind else ""))
    return 0


def add_sample_arguments(parser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="labelled dialogue JSONL file (docs/dialogues-format.md)")
    parser.add_argument("--per-class", type=int, default=100, metavar="N",
                        help="dialogues per class (default 100: 300 in all, N, OB and BB alike)")
    parser.add_argument("--seed", type=int, default=20251130, metavar="N", help="seed of the draw (default 20251130)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="PATH",
                        help="write the sample (the dialogues as given, labels included) as JSONL")
    parser.add_argument("--blind", type=Path, metavar="PATH",
                        help="also write the sample without class, source, generator and prompt, for the annotator")


# --------------------------------------------------------------------------- cue words


def agent_words(dialogue: dict) -> list[str]:
    """The lower-cased words of a dialogue's agent turns (letters, inner apostrophes)."""
    return [w for turn in dialogue["turns"] if turn["speaker"] == "agent" for w in _WORD.findall(turn["text"].lower())]


def log_odds(dialogues: list[dict], min_count: int = 5, prior_scale: float = 1.0) -> dict[str, list[tuple]]:
    """Per class, every word with at least ``min_count`` uses in agent turns, as
    ``(word, z, count in the class)``, highest z first (ties by word): the weighted
    log-odds ratio of the class against the other two classes, with an informative
    Dirichlet prior of ``prior_scale`` times the file's own counts (Monroe, Colaresi and
    Quinn 2008, their equations 16, 18 and 19)."""
    counts = {cls: Counter() for cls in CLASSES}
    for dialogue in dialogues:
        if dialogue.get("class") in counts:
            counts[dialogue["class"]].update(agent_words(dialogue))
    missing = [cls for cls in CLASSES if not counts[cls]]
    if missing:
        raise ConfigError(f"no agent words of class {', '.join(missing)}: cue words are derived per class, so the file "
                          "needs labelled dialogues of N, OB and BB")
    total = sum((counts[cls] for cls in CLASSES), Counter())
    prior = {w: prior_scale * n for w, n in total.items()}
    a0 = sum(prior.values())
    out: dict[str, list[tuple]] = {}
    for cls in CLASSES:
        mine = counts[cls]
        rest = total - mine
        n_i, n_j = sum(mine.values()), sum(rest.values())
        ranked = []
        for word, n in total.items():
            if n < min_count:
                continue
            y_i, y_j, a = mine.get(word, 0), rest.get(word, 0), prior[word]
            delta = (math.log((y_i + a) / (n_i + a0 - y_i - a)) - math.log((y_j + a) / (n_j + a0 - y_j - a)))
            z = delta / math.sqrt(1.0 / (y_i + a) + 1.0 / (y_j + a))
            ranked.append((word, round(z, 4), y_i))
        ranked.sort(key=lambda t: (-t[1], t[0]))
        out[cls] = ranked
    return out


def cue_lists(ranked: dict[str, list[tuple]], top: int) -> dict[str, list[tuple]]:
    """The ``top`` words of each class with z > 0."""
    return {cls: [t for t in words if t[1] > 0][:top] for cls, words in ranked.items()}


def cue_file_text(lists: dict[str, list[tuple]], source: str, top: int, min_count: int, prior_scale: float) -> str:
    lines = [
        f"# Cue words derived from {source} by `python -m pytest_socialbias cue-words`:",
        f"# per class, the top {top} words of agent turns by the weighted log-odds ratio with an",
        f"# informative Dirichlet prior (class against the other two; prior {prior_scale:g} x the file's",
        f"# counts; words used at least {min_count} times), a stand-in for attribution-ranked words.",
        "# One cue per line; a word listed under two classes is written once. For a detector",
        "# suite's `cues:` (the mask and randmask variants).",
    ]
    seen: set = set()
    for cls in CLASSES:
        lines.append(f"# --- {cls}")
        for word, z, _ in lists[cls]:
            if word not in seen:
                seen.add(word)
                lines.append(f"{word}  # z {z:.2f}")
    return "\n".join(lines) + "\n"


def run_cue_words(args) -> int:
    dialogues = load_dialogues(args.file, "cue-words FILE")
    if args.top < 1 or args.min_count < 1 or not args.prior_scale > 0:
        raise ConfigError("--top and --min-count are whole numbers of 1 or more, --prior-scale a number above 0")
    ranked = log_odds(dialogues, args.min_count, args.prior_scale)
    lists = cue_lists(ranked, args.top)
    text = cue_file_text(lists, Path(args.file).name, args.top, args.min_count, args.prior_scale)
    if args.output is not None:
        from ..files import write_atomically

        write_atomically(args.output, text)
    if args.json_path is not None:
        from ..files import write_atomically

        write_atomically(args.json_path, json.dumps(
            {cls: [{"word": w, "z": z, "count": c} for w, z, c in words] for cls, words in lists.items()},
            indent=2, sort_keys=True) + "\n")
    labelled = Counter(d.get("class") for d in dialogues)
    print(f"cue words from {sum(labelled[c] for c in CLASSES)} labelled dialogues ("
          + ", ".join(f"{c} {labelled[c]}" for c in CLASSES) + f"), agent turns, words used at least "
          f"{args.min_count} times; weighted log-odds with an informative Dirichlet prior, z per class:")
    for cls in CLASSES:
        shown = ", ".join(f"{w} {z:.2f}" for w, z, _ in lists[cls][:10]) or "(no word above the rest)"
        print(f"  {cls} ({len(lists[cls])}): {shown}")
    if args.output is not None:
        print(f"cue file: {args.output} ({len(set(w for ws in lists.values() for w, _, _ in ws))} cues)")
    return 0


def add_cue_arguments(parser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="labelled dialogue JSONL file (docs/dialogues-format.md)")
    parser.add_argument("--top", type=int, default=50, metavar="K", help="words per class (default 50)")
    parser.add_argument("--min-count", type=int, default=5, metavar="N",
                        help="leave out words used fewer than N times in agent turns (default 5)")
    parser.add_argument("--prior-scale", type=float, default=1.0, metavar="S",
                        help="the prior's counts: S times the file's own (default 1)")
    parser.add_argument("-o", "--output", type=Path, metavar="PATH", help="write the cue file (for a suite's cues:)")
    parser.add_argument("--json", type=Path, metavar="PATH", dest="json_path",
                        help="also write the lists as JSON (word, z, count per class)")
