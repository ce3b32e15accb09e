"""Dataset quality statistics (pytest_socialbias/research/quality.py) against values worked
out by hand on tiny inputs."""

from __future__ import annotations

import json
import math
import random

import pytest

from pytest_socialbias.research import quality
from pytest_socialbias.research.quality import bleu, mtld, self_bleu, tokens, vendi

W = str.split


def test_tokens_are_lowercased_words_without_punctuation():
    assert tokens("Don't STOP, it's 5pm!  Well -- ok_then?") == ["don't", "stop", "it's", "5pm", "well", "ok", "then"]


def test_dialogue_text_is_all_turns_without_labels():
    record = {"turns": [{"speaker": "user", "text": "Hi, there."}, {"speaker": "agent", "text": "Hello!"}]}
    assert quality.dialogue_tokens(record) == ["hi", "there", "hello"]


# --------------------------------------------------------------------------- MTLD


def test_mtld_hand_worked_with_partial_factors():
    # Forward: "a" TTR 1, "a a" 1/2 <= 0.72: one factor, restart; "b c d e" ends at TTR 1,
    # a partial factor of 0; 6 tokens / 1 factor = 6.
    # Backward: "e d c b a" all new (TTR 1), then "a" makes 5/6; the run left has TTR 5/6,
    # a partial factor (1 - 5/6) / (1 - 0.72) = 0.595238; 6 / 0.595238 = 10.08.
    # Mean of the passes: (6 + 10.08) / 2 = 8.04.
    assert mtld(W("a a b c d e")) == pytest.approx(8.04)
    # "a b c a": one run with TTR 3/4 both ways, factor 0.25 / 0.28; 4 / that = 4.48.
    assert mtld(W("a b c a")) == pytest.approx(4.48)
    # "a b a" reaches 2/3 twice per pass, nothing left over: 8 tokens / 2 factors.
    assert mtld(W("a b a b a b a b")) == pytest.approx(4.0)


def test_mtld_is_undefined_without_a_factor():
    assert mtld(W("every word here is new")) is None
    assert mtld([]) is None


# --------------------------------------------------------------------------- BLEU


def test_bleu_hand_worked():
    # Clipped matches: 1-grams 5/6, 2-grams 3/5 (the cat, on the, the mat), 3-grams 1/4
    # (on the mat), 4-grams 0/3 -> smoothed 0.1/3; equal lengths, no brevity penalty.
    # (5/6 * 3/5 * 1/4 * 1/30) ** (1/4) = 240 ** -0.25 = 0.254066.
    assert bleu(W("the cat sat on the mat"), [W("the cat is on the mat")]) == pytest.approx(25.4066, abs=1e-4)


def test_bleu_brevity_penalty_and_short_hypotheses():
    # 1- and 2-grams all match; no 3- or 4-grams in a 2-word hypothesis: 0/1 -> 0.1 each.
    # (1 * 1 * 0.1 * 0.1) ** (1/4) = 0.316228; brevity penalty exp(1 - 4/2) = 0.367879.
    assert bleu(W("the cat"), [W("the cat sat on")]) == pytest.approx(100 * math.sqrt(0.1) * math.exp(-1))
    # The closest reference length decides the penalty: 2 against [2, 4] is no penalty.
    assert bleu(W("the cat"), [W("the cat sat on"), W("a dog")]) == pytest.approx(100 * math.sqrt(0.1))


def test_bleu_identical_is_100_and_no_unigram_match_is_0():
    assert bleu(W("one two three four five"), [W("one two three four five")]) == pytest.approx(100)
    assert bleu(W("one two three four"), [W("five six seven eight")]) == 0.0


def test_self_bleu_of_identical_texts_is_100():
    result = self_bleu([W("we can talk about your plan today")] * 3)
    assert result["value"] == pytest.approx(100)
    assert (result["n"], result["hypotheses"], result["references"], result["mode"]) == (3, 3, 2, "leave-one-out")
    assert result["comparable"] is False and "not comparable" in result["note"]


def test_self_bleu_small_cell_is_leave_one_out():
    # Each text against the other: 25.4066 both ways (the matches are symmetric here).
    result = self_bleu([W("the cat sat on the mat"), W("the cat is on the mat")])
    assert result["value"] == pytest.approx(100 * 240**-0.25)
    assert result["draws"] == 1
    assert self_bleu([W("alone here")])["value"] is None


def test_self_bleu_sampled_draws_are_seeded():
    rng = random.Random(5)
    texts = [[rng.choice("abcdefgh") for _ in range(30)] for _ in range(12)]
    first = self_bleu(texts, seed=1, hypotheses=3, references=4, seeds=5)
    assert first["mode"] == "sampled" and first["draws"] == 5 and (first["hypotheses"], first["references"]) == (3, 4)
    assert self_bleu(texts, seed=1, hypotheses=3, references=4, seeds=5) == first
    assert self_bleu([W("a b c d e")] * 8, hypotheses=3, references=4)["value"] == pytest.approx(100)


def _synthetic_dialogues(count: int, seed: int) -> list[list[str]]:
    """Texts of 100-220 words from one distribution: common words and a long tail."""
    rng = random.Random(seed)
    common = "the a you can and to of it is we".split()
    return [
        [rng.choice(common) if rng.random() < 0.4 else f"w{min(399, int(rng.expovariate(1 / 60)))}"
         for _ in range(rng.randint(100, 220))]
        for _ in range(count)
    ]


def test_self_bleu_does_not_depend_on_the_cells_size():
    """Cells drawn from one distribution score the same whatever their size: BLEU grows
    with the number of references, and cells of 101-399 dialogues used to be scored
    leave-one-out against all the others (16.4 at 399 dialogues, then 9.1 at 400 when the
    sampled protocol took over); now every cell above 100 dialogues scores against 100."""
    texts = _synthetic_dialogues(1000, seed=1)
    values = {n: self_bleu(texts[:n], seed=0) for n in (150, 250, 399, 400, 1000)}
    assert all(v["comparable"] and v["references"] == 100 and v["mode"] == "sampled" for v in values.values())
    assert {n: v["hypotheses"] for n, v in values.items()} == {150: 50, 250: 150, 399: 299, 400: 300, 1000: 300}
    assert "50 hypotheses" in values[150]["note"] and "note" not in values[400]
    numbers = [v["value"] for v in values.values()]
    assert max(numbers) - min(numbers) < 1.0, values
    # At most 100 dialogues there are not 100 references besides the hypothesis: the value
    # is given, marked as not comparable.
    small = self_bleu(texts[:40], seed=0)
    assert small["mode"] == "leave-one-out" and small["references"] == 39 and small["comparable"] is False
    assert small["value"] < min(numbers) - 1  # 7.4 against 9.0-9.2


def test_vendi_marks_cells_smaller_than_the_protocol():
    texts = _synthetic_dialogues(60, seed=2)
    small, full = vendi(texts), vendi(texts, cap=50)
    assert small["comparable"] is False and "60 dialogues (the protocol samples 5000)" in small["note"]
    assert full["comparable"] is True and full["n"] == 50 and "note" not in full
    # Why: the score grows with the number of dialogues of one distribution.
    assert vendi(texts[:20])["value"] < vendi(texts[:40])["value"] < small["value"]


def test_self_bleu_reads_only_the_first_200_words():
    head = [f"w{i}" for i in range(200)]
    result = self_bleu([head + ["x"] * 50, head + ["y"] * 80])
    assert result["value"] == pytest.approx(100)


# --------------------------------------------------------------------------- Vendi

def test_vendi_identical_is_1_and_disjoint_is_n():
    assert vendi([W("same words here")] * 5)["value"] == pytest.approx(1)
    result = vendi([W("alpha"), W("beta gamma"), W("delta"), W("epsilon zeta eta")])
    assert result["value"] == pytest.approx(4) and result["n"] == 4 and result["kernel"] == "ngram-cosine"


def test_vendi_hand_worked_pair():
    # "a b" -> {a, b, "a b"}, "a c" -> {a, c, "a c"}: cosine 1/3. K/2 has eigenvalues
    # 2/3 and 1/3; exp(-(2/3 ln 2/3 + 1/3 ln 1/3)) = 3 / 2^(2/3) = 1.889882.
    assert vendi([W("a b"), W("a c")])["value"] == pytest.approx(1.889882, abs=1e-6)


def test_the_kernel_is_the_cosine_of_the_ngram_counts_and_the_sample_is_capped():
    # 30 texts over 10 letters: n-grams in many texts go through the dense products, the
    # rest through the pairwise sums; both must give the plain cosine.
    import numpy

    rng = random.Random(2)
    texts = [[rng.choice("abcdefghij") for _ in range(rng.randint(3, 25))] for _ in range(30)] + [[]]
    vectors = [quality._ngram_vector(text) for text in texts]

    def cosine(a, b):
        norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
        return sum(a[g] * b[g] for g in a) / norm if norm else 0.0

    kernel = quality._kernel(vectors, numpy)
    for i, a in enumerate(vectors):
        for j, b in enumerate(vectors):
            assert kernel[i, j] == pytest.approx(1.0 if i == j else cosine(a, b), abs=1e-12), (i, j)
    eigenvalues = numpy.linalg.eigvalsh(numpy.array(kernel) / len(texts))
    entropy = -sum(x * math.log(x) for x in eigenvalues if x > 1e-12)
    assert vendi(texts)["value"] == pytest.approx(math.exp(entropy), rel=1e-12)
    capped = vendi(texts, cap=10, seed=4)
    assert capped["n"] == 10 and capped == vendi(texts, cap=10, seed=4)


def test_vendi_without_numpy_is_left_out_with_the_reason(monkeypatch):
    monkeypatch.setattr(quality, "_numpy", lambda: None)
    result = vendi([W("a"), W("b"), W("c")])
    assert result["value"] is None and result["n"] == 3 and "needs numpy" in result["note"]


# --------------------------------------------------------------------------- the report


def record(id_, cls, generator, text):
    return {
        "id": id_, "class": cls, "role": "wellbeing", "need": None,
        "user": {"age": "30", "gender": "woman", "race": "white", "ability": "none"}, "agent": None,
        "turns": [{"speaker": "user", "text": "hello there"}, {"speaker": "agent", "text": text}],
        "source": "generated:paper", "generator": generator,
    }


RECORDS = [
    record("n-1", "N", "g1", "we can look at every option together"),
    record("n-2", "N", "g2", "here are all the options you asked about"),
    record("ob-1", "OB", "g1", "people like you should not try this"),
    record("ob-2", "OB", "g1", "leave that to someone younger leave that to them"),
    record("bb-1", "BB", "g2", "oh dear let us keep it small and safe for you"),
]


def test_report_layout_per_class_and_per_generator_cell():
    report = quality.quality_report(RECORDS, seed=7, source="x.jsonl")
    assert report["format"] == "benevdial-quality/1" and report["style"] == "paper" and report["dialogues"] == 5
    assert report["settings"]["vendi"]["kernel"] == "ngram-cosine" and "stand-in" in report["settings"]["vendi"]["note"]
    assert "method1" in report["settings"]["self_bleu4"]["smoothing"]
    assert {cls: cell["n"] for cls, cell in report["classes"].items()} == {"N": 2, "OB": 2, "BB": 1}
    assert {g: {cls: cell["n"] for cls, cell in cells.items()} for g, cells in report["generators"].items()} == {
        "g1": {"N": 1, "OB": 2}, "g2": {"N": 1, "BB": 1},
    }
    cell = report["classes"]["OB"]
    assert set(cell) == {"n", "mtld", "self_bleu4", "vendi"}
    assert cell["vendi"]["n"] == 2 and cell["self_bleu4"]["n"] == 2
    # ob-1 repeats no word, so its MTLD is undefined and left out of the mean.
    assert cell["mtld"]["n"] == 1 and cell["mtld"]["value"] == pytest.approx(mtld(quality.dialogue_tokens(RECORDS[3])))
    assert report["generators"]["g2"]["BB"]["self_bleu4"]["value"] is None  # one dialogue
    lines = quality.summary_lines(report)
    assert lines[0].startswith("quality: MTLD (threshold 0.72") and "stand-in" in lines[0]
    assert any(line.startswith("quality OB g1: n 2;") for line in lines)
    assert "300 hypotheses vs 100 references from a 2,000 pool, 5 seeds" in lines[0] and "over 5,000" in lines[0]
    assert all("small cell: not comparable" in line for line in lines[1:]
               if "Self-BLEU-4 n/a" not in line and "generator cell(s)" not in line)
    # The paper's class means: each statistic averaged over the class's generator cells.
    means = report["class_means"]
    assert {cls: m["generators"] for cls, m in means.items()} == {"N": 2, "OB": 1, "BB": 1}
    n_cells = [report["generators"][g]["N"]["vendi"]["value"] for g in ("g1", "g2")]
    assert means["N"]["vendi"]["value"] == pytest.approx(sum(n_cells) / 2)
    assert means["N"]["vendi"]["comparable"] is False  # small cells
    assert any(line.startswith("quality N (mean of 2 generator cell(s), as the paper averages): MTLD") for line in lines)
    assert any(line.startswith("quality N (all generators pooled): n 2;") for line in lines)
    json.dumps(report)  # plain JSON


def test_the_quality_subcommand_on_a_file(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    done = subprocess.run([sys.executable, "-m", "pytest_socialbias", "quality", str(path), "--seed", "7"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "set.quality.json").read_text())
    assert written == json.loads(json.dumps(quality.quality_report(RECORDS, seed=7, source=str(path))))
    assert "quality: written to" in done.stderr
    missing = subprocess.run([sys.executable, "-m", "pytest_socialbias", "quality", str(tmp_path / "no.jsonl")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no.jsonl: file not found" in missing.stderr
