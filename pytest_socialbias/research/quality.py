"""Quality statistics of a labelled BenevDial dialogue set (docs/benevdial.md).

Three measures of how varied a generated set is, for every class and for every
generator x class cell:

* **MTLD** (lexical diversity of one dialogue, averaged over the cell);
* **Self-BLEU-4** (how much the dialogues of a cell repeat each other; lower is more varied);
* **Vendi score** with an n-gram kernel (the effective number of distinct dialogues).

Every statistic reads the same text: all turns of the dialogue, user and agent alike, in
order, without speaker labels, split by ``tokens`` into lowercased word tokens (runs of
letters and digits, apostrophes inside a word kept; punctuation dropped).

``python -m pytest_socialbias quality FILE.jsonl [--json PATH] [--seed N]`` runs
them on an existing file; ``generate-benevdial`` runs them on what it wrote.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import sys
from collections import Counter
from pathlib import Path

from ..vocabulary import CLASSES

FORMAT = "benevdial-quality/1"

MTLD_THRESHOLD = 0.72
BLEU_MAX_N = 4
BLEU_EPSILON = 0.1
BLEU_TRUNCATE = 200
SELF_BLEU_HYPOTHESES = 300
SELF_BLEU_REFERENCES = 100
SELF_BLEU_POOL = 2000
SELF_BLEU_SEEDS = 5
VENDI_NGRAMS = (1, 2)
VENDI_MAX = 5000

KERNEL = "ngram-cosine"
KERNEL_NOTE = (
    "cosine similarity of 1-2-gram count vectors: a stand-in for the paper's bert-base [CLS] "
    "cosine kernel (no model weights are downloaded); values are not comparable with the paper's"
)
SMOOTHING = "method1: a zero n-gram match count becomes epsilon 0.1 (Chen and Cherry 2014, NLTK method1)"
TEXT_NOTE = "all turns (user and agent), no speaker labels; lowercased word tokens, punctuation dropped"

_TOKEN_RE = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")


def tokens(text: str) -> list[str]:
    """Lowercased word tokens: runs of letters and digits, with inner apostrophes kept."""
    return _TOKEN_RE.findall(text.lower())


def dialogue_tokens(record: dict) -> list[str]:
    """The tokens of all turns of a dialogue record, in order, without speaker labels."""
    return [token for turn in record["turns"] for token in tokens(turn["text"])]


def _rng(seed: int, *labels: str) -> random.Random:
    text = "\x1f".join([str(seed), *labels])
    return random.Random(int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big"))


# --------------------------------------------------------------------------- MTLD


def _mtld_pass(words: list[str], threshold: float) -> float | None:
    """One directional MTLD pass.

    Walk the tokens keeping a running type-token ratio (TTR). Each time the TTR drops to
    the threshold or below, one full factor is counted and the running counts start again
    at the next token. What is left at the end counts as a partial factor, the share of
    the way from TTR 1 down to the threshold that it got: (1 - TTR) / (1 - threshold).
    The pass value is the number of tokens divided by the number of factors; None when
    there are no factors at all (every token is new, so there is nothing to measure).
    """
    factors = 0.0
    seen: set[str] = set()
    count = 0
    ttr = 1.0
    for word in words:
        count += 1
        seen.add(word)
        ttr = len(seen) / count
        if ttr <= threshold:
            factors += 1
            seen = set()
            count = 0
            ttr = 1.0
    factors += (1.0 - ttr) / (1.0 - threshold)
    if factors <= 0:
        return None
    return len(words) / factors


def mtld(words: list[str], threshold: float = MTLD_THRESHOLD) -> float | None:
    """Measure of Textual Lexical Diversity, bidirectional.

    After McCarthy and Jarvis (2010, Behavior Research Methods 42(2)): the mean length of
    word runs that keep the type-token ratio above the threshold (0.72), computed once
    from the first token forwards and once from the last token backwards, and averaged.
    None when either pass has no factor (an empty text, or one in which no word repeats).
    """
    forward = _mtld_pass(words, threshold)
    backward = _mtld_pass(words[::-1], threshold)
    if forward is None or backward is None:
        return None
    return (forward + backward) / 2


# --------------------------------------------------------------------------- BLEU


def _ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _bleu(hyp: list[str], hyp_grams: list[Counter], clip, ref_lengths) -> float:
    """Sentence BLEU-4 of one hypothesis on a 0-1 scale.

    ``clip(n, gram)`` gives the largest count of the n-gram in any one reference (the
    clipping limit of modified precision); ``ref_lengths`` are the reference lengths.
    Uniform weights over 1- to 4-gram precisions, geometric mean; an order with no match
    gets epsilon 0.1 in place of its zero numerator (smoothing method 1), and no unigram
    match at all gives 0. Brevity penalty exp(1 - r/c) when the hypothesis length c is
    not longer than r, the reference length closest to c (the shorter one on a tie).
    """
    c = len(hyp)
    if c == 0:
        return 0.0
    logs = 0.0
    for n in range(1, BLEU_MAX_N + 1):
        grams = hyp_grams[n - 1]
        matched = sum(min(count, clip(n, gram)) for gram, count in grams.items())
        total = max(1, sum(grams.values()))
        if matched == 0:
            if n == 1:
                return 0.0
            logs += math.log(BLEU_EPSILON / total)
        else:
            logs += math.log(matched / total)
    r = min(ref_lengths, key=lambda length: (abs(length - c), length))
    penalty = 1.0 if c > r else math.exp(1 - r / c)
    return penalty * math.exp(logs / BLEU_MAX_N)


def bleu(hypothesis: list[str], references: list[list[str]]) -> float:
    """BLEU-4 (0-100) of one tokenised hypothesis against tokenised references, as in
    ``_bleu`` (no truncation here)."""
    if not references:
        raise ValueError("BLEU needs at least one reference")
    ref_grams = [[_ngrams(ref, n) for n in range(1, BLEU_MAX_N + 1)] for ref in references]

    def clip(n, gram):
        return max(grams[n - 1].get(gram, 0) for grams in ref_grams)

    hyp_grams = [_ngrams(hypothesis, n) for n in range(1, BLEU_MAX_N + 1)]
    return 100 * _bleu(hypothesis, hyp_grams, clip, [len(ref) for ref in references])


def self_bleu(
    texts: list[list[str]],
    *,
    seed: int = 0,
    label: str = "",
    hypotheses: int = SELF_BLEU_HYPOTHESES,
    references: int = SELF_BLEU_REFERENCES,
    pool: int = SELF_BLEU_POOL,
    seeds: int = SELF_BLEU_SEEDS,
    truncate: int = BLEU_TRUNCATE,
) -> dict:
    """Self-BLEU-4 of a set of tokenised dialogues, 0-100 (lower: less repetition), on a
    protocol whose expected value does not depend on the cell's size.

    Every text is cut to its first ``truncate`` words. A seeded sample of ``pool`` texts is
    drawn (all of them when there are fewer). Each of ``seeds`` seeded draws takes
    ``references`` texts as the references of every hypothesis and, disjoint from them,
    ``hypotheses`` texts as hypotheses (mode ``sampled``, the published protocol); the
    value is the mean over hypotheses, then over draws. A pool with more than
    ``references`` texts but fewer than ``hypotheses + references`` keeps the references
    at ``references`` and takes all the other texts as hypotheses: each hypothesis is
    still scored against ``references`` texts of the same cell, so the value estimates
    the same quantity, with fewer hypotheses (``comparable`` stays True). BLEU grows with
    the number of references, so a cell of at most ``references`` texts, where every
    hypothesis can only be scored against all the other texts of the cell (mode
    ``leave-one-out``), gets a value that is not comparable with other cells or sizes:
    ``comparable`` False and a ``note`` say so. ``label`` enters the seeds (one per cell).
    Returns ``{"value", "n", "hypotheses", "references", "draws", "mode", "comparable"}``
    (and ``note``); value None below two texts.
    """
    n = len(texts)
    out = {"value": None, "n": n, "hypotheses": 0, "references": 0, "draws": 0, "mode": None, "comparable": False}
    if n < 2:
        return out
    cut = [text[:truncate] for text in texts]
    if n > pool:
        cut = _rng(seed, "self-bleu-pool", label).sample(cut, pool)
    size = len(cut)
    grams = [[_ngrams(text, k) for k in range(1, BLEU_MAX_N + 1)] for text in cut]
    lengths = [len(text) for text in cut]
    values = []
    if size > references:
        taken = min(hypotheses, size - references)
        for draw in range(seeds):
            order = _rng(seed, "self-bleu", label, str(draw)).sample(range(size), taken + references)
            hyps, refs = order[:taken], order[taken:]
            limit: list[dict] = [{} for _ in range(BLEU_MAX_N)]
            for r in refs:
                for k in range(BLEU_MAX_N):
                    table = limit[k]
                    for gram, count in grams[r][k].items():
                        if count > table.get(gram, 0):
                            table[gram] = count
            ref_lengths = [lengths[r] for r in refs]

            def clip(k, gram, limit=limit):
                return limit[k - 1].get(gram, 0)

            values.append(sum(_bleu(cut[h], grams[h], clip, ref_lengths) for h in hyps) / len(hyps))
        out.update(hypotheses=taken, references=references, mode="sampled", comparable=True)
        if taken < hypotheses:
            out["note"] = f"{taken} hypotheses (the protocol takes {hypotheses}): same expected value, wider spread"
    else:
        # Leave one out: for each n-gram, the largest count in any text and the runner-up,
        # so the largest count among the texts other than the hypothesis is one look-up.
        top: list[dict] = [{} for _ in range(BLEU_MAX_N)]
        for index in range(size):
            for k in range(BLEU_MAX_N):
                table = top[k]
                for gram, count in grams[index][k].items():
                    best, where, second = table.get(gram, (0, -1, 0))
                    if count > best:
                        table[gram] = (count, index, best)
                    elif count > second:
                        table[gram] = (best, where, count)
        draws = 1 if size <= hypotheses else seeds
        for draw in range(draws):
            hyps = range(size) if size <= hypotheses else _rng(seed, "self-bleu", label, str(draw)).sample(range(size), hypotheses)
            total = 0.0
            for h in hyps:
                def clip(k, gram, h=h):
                    best, where, second = top[k - 1].get(gram, (0, -1, 0))
                    return second if where == h else best

                others = lengths[:h] + lengths[h + 1 :]
                total += _bleu(cut[h], grams[h], clip, others)
            values.append(total / len(hyps))
        out.update(hypotheses=min(size, hypotheses), references=size - 1, mode="leave-one-out")
        out["note"] = (
            f"small cell: {size} dialogues leave {size - 1} references per hypothesis (the protocol scores "
            f"against {references}); BLEU grows with the references, so not comparable with other cells"
        )
    out["value"] = 100 * sum(values) / len(values)
    out["draws"] = len(values)
    return out


# --------------------------------------------------------------------------- Vendi


def _ngram_vector(words: list[str]) -> Counter:
    vector: Counter = Counter()
    for n in VENDI_NGRAMS:
        vector.update(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    return vector


def _kernel(vectors: list[Counter], np):
    """Cosine similarity matrix of sparse count vectors (diagonal 1, also for empty ones), with numpy.

    Only n-grams shared by two or more texts reach the off-diagonal (the others enter the
    norms only). Those found in many texts go through dense matrix products, in blocks of
    columns; the rest, each in a few texts, add their pairwise products directly.
    """
    n = len(vectors)
    norms = [math.sqrt(sum(v * v for v in vec.values())) or 1.0 for vec in vectors]
    postings: dict[str, list[tuple[int, float]]] = {}
    for i, vec in enumerate(vectors):
        for gram, count in vec.items():
            postings.setdefault(gram, []).append((i, count / norms[i]))
    shared = [entries for entries in postings.values() if len(entries) > 1]
    many = max(8, n // 50)
    dense_columns = [entries for entries in shared if len(entries) > many]
    k = np.zeros((n, n))
    block = 1024
    for start in range(0, len(dense_columns), block):
        part = dense_columns[start : start + block]
        dense = np.zeros((n, len(part)))
        for column, entries in enumerate(part):
            rows, values = zip(*entries)
            dense[list(rows), column] = values
        k += dense @ dense.T
    by_size: dict[int, list] = {}
    for entries in shared:
        if len(entries) <= many:
            by_size.setdefault(len(entries), []).append(entries)
    cells, weights = [], []
    for group in by_size.values():
        rows = np.array([[i for i, _ in entries] for entries in group], dtype=np.int64)
        values = np.array([[x for _, x in entries] for entries in group])
        cells.append((rows[:, :, None] * n + rows[:, None, :]).ravel())
        weights.append((values[:, :, None] * values[:, None, :]).ravel())
    if cells:
        k += np.bincount(np.concatenate(cells), weights=np.concatenate(weights), minlength=n * n).reshape(n, n)
    np.fill_diagonal(k, 1.0)
    return k


def _numpy():
    try:
        import numpy
    except ImportError:  # not a dependency of the package: Vendi needs it
        return None
    return numpy


def vendi(texts: list[list[str]], *, seed: int = 0, label: str = "", cap: int = VENDI_MAX) -> dict:
    """Vendi score of a set of tokenised dialogues with an n-gram cosine kernel.

    After Friedman and Dieng (2023, TMLR, "The Vendi Score"): with K the n x n similarity
    matrix (here the cosine of 1-2-gram count vectors, K_ii = 1), the score is the
    exponential of the Shannon entropy of the eigenvalues of K / n: 1 when all texts are
    the same, n when no two share an n-gram. At most ``cap`` texts (a seeded sample).
    The eigenvalues come from numpy (``eigvalsh``); without numpy the value is None, with a
    ``note``.

    The score grows with the number of texts until it nears the set's own diversity (one
    synthetic distribution gave 11.8 at 100 texts, 17.1 at 400, 25.9 at 2,000), so only
    values over the same number of texts compare: the protocol takes ``cap`` texts, and a
    smaller cell is marked ``comparable`` False with a ``note``.
    Returns ``{"value", "n", "kernel", "comparable"}`` (plus ``note``).
    """
    out: dict = {"value": None, "n": 0, "kernel": KERNEL, "comparable": False}
    if not texts:
        return out
    if len(texts) > cap:
        texts = _rng(seed, "vendi", label).sample(texts, cap)
    n = len(texts)
    out["n"] = n
    out["comparable"] = n >= cap
    if n < cap:
        out["note"] = (
            f"small cell: {n} dialogues (the protocol samples {cap}); the score grows with the number "
            "of dialogues, so not comparable with cells of other sizes"
        )
    np = _numpy()
    if np is None:
        out["note"] = "left out: the Vendi score needs numpy (pip install numpy)"
        return out
    vectors = [_ngram_vector(text) for text in texts]
    eigenvalues = [float(x) for x in np.linalg.eigvalsh(_kernel(vectors, np) / n)]
    entropy = -sum(x * math.log(x) for x in eigenvalues if x > 1e-12)
    out["value"] = math.exp(entropy)
    return out


# --------------------------------------------------------------------------- report


def cell_statistics(records: list[dict], *, seed: int = 0, label: str = "") -> dict:
    """MTLD, Self-BLEU-4 and Vendi of one cell of dialogue records, each with its n."""
    texts = [dialogue_tokens(record) for record in records]
    values = [v for v in (mtld(text) for text in texts) if v is not None]
    return {
        "n": len(records),
        "mtld": {"value": sum(values) / len(values) if values else None, "n": len(values)},
        "self_bleu4": self_bleu(texts, seed=seed, label=label),
        "vendi": vendi(texts, seed=seed, label=label),
    }


def settings() -> dict:
    """How the statistics were computed, for the JSON file."""
    return {
        "text": TEXT_NOTE,
        "mtld": {
            "threshold": MTLD_THRESHOLD,
            "direction": "bidirectional: mean of the forward and backward passes",
            "partial_factor": f"(1 - TTR) / (1 - {MTLD_THRESHOLD}) for the run left at the end",
            "unit": "per dialogue, then the mean over the cell (n: dialogues with a defined value)",
        },
        "self_bleu4": {
            "scale": "0-100",
            "weights": [1 / BLEU_MAX_N] * BLEU_MAX_N,
            "brevity_penalty": "closest reference length",
            "smoothing": SMOOTHING,
            "truncate_words": BLEU_TRUNCATE,
            "hypotheses": SELF_BLEU_HYPOTHESES,
            "references": SELF_BLEU_REFERENCES,
            "pool": SELF_BLEU_POOL,
            "seeds": SELF_BLEU_SEEDS,
            "small_cells": "more than `references` dialogues but fewer than hypotheses + references: "
            "the references stay at `references` and every other dialogue is a hypothesis (same expected "
            "value, comparable); at most `references` dialogues: every hypothesis against all the other "
            "dialogues of the cell (leave-one-out), marked comparable: false, as BLEU grows with the "
            "number of references",
        },
        "vendi": {
            "kernel": KERNEL,
            "ngrams": list(VENDI_NGRAMS),
            "weighting": "counts",
            "note": KERNEL_NOTE,
            "max_dialogues": VENDI_MAX,
            "small_cells": f"fewer than {VENDI_MAX} dialogues: all of them, marked comparable: false, as the "
            "score grows with the number of dialogues",
        },
    }


def _generator_of(record: dict) -> str:
    return record.get("generator") or "(none)"


def _style_of(records: list[dict]) -> str | None:
    """The generation style named in the records' ``source`` (``generated:paper``), when
    they all name the same one."""
    styles = {str(r.get("source") or "").partition(":")[2] for r in records}
    if len(styles) != 1:
        return None
    return styles.pop() or None


def quality_report(records: list[dict], *, seed: int = 0, source: str | None = None, style: str | None = None) -> dict:
    """The statistics of a dialogue set: per class, and per generator x class cell.

    Layout (``format`` benevdial-quality/1): ``settings`` (how each statistic was
    computed), ``classes`` {class: cell} (every generator pooled), ``generators``
    {generator spec: {class: cell}}, each cell ``{"n", "mtld", "self_bleu4", "vendi"}``
    with a ``value`` and an ``n`` each, and ``class_means`` {class: each statistic averaged
    over that class's generator cells, the paper's way}.
    """
    report: dict = {
        "format": FORMAT,
        "source": source,
        "style": style if style is not None else _style_of(records),
        "dialogues": len(records),
        "seed": seed,
        "settings": settings(),
        "classes": {},
        "generators": {},
    }
    for cls in CLASSES:
        mine = [r for r in records if r["class"] == cls]
        if mine:
            report["classes"][cls] = cell_statistics(mine, seed=seed, label=cls)
    for generator in sorted({_generator_of(r) for r in records}):
        cells = {}
        for cls in CLASSES:
            mine = [r for r in records if r["class"] == cls and _generator_of(r) == generator]
            if mine:
                cells[cls] = cell_statistics(mine, seed=seed, label=f"{generator}\x1f{cls}")
        report["generators"][generator] = cells
    report["class_means"] = class_means(report["generators"])
    return report


def class_means(generators: dict) -> dict:
    """Per class, each statistic averaged over the generator x class cells (the BenevDial
    paper's class means; ``classes`` pools every generator's dialogues into one cell
    instead). ``cells``: how many cells had a value; ``comparable`` is false when any of
    them was a small cell."""
    out: dict = {}
    for cls in CLASSES:
        cells = [cells[cls] for cells in generators.values() if cls in cells]
        if not cells:
            continue
        entry = {"generators": len(cells)}
        for name in ("mtld", "self_bleu4", "vendi"):
            values = [c[name]["value"] for c in cells if c[name]["value"] is not None]
            entry[name] = {
                "value": sum(values) / len(values) if values else None,
                "cells": len(values),
                "comparable": all(c[name].get("comparable", True) for c in cells if c[name]["value"] is not None),
            }
        out[cls] = entry
    return out


def _number(value, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _small_cell_flag(statistic: dict) -> str:
    """What a statistic's summary says when its cell is too small for the protocol."""
    return "" if statistic.get("comparable") or statistic["value"] is None else ", small cell: not comparable"


def summary_lines(report: dict, prefix: str = "quality") -> list[str]:
    """One line saying how, then one line per class and per generator x class cell."""
    how = (
        f"{prefix}: MTLD (threshold {MTLD_THRESHOLD}, forward/backward mean); Self-BLEU-4 (0-100, "
        f"first {BLEU_TRUNCATE} words, {SELF_BLEU_HYPOTHESES} hypotheses vs {SELF_BLEU_REFERENCES} references "
        f"from a {SELF_BLEU_POOL:,} pool, {SELF_BLEU_SEEDS} seeds, smoothing method1 epsilon {BLEU_EPSILON}); "
        f"Vendi ({KERNEL} kernel on 1-2-gram counts, a stand-in for bert-base [CLS] cosine, over {VENDI_MAX:,} "
        "dialogues a cell); values marked small cell are not comparable across cell sizes"
    )
    lines = [how]

    def line(name: str, cell: dict) -> str:
        bleu = cell["self_bleu4"]
        vendi_cell = cell["vendi"]
        bleu_flag, vendi_flag = _small_cell_flag(bleu), _small_cell_flag(vendi_cell)
        return (
            f"{prefix} {name}: n {cell['n']}; MTLD {_number(cell['mtld']['value'], 1)} (n {cell['mtld']['n']}); "
            f"Self-BLEU-4 {_number(bleu['value'], 2)} ({bleu['hypotheses']} hyp vs "
            f"{bleu['references']} ref, {bleu['mode'] or 'n/a'}{bleu_flag}); "
            f"Vendi {_number(vendi_cell['value'], 2)} (n {vendi_cell['n']}{vendi_flag})"
        )

    for cls, cell in report["classes"].items():
        lines.append(line(f"{cls} (all generators pooled)", cell))
    for cls, mean in (report.get("class_means") or {}).items():
        flag = "" if all(mean[k]["comparable"] for k in ("self_bleu4", "vendi")) else ", a small cell among them"
        lines.append(
            f"{prefix} {cls} (mean of {mean['generators']} generator cell(s), as the paper averages): "
            f"MTLD {_number(mean['mtld']['value'], 1)}; Self-BLEU-4 {_number(mean['self_bleu4']['value'], 2)}; "
            f"Vendi {_number(mean['vendi']['value'], 2)}{flag}"
        )
    for generator, cells in report["generators"].items():
        for cls, cell in cells.items():
            lines.append(line(f"{cls} {generator}", cell))
    return lines


def default_json_path(dialogues: Path) -> Path:
    """``NAME.quality.json`` beside ``NAME.jsonl``."""
    return dialogues.with_name(f"{dialogues.stem if dialogues.suffix == '.jsonl' else dialogues.name}.quality.json")


def write_json(path: Path, report: dict) -> None:
    from ..files import write_atomically

    write_atomically(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")


def quality_of_file(path: str | Path, *, seed: int = 0) -> dict:
    """The report of an existing labelled-dialogue JSONL file (validated by the loader)."""
    from ..benevdial.dialogues import load_dialogues

    return quality_report(load_dialogues(path, "FILE"), seed=seed, source=str(path))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m pytest_socialbias quality``."""
    parser.add_argument("dialogues", type=Path, metavar="FILE.jsonl")
    parser.add_argument("--json", type=Path, metavar="PATH", help="where to write the report (default: FILE.quality.json beside the file)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the Self-BLEU and Vendi samples (default 0)")


def run(args: argparse.Namespace) -> int:
    """Compute, write and summarise a file's statistics; ConfigError on bad input."""
    report = quality_of_file(args.dialogues, seed=args.seed)
    path = args.json or default_json_path(args.dialogues)
    write_json(path, report)
    for text in summary_lines(report):
        print(text, file=sys.stderr)
    print(f"quality: written to {path}", file=sys.stderr)
    return 0
