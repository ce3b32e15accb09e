"""Surface markers of patronising talk in agent turns, and their effect sizes by class.

Cheap, judge-free descriptors of a labelled dialogue set (docs/benevdial.md): compared to
neutral support (N), benevolently biased dialogues (BB) tend to have shorter sentences,
fewer questions, more exclamations and longer agent turns (the research protocol's four
named features, ``PROTOCOL_BB_DIRECTION``). The table reports each marker's mean per
class and Cohen's d of OB and BB against N. These describe a data set; they are not a
detector. ``python -m pytest_socialbias markers FILE`` computes them on any dialogue file
(:func:`markers_report`), with no judge or guard.

Definitions, over the agent turns of one dialogue (user turns are ignored):

- A *word* is a run of letters, digits or "_" with inner apostrophes ("don't", "you're"
  are one word; "’" counts as an apostrophe).
- *Sentences*: an agent turn is split after a run of ".", "!", "?", "…" or "‽" (plus any
  closing quotes or brackets) that is followed by whitespace or the end of the turn; a
  trailing piece without final punctuation is a sentence too. Pieces with no word are not
  sentences (a lone "!!!" or emoji). A sentence *ends in "?"* when its final punctuation
  run contains "?" or "‽", and *ends in "!"* when it contains "!" or "‽" ("Really?!"
  counts for both).

Markers (a ratio whose denominator is 0 is 0.0):

- ``sentence_length``: agent words / agent sentences.
- ``questions_per_turn``: agent sentences ending in "?" / agent turns.
- ``exclamation_rate``: agent sentences ending in "!" / agent sentences.
- ``agent_turn_length``: agent words / agent turns.
- ``diminutive_rate``: agent words that are endearments or diminutive terms of address
  (``DIMINUTIVES``: "sweetie", "honey", "dear", ...) / agent words. Overly endearing terms
  are a common description of elderspeak and patronising talk (Ryan, Hummert & Boich
  1995); Williams, Kemper & Hummert (2003) code them directly. (Kemper 1994 found that
  diminutives and tag questions did not vary with the listener's age in her samples,
  so these markers are measured, not assumed to separate the classes.)
- ``inclusive_we_rate``: agent words that are first person plural (``INCLUSIVE_WE``: "we",
  "us", "our", "let's", ...) / agent words. The "collective we" ("shall we take our
  pills?"), addressing one person as a plural that includes the speaker, is the other
  elderspeak feature coded by Williams et al.; a support agent talking to one user has
  little other use for it.
- ``tag_question_rate``: agent sentences ending in "?" whose last comma-separated part
  is a tag question (``_TAG``: a negative auxiliary and a pronoun such as "isn't it",
  "don't you", "won't we", or "right", "okay", "ok", "alright", "all right", "yes",
  "yeah", "eh", "shall we", "will you") / agent sentences. Tag questions that invite
  agreement rather than information ("That's nice, isn't it?") are the third elderspeak
  feature of Williams et al. and keep a question mark while asking nothing, which is why
  they are counted apart from ``questions_per_turn``.
- ``directive_rate``: agent sentences that tell the user what to do / agent sentences. A
  sentence is a directive when, after leading interjections and terms of address ("oh",
  "now", "please", "sweetie", ...), its first word is a verb in the base form that opens
  imperatives in support talk (``DIRECTIVE_VERBS``: "rest", "take", "don't", ...), or it
  contains "you should", "you need to", "you must", "you have to", "you'd better" or
  "you ought to". Controlling, directive talk is the other side of patronising
  communication in Ryan, Hummert & Boich (1995); politeness theory (Mills 2003) reads bare
  directives as the least polite form of a request.
- ``agent_word_share``: agent words / all words of the dialogue (user and agent). Who
  holds the floor is the measure of interactional asymmetry in conversation analysis
  (Sacks, Schegloff & Jefferson 1974; Heritage 2002): an agent that talks over a user it
  does not expect much of holds more of it.

The research protocol's text names four of its nine features (``PROTOCOL_BB_DIRECTION``)
and draws the rest from this literature without listing them; the five above are ours,
chosen from the same literature, and may differ from the protocol's.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

from ..vocabulary import CLASSES

#: Marker names, in table order.
MARKERS = (
    "sentence_length",
    "questions_per_turn",
    "exclamation_rate",
    "agent_turn_length",
    "diminutive_rate",
    "inclusive_we_rate",
    "tag_question_rate",
    "directive_rate",
    "agent_word_share",
)

#: The features the research protocol names, with the sign of Cohen's d (BB against N) it
#: expects: shorter sentences, fewer questions, more exclamations, longer agent turns.
PROTOCOL_BB_DIRECTION = {
    "sentence_length": -1,
    "questions_per_turn": -1,
    "exclamation_rate": 1,
    "agent_turn_length": 1,
}

#: Endearments and diminutive terms of address (single words, lower case). "love" is left
#: out: as a verb ("I'd love to") it is far more common in support talk than as a name.
DIMINUTIVES = frozenset(
    {
        "sweetie", "sweetheart", "sweetpea", "honey", "hon", "dear", "dearie", "darling",
        "sugar", "lovey", "buddy", "pal", "champ", "kiddo", "missy", "sonny",
    }
)
#: First person plural forms (lower case, straight apostrophe).
INCLUSIVE_WE = frozenset(
    {"we", "us", "our", "ours", "ourselves", "let's", "we're", "we'll", "we've", "we'd"}
)

#: Verbs whose base form opens an imperative in support talk (lower case; "let's" is not
#: here: it is counted as an inclusive we).
DIRECTIVE_VERBS = frozenset(
    {
        "take", "try", "rest", "go", "make", "call", "remember", "don't", "do", "keep", "stay", "sit", "wait", "leave",
        "stop", "use", "ask", "tell", "put", "get", "avoid", "drink", "eat", "be", "give", "bring", "check",
        "follow", "consider", "focus", "start", "write", "read", "look", "think", "hold", "come", "pick", "set",
        "listen", "let", "relax", "breathe", "slow", "sleep", "walk", "talk", "book", "fill", "send",
        "contact", "visit", "see", "note", "never", "always", "just",
    }
)
#: Words that may come before the verb of a directive without making it one.
_LEAD_INS = frozenset({"oh", "now", "so", "please", "well", "and", "okay", "ok", "alright", "right", "then", "first"})
_YOU_SHOULD = re.compile(r"\byou(?:'d| would)? (?:should|must|need to|have to|had better|'d better|better|ought to)\b",
                         re.IGNORECASE)
_WORD = re.compile(r"\w+(?:['’]\w+)*")
_SENTENCE_END = re.compile(r"[.!?…‽]+[\"'”’)\]]*(?=\s|$)")
_TAG = re.compile(
    r",\s*(?:(?:is|are|was|were|do|does|did|have|has|had|can|could|will|would|should|shall|"
    r"must|wo|ca|ai)n['’]t\s+(?:it|you|we|they|he|she|i|that|there)|right|okay|ok|alright|"
    r"all right|yes|yeah|eh|shall we|will you)\s*[?‽][\"'”’)\]]*$",
    re.IGNORECASE,
)


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def _sentences(text: str) -> list[tuple[str, str]]:
    """(sentence, its final punctuation run) for each sentence that has a word."""
    out = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        out.append((text[start : match.end()].strip(), match.group(0)))
        start = match.end()
    out.append((text[start:].strip(), ""))
    return [(s, end) for s, end in out if _WORD.search(s)]


def _directive(sentence: str) -> bool:
    """Whether a sentence tells the listener what to do (module docstring)."""
    if _YOU_SHOULD.search(sentence.replace("’", "'")):
        return True
    for word in _words(sentence):
        if word in _LEAD_INS or word in DIMINUTIVES:
            continue
        return word in DIRECTIVE_VERBS
    return False


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def dialogue_markers(dialogue: dict) -> dict[str, float]:
    """The markers of one dialogue (definitions in the module docstring), keyed by MARKERS.

    ValueError when the dialogue has no agent turn.
    """
    texts = [t.get("text", "") for t in dialogue.get("turns", []) if t.get("speaker") == "agent"]
    if not texts:
        raise ValueError(f"dialogue {dialogue.get('id', '?')!r} has no agent turn; markers describe agent turns")
    words: list[str] = []
    sentences: list[tuple[str, str]] = []
    for text in texts:
        words.extend(_words(text))
        sentences.extend(_sentences(text))
    user_words = sum(len(_words(t.get("text", ""))) for t in dialogue.get("turns", []) if t.get("speaker") != "agent")
    questions = sum(1 for _, end in sentences if "?" in end or "‽" in end)
    exclamations = sum(1 for _, end in sentences if "!" in end or "‽" in end)
    tags = sum(1 for s, _ in sentences if _TAG.search(s))
    return {
        "sentence_length": _ratio(len(words), len(sentences)),
        "questions_per_turn": _ratio(questions, len(texts)),
        "exclamation_rate": _ratio(exclamations, len(sentences)),
        "agent_turn_length": _ratio(len(words), len(texts)),
        "diminutive_rate": _ratio(sum(1 for w in words if w in DIMINUTIVES), len(words)),
        "inclusive_we_rate": _ratio(sum(1 for w in words if w in INCLUSIVE_WE), len(words)),
        "tag_question_rate": _ratio(tags, len(sentences)),
        "directive_rate": _ratio(sum(1 for text, end in sentences if "?" not in end and _directive(text)), len(sentences)),
        "agent_word_share": _ratio(len(words), len(words) + user_words),
    }


def cohens_d(group: list[float], reference: list[float]) -> float | None:
    """Cohen's d of ``group`` minus ``reference`` with the pooled standard deviation.

    pooled SD = sqrt(((n1 - 1) s1^2 + (n2 - 1) s2^2) / (n1 + n2 - 2)), s^2 the sample
    variance. None when either side has fewer than 2 values or the pooled SD is 0.
    """
    if len(group) < 2 or len(reference) < 2:
        return None
    n1, n2 = len(group), len(reference)
    pooled = ((n1 - 1) * statistics.variance(group) + (n2 - 1) * statistics.variance(reference)) / (n1 + n2 - 2)
    if pooled <= 0:
        return None
    return (statistics.fmean(group) - statistics.fmean(reference)) / math.sqrt(pooled)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def marker_table(dialogues: list[dict]) -> list[dict]:
    """One row per marker (in MARKERS order) comparing the classes.

    Row: ``marker``; ``n_mean``, ``ob_mean``, ``bb_mean`` (mean per class, rounded to 6
    digits, None for a class with no dialogue); ``n``, ``ob``, ``bb`` (dialogue counts);
    ``d_ob`` and ``d_bb`` (Cohen's d of OB and of BB against N, rounded to 6 digits, None
    where :func:`cohens_d` is None). Builtins only. ValueError for a dialogue whose class
    is not N, OB or BB.
    """
    values: dict[str, dict[str, list[float]]] = {c: {m: [] for m in MARKERS} for c in CLASSES}
    for dialogue in dialogues:
        label = dialogue.get("class")
        if label not in CLASSES:
            raise ValueError(
                f"dialogue {dialogue.get('id', '?')!r}: class {label!r} is not one of {', '.join(CLASSES)}"
            )
        for name, value in dialogue_markers(dialogue).items():
            values[label][name].append(value)
    rows = []
    for name in MARKERS:
        per = {c: values[c][name] for c in CLASSES}
        rows.append(
            {
                "marker": name,
                "n_mean": _rounded(statistics.fmean(per["N"]) if per["N"] else None),
                "ob_mean": _rounded(statistics.fmean(per["OB"]) if per["OB"] else None),
                "bb_mean": _rounded(statistics.fmean(per["BB"]) if per["BB"] else None),
                "n": len(per["N"]),
                "ob": len(per["OB"]),
                "bb": len(per["BB"]),
                "d_ob": _rounded(cohens_d(per["OB"], per["N"])),
                "d_bb": _rounded(cohens_d(per["BB"], per["N"])),
            }
        )
    return rows


# ---- python -m pytest_socialbias markers FILE ------------------------------------------

#: Confidence level of the interval for d.
CONFIDENCE = 0.95
#: How the interval for d is computed (also written into the JSON output).
D_INTERVAL = (
    "d +- z * SE, z = 1.959964 (95%), SE = sqrt((n1 + n2) / (n1 * n2) + d^2 / (2 * (n1 + n2))): "
    "the large-sample normal approximation (Hedges & Olkin 1985)"
)
_Z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
_FORMAT_FIX = 'each line is one dialogue: {"class": "N"|"OB"|"BB" (optional), "turns": [{"speaker": "user"|"agent", "text": "..."}]} (docs/dialogues-format.md)'


def d_interval(d: float | None, n1: int, n2: int) -> tuple[float, float, float] | None:
    """(SE, low, high) of Cohen's d from groups of n1 and n2 values, or None without a d.

    SE = sqrt((n1 + n2) / (n1 n2) + d^2 / (2 (n1 + n2))), the large-sample normal
    approximation of the standard error of d (Hedges & Olkin 1985; Borenstein et
    al. 2009, *Introduction to Meta-Analysis*, ch. 4); the interval is d +- 1.96 SE. With a handful of dialogues per
    class it is rough (and too narrow for large |d|): read it as a scale, not a test.
    """
    if d is None or n1 < 1 or n2 < 1:
        return None
    se = math.sqrt((n1 + n2) / (n1 * n2) + d * d / (2 * (n1 + n2)))
    return se, d - _Z * se, d + _Z * se


def load_marker_dialogues(path: str | Path) -> list[dict]:
    """The dialogues of a JSONL file for the marker table, labelled or not.

    Lighter than ``load_dialogues``: a line needs ``turns`` (speaker/text objects, at least
    one agent turn) and, when any line has a ``class``, every line needs one of N, OB, BB.
    ConfigError naming ``FILE:LINE`` and the fix; each dialogue gets ``_line``.
    """
    from ..errors import ConfigError
    from ..files import read_jsonl

    path = Path(path)
    dialogues: list[dict] = []
    labelled_line = unlabelled_line = None
    for place, number, data in read_jsonl(path, "FILE", "give a JSONL file of dialogues (docs/dialogues-format.md)"):
        if not isinstance(data, dict):
            raise ConfigError(f"{place}: not a JSON object; {_FORMAT_FIX}")
        turns = data.get("turns")
        if not isinstance(turns, list) or not turns:
            raise ConfigError(f'{place}: no "turns" list; {_FORMAT_FIX}')
        for i, turn in enumerate(turns):
            if not (isinstance(turn, dict) and turn.get("speaker") in ("user", "agent") and isinstance(turn.get("text"), str)):
                raise ConfigError(f'{place}: turns[{i}] needs "speaker": "user" or "agent" and a "text" string; {_FORMAT_FIX}')
        if not any(turn["speaker"] == "agent" for turn in turns):
            raise ConfigError(f"{place}: no agent turn; the markers describe agent turns, so give each dialogue at least one")
        label = data.get("class")
        if label is None:
            unlabelled_line = unlabelled_line or number
        elif label in CLASSES:
            labelled_line = labelled_line or number
        else:
            raise ConfigError(f"{place}: class {label!r} is not one of {', '.join(CLASSES)}; fix the label, or drop it from every line")
        if labelled_line and unlabelled_line:
            raise ConfigError(
                f"{place}: {'no class' if label is None else 'a class'} but line "
                f"{labelled_line if label is None else unlabelled_line} has "
                f"{'one' if label is None else 'none'}; label every dialogue (N, OB or BB) or none"
            )
        dialogues.append({**data, "_line": number})
    if not dialogues:
        raise ConfigError(f"{path}: no dialogues in the file; {_FORMAT_FIX}")
    return dialogues


def _group_value(dialogue: dict, by: str, source: str):
    value = dialogue
    for part in by.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, (dict, list)):
        from ..errors import ConfigError

        raise ConfigError(
            f"{source}:{dialogue.get('_line', '?')}: --by={by} is an object or list there, not a value; "
            "name a field that holds a string, such as role, generator or user.age"
        )
    return None if value is None else str(value)


def _stats(values: list[float]) -> dict:
    return {
        "n": len(values),
        "mean": _rounded(statistics.fmean(values)) if values else None,
        "sd": _rounded(statistics.stdev(values)) if len(values) > 1 else None,
    }


def _group_rows(group: str | None, measured: list[tuple[str | None, dict]], labelled: bool) -> list[dict]:
    rows = []
    for name in MARKERS:
        per = {c: [m[name] for label, m in measured if label == c] for c in CLASSES}
        classes = [*CLASSES, None] if labelled else [None]
        for label in classes:
            values = per[label] if label is not None else [m[name] for _, m in measured]
            row = {"group": group, "marker": name, "class": label, **_stats(values),
                   "d": None, "d_se": None, "d_low": None, "d_high": None}
            if label is not None and label != "N":
                d = cohens_d(values, per["N"])
                interval = d_interval(d, len(values), len(per["N"]))
                if interval is not None:
                    row.update(d=_rounded(d), d_se=_rounded(interval[0]), d_low=_rounded(interval[1]), d_high=_rounded(interval[2]))
            rows.append(row)
    return rows


def marker_summary(dialogues: list[dict], source: str = "", by: str | None = None) -> dict:
    """Per-class (or, unlabelled, overall) marker means and Cohen's d against N, as builtins.

    ``rows``: one per group, marker and class, in that order: ``group`` (None for every
    dialogue, then each ``by`` value sorted; dialogues without it are "(none)"),
    ``marker``, ``class`` (N, OB, BB, then None for every class; only None when the file is
    unlabelled), ``n``, ``mean``, ``sd`` (sample SD), and for OB and BB ``d`` (against N in
    the same group), ``d_se``, ``d_low``, ``d_high`` (see :func:`d_interval`); None where
    undefined. Numbers rounded to 6 digits.
    """
    labelled = any(d.get("class") is not None for d in dialogues)
    measured = [(d.get("class"), dialogue_markers(d)) for d in dialogues]
    groups: list[tuple[str | None, list]] = [(None, measured)]
    if by:
        values = [_group_value(d, by, source) for d in dialogues]
        if all(v is None for v in values):
            from ..errors import ConfigError

            raise ConfigError(f"--by={by}: no dialogue in {source or 'the file'} has {by}; name a field the records carry, such as role or generator")
        keys = [v if v is not None else "(none)" for v in values]
        groups += [(key, [m for k, m in zip(keys, measured) if k == key]) for key in sorted(set(keys))]
    rows = [row for group, items in groups for row in _group_rows(group, items, labelled)]
    counts = {c: sum(1 for d in dialogues if d.get("class") == c) for c in CLASSES}
    return {
        "file": source,
        "dialogues": len(dialogues),
        "labelled": labelled,
        "classes": counts if labelled else None,
        "by": by,
        "reference": "N" if labelled else None,
        "confidence": CONFIDENCE,
        "d_interval": D_INTERVAL,
        "markers": list(MARKERS),
        "protocol_bb_direction": dict(PROTOCOL_BB_DIRECTION),
        "rows": rows,
    }


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_summary(summary: dict) -> str:
    """The summary as a plain-text table, one block per group."""
    rows = summary["rows"]
    labelled = summary["labelled"]
    lines = []
    if labelled:
        counts = ", ".join(f"{c} {n}" for c, n in summary["classes"].items())
        lines.append(
            f"{summary['file']}: {summary['dialogues']} dialogues ({counts}); "
            f"d = Cohen's d against N, {summary['confidence']:.0%} CI by the large-sample normal approximation"
        )
    else:
        lines.append(f"{summary['file']}: {summary['dialogues']} dialogues, unlabelled (no class): overall means, no d")
    seen: list = []
    for row in rows:
        if row["group"] not in seen:
            seen.append(row["group"])
    for group in seen:
        mine = [r for r in rows if r["group"] == group]
        if summary["by"]:
            n = next(r["n"] for r in mine if r["class"] is None)
            lines.append("")
            lines.append(f"{summary['by']}={group}: {n} dialogues" if group is not None else f"all: {n} dialogues")
        if labelled:
            header = f"{'marker':<20} {'N mean':>9} {'OB mean':>9} {'BB mean':>9} {'all mean':>9}   {'d OB [95% CI]':<22} d BB [95% CI]"
        else:
            header = f"{'marker':<20} {'mean':>9} {'sd':>9}"
        lines.append(header)
        for name in MARKERS:
            by_class = {r["class"]: r for r in mine if r["marker"] == name}
            if labelled:
                means = " ".join(f"{_num(by_class[c]['mean'], 3):>9}" for c in (*CLASSES, None))
                ds = []
                for c in ("OB", "BB"):
                    r = by_class[c]
                    ds.append("-" if r["d"] is None else f"{r['d']:.2f} [{r['d_low']:.2f}, {r['d_high']:.2f}]")
                lines.append(f"{name:<20} {means}   {ds[0]:<22} {ds[1]}".rstrip())
            else:
                r = by_class[None]
                lines.append(f"{name:<20} {_num(r['mean'], 3):>9} {_num(r['sd'], 3):>9}")
    return "\n".join(lines)


def markers_report(path: str | Path, by: str | None = None, json_path: str | Path | None = None) -> str:
    """Read a dialogue file, summarise its markers, write the JSON (if asked); the text table."""
    summary = marker_summary(load_marker_dialogues(path), source=str(path), by=by)
    if json_path is not None:
        from ..errors import ConfigError
        from ..files import write_atomically

        try:
            write_atomically(json_path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise ConfigError(f"--json={json_path}: cannot write it ({exc}); give a writable path") from None
    return format_summary(summary)
