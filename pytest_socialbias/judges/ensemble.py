"""Ensembles of three-class judges (BenevDial detector mode).

With class probabilities from every judge that answered (their backends return
log-probabilities), the ensemble takes the equal-weight average of the judges'
probabilities and its argmax (docs/benevdial.md); a tie goes to the class listed first in
``CLASSES`` (N, then OB, then BB). Where any answering judge has no probabilities (e.g. an
Anthropic judge), it takes a majority vote of the judges' classes instead; a tied vote goes
to the class of the earliest judge (in ``--judge`` order) among the tied ones. Judges whose
answer was unreadable are left out; with no readable answer the ensemble has no class.
The method used is returned with the class, and the report counts them.
"""

from __future__ import annotations

from collections import Counter

from ..vocabulary import CLASSES

AVERAGE, VOTE = "probability average", "majority vote"


def combine(members: list[tuple[str | None, dict | None]]) -> dict:
    """``members``: (class, probabilities or None) per judge, in ``--judge`` order."""
    readable = [(cls, probs) for cls, probs in members if cls is not None]
    if not readable:
        return {"class": None, "probs": None, "method": None, "members": len(members)}
    if all(probs is not None for _, probs in readable):
        average = {k: sum(probs.get(k, 0.0) for _, probs in readable) / len(readable) for k in CLASSES}
        best = max(CLASSES, key=lambda k: (average[k], -CLASSES.index(k)))
        return {
            "class": best,
            "probs": {k: round(v, 6) for k, v in average.items()},
            "method": AVERAGE,
            "members": len(members),
        }
    votes = Counter(cls for cls, _ in readable)
    top = max(votes.values())
    best = next(cls for cls, _ in readable if votes[cls] == top)
    return {"class": best, "probs": None, "method": VOTE, "members": len(members)}
