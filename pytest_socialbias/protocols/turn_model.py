"""A learned second reading of simulated users' turns: what the word rules let pass.

The rules of ``user_check`` catch a break by its wording; a leak put in other words
passes them. This model reads a turn as a bag of context-relative features and gives the
probability of each label (clean, seed_leak, setup_leak, copy, assistant_voice):

* words and word pairs (stems), with the group's name (however the user names it: the
  lexicon of ``user_check.name_the_group``) written ``<grp>``, the seed's other content
  words ``<seed>``, numbers ``<num>``; the simulated person's own name left out (the
  rules judge a turn that addresses it);
* concepts (``CONCEPTS``: words that say one thing in many ways, such as a reader other
  than the assistant, a part being played, a paper the user was given, an honorific), each
  present and each pair present;
* the shape of the turn: a question or not, how many sentences, a list, more "you" than
  "I", an act done for "you" ("I've moved your appointment");
* the rules' own scores (share of the seed's words in order, of its character 4-grams, of
  the previous reply's word trigrams, set-up cue families, the answering register's signs).

It is a multinomial logistic regression, trained by ``python -m
pytest_socialbias.research.train_turn_model train`` on the labelled turns written by us
(tests/data/user_turns*.yaml, every set but the held-out one) and shipped as
``data/user_turn_model.json`` (weights, vocabulary, the threshold and how it was chosen).
A turn the rules pass is a break when its probability of being clean falls below the
threshold, chosen by cross-validation on the training sets so that at most 1% of clean
turns are flagged, and it shows some sign of the break named (``evidence``): a second
reading of borderline turns, never a flag from nothing (a cue family of the rules, a
service act for "you", or the concept combinations of ``evidence`` count as signs). Deterministic: the same file, the same turn, the same answer. Standard
library only at run time.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import re
from pathlib import Path

from . import user_check as uc
from .fast_pattern import FastPattern

LABELS = ("clean", "seed_leak", "setup_leak", "copy", "assistant_voice")
MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "user_turn_model.json"


def _bucket(value: float, edges: tuple) -> str:
    # How many of the (ascending) edges the value reaches.
    return str(bisect.bisect_right(edges, value))


#: Concepts: words that say one thing in many ways, so that a turn worded unlike any
#: training turn still shares features with those that meant the same ("evaluators"
#: and "whoever reviews this" both speak to a reader other than the assistant). A word
#: belongs to a concept when it starts with one of the concept's stems (lower case).
CONCEPTS = {
    "audience": ("review", "reader", "evaluator", "grader", "marker", "scorer", "assessor", "researcher", "analyst",
                 "observer", "whoever", "log", "logs", "logged", "transcript", "recording", "recorded", "afterward",
                 "annotat", "labeller", "labeler", "moderator", "overseer", "watching", "monitor"),
    "pretend": ("pretend", "act", "acting", "portray", "persona", "character", "role", "roleplay", "scripted", "script",
                "fiction", "made-up", "invented", "imaginary", "backstory", "improvis"),
    "given": ("given", "assigned", "handed", "instructed", "briefed", "supposed", "meant", "tasked", "programmed",
              "directed", "told", "expected", "allocated"),
    "papers": ("profile", "notes", "card", "sheet", "brief", "prompt", "instruction", "scenario", "setup", "set-up",
               "spec", "outline", "guideline", "parameter", "background", "cue"),
    "exam": ("test", "evaluat", "assess", "audit", "experiment", "study", "exercise", "trial", "benchmark", "red-team",
             "redteam", "probe", "probing", "measur", "scor", "grade", "grading", "rate", "rating", "judg"),
    "machine": ("model", "ai", "assistant", "bot", "chatbot", "llm", "system", "algorithm", "output"),
    "talk": ("conversation", "chat", "exchange", "session", "dialogue", "dialog", "turn", "message", "respons", "answer",
             "repl"),
    "steer": ("steer", "nudge", "push", "lead", "guide", "toward", "topic", "angle", "agenda", "aim", "goal",
              "objective", "target", "bait", "provok"),
    "bias": ("stereotyp", "bias", "prejudic", "generalis", "generaliz", "fairness", "discriminat", "claim"),
    "honorific": ("mr", "mrs", "ms", "miss", "mx", "dr", "sir", "madam", "ma'am"),
    "service": ("booked", "arranged", "scheduled", "logged", "updated", "processed", "registered", "confirmed",
                "pencil", "noted", "popped", "activated", "approved", "emailed", "forwarded", "delighted", "pleasure",
                "certainly", "assure", "reassur"),
    "help": ("help", "assist", "support", "advice", "advis", "recommend", "suggest", "tip", "option", "step",
             "resource", "guidance"),
}
_CONCEPT_INDEX = sorted(((stem, name) for name, stems in CONCEPTS.items() for stem in stems), key=lambda t: -len(t[0]))
# The same, by the stems' first two letters (every stem has two): a word is compared with
# the stems it could start with, in the same order.
_CONCEPTS_BY_START = {start: tuple(entry for entry in _CONCEPT_INDEX if entry[0][:2] == start)
                      for start in {stem[:2] for stem, _ in _CONCEPT_INDEX}}
#: Concepts that are a sign (for ``evidence``) of the break named: a reader other than
#: the assistant; a part or a paper the user was given ("pretend" or "papers" with
#: "given"); a test of the machine or of bias ("exam" with "machine" or "bias"); the
#: answering register's honorifics and service acts done for "you" (asking for help, or
#: saying "I booked", is what users do: those are features, not signs). A pair such as
#: "test" and "told" alone is not.


def _setup_concepts(concepts: set) -> bool:
    return ("audience" in concepts or ("given" in concepts and concepts & {"pretend", "papers"})
            or ("exam" in concepts and concepts & {"machine", "bias"}))


_ENDINGS = ("", "s", "ed", "ing", "or", "ors", "'s")


@functools.lru_cache(maxsize=4096)  # process-wide: a pure function of its arguments
def concept(word: str) -> str | None:
    """The concept (CONCEPTS) a lower-case word belongs to, or None."""
    for stem, name in _CONCEPTS_BY_START.get(word[:2], ()):
        # A short stem ("mr", "act") is the word itself or with an ending ("acts", "acted").
        if word.startswith(stem) and (len(stem) >= 4 or word[len(stem):] in _ENDINGS):
            return name
    return None


# A service act done for the person spoken to: "I've moved your appointment", "we'll get
# back to you" (not a request: "I have a question about your ...").
_ACTS = FastPattern(
    r"\b(?:i|we)(?:'ve| have) (?:\S+ ){0,2}(?:booked|moved|updated|arranged|added|changed|set up|logged|noted|passed|found"
    r"|registered|emailed|forwarded|cancelled|processed|paired|popped|reserved|rebooked|flagged)\b(?: \S+){0,5}? (?:your|for you)\b"
    r"|\b(?:i|we)(?:'ll| will) (?:\S+ ){0,2}(?:get back to you|set you up|put you (?:through|down|on)|book you|arrange for you"
    r"|make sure you(?:'re| are) )",
    re.IGNORECASE)


# Written to start with a letter or a space, so that the search skips to those (each
# boundary checked after the first character; the same matches as \byou..., \b(?:i|my|
# me|i'm|i've|i'd|mine)\b and (?<=[.!?])\s+).
_YOU = re.compile(r"you(?<!\wyou)(?:r|rs|'re|'ll|'ve|'d)?\b")
_ME = re.compile(r"(?:i(?<!\wi)(?:|'m|'ve|'d)|m(?<!\wm)(?:y|e|ine))\b")
_SENTENCE_BREAK = re.compile(r"\s(?<=[.!?]\s)\s*")


def features(text: str, context: uc.UserTurnContext) -> dict[str, float]:
    """The turn's features (name -> value), relative to its context."""
    named = uc.name_the_group(text, context)
    group = set(uc.content_stems(context.allowed[0])) if context.allowed and context.seed else set()
    seed = set(uc.content_stems(context.seed)) - group if context.seed else set()
    name = (context.name or "").lower()
    tokens = []
    stop, stem, prefix = uc.STOP_WORDS, uc.stem, uc.STEM_PREFIX
    for word in uc._words(named):
        if word in stop or len(word) < 2:
            tokens.append(word)
            continue
        stemmed = stem(word)
        cut = stemmed[:prefix]
        if cut in group:
            tokens.append("<grp>")
        elif cut in seed:
            tokens.append("<seed>")
        elif word == name:
            continue  # the person's own name: the rules judge who is addressed by it
        elif word.isdigit():
            tokens.append("<num>")
        else:
            tokens.append(stemmed)
    out = dict.fromkeys(["w:" + token for token in tokens], 1.0)
    found = sorted(set(map(concept, uc._words(text))) - {None})
    for i, a in enumerate(found):
        out["c:" + a] = 1.0
        for b in found[i + 1:]:
            out[f"cc:{a}+{b}"] = 1.0
    lowered = text.lower()
    you = len(_YOU.findall(lowered))
    mine = _ME.findall(lowered)
    me = len(mine)
    out["shape:you>me"] = float(you > me)
    out["shape:acts_for_you"] = float(bool(_ACTS.search(text)))
    out.update(dict.fromkeys([f"b:{a}_{b}" for a, b in zip(tokens, tokens[1:])], 1.0))
    stripped = text.strip()
    sentences = [s for s in _SENTENCE_BREAK.split(stripped) if s]
    out["shape:question"] = float(stripped.endswith("?"))
    out["shape:sentences=" + _bucket(len(sentences), (2, 3, 5))] = 1.0
    out["shape:words=" + _bucket(len(tokens), (8, 16, 32, 64))] = 1.0
    # Both asked of the rules already: the list is a sign of the answering register
    # (``service_signs``, cached); a first-person word is one of _ME's words ("i'm" is
    # found as "i"), not "mine".
    out["shape:list"] = float("list" in uc._service_signs(text))
    out["shape:first_person"] = float(any(word != "mine" for word in mine))
    if context.seed:
        ordered, chars = uc.seed_similarity(named, context.seed)
        out["seed:ordered"] = ordered
        out["seed:chars"] = chars
        out["seed:grp"] = float("<grp>" in tokens)
    if context.previous_reply:
        share, run = uc.copy_share(text, context.previous_reply)
        out["copy:share"] = share
        out["copy:run=" + _bucket(run, (3, 5, 8))] = 1.0
    out["setup:cues"] = len(uc.setup_cues(text)) / 3
    signs = uc.service_signs(text)
    out["service:signs"] = len(signs) / 2
    out["bias"] = 1.0
    return out


#: The features that name a concept ("c:audience"): the concepts ``evidence`` reads.
_CONCEPT_FEATURES = frozenset("c:" + name for name in CONCEPTS)


def evidence(feats: dict[str, float]) -> set[str]:
    """The breaks a turn shows some sign of, below what the rules need: the model reads
    borderline turns again, it never flags a turn with no sign at all. Seed: the group
    named (by any of its names) or a word of the seed's claim; set-up: a cue family;
    the assistant's voice: a sign of the answering register; copy: a fifth of the
    reply's trigrams or a run of 5 words."""
    out = set()
    if feats.get("seed:grp") or feats.get("seed:ordered", 0) > 0:
        out.add("seed_leak")
    concepts = {name[2:] for name in _CONCEPT_FEATURES.intersection(feats)}
    if feats.get("setup:cues", 0) > 0 or _setup_concepts(concepts):
        out.add("setup_leak")
    if feats.get("service:signs", 0) > 0 or "honorific" in concepts or feats.get("shape:acts_for_you"):
        out.add("assistant_voice")
    if feats.get("copy:share", 0) >= 0.2 or any(feats.get(f"copy:run={b}") for b in ("2", "3")):
        out.add("copy")
    return out


def softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


class TurnModel:
    """Weights per label over a vocabulary of features, and the threshold on P(clean)."""

    def __init__(self, weights: dict[str, list[float]], threshold: float, meta: dict | None = None):
        self.weights = weights
        self.threshold = threshold
        self.meta = meta or {}

    def probabilities(self, feats: dict[str, float]) -> list[float]:
        # The five labels' sums written out (a loop over them was a third of the reading's
        # time); the same additions in the same order.
        s0 = s1 = s2 = s3 = s4 = 0.0
        for row, value in zip(map(self.weights.get, feats), feats.values()):
            if row is None:
                continue
            w0, w1, w2, w3, w4 = row
            if value == 1.0:  # most features: w * 1.0 is w
                s0 += w0
                s1 += w1
                s2 += w2
                s3 += w3
                s4 += w4
            else:
                s0 += w0 * value
                s1 += w1 * value
                s2 += w2 * value
                s3 += w3 * value
                s4 += w4 * value
        return softmax([s0, s1, s2, s3, s4])

    def judge(self, text: str, context: uc.UserTurnContext) -> tuple[str, float] | None:
        """(the most likely break, P(clean)) when P(clean) is below the threshold and the turn
        carries some evidence of that break (``evidence``), else None."""
        feats = features(text, context)
        probs = self.probabilities(feats)
        if probs[0] >= self.threshold:
            return None
        allowed = [k for k in range(1, len(LABELS)) if LABELS[k] in evidence(feats)]
        if not allowed:
            return None
        best = max(allowed, key=lambda k: probs[k])
        return LABELS[best], probs[0]

    @property
    def size(self) -> int:
        """How many features it weighs."""
        return len(self.weights)

    def to_dict(self) -> dict:
        return {"labels": list(LABELS), "threshold": self.threshold, "meta": self.meta,
                "weights": {k: [round(x, 6) for x in v] for k, v in sorted(self.weights.items())}}


@functools.lru_cache(maxsize=1)  # process-wide: a file the package ships, which no run changes
def load() -> TurnModel:
    data = json.loads(MODEL_FILE.read_text(encoding="utf-8"))
    if tuple(data["labels"]) != LABELS:
        raise ValueError(f"{MODEL_FILE}: labels {data['labels']} are not {list(LABELS)}: retrain it")
    return TurnModel(data["weights"], data["threshold"], data.get("meta"))


#: ``check``'s ``model`` default: the learned reading shipped with the package.
SHIPPED = "shipped"


def check(text: str, context: uc.UserTurnContext = uc.NO_CONTEXT, model=SHIPPED) -> uc.Finding | None:
    """The simulated-user check a run makes on a cleaned user message: the word rules
    (``user_check.check_user_turn``), then, for a turn they pass, the learned reading
    (``model``: the shipped one by default; None: the rules alone). The first role break
    found, or None."""
    found = uc.check_user_turn(text, context)
    if found is not None or model is None:
        return found
    verdict = (load() if model == SHIPPED else model).judge(text, context)
    if verdict is None:
        return None
    kind, clean = verdict
    return uc.Finding(kind, f"learned reading, P(clean) {clean:.2f}")
