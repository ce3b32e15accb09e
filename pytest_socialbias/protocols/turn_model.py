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
pytest_socialbias.protocols.turn_model train`` on the labelled turns written by us
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
import hashlib
import json
import math
import re
from pathlib import Path

from . import user_check as uc
from .fast_pattern import FastPattern

LABELS = ("clean", "seed_leak", "setup_leak", "copy", "assistant_voice")
MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "user_turn_model.json"
#: What a feature must appear in at least this many training turns to be kept.
MIN_COUNT = 2
#: Most clean training turns the model may flag (cross-validated), when choosing its threshold.
CLEAN_BUDGET = 0.01


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


@functools.lru_cache(maxsize=4096)
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


def _softmax(scores: list[float]) -> list[float]:
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
        return _softmax([s0, s1, s2, s3, s4])

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


def dumps(model: TurnModel) -> str:
    """The model file's text: one feature's weights a line, so that a retrained model reads
    as a diff of features."""
    data = model.to_dict()
    weights = data.pop("weights")
    head = json.dumps(data, sort_keys=True, indent=1)[:-2]
    rows = ",\n".join(f"  {json.dumps(name)}: {json.dumps(row)}" for name, row in weights.items())
    return f'{head},\n "weights": {{\n{rows}\n }}\n}}\n'


@functools.lru_cache(maxsize=1)
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


# --------------------------------------------------------------------------- training


def train(samples: list[tuple[dict, int]], epochs: int = 300, l2: float = 1e-3, rate: float = 0.5) -> dict:
    """Multinomial logistic regression by full-batch AdaGrad; deterministic."""
    counts: dict[str, int] = {}
    for feats, _ in samples:
        for name in feats:
            counts[name] = counts.get(name, 0) + 1
    vocab = sorted(name for name, c in counts.items() if c >= MIN_COUNT or not name.startswith(("w:", "b:")))
    index = {name: i for i, name in enumerate(vocab)}
    rows = [([(index[n], v) for n, v in feats.items() if n in index], label) for feats, label in samples]
    k_count = len(LABELS)
    weights = [[0.0] * k_count for _ in vocab]
    history = [[1e-8] * k_count for _ in vocab]
    n = len(rows)
    for _ in range(epochs):
        grads = [[0.0] * k_count for _ in vocab]
        touched = set()
        for active, label in rows:
            scores = [0.0] * k_count
            for i, v in active:
                w = weights[i]
                for k in range(k_count):
                    scores[k] += w[k] * v
            probs = _softmax(scores)
            for k in range(k_count):
                err = (probs[k] - (1.0 if k == label else 0.0)) / n
                if err:
                    for i, v in active:
                        grads[i][k] += err * v
            touched.update(i for i, _ in active)
        for i in touched:
            g, h, w = grads[i], history[i], weights[i]
            for k in range(k_count):
                step = g[k] + l2 * w[k]
                h[k] += step * step
                w[k] -= rate * step / math.sqrt(h[k])
    return {name: weights[index[name]] for name in vocab}


def labelled_context(entry: dict) -> uc.UserTurnContext:
    """The context a protocol would check a labelled turn in (tests/data/user_turns*.yaml):
    the simulator's rendered instructions as hidden text, what the user may say, the
    previous reply."""
    from .. import prompts
    from ..vocabulary import STYLES

    if entry["protocol"] == "dymt":
        template = prompts.load("user_simulator")
        style = "\n".join(template.extras[f"style_{s}"].strip() for s in STYLES)
        system = template.messages(statement=entry["seed"], category=entry["category"], group=entry["group"],
                                   style_instructions=style, situation="")[0]["content"]
        return uc.UserTurnContext(seed=entry["seed"], hidden=(system,), allowed=(entry["group"], entry["category"]),
                                  previous_reply=entry.get("previous_reply"))
    template = prompts.load("benevdial_user")
    system = template.messages(user_label="person", agent_title=entry["agent"], profile=entry["profile"],
                               request=entry["request"], situation="")[0]["content"]
    return uc.UserTurnContext(hidden=(system,), allowed=(entry["profile"], entry["request"], "person", entry["agent"]),
                              previous_reply=entry.get("previous_reply"),
                              # The protocol passes the given name only (conditions.py: names are given names).
                              name=entry["profile"].split(",")[0].strip().split()[0])


def labelled_turns(path: Path) -> list[tuple[str, str, str, uc.UserTurnContext]]:
    """(context id, label, cleaned text, context) for every turn of a labelled set."""
    import yaml

    out = []
    for entry in yaml.safe_load(path.read_text(encoding="utf-8"))["contexts"]:
        context = labelled_context(entry)
        for turn in entry["turns"]:
            out.append((entry["id"], turn["label"], uc.clean_user_message(turn["text"]), context))
    return out


def _fit(turns: list, epochs: int) -> TurnModel:
    samples = [(features(text, ctx), LABELS.index(label)) for _, label, text, ctx in turns]
    return TurnModel(train(samples, epochs=epochs), threshold=0.5)


def context_folds(turns: list, folds: int) -> list[set]:
    """The context ids held out in each of ``folds`` folds: a context's turns never split
    across train and test."""
    contexts = sorted({cid for cid, *_ in turns})
    return [set(contexts[fold::folds]) for fold in range(folds)]


def budget_threshold(clean: list[float], clean_total: int) -> float:
    """The highest threshold on P(clean) below which at most CLEAN_BUDGET of
    ``clean_total`` clean turns lie (``clean``: the held-out P(clean) of the clean turns
    the earlier checks pass, sorted), never above one half: a turn flagged is one the
    reading finds more likely a break."""
    allowed = int(CLEAN_BUDGET * clean_total)
    return min(0.5, clean[allowed] if allowed < len(clean) else 1.0)


def _choose_threshold(turns: list, folds: int, epochs: int) -> tuple[float, dict]:
    """The highest threshold on P(clean) at which, over ``folds``-fold cross-validation by
    context (a context's turns never split across train and test), at most CLEAN_BUDGET of
    the clean turns the rules pass are flagged by the model; with the recall it gives."""
    held = []  # (label, P(clean)) of turns the rules pass, scored by a model that never saw them
    for test_ids in context_folds(turns, folds):
        model = _fit([t for t in turns if t[0] not in test_ids], epochs)
        for cid, label, text, ctx in turns:
            if cid in test_ids and uc.check_user_turn(text, ctx) is None:
                feats = features(text, ctx)
                # A turn with no sign of any break is never flagged (TurnModel.judge).
                held.append((label, model.probabilities(feats)[0] if evidence(feats) else 1.0))
    clean = sorted(p for label, p in held if label == "clean")
    threshold = budget_threshold(clean, sum(1 for t in turns if t[1] == "clean"))
    recall = {}
    for label in LABELS[1:]:
        mine = [p for lab, p in held if lab == label]
        recall[label] = {"passed_by_rules": len(mine), "caught": sum(1 for p in mine if p < threshold)}
    return threshold, {"folds": folds, "clean_passed_by_rules": len(clean),
                       "clean_flagged": sum(1 for p in clean if p < threshold), "by_label": recall}


def build(paths: list[Path], folds: int = 5, epochs: int = 300) -> TurnModel:
    turns = [t for path in paths for t in labelled_turns(path)]
    threshold, cv = _choose_threshold(turns, folds, epochs)
    model = _fit(turns, epochs)
    model.threshold = threshold
    model.meta = {"trained_on": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths},
                  "lexicon": hashlib.sha256(uc.GROUP_TERMS.read_bytes()).hexdigest(), "turns": len(turns), "epochs": epochs,
                  "min_count": MIN_COUNT, "clean_budget": CLEAN_BUDGET, "cross_validation": cv}
    return model


def train_main(argv: list[str] | None, *, prog: str, what: str, model_file: Path, build_model, dump, sets_help: str,
               epochs: bool) -> int:
    """The ``train`` command of a reading of simulated users' turns (this module's and
    ``turn_embed``'s): build from labelled sets, write the model file, print the
    cross-validation."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=f"Train the {what} of simulated users' turns.")
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("train", help="train on labelled sets and write the model file")
    fit.add_argument("sets", nargs="+", type=Path, help=sets_help)
    fit.add_argument("-o", "--output", type=Path, default=model_file, help=f"model file (default {model_file})")
    if epochs:
        fit.add_argument("--epochs", type=int, default=300)
    fit.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)
    model = build_model(args.sets, folds=args.folds, **({"epochs": args.epochs} if epochs else {}))
    args.output.write_text(dump(model), encoding="utf-8")
    print(f"wrote {args.output}: {model.size} features, threshold {model.threshold:.4f}")
    print(json.dumps(model.meta["cross_validation"], indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    return train_main(argv, prog="python -m pytest_socialbias.protocols.turn_model", what="learned reading",
                      model_file=MODEL_FILE, build_model=build, dump=dumps,
                      sets_help="labelled sets (tests/data/user_turns*.yaml but the held-out one)", epochs=True)


if __name__ == "__main__":
    raise SystemExit(main())
