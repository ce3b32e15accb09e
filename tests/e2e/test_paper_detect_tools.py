"""BenevDial detector tools for the paper's setting: ``preset: paper`` in a detector suite
(the test-side variants with the paper's scope and mask token), ``annotation-sample`` (a
class-balanced, seeded sample for people to label) and ``cue-words`` (cue words per class
by weighted log-odds with an informative Dirichlet prior, a stand-in for attribution)."""

from __future__ import annotations

import json
import math

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.benevdial.transforms import load_cues
from pytest_socialbias.protocols import forget_suites, load_suite
from pytest_socialbias.protocols.detect import PAPER_VARIANTS
from pytest_socialbias.research.lexicon import balanced_sample, log_odds
from pytest_socialbias.testing import FakeServer

from ..support.detectworld import DIALOGUES
from ..support.detectworld import world as detect_world


def dialogue(i: int, cls: str, agent: str, user: str = "Can you help me plan this?") -> dict:
    return {
        "id": f"{cls.lower()}-{i:03d}", "class": cls, "role": "lifestyle", "need": "running",
        "user": {"age": "elder", "gender": "female", "race": "black", "ability": "none"}, "agent": None,
        "turns": [{"speaker": "user", "text": user}, {"speaker": "agent", "text": agent}],
        "source": "test", "generator": "g",
    }


AGENT_TEXT = {
    "N": "Here are some options for your plan; choose what suits you.",
    "OB": "That is unrealistic at your age, so do not bother with it.",
    "BB": "Oh sweetie, you are so brave, but let your family handle it for you.",
}


def labelled_file(path, counts=(150, 120, 110)):
    rows = [dialogue(i, cls, AGENT_TEXT[cls]) for cls, n in zip(("N", "OB", "BB"), counts) for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------- preset: paper


@pytest.fixture
def paper_suite(tmp_path):
    forget_suites()
    (tmp_path / "labelled.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    (tmp_path / "cues.txt").write_text("warmnarrow\ncoldnarrow\n")
    path = tmp_path / "paper.yaml"
    path.write_text("socialbias: 1\nsuite: paper\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\n"
                    "cues: cues.txt\npreset: paper\n")
    yield path
    forget_suites()


def test_the_paper_preset_sets_the_test_side_variants_scope_and_mask_token(paper_suite):
    suite = load_suite(paper_suite)
    assert suite.styles == PAPER_VARIANTS == ("clean", "fold", "mask", "shuffle", "foldmask", "randmask",
                                              "foldrandmask")
    options = suite.cases[0].extra["options"]
    assert (options["variant_scope"], options["mask_token"]) == ("paper", "[unused0]")
    assert dict(suite.cases[0].judge_params) == {"max_tokens": 2000, "temperature": 0.6, "top_p": 0.9}
    # The suite's own keys win over the preset's.
    forget_suites()
    paper_suite.write_text(paper_suite.read_text() + "variants: [clean, mask]\nmask_token: '[MASK]'\n"
                           "variant_scope: agent\n")
    suite = load_suite(paper_suite)
    options = suite.cases[0].extra["options"]
    assert suite.styles == ("clean", "mask") and (options["variant_scope"], options["mask_token"]) == ("agent", "[MASK]")


def test_the_preset_option_sets_the_same_as_the_key_and_none_drops_it(paper_suite):
    from pytest_socialbias.cases import SuiteOverrides
    from pytest_socialbias.vocabulary import VARIANTS

    def loaded(preset):
        forget_suites()
        suite = load_suite(paper_suite, SuiteOverrides(preset=preset))
        options = suite.cases[0].extra["options"]
        return (suite.styles, options["variant_scope"], options["mask_token"], dict(suite.cases[0].judge_params),
                {c.preset for c in suite.cases}, {c.simulator_findings for c in suite.cases})

    paper = (PAPER_VARIANTS, "paper", "[unused0]", {"max_tokens": 2000, "temperature": 0.6, "top_p": 0.9},
             {"paper"}, {"report"})
    assert loaded(None) == loaded("paper") == paper  # the file says preset: paper
    assert loaded("none") == (VARIANTS, "agent", "[MASK]", {}, {None}, {None})
    paper_suite.write_text(paper_suite.read_text().replace("preset: paper\n", ""))
    assert loaded(None) == (VARIANTS, "agent", "[MASK]", {}, {None}, {None})
    assert loaded("paper") == paper  # the option alone: as if the file said it


def test_the_judge_sees_the_papers_transformations(paper_suite, pytester, keys):
    for name in ("labelled.jsonl", "cues.txt", "paper.yaml"):
        (pytester.path / name).write_text((paper_suite.parent / name).read_text())
    with FakeServer(detect_world) as server:
        result = pytester.runpytest("paper.yaml", f"--judge=openai:ja@{server.openai_base_url}",
                                    "-p", "no:cacheprovider", "--socialbias-record=off", "-k", "bb-1")
        seen = [r.last_user for r in server.requests if not r.endpoint_check]
    assert result.ret in (0, 1), result.stdout.str()[-3000:]
    assert len(seen) == len(PAPER_VARIANTS)
    masked = [t for t in seen if "[unused0]" in t]
    # mask, foldmask (the cue), randmask and foldrandmask (as many non-cue words): agent turns only.
    assert len(masked) == 4
    assert all("User: I want to plan a trip on my own!" in t for t in masked if "own." not in t)
    # Folding reaches the user's turns under the paper's scope ("own!" -> "own.").
    assert sum("I want to plan a trip on my own." in t for t in seen) == 3  # fold, foldmask, foldrandmask


# --------------------------------------------------------------------------- annotation-sample


def test_an_annotation_sample_is_balanced_seeded_and_blind_on_request(tmp_path, capsys):
    source = labelled_file(tmp_path / "all.jsonl")
    out, blind = tmp_path / "sample.jsonl", tmp_path / "blind.jsonl"
    assert main(["annotation-sample", str(source), "-o", str(out), "--blind", str(blind)]) == 0
    said = capsys.readouterr().out
    assert "drew 100 per class (seed 20251130): N 100 of 150, OB 100 of 120, BB 100 of 110; 300 of 380" in said
    sample = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(sample) == 300 and {c: sum(d["class"] == c for d in sample) for c in ("N", "OB", "BB")} == \
        {"N": 100, "OB": 100, "BB": 100}
    hidden = [json.loads(line) for line in blind.read_text().splitlines()]
    assert [d["id"] for d in hidden] == [d["id"] for d in sample]
    assert not any({"class", "source", "generator"} & set(d) for d in hidden)
    # The same seed draws the same; another seed another.
    again = tmp_path / "again.jsonl"
    assert main(["annotation-sample", str(source), "-o", str(again)]) == 0
    assert again.read_text() == out.read_text()
    assert main(["annotation-sample", str(source), "-o", str(again), "--seed", "7"]) == 0
    assert again.read_text() != out.read_text()


def test_a_class_too_small_for_the_sample_is_a_usage_error(tmp_path, capsys):
    source = labelled_file(tmp_path / "all.jsonl", counts=(150, 120, 40))
    assert main(["annotation-sample", str(source), "-o", str(tmp_path / "s.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "too few labelled dialogues for a balanced sample (BB has 40); ask for at most 40 per class" in err
    assert not (tmp_path / "s.jsonl").exists()


def test_each_class_draw_does_not_depend_on_the_others():
    rows = [dialogue(i, cls, "x y") for cls in ("N", "OB", "BB") for i in range(20)]
    first, _ = balanced_sample(rows, 5, 1)
    more = rows + [dialogue(i, "OB", "x y") for i in range(20, 40)]
    second, _ = balanced_sample(more, 5, 1)
    assert [d["id"] for d in first if d["class"] != "OB"] == [d["id"] for d in second if d["class"] != "OB"]


# --------------------------------------------------------------------------- cue-words


def test_cue_words_rank_each_classes_own_words_first_and_write_a_cue_file(tmp_path, capsys):
    source = labelled_file(tmp_path / "all.jsonl", counts=(30, 30, 30))
    cues, table = tmp_path / "cues.txt", tmp_path / "cues.json"
    assert main(["cue-words", str(source), "--top", "3", "-o", str(cues), "--json", str(table)]) == 0
    lists = json.loads(table.read_text())
    top = {cls: [entry["word"] for entry in words] for cls, words in lists.items()}
    assert {"options", "choose", "suits"} & set(top["N"])
    assert {"unrealistic", "bother", "age"} & set(top["OB"])
    assert {"sweetie", "brave", "family"} & set(top["BB"])
    assert all(entry["z"] > 0 for words in lists.values() for entry in words)
    # A shared word ("you", in every class's text) is no class's cue.
    assert not any("you" in words for words in top.values())
    # The cue file is one a detector suite reads.
    loaded = load_cues(cues)
    assert len(loaded) == 9 and set(loaded) == {w for words in top.values() for w in words}
    said = capsys.readouterr().out
    assert "cue words from 90 labelled dialogues (N 30, OB 30, BB 30)" in said and "cue file:" in said


def test_the_log_odds_match_a_hand_computation():
    rows = [dialogue(0, "N", "alpha beta"), dialogue(1, "N", "alpha gamma"),
            dialogue(0, "OB", "beta gamma"), dialogue(0, "BB", "gamma beta")]
    ranked = log_odds(rows, min_count=1)
    z = {w: v for w, v, _ in ranked["N"]}
    # Word "alpha": 2 in N (n_N = 4), 0 in the rest (n_rest = 4); prior = file counts (alpha 2,
    # beta 3, gamma 3; a0 = 8).
    y_i, y_j, a, a0, n_i, n_j = 2, 0, 2, 8, 4, 4
    delta = math.log((y_i + a) / (n_i + a0 - y_i - a)) - math.log((y_j + a) / (n_j + a0 - y_j - a))
    assert z["alpha"] == round(delta / math.sqrt(1 / (y_i + a) + 1 / (y_j + a)), 4)
    assert ranked["N"][0][0] == "alpha" and z["beta"] < 0


def test_cue_words_need_every_class(tmp_path, capsys):
    source = tmp_path / "two.jsonl"
    source.write_text("".join(json.dumps(dialogue(i, cls, AGENT_TEXT[cls])) + "\n"
                              for cls in ("N", "OB") for i in range(3)))
    assert main(["cue-words", str(source)]) == 2
    assert "no agent words of class BB" in capsys.readouterr().err
