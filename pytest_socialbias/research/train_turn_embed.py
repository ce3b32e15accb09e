"""Training of the embedded reading of simulated users' turns (``protocols/turn_embed.py``):
``python -m pytest_socialbias.research.train_turn_embed train SETS`` embeds the labelled
turns the learned reading was trained on with the embedded model, fits a multinomial
logistic regression (numpy and scikit-learn's L-BFGS, of the ``dev`` extra) and writes
``data/user_turn_embed.json``. A run never imports this module.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import ConfigError
from ..protocols import turn_model as tm
from ..protocols.turn_embed import MODEL_FILE, Embedder, EmbedReading, features
from . import train_turn_model as tt


def dumps(reading: EmbedReading) -> str:
    data = reading.to_dict()
    rows = {key: data.pop(key) for key in ("mean", "scale", "weights")}
    head = json.dumps(data, sort_keys=True, indent=1)[:-2]
    body = ",\n".join(f' "{key}": [\n' + ",\n".join("  " + json.dumps(v) for v in value) + "\n ]"
                      for key, value in rows.items())
    return f"{head},\n{body}\n}}\n"


def _fit(x, y, l2: float, iterations: int):
    """Multinomial logistic regression with an L2 penalty on the weights (not the bias),
    fitted to convergence by scikit-learn's L-BFGS; deterministic, and a change in the
    vectors' last digits (another CPU's arithmetic) moves the weights as little. ``x``:
    standardised features; returns the weights, one row per feature and the bias last."""
    import warnings

    import numpy as np

    try:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise ConfigError("training the embedded reading needs scikit-learn: pip install -e '.[dev]'") from None

    model = LogisticRegression(C=1.0 / (l2 * len(x)), max_iter=iterations, tol=1e-8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        try:
            model.fit(x, y)
        except ConvergenceWarning:
            raise ConfigError(f"the embedded reading's regression did not converge in {iterations} iterations: "
                              f"call build() with more iterations or a larger l2") from None
    coef, intercept = model.coef_, model.intercept_
    if len(model.classes_) == 2:  # scikit-learn keeps one row for two labels: the second's log-odds
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    weights = np.zeros((x.shape[1] + 1, len(tm.LABELS)))
    weights[-1] = -30.0  # a label with no training turn (a small set, a fold): P ~ 0
    for row, k in enumerate(model.classes_):
        weights[:-1, k], weights[-1, k] = coef[row], intercept[row]
    return weights


def _predict(x, weights):
    """Probabilities per label (numpy rows) of standardised features under ``_fit``'s weights."""
    import numpy as np

    z = x @ weights[:-1] + weights[-1]
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def build(paths: list[Path], embedder: Embedder | None = None, folds: int = 5, l2: float = 1e-2,
          iterations: int = 5000) -> EmbedReading:
    import numpy as np

    embedder = embedder or Embedder()
    turns = [t for path in paths for t in tt.labelled_turns(path)]
    raw = np.array([features(text, ctx, embedder) for _, _, text, ctx in turns])
    mean, scale = raw.mean(0), raw.std(0) + 1e-6
    x = (raw - mean) / scale
    y = np.array([tm.LABELS.index(label) for _, label, _, _ in turns])
    passed = np.array([tm.check(text, ctx) is None for _, _, text, ctx in turns])
    held = []  # (label, P(clean)) of turns the earlier readings pass, by a model that never saw them
    for test_ids in tt.context_folds(turns, folds):
        test = np.array([cid in test_ids for cid, *_ in turns])
        p = _predict(x[test], _fit(x[~test], y[~test], l2, iterations))
        held += [(int(label), float(pc)) for label, pc, ok in zip(y[test], p[:, 0], passed[test]) if ok]
    clean = sorted(p for label, p in held if label == 0)
    threshold = tt.budget_threshold(clean, int((y == 0).sum()))
    weights = _fit(x, y, l2, iterations)
    cv = {"folds": folds, "clean_passed": len(clean), "clean_flagged": sum(1 for p in clean if p < threshold),
          "by_label": {label: {"passed": sum(1 for lab, _ in held if lab == k),
                               "caught": sum(1 for lab, p in held if lab == k and p < threshold)}
                       for k, label in enumerate(tm.LABELS) if k}}
    meta = {"trained_on": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths},
            "learned_reading": hashlib.sha256(tm.MODEL_FILE.read_bytes()).hexdigest(),
            "embedding_model": embedder.identity, "turns": len(turns), "l2": l2, "solver": "lbfgs",
            "clean_budget": tt.CLEAN_BUDGET, "cross_validation": cv}
    return EmbedReading(mean.tolist(), scale.tolist(), weights.tolist(), threshold, meta)


def main(argv: list[str] | None = None) -> int:
    return tt.train_main(argv, prog="python -m pytest_socialbias.research.train_turn_embed", what="embedded reading",
                         model_file=MODEL_FILE, build_model=build, dump=dumps,
                         sets_help="labelled sets: those the learned reading was trained on (never the held-out one)",
                         epochs=False)



if __name__ == "__main__":
    raise SystemExit(main())
