"""``generate-benevdial --style=paper`` against the loopback fake server: conditions from
the crossed grid, no treatment instruction for N, no number of exchanges asked for (and
dialogues of any length from two exchanges kept), every generator writes every condition,
the paper's decoding settings, and the quality statistics file."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest

from pytest_socialbias import prompts
from pytest_socialbias.__main__ import main
from pytest_socialbias.benevdial.conditions import load_conditions
from pytest_socialbias.research import quality
from pytest_socialbias.research.generate import CLASSES
from pytest_socialbias.research.grid import sample_grid
from pytest_socialbias.testing import FakeServer, Reply

from .test_generate_benevdial import load_lines

CONDITIONS = Path(__file__).resolve().parents[2] / "suites" / "benevdial" / "conditions.yaml"
#: Exchanges the fake generator writes, call after call: the paper style fixes none.
LENGTHS = (2, 3, 5, 9)
PER_CLASS = 4
GENERATORS = ("g1", "g2")
#: Words that would tell the generator the class (or that there is one) in an N prompt.
BIAS_WORDS = ("bias", "fair", "unfair", "treat", "equal", "uniform", "disparate", "research")


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def paper_class_of(prompt: str) -> str:
    extras = prompts.load("benevdial_generate_paper").extras
    found = [cls for cls in ("OB", "BB") if extras[f"class_{cls}"].strip() in prompt]
    assert len(found) <= 1
    return found[0] if found else "N"


class Script:
    """Well-formed dialogues that name the class asked for, the model and their own
    length (2, 3, 5 or 9 exchanges, in turn), with words that vary from call to call so the
    quality statistics have something to measure."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0

    def __call__(self, req):
        with self.lock:
            self.calls += 1
            call = self.calls
        cls = paper_class_of(req.prompt_text)
        exchanges = LENGTHS[call % len(LENGTHS)]
        lines = []
        for i in range(exchanges):
            lines.append(f"User: question {i + 1} about plan {call} and the plan again")
            lines.append(f"Agent: answer {i + 1} [{cls}] by {req.model} <{exchanges}>, step {call * 7 + i} of the plan")
        return Reply("\n".join(lines))


def argv(tmp_path, server, *extra, models=GENERATORS, style="paper"):
    out = [
        "generate-benevdial", "--conditions", str(CONDITIONS), "--out", str(tmp_path / "out.jsonl"),
        "--cache-dir", str(tmp_path / "cache"), "--per-class", str(PER_CLASS), "--seed", "3", "--style", style,
    ]
    for model in models:
        out += ["--generator", f"openai:{model}@{server.openai_base_url}?max_retries=0"]
    return out + list(extra)


def test_paper_style_full_crossing_no_n_instruction_paper_decoding_and_quality(tmp_path, capsys):
    conditions = load_conditions(CONDITIONS)
    picked = sample_grid(conditions, PER_CLASS, 3)
    with FakeServer(Script()) as server:
        assert main(argv(tmp_path, server)) == 0
        requests = list(server.requests)
    err = capsys.readouterr().err

    # Every generator got every condition in every class: 4 conditions x 3 classes = 12
    # requests each, 24 in all; per generator 4 of each class.
    assert len(requests) == PER_CLASS * len(CLASSES) * len(GENERATORS) == 24
    assert Counter(req.model for req in requests) == {"g1": 12, "g2": 12}
    asked = Counter((req.model, paper_class_of(req.prompt_text)) for req in requests)
    assert asked == {(g, cls): PER_CLASS for g in GENERATORS for cls in CLASSES}
    for g in GENERATORS:  # ... and each condition (by its profile text) once per class
        for condition in picked:
            profile = conditions.profile_text(condition.profile)
            mine = [r for r in requests if r.model == g and profile in r.prompt_text]
            assert sorted(paper_class_of(r.prompt_text) for r in mine) == sorted(CLASSES)
    # The grid's conditions: each is written with its own persona (the ids name it) and
    # its role's user label; no prompt asks for a number of exchanges.
    assert all(re.fullmatch(r"(wellbeing|lifestyle)(-[a-z-]+)+-p\d+", c.id) for c in picked)
    for req in requests:
        text = " ".join(req.prompt_text.split())
        assert not re.search(r"\b(exactly|\d+) (exchanges|turns)\b", text, re.I), text
        assert ("a client who has come for help" in text) or ("a user who has come for help" in text)

    # N prompts: roles and demographics only, no word about treatment or bias.
    ours = prompts.load("benevdial_generate").extras
    paper = prompts.load("benevdial_generate_paper").extras
    n_prompts = [r.prompt_text for r in requests if paper_class_of(r.prompt_text) == "N"]
    assert len(n_prompts) == 8
    for text in n_prompts:
        assert not any(ours[f"class_{cls}"].strip() in text for cls in CLASSES)
        assert not any(paper[f"class_{cls}"].strip() in text for cls in ("OB", "BB"))
        assert "How the agent treats" not in text
        lowered = text.lower()
        assert not [word for word in BIAS_WORDS if word in lowered], text
        assert "The user, a " in text and "The agent: a " in text
    for req in requests:
        if paper_class_of(req.prompt_text) != "N":
            assert "How the agent treats this user" in req.prompt_text

    # The paper's decoding settings on the wire.
    for req in requests:
        assert req.params["temperature"] == 0.6 and req.params["top_p"] == 0.9 and req.params["max_tokens"] == 2000  # the paper's budget

    # The written set: 24 dialogues with unique ids (one per generator), style in source.
    lines = load_lines(tmp_path / "out.jsonl", style="paper")
    assert len(lines) == 24
    assert Counter(d["id"].rsplit("-", 1)[1] for d in lines) == {"g1": 12, "g2": 12}
    for d in lines:
        model = d["generator"].split("@")[0].split(":")[1]
        assert d["id"].endswith(f"-g{GENERATORS.index(model) + 1}")
        assert f"[{d['class']}] by {model}" in d["turns"][1]["text"]
        # Whatever length the generator chose, the whole dialogue was kept.
        written = int(re.search(r"<(\d+)>", d["turns"][1]["text"]).group(1))
        assert len(d["turns"]) == 2 * written
    assert {len(d["turns"]) // 2 for d in lines} == set(LENGTHS)
    assert "generate-benevdial: exchanges per dialogue: 2 to 9, mean 4.8 (by class: " in err
    summary = err.strip().splitlines()[-1]
    assert "wrote 24 dialogues" in summary and "(N 8, OB 8, BB 8) in paper style" in summary

    # The quality file: per class and per generator x class, each with its n.
    report = json.loads((tmp_path / "out.quality.json").read_text())
    assert report["format"] == "benevdial-quality/1" and report["style"] == "paper" and report["dialogues"] == 24
    assert report["source"] == str(tmp_path / "out.jsonl") and report["seed"] == 3
    assert {cls: cell["n"] for cls, cell in report["classes"].items()} == {"N": 8, "OB": 8, "BB": 8}
    specs = {d["generator"] for d in lines}
    assert set(report["generators"]) == specs
    for cells in report["generators"].values():
        assert set(cells) == set(CLASSES)
        for cell in cells.values():
            assert cell["n"] == 4
            assert cell["mtld"]["n"] == 4 and cell["mtld"]["value"] > 0
            assert cell["self_bleu4"]["n"] == 4 and 0 < cell["self_bleu4"]["value"] < 100
            assert cell["vendi"]["n"] == 4 and 1 < cell["vendi"]["value"] <= 4
    assert report["settings"]["vendi"]["kernel"] == "ngram-cosine"
    quality_lines = [line for line in err.splitlines() if line.startswith("generate-benevdial: quality")]
    assert "stand-in" in quality_lines[0] and "method1" in quality_lines[0]
    assert len(quality_lines) == 1 + 3 + 3 + 3 * 2 + 1  # how, classes pooled, class means, cells, where

    # The same statistics from the file, with the same seed.
    assert quality.quality_of_file(tmp_path / "out.jsonl", seed=3)["generators"] == report["generators"]


def test_explicit_decoding_flags_win_and_styles_do_not_share_cache_entries(tmp_path, capsys):
    quality_path = tmp_path / "stats.json"
    with FakeServer(Script()) as server:
        assert main(argv(tmp_path, server, models=("g1",), style="ours")) == 0
        server.clear()
        assert main(argv(tmp_path, server, "--temperature", "0.2", "--quality-json", str(quality_path), models=("g1",))) == 0
        requests = list(server.requests)
    capsys.readouterr()
    # A different prompt template: nothing replays from the ours-style run.
    assert len(requests) == PER_CLASS * len(CLASSES)
    assert all(r.params["temperature"] == 0.2 and r.params["top_p"] == 0.9 for r in requests)
    lines = load_lines(tmp_path / "out.jsonl", style="paper")
    # With one generator the ids carry no generator suffix.
    assert all(d["id"] == f"{d['class'].lower()}-{d['id'].split('-', 1)[1]}" and not d["id"].endswith("-g1") for d in lines)
    assert json.loads(quality_path.read_text())["style"] == "paper"


def test_no_quality_writes_no_statistics(tmp_path, capsys):
    with FakeServer(Script()) as server:
        assert main(argv(tmp_path, server, "--no-quality", models=("g1",))) == 0
    err = capsys.readouterr().err
    assert not (tmp_path / "out.quality.json").exists() and "generate-benevdial: quality" not in err


def test_quality_json_usage_errors(tmp_path, capsys):
    base = ["generate-benevdial", "--conditions", str(CONDITIONS), "--out", str(tmp_path / "out.jsonl"),
            "--generator", "openai:g@http://127.0.0.1:9/v1"]
    assert main(base + ["--quality-json", str(tmp_path / "nope" / "q.json")]) == 2
    assert main(base + ["--quality-json", str(tmp_path / "out.jsonl")]) == 2
    assert main(base + ["--style", "other"]) == 2
    err = capsys.readouterr().err
    assert "the folder" in err and "is the --out file" in err and "invalid choice: 'other'" in err


def test_the_paper_style_prompt_sets_no_length_rule_for_agent_turns():
    """The paper's generation prompt has no rule on the agent's turn length (its markers
    measure it), so the paper-style prompt sets none."""
    from pytest_socialbias import prompts

    paper = prompts.load("benevdial_generate_paper")
    assert paper.id == "benevdial_generate_paper@3"
    assert "sentences" not in paper.system.lower()
    # ... nor on the number of exchanges: that is the generator's choice.
    assert "$turns" not in paper.system + paper.user and "exactly" not in (paper.system + paper.user).lower()


def test_a_dry_run_says_the_dataset_size_and_cost_and_calls_nothing(tmp_path, monkeypatch, capsys):
    from pytest_socialbias.__main__ import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    conditions = Path(__file__).resolve().parents[2] / "suites" / "benevdial" / "conditions.yaml"
    out = tmp_path / "gen.jsonl"
    args = ["generate-benevdial", "--generator", "openai:g1@http://127.0.0.1:9/v1", "--generator", "anthropic:g2",
            "--per-class", "10", "--out", str(out), "--conditions", str(conditions), "--dry-run"]
    assert main(args + ["--style", "paper"]) == 0
    err = capsys.readouterr().err
    assert ("dry run (paper style): grid 40,320 condition(s) per class (2 roles x 315 profiles x 64 personas) "
            "x 2 generators = 80,640 dialogues per class, 241,920 in all; sample 10 condition(s) per class "
            "(0.0248% of the grid) x 2 generators = 20 dialogue(s) per class, 60 in all; "
            "calls per generator g1: 30, g2: 30;") in err
    assert "at most 120,000 completion tokens (2000 a dialogue); nothing called, nothing written" in err
    assert main(args) == 0  # ours: the generators share the work
    assert "10 condition(s) x 3 classes = 30 dialogue(s), 10 per class; calls per generator g1: 15, g2: 15;" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / ".socialbias").exists()
