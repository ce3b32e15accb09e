"""The crossed BenevDial grid (research/grid.py) and ``generate-benevdial --style=paper``
on it: grid sizes counted by hand from a small conditions file, the class-balanced sampler
(balance, determinism under two seeds, nesting), the dry run's grid and sample sizes,
dialogues of any length accepted, and ``--prompts DIR`` read, checked and recorded."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest

from pytest_socialbias import prompts
from pytest_socialbias.__main__ import main
from pytest_socialbias.benevdial.conditions import load_conditions
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.research.generate import CLASSES, job_count, resolve_per_class
from pytest_socialbias.research.grid import grid_shape, grid_size, sample_grid, sample_indices
from pytest_socialbias.testing import FakeServer, Reply

from ..e2e.test_generate_benevdial import load_lines

SHIPPED = Path(__file__).resolve().parents[2] / "suites" / "benevdial" / "conditions.yaml"

#: Two roles (2 and 3 needs); 2 x 2 x 2 x 2 = 16 user profiles; agent personas age x
#: gender = 4, plus the unspecified one = 5. Grid per class: 2 x 16 x 5 = 160.
SMALL = """\
socialbias_conditions: 1
roles:
  - id: coach
    title: "study skills coach"
    user_label: student
    agent_prompt: |
      You are a study skills coach.
      $persona_line
    needs:
      - {id: exams, request: "My exams start soon.", follow_ups: ["Where do I begin?"]}
      - {id: focus, request: "I lose focus quickly.", follow_ups: ["What first?"]}
  - id: trainer
    title: "fitness trainer"
    user_label: client
    agent_prompt: |
      You are a fitness trainer.
      $persona_line
    needs:
      - {id: run, request: "I want to run a 10k.", follow_ups: ["How often?"]}
      - {id: swim, request: "I want to swim again.", follow_ups: ["Where?"]}
      - {id: lift, request: "I want to get stronger.", follow_ups: ["How heavy?"]}
user_axes:
  age:
    - {id: young, label: "young", years: [19, 25]}
    - {id: elder, label: "older", years: [66, 75]}
  gender:
    - {id: male, label: "man", pronouns: "he/him", names: [Daniel, Omar]}
    - {id: female, label: "woman", pronouns: "she/her", names: [Sarah, Amina, Lea]}
  race:
    - {id: white, label: "White"}
    - {id: black, label: "Black"}
  ability:
    - {id: none, label: "no disability stated", statement: ""}
    - {id: deaf, label: "deaf", statement: "I'm deaf"}
agent_axes: [age, gender]
agent_unspecified: true
"""


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL, encoding="utf-8")
    return path


def variant(path: Path, old: str, new: str, name: str) -> Path:
    text = path.read_text(encoding="utf-8")
    assert old in text
    out = path.with_name(name)
    out.write_text(text.replace(old, new), encoding="utf-8")
    return out


# --------------------------------------------------------------------------- the grid


def test_the_grid_size_follows_the_conditions_file(small):
    c = load_conditions(small)
    assert grid_shape(c).describe() == "2 roles x 16 profiles x 5 personas"
    assert grid_size(c) == 2 * 16 * 5 == 160
    # No unspecified persona: 2 x 16 x 4; the race axis on the agent too: 2 x 16 x (8 + 1).
    assert grid_size(load_conditions(variant(small, "agent_unspecified: true", "agent_unspecified: false", "a.yaml"))) == 128
    assert grid_size(load_conditions(variant(small, "agent_axes: [age, gender]", "agent_axes: [age, gender, race]", "b.yaml"))) == 288


def test_the_shipped_grid_reproduces_the_papers_arithmetic():
    """The paper: 315 profiles x 64 personas x 2 roles per class, x 3 classes x 3 generators
    = 362,880 dialogues; a class-balanced 10% sample of them is 36,288."""
    c = load_conditions(SHIPPED)
    shape = grid_shape(c)
    assert (shape.roles, shape.profiles, shape.personas) == (2, 315, 64)
    assert grid_size(c) == 40_320
    assert job_count(grid_size(c), 3, "paper") == 362_880
    tenth = resolve_per_class("10%", c, "paper")
    assert tenth == 4_032 and job_count(tenth, 3, "paper") == 36_288
    assert resolve_per_class("all", c, "paper") == 40_320
    assert resolve_per_class("all", c, "ours") == 630  # our style: one persona per profile and role
    with pytest.raises(ConfigError, match=r"--per-class=40321: expected 1 to 40,320 \(the crossed grid of .*2 roles x 315"):
        resolve_per_class(40_321, c, "paper")


def test_the_full_grid_crosses_every_profile_with_every_persona_in_every_role(small):
    c = load_conditions(small)
    cells = sample_grid(c, 160, seed=5)
    assert len(cells) == len({x.id for x in cells}) == 160
    personas = c.personas()
    keys = {(x.role, x.profile.key, x.persona) for x in cells}
    profiles = {"-".join(p) for p in itertools.product(("young", "elder"), ("male", "female"), ("white", "black"), ("none", "deaf"))}
    assert keys == {(r, p, q) for r in ("coach", "trainer") for p in profiles for q in personas}
    assert Counter(x.persona for x in cells)[None] == 32  # the unspecified persona: 2 roles x 16 profiles
    for (role, profile), group in itertools.groupby(sorted(cells, key=lambda x: (x.role, x.profile.key)), key=lambda x: (x.role, x.profile.key)):
        group = list(group)
        # Across the 5 personas of a (role, profile): needs balanced (2 needs: 3 + 2; 3 needs: 2 + 2 + 1) ...
        assert sorted(Counter(x.need for x in group).values()) == ([2, 3] if role == "coach" else [1, 2, 2])
        # ... and so are the names of the profile's gender (2 names: 3 + 2; 3 names: 2 + 2 + 1).
        names = Counter(x.profile.name for x in group)
        assert sorted(names.values()) == ([2, 3] if "-male-" in f"-{profile}-" else [1, 2, 2])
        low, high = (19, 25) if profile.startswith("young") else (66, 75)
        assert all(low <= x.profile.years <= high for x in group)
    # Every id names its persona by its place: ...-p0 to ...-p4 (p4 the unspecified one).
    assert {x.id.rsplit("-p", 1)[1] for x in cells} == {"0", "1", "2", "3", "4"}
    assert all((x.persona is None) == x.id.endswith("-p4") for x in cells)


@pytest.mark.parametrize("seed", [0, 11])
def test_the_sample_is_role_balanced_seeded_stable_and_nested(small, seed):
    c = load_conditions(small)
    drawn = sample_grid(c, 37, seed)
    assert len(drawn) == len({x.id for x in drawn}) == 37
    assert sorted(Counter(x.role for x in drawn).values()) == [18, 19]  # 37 over 2 roles
    assert drawn == sample_grid(c, 37, seed)  # the same in every run
    assert drawn != sample_grid(c, 37, 1 - seed if seed == 0 else 0)  # another seed, another sample
    # A larger sample with the same seed keeps the smaller one, cell for cell (need, name, years).
    larger = {x.id: x for x in sample_grid(c, 90, seed)}
    assert all(larger[x.id] == x for x in drawn)
    assert sum(len(v) for v in sample_indices(c, 37, seed).values()) == 37


def test_the_sample_does_not_depend_on_python_hash_seeds(small):
    """Ranks are SHA-256 of (seed, role, index): these indices were taken from a run."""
    c = load_conditions(small)
    first = sample_indices(c, 4, 0)
    assert first == sample_indices(c, 4, 0) and sum(map(len, first.values())) == 4
    expected = {}
    for role in ("coach", "trainer"):
        ranks = sorted(range(80), key=lambda i: hashlib.sha256(f"0\x1fgrid-sample\x1f{role}\x1f{i}".encode()).digest())
        expected[role] = sorted(ranks[: len(first[role])])
    assert first == expected


def test_sample_size_outside_the_grid_is_refused(small):
    c = load_conditions(small)
    for bad in (0, 161, True, 2.5):
        with pytest.raises(ValueError, match="from 1 to 160"):
            sample_indices(c, bad, 0)


# --------------------------------------------------------------------------- the command


def paper_class_of(prompt: str) -> str:
    extras = prompts.load("benevdial_generate_paper").extras
    found = [cls for cls in ("OB", "BB") if extras[f"class_{cls}"].strip() in prompt]
    return found[0] if found else "N"


class Lengths:
    """Dialogues of 2, 4, 7 and 3 exchanges in turn, named by their class and length; a
    prompt whose profile mentions the ``short`` name gets a one-exchange reply every time."""

    def __init__(self, short: str | None = None):
        self.lock = threading.Lock()
        self.calls = 0
        self.short = short

    def __call__(self, req):
        with self.lock:
            self.calls += 1
            call = self.calls
        cls = paper_class_of(req.prompt_text)
        n = 1 if self.short and self.short in req.prompt_text else (2, 4, 7, 3)[call % 4]
        return Reply("\n".join(f"User: ask {i} of {call}\nAgent: say {i} [{cls}] <{n}> {call}" for i in range(n)))


def argv(tmp_path, conditions, server, *extra, models=("g1",)):
    out = ["generate-benevdial", "--style", "paper", "--conditions", str(conditions), "--out", str(tmp_path / "out.jsonl"),
           "--cache-dir", str(tmp_path / "cache"), "--seed", "2", "--no-quality"]
    for model in models:
        out += ["--generator", f"openai:{model}@{server.openai_base_url}?max_retries=0"]
    return out + list(extra)


def test_a_paper_run_is_class_balanced_over_the_same_cells_and_keeps_any_length(small, tmp_path, capsys):
    c = load_conditions(small)
    picked = sample_grid(c, 7, 2)
    with FakeServer(Lengths()) as server:
        assert main(argv(tmp_path, small, server, "--per-class", "7", models=("g1", "g2"))) == 0
        requests = list(server.requests)
    err = capsys.readouterr().err
    # 7 cells x 3 classes x 2 generators = 42 calls, 21 each; 14 dialogues per class.
    assert len(requests) == 42 and Counter(r.model for r in requests) == {"g1": 21, "g2": 21}
    lines = load_lines(tmp_path / "out.jsonl", style="paper", roles=("coach", "trainer"))
    assert Counter(d["class"] for d in lines) == {"N": 14, "OB": 14, "BB": 14}
    # The same cells in every class (so demographics say nothing about the class).
    cells = {cls: sorted(d["id"].split("-", 1)[1].rsplit("-g", 1)[0] for d in lines if d["class"] == cls) for cls in CLASSES}
    assert cells["N"] == cells["OB"] == cells["BB"] == sorted(x.id for x in picked for _ in range(2))
    assert Counter(d["role"] for d in lines if d["class"] == "N") in ({"coach": 6, "trainer": 8}, {"coach": 8, "trainer": 6})
    # Each dialogue kept whole, whatever length its generator chose.
    for d in lines:
        n = int(re.search(r"<(\d+)>", d["turns"][1]["text"]).group(1))
        assert len(d["turns"]) == 2 * n
    assert {len(d["turns"]) // 2 for d in lines} == {2, 3, 4, 7}
    mean = sum(len(d["turns"]) // 2 for d in lines) / len(lines)
    assert re.search(rf"exchanges per dialogue: 2 to 7, mean {mean:.1f} \(by class: N \d\.\d, OB \d\.\d, BB \d\.\d\)", err), err
    # The role's user label and the persona reach the prompt.
    assert all(("a student who has come" in " ".join(r.prompt_text.split())) != ("a client who has come" in " ".join(r.prompt_text.split())) for r in requests)


def test_a_single_exchange_is_not_a_multi_turn_dialogue(small, tmp_path, capsys):
    c = load_conditions(small)
    picked = sample_grid(c, 3, 2)
    short = c.profile_text(picked[0].profile)
    assert sum(short == c.profile_text(x.profile) for x in picked) == 1
    with FakeServer(Lengths(short=short)) as server:
        assert main(argv(tmp_path, small, server, "--per-class", "3")) == 0
        assert server.request_count == 3 * 3 + 3  # the short cell's three classes: two draws each
    err = capsys.readouterr().err
    # Three dialogues discarded, each after two draws of a single exchange.
    assert err.count("only 1 exchange(s); at least 2 user and 2 agent turns are needed") == 3 * 2
    assert "wrote 6 dialogues" in err.strip().splitlines()[-1] and "discarded 3 (malformed 3)" in err


def test_dry_run_prints_the_grid_the_sample_and_the_tokens(small, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    base = ["generate-benevdial", "--style", "paper", "--conditions", str(small), "--out", str(tmp_path / "o.jsonl"),
            "--generator", "openai:g1", "--generator", "openai:g2", "--dry-run"]
    assert main(base + ["--per-class", "25%"]) == 0
    err = capsys.readouterr().err
    assert ("dry run (paper style): grid 160 condition(s) per class (2 roles x 16 profiles x 5 personas) x 2 generators "
            "= 320 dialogues per class, 960 in all; sample 40 condition(s) per class (25% of the grid) x 2 generators "
            "= 80 dialogue(s) per class, 240 in all; calls per generator g1: 120, g2: 120; about ") in err
    assert "prompt tokens and at most 480,000 completion tokens (2000 a dialogue); nothing called, nothing written" in err
    tokens = int(re.search(r"about ([\d,]+) prompt tokens", err).group(1).replace(",", ""))
    assert main(base + ["--per-class", "all"]) == 0
    err = capsys.readouterr().err
    assert "sample 160 condition(s) per class (100% of the grid) x 2 generators = 320 dialogue(s) per class, 960 in all" in err
    assert int(re.search(r"about ([\d,]+) prompt tokens", err).group(1).replace(",", "")) > 3.5 * tokens
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / ".socialbias").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--turns", "3"], "--turns=3: --style=paper asks for no number of exchanges"),
    (["--per-class", "161"], "--per-class=161: expected 1 to 160 (the crossed grid of"),
    (["--per-class", "0.1%"], "--per-class=0.1% (0 conditions): expected 1 to 160"),
    (["--per-class", "150%"], "a percentage above 0 and at most 100%"),
    (["--per-class", "some"], "'some' is not a whole number; give a whole number from 1, `all`, or a percentage"),
])
def test_paper_usage_errors(small, tmp_path, capsys, extra, needle):
    base = ["generate-benevdial", "--style", "paper", "--conditions", str(small), "--out", str(tmp_path / "o.jsonl"),
            "--generator", "openai:g@http://127.0.0.1:9/v1"]
    assert main(base + extra) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


# --------------------------------------------------------------------------- --prompts DIR

#: A researcher's own wording (here a stand-in for a paper's), with the paper style's extra
#: placeholders: both roles, both demographics, the class text inline.
OVERRIDE = """\
name: benevdial_generate_paper
version: 9
user: |
  RESEARCHER-TEXT between $agent_title and $user_label; the $user_label is $profile and the
  $agent_title is $agent_demographics. $class_instruction Label turns "$user_label:" and "$agent_title:".
class_OB: "RESEARCHER-OB."
class_BB: "RESEARCHER-BB."
"""


def role_labelled(req):
    """A dialogue labelled with the role names the override asks for."""
    text = req.prompt_text
    user, agent = re.search(r'Label turns "(.+?):" and "(.+?):"', text).groups()
    cls = "OB" if "RESEARCHER-OB." in text else "BB" if "RESEARCHER-BB." in text else "N"
    return "\n".join(f"{user}: q{i}\n{agent}: a{i} [{cls}]" for i in range(3))


def test_prompts_dir_replaces_our_template_and_its_id_is_recorded(small, tmp_path, capsys):
    folder = tmp_path / "paper-prompts"
    folder.mkdir()
    (folder / "benevdial_generate_paper.yaml").write_text(OVERRIDE, encoding="utf-8")
    digest = hashlib.sha256(OVERRIDE.encode()).hexdigest()[:12]
    c = load_conditions(small)
    picked = sample_grid(c, 2, 2)
    with FakeServer(role_labelled) as server:
        assert main(argv(tmp_path, small, server, "--per-class", "2", "--prompts", str(folder))) == 0
        requests = list(server.requests)
        err = capsys.readouterr().err
        # The override is in the cache key: without it, nothing replays (replay only: all miss).
        server.clear()
        assert main(argv(tmp_path, small, server, "--per-class", "2", "--record", "none")) == 1
        assert server.request_count == 0 and "no recorded answer" in capsys.readouterr().err
    assert len(requests) == 6 and all(r.prompt_text.startswith("RESEARCHER-TEXT") for r in requests)
    assert not any("You write realistic" in r.prompt_text for r in requests)
    for x in picked:
        role = c.roles[x.role]
        mine = [r.prompt_text for r in requests if c.profile_text(x.profile) in r.prompt_text]
        assert len(mine) == 3
        described = c.persona_line(x.persona).removeprefix("You present yourself as ").rstrip(".") if x.persona else "unspecified"
        assert all(f"the {role.user_label} is {c.profile_text(x.profile)}" in " ".join(t.split()) for t in mine)
        assert all(f"the {role.title} is {described}." in " ".join(t.split()) for t in mine)
        assert sorted("RESEARCHER-OB." in t or "RESEARCHER-BB." in t for t in mine) == [False, True, True]
    lines = load_lines(tmp_path / "out.jsonl", style="paper", prompt=f"benevdial_generate_paper@9+{digest}",
                       roles=("coach", "trainer"))
    assert len(lines) == 6 and {d["turns"][1]["text"].split()[-1] for d in lines} == {"[N]", "[OB]", "[BB]"}
    assert f"prompt benevdial_generate_paper@9+{digest} from {folder.resolve() / 'benevdial_generate_paper.yaml'} in place of ours" in err
    # Ours again once the command is over.
    assert prompts.load("benevdial_generate_paper").id == "benevdial_generate_paper@3"


def test_prompts_dir_with_our_style(small, tmp_path, capsys):
    folder = tmp_path / "p"
    folder.mkdir()
    ours = prompts.load("benevdial_generate")
    text = f"name: benevdial_generate\nversion: 5\nuser: |\n  OURS-REPLACED {ours.user.strip().splitlines()[-1]} $class_instruction\n"
    (folder / "benevdial_generate.yaml").write_text(text, encoding="utf-8")
    with FakeServer(lambda req: "\n".join(f"User: q{i}\nAgent: a{i}" for i in range(2))) as server:
        args = ["generate-benevdial", "--conditions", str(small), "--out", str(tmp_path / "o.jsonl"), "--no-quality",
                "--cache-dir", str(tmp_path / "c"), "--per-class", "2", "--prompts", str(folder),
                "--generator", f"openai:g@{server.openai_base_url}?max_retries=0"]
        assert main(args) == 0
        assert all(r.prompt_text.startswith("OURS-REPLACED") for r in server.requests)
    capsys.readouterr()
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    assert {json.loads(x)["prompt"] for x in (tmp_path / "o.jsonl").read_text().splitlines()} == {f"benevdial_generate@5+{digest}"}


@pytest.mark.parametrize("files, needle", [
    (None, "--prompts={dir}: not a folder"),
    ({"judge_bias.yaml": "name: judge_bias\nversion: 2\nuser: $reply\n"},
     "--prompts={dir}: holds no benevdial_generate_paper.yaml, the prompt --style=paper uses"),
    ({"benevdial_generate_paper.yaml": "name: benevdial_generate_paper\nversion: 2\nuser: Write $turns exchanges.\n"},
     "{dir}/benevdial_generate_paper.yaml: placeholder(s) $turns in user are never filled for benevdial_generate_paper"),
    ({"benevdial_generate_paper.yaml": "name: benevdial_generate_paper\nversion: [\n"},
     "{dir}/benevdial_generate_paper.yaml: not a readable YAML prompt file"),
    ({"benevdial_generate_paper.yaml": "name: benevdial_generate\nversion: 2\nuser: hi\n"},
     "{dir}/benevdial_generate_paper.yaml: name: 'benevdial_generate' differs from the file name"),
])
def test_a_missing_or_malformed_override_is_a_usage_error_naming_the_file(small, tmp_path, capsys, files, needle):
    folder = tmp_path / "prompts-dir"
    if files is not None:
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
    base = ["generate-benevdial", "--style", "paper", "--conditions", str(small), "--out", str(tmp_path / "o.jsonl"),
            "--generator", "openai:g@http://127.0.0.1:9/v1", "--prompts", str(folder)]
    for extra in ([], ["--dry-run"]):
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle.format(dir=folder) in err, err
    assert prompts.load("benevdial_generate_paper").id == "benevdial_generate_paper@3"
