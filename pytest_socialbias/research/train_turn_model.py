"""Training of the learned reading of simulated users' turns (``protocols/turn_model.py``):
``python -m pytest_socialbias.research.train_turn_model train SETS`` fits it on labelled
turns (tests/data/user_turns*.yaml, every set but the held-out one) and writes
``data/user_turn_model.json``. A run never imports this module.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path

import yaml

from .. import prompts
from ..protocols import user_check as uc
from ..protocols.turn_model import LABELS, MODEL_FILE, TurnModel, evidence, features, softmax
from ..vocabulary import STYLES

#: What a feature must appear in at least this many training turns to be kept.
MIN_COUNT = 2
#: Most clean training turns the model may flag (cross-validated), when choosing its threshold.
CLEAN_BUDGET = 0.01


def dumps(model: TurnModel) -> str:
    """The model file's text: one feature's weights a line, so that a retrained model reads
    as a diff of features."""
    data = model.to_dict()
    weights = data.pop("weights")
    head = json.dumps(data, sort_keys=True, indent=1)[:-2]
    rows = ",\n".join(f"  {json.dumps(name)}: {json.dumps(row)}" for name, row in weights.items())
    return f'{head},\n "weights": {{\n{rows}\n }}\n}}\n'


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
            probs = softmax(scores)
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
    ``train_turn_embed``'s): build from labelled sets, write the model file, print the
    cross-validation."""
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
    return train_main(argv, prog="python -m pytest_socialbias.research.train_turn_model", what="learned reading",
                      model_file=MODEL_FILE, build_model=build, dump=dumps,
                      sets_help="labelled sets (tests/data/user_turns*.yaml but the held-out one)", epochs=True)


if __name__ == "__main__":
    raise SystemExit(main())
