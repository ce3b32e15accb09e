"""Surface markers of patronising talk in agent turns, and their effect sizes by class.

Cheap, judge-free descriptors of a labelled dialogue set (docs/benevdial.md): compared to
neutral support (N), benevolently biased dialogues (BB) tend to have shorter sentences,
fewer questions, more exclamations and longer agent turns (the research protocol's four
named features, ``PROTOCOL_BB_DIRECTION``). The table reports each marker's mean per
class and Cohen's d of OB and BB against N. These describe a data set; they are not a
detector. A detector run reports the table of its labelled dialogues (:func:`marker_table`);
``python -m pytest_socialbias markers FILE`` computes them on any dialogue file, with
intervals for d and no judge or guard (``research/marker_report.py``).

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

import math
import re
import statistics

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


def rounded(value: float | None) -> float | None:
    """A table's number: rounded to 6 digits (None stays None)."""
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
                "n_mean": rounded(statistics.fmean(per["N"]) if per["N"] else None),
                "ob_mean": rounded(statistics.fmean(per["OB"]) if per["OB"] else None),
                "bb_mean": rounded(statistics.fmean(per["BB"]) if per["BB"] else None),
                "n": len(per["N"]),
                "ob": len(per["OB"]),
                "bb": len(per["BB"]),
                "d_ob": rounded(cohens_d(per["OB"], per["N"])),
                "d_bb": rounded(cohens_d(per["BB"], per["N"])),
            }
        )
    return rows
