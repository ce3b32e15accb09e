"""``python -m pytest_socialbias agreement FILE.jsonl --raters A B [C ...]``: agreement
among people (or between people and generation labels), the human-validation numbers the
papers report and a run does not make.

Each line of FILE is a JSON object; ``--raters`` names the fields that hold each rater's
label of that item (any JSON scalar: "BB", 1, true). With two raters: the share of equal
labels, Cohen's kappa and Gwet's AC1 (stats.multiclass_agreement: Dirichlet-posterior
intervals), the BenevDial paper's annotator-vs-generation-label check. With three or
more: Fleiss' kappa and Gwet's AC1 for many raters, with 95% percentile-bootstrap
intervals over items (seeded), DyMT's three-annotator figure. ``--share FIELD`` adds the
share of items whose FIELD is true (yes, 1), with a Wilson interval: DyMT's share of
follow-ups coherent with the history. Items missing a rater's label are counted and left
out, never read as agreement.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from ..errors import ConfigError
from ..files import read_jsonl
from ..metrics.rates import DIGITS, wilson_interval

RESAMPLES = 2000
SEED = 20251201
TRUE_WORDS = {"true", "yes", "y", "1"}


def many_rater_agreement(items: list[list], categories: list) -> dict:
    """Fleiss' kappa and Gwet's AC1 over items each labelled by two or more raters.

    For item i with r_i labels of which r_ik are category k: observed agreement
    pa = mean_i sum_k r_ik (r_ik - 1) / (r_i (r_i - 1)); pi_k = mean_i r_ik / r_i;
    Fleiss pe = sum_k pi_k^2; Gwet's AC1 pe = sum_k pi_k (1 - pi_k) / (K - 1)
    (Gwet 2008). Each statistic is (pa - pe) / (1 - pe), 1.0 where pe is 1."""
    usable = [labels for labels in items if len(labels) >= 2]
    n, size = len(usable), len(categories)
    if not n:
        return {"n": 0, "agreement": None, "fleiss_kappa": None, "ac1": None}
    pa, pi = 0.0, [0.0] * size
    for labels in usable:
        r = len(labels)
        counts = [sum(1 for x in labels if x == c) for c in categories]
        pa += sum(k * (k - 1) for k in counts) / (r * (r - 1))
        for index, k in enumerate(counts):
            pi[index] += k / r
    pa /= n
    pi = [p / n for p in pi]
    fleiss_pe = sum(p * p for p in pi)
    ac1_pe = sum(p * (1 - p) for p in pi) / (size - 1) if size > 1 else 0.0

    def chance_corrected(pe: float) -> float:
        return 1.0 if pe >= 1.0 else (pa - pe) / (1 - pe)

    return {"n": n, "agreement": pa, "fleiss_kappa": chance_corrected(fleiss_pe), "ac1": chance_corrected(ac1_pe)}


def _bootstrap(items: list[list], categories: list, seed: int) -> dict:
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {"agreement": [], "fleiss_kappa": [], "ac1": []}
    for _ in range(RESAMPLES):
        sample = [items[rng.randrange(len(items))] for _ in items]
        stats = many_rater_agreement(sample, categories)
        for key in draws:
            draws[key].append(stats[key])
    out = {}
    for key, values in draws.items():
        values.sort()
        out[f"{key}_low"] = values[int(0.025 * (len(values) - 1))]
        out[f"{key}_high"] = values[int(0.975 * (len(values) - 1))]
    return out


def agreement_report(rows: list[dict], raters: list[str], share: str | None = None, seed: int = SEED) -> dict:
    from .. import stats

    complete, missing = [], 0
    for row in rows:
        if all(row.get(field) is not None for field in raters):
            complete.append([row[field] for field in raters])
        else:
            missing += 1
    categories = sorted({str(x) for labels in complete for x in labels})
    labelled = [[str(x) for x in labels] for labels in complete]
    report: dict = {"items": len(rows), "left_out_missing_label": missing, "raters": raters, "categories": categories}
    if len(raters) == 2:
        two = stats.multiclass_agreement([(a, b) for a, b in labelled], tuple(categories), seed=seed)
        report["two_raters"] = {k: two[k] for k in ("n", "agreement", "agreement_low", "agreement_high", "kappa",
                                                     "kappa_low", "kappa_high", "ac1", "ac1_low", "ac1_high")
                                if k in two}
    else:
        many = many_rater_agreement(labelled, categories)
        if many["n"]:
            many.update(_bootstrap(labelled, categories, seed))
        many["interval"] = f"95% percentile bootstrap over items ({RESAMPLES} seeded resamples)"
        report["many_raters"] = many
    if share is not None:
        values = [row.get(share) for row in rows if row.get(share) is not None]
        yes = sum(1 for v in values if str(v).strip().lower() in TRUE_WORDS)
        low, high = wilson_interval(yes, len(values))
        report["share"] = {"field": share, "n": len(values), "count": yes,
                           "share": yes / len(values) if values else None, "ci_low": low, "ci_high": high}
    return _rounded(report)


def _rounded(value):
    if isinstance(value, float):
        return round(value, DIGITS)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def summary_lines(report: dict) -> list[str]:
    def pct(v):
        return "n/a" if v is None else f"{100 * v:.1f}%"

    def num(v):
        return "n/a" if v is None else f"{v:.3f}"

    lines = [f"agreement: {report['items']} items, raters {', '.join(report['raters'])}; "
             f"{report['left_out_missing_label']} left out (a label missing); categories {', '.join(report['categories'])}"]
    two = report.get("two_raters")
    if two:
        lines.append(f"two raters: n {two['n']}; agreement {pct(two.get('agreement'))}; Cohen's kappa "
                     f"{num(two.get('kappa'))} [{num(two.get('kappa_low'))}, {num(two.get('kappa_high'))}]; Gwet's AC1 "
                     f"{num(two.get('ac1'))} [{num(two.get('ac1_low'))}, {num(two.get('ac1_high'))}]")
    many = report.get("many_raters")
    if many:
        lines.append(f"{len(report['raters'])} raters: n {many['n']}; agreement {pct(many['agreement'])}; Fleiss' kappa "
                     f"{num(many['fleiss_kappa'])} [{num(many.get('fleiss_kappa_low'))}, "
                     f"{num(many.get('fleiss_kappa_high'))}]; Gwet's AC1 {num(many['ac1'])} "
                     f"[{num(many.get('ac1_low'))}, {num(many.get('ac1_high'))}] ({many['interval']})")
    share = report.get("share")
    if share:
        lines.append(f"share of items with {share['field']} true: {share['count']} of {share['n']} "
                     f"({pct(share['share'])} [{pct(share['ci_low'])}, {pct(share['ci_high'])}], Wilson)")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.jsonl", help="one JSON object per item")
    parser.add_argument("--raters", nargs="+", required=True, metavar="FIELD",
                        help="the fields holding each rater's label (two or more)")
    parser.add_argument("--share", metavar="FIELD", help="also the share of items whose FIELD is true (yes, 1)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed of the intervals' draws (default {SEED})")
    parser.add_argument("--json", type=Path, metavar="PATH", dest="json_path", help="also write the numbers as JSON")


def run(args: argparse.Namespace) -> int:
    if len(args.raters) < 2 or len(set(args.raters)) != len(args.raters):
        raise ConfigError(f"--raters {' '.join(args.raters)}: name two or more different fields")
    rows = []
    for place, _, value in read_jsonl(args.file, "agreement", "give a JSONL file of labelled items"):
        if not isinstance(value, dict):
            raise ConfigError(f"{place}: expected a JSON object with the fields {', '.join(args.raters)}")
        rows.append(value)
    absent = [name for name in args.raters if not any(row.get(name) is not None for row in rows)]
    if absent:
        found = sorted({str(key) for row in rows for key in row})
        raise ConfigError(f"{args.file}: no item has a label in {', '.join(absent)}: --raters names the fields that "
                          f"hold each rater's label (the items' fields: {', '.join(found) or 'none'})")
    report = agreement_report(rows, args.raters, args.share, args.seed)
    for line in summary_lines(report):
        print(line)
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0
