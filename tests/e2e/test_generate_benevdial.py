"""``python -m pytest_socialbias generate-benevdial``: generation against the loopback
fake server, malformed-output handling, resume from the cache, generator rotation, and
usage errors."""

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
from pytest_socialbias.research.generate import CLASSES, iter_jobs, parse_turns, pick_conditions
from pytest_socialbias.testing import FakeServer, Fault, Reply

CONDITIONS = Path(__file__).resolve().parents[2] / "suites" / "benevdial" / "conditions.yaml"
TURNS = 3


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def class_of(prompt: str) -> str:
    extras = prompts.load("benevdial_generate").extras
    found = [cls for cls in CLASSES if extras[f"class_{cls}"].strip() in prompt]
    assert len(found) == 1, "the prompt must carry exactly one class instruction"
    return found[0]


def dialogue_text(cls: str, model: str, turns: int = TURNS, variant: int = 0) -> str:
    """A well-formed dialogue in one of a few surface forms a real model writes."""
    user, agent = [("User:", "Agent:"), ("**User:**", "**Assistant:**"), ("client:", "AGENT:")][variant % 3]
    lines = ["Here is the conversation you asked for:", ""]
    for i in range(turns):
        lines.append(f"{user} question {i + 1}")
        lines.append(f"{agent} answer {i + 1} [{cls}] by {model}")
        if i == 0:
            lines.append("and a second line of the first answer")
    return "\n".join(lines)


class Script:
    """Well-formed dialogues, except: the ``flaky`` condition's prompts are unreadable on
    their first draw only, the ``broken`` condition's on every draw, and the ``failing``
    condition's calls fail with HTTP 400."""

    def __init__(self, conditions, flaky=None, broken=None, failing=None):
        self.conditions = conditions
        self.marks = {name: self._mark(c) for name, c in (("flaky", flaky), ("broken", broken), ("failing", failing)) if c}
        self.seen: Counter = Counter()
        self.lock = threading.Lock()

    def _mark(self, condition):
        role = self.conditions.roles[condition.role]
        return (role.title, self.conditions.profile_text(condition.profile))

    def _is(self, name, prompt):
        mark = self.marks.get(name)
        return mark is not None and all(part in prompt for part in mark)

    def __call__(self, req):
        prompt = req.prompt_text
        cls = class_of(prompt)
        with self.lock:
            self.seen[prompt] += 1
            draw = self.seen[prompt]
        if self._is("failing", prompt):
            return Fault("bad_request")
        if self._is("broken", prompt) or (self._is("flaky", prompt) and draw == 1):
            return Reply("I would rather describe the conversation in prose than write it out.")
        return Reply(dialogue_text(cls, req.model, variant=draw + len(prompt)))


def load_lines(path: Path, style: str = "ours", prompt: str | None = None, roles=("wellbeing", "lifestyle")) -> list[dict]:
    """The written file, validated by the project's loader when it exists, else here;
    every record names the prompt template it was written from (ours unless ``prompt``)."""
    from pytest_socialbias.research.generate import TEMPLATES

    prompt = prompt or prompts.load(TEMPLATES[style]).id
    try:
        from pytest_socialbias.benevdial.dialogues import load_dialogues
    except ImportError:
        load_dialogues = None
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if load_dialogues is not None:
        assert load_dialogues(path) == lines
    for d in lines:
        assert set(d) == {"id", "class", "role", "need", "user", "agent", "turns", "source", "generator", "prompt"}
        assert d["prompt"] == prompt
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", d["id"]) and len(d["id"]) <= 100
        assert d["class"] in CLASSES and d["role"] in roles
        assert set(d["user"]) == {"age", "gender", "race", "ability"}
        assert d["agent"] is None or set(d["agent"]) == {"age", "gender", "race"}
        assert d["source"] == f"generated:{style}" and isinstance(d["generator"], str)
        assert all(t["speaker"] in ("user", "agent") and t["text"] for t in d["turns"])
    assert len({d["id"] for d in lines}) == len(lines)
    return lines


def args(tmp_path, server, *extra, models=("g1",), per_class=4):
    out = [
        "generate-benevdial", "--conditions", str(CONDITIONS), "--out", str(tmp_path / "out.jsonl"),
        "--cache-dir", str(tmp_path / "cache"), "--per-class", str(per_class), "--turns", str(TURNS),
        "--seed", "3",
    ]
    for model in models:
        out += ["--generator", f"openai:{model}@{server.openai_base_url}?max_retries=0"]
    return out + list(extra)


def test_generates_balanced_labelled_dialogues_retries_once_and_resumes_from_cache(tmp_path, capsys):
    conditions = load_conditions(CONDITIONS)
    picked = pick_conditions(conditions, 4, 3)
    flaky, broken = picked[0], picked[1]
    script = Script(conditions, flaky=flaky, broken=broken)
    with FakeServer(script) as server:
        assert main(args(tmp_path, server)) == 0
        err = capsys.readouterr().err
        first = (tmp_path / "out.jsonl").read_bytes()
        requests = server.request_count

        # 4 conditions x 3 classes; the flaky prompts and the broken ones are drawn twice.
        assert requests == 12 + 3 + 3
        lines = load_lines(tmp_path / "out.jsonl")
        assert [d["id"] for d in lines] == sorted(d["id"] for d in lines)
        assert Counter(d["class"] for d in lines) == {"N": 3, "OB": 3, "BB": 3}
        written_conditions = {d["id"].split("-", 1)[1] for d in lines}
        assert written_conditions == {c.id for c in picked} - {broken.id}
        assert all(d["id"] == f"{d['class'].lower()}-{d['id'].split('-', 1)[1]}" for d in lines)
        by_id = {c.id: c for c in picked}
        for d in lines:
            condition = by_id[d["id"].split("-", 1)[1]]
            assert (d["role"], d["need"]) == (condition.role, condition.need)
            assert d["user"] == {a: condition.profile.value(a) for a in ("age", "gender", "race", "ability")}
            assert d["agent"] == (condition.persona.to_dict() if condition.persona else None)
            assert [t["speaker"] for t in d["turns"]] == ["user", "agent"] * TURNS
            assert d["turns"][0]["text"] == "question 1"  # the preamble is dropped
            assert d["turns"][1]["text"].endswith("\nand a second line of the first answer")
            # The class written is the class the generator was asked for.
            assert all(f"[{d['class']}]" in t["text"] for t in d["turns"] if t["speaker"] == "agent")
            assert d["generator"] == f"openai:g1@{server.openai_base_url}?max_retries=0"

        # The broken condition is named on stderr, with the reason; the flaky one is not.
        for cls in CLASSES:
            assert f"discarded {cls.lower()}-{broken.id}: malformed on all 2 draws" in err
            assert f"{cls.lower()}-{flaky.id}" not in err
        summary = err.strip().splitlines()[-1]
        assert "wrote 9 dialogues" in summary and "(N 3, OB 3, BB 3)" in summary
        assert "discarded 3 (malformed 3)" in summary and "0 cache hits" in summary
        assert "in ours style" in summary

        # The quality statistics of what was written: stderr lines before the summary, and
        # the JSON file beside the output.
        quality = json.loads((tmp_path / "out.quality.json").read_text())
        assert quality["style"] == "ours" and quality["dialogues"] == 9
        assert {cls: cell["n"] for cls, cell in quality["classes"].items()} == {"N": 3, "OB": 3, "BB": 3}
        assert "generate-benevdial: quality N (all generators pooled): n 3; MTLD " in err
        assert f"quality statistics written to {tmp_path / 'out.quality.json'}" in err

        # The generation settings (docs/benevdial.md) reach the server.
        params = server.requests[0].params
        assert params["temperature"] == 0.6 and params["top_p"] == 0.9 and params["max_tokens"] == 900

        # Replay only: no request at all, and the same bytes.
        (tmp_path / "out.jsonl").write_text("stale\n")
        server.clear()
        assert main(args(tmp_path, server, "--record", "none")) == 0
        err = capsys.readouterr().err
        assert server.request_count == 0
        assert (tmp_path / "out.jsonl").read_bytes() == first
        assert f"discarded ob-{broken.id}" in err
        assert f"{requests} generator calls, {requests} cache hits" in err.strip().splitlines()[-1]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_rerun_after_failures_asks_only_for_what_did_not_finish(tmp_path, capsys):
    conditions = load_conditions(CONDITIONS)
    picked = pick_conditions(conditions, 4, 3)
    script = Script(conditions, failing=picked[2])
    with FakeServer(script) as server:
        assert main(args(tmp_path, server)) == 0
        assert len(load_lines(tmp_path / "out.jsonl")) == 9
        # As after an interruption: what finished is in the cache, the rest is not.
        script.marks.clear()
        server.clear()
        assert main(args(tmp_path, server)) == 0
        lines = load_lines(tmp_path / "out.jsonl")
        assert server.request_count == 3
        assert {req.model for req in server.requests} == {"g1"}
    err = capsys.readouterr().err
    assert len(lines) == 12 and Counter(d["class"] for d in lines) == {"N": 4, "OB": 4, "BB": 4}
    assert "12 generator calls, 9 cache hits" in err.strip().splitlines()[-1]


def test_two_generators_share_the_work_evenly_within_every_class(tmp_path, capsys):
    conditions = load_conditions(CONDITIONS)
    with FakeServer(Script(conditions)) as server:
        assert main(args(tmp_path, server, models=("g1", "g2"))) == 0
        lines = load_lines(tmp_path / "out.jsonl")
        asked = Counter(req.model for req in server.requests)
    capsys.readouterr()
    assert len(lines) == 12 and asked == {"g1": 6, "g2": 6}
    generators = Counter(d["generator"].split("@")[0] for d in lines)
    assert generators == {"openai:g1": 6, "openai:g2": 6}
    for cls in CLASSES:
        assert Counter(d["generator"].split("@")[0] for d in lines if d["class"] == cls) == {"openai:g1": 2, "openai:g2": 2}
    for d in lines:  # the dialogue came from the generator the line names
        model = d["generator"].split("@")[0].split(":")[1]
        assert f"by {model}" in d["turns"][1]["text"]


def test_failed_call_is_reported_and_skipped(tmp_path, capsys):
    conditions = load_conditions(CONDITIONS)
    picked = pick_conditions(conditions, 2, 3)
    with FakeServer(Script(conditions, failing=picked[0])) as server:
        assert main(args(tmp_path, server, per_class=2)) == 0
    err = capsys.readouterr().err
    lines = load_lines(tmp_path / "out.jsonl")
    assert Counter(d["class"] for d in lines) == {"N": 1, "OB": 1, "BB": 1}
    assert f"discarded n-{picked[0].id}: model call failed: " in err and "HTTP 400" in err
    assert "(model call failed 3)" in err.strip().splitlines()[-1]


def test_all_discarded_exits_1_and_writes_nothing(tmp_path, capsys):
    with FakeServer("Sorry, no dialogue today.") as server:
        assert main(args(tmp_path, server, per_class=1)) == 1
    err = capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
    assert "wrote 0 dialogues (nothing written" in err and err.count("discarded n-") == 1


def test_odd_per_class_spreads_conditions_over_roles():
    conditions = load_conditions(CONDITIONS)
    picked = pick_conditions(conditions, 5, 0)
    assert len(picked) == 5 and len({c.id for c in picked}) == 5
    assert sorted(Counter(c.role for c in picked).values()) == [2, 3]
    assert picked == pick_conditions(conditions, 5, 0)
    jobs = list(iter_jobs(picked, 3))
    assert Counter(j.cls for j in jobs) == {"N": 5, "OB": 5, "BB": 5}
    assert Counter(j.generator for j in jobs) == {0: 5, 1: 5, 2: 5}
    # No generator is tied to a class: with 6 conditions, each writes 2 of every class.
    jobs = list(iter_jobs(pick_conditions(conditions, 6, 0), 3))
    assert Counter((j.cls, j.generator) for j in jobs) == {(cls, g): 2 for cls in CLASSES for g in range(3)}


@pytest.mark.parametrize(
    "text, speakers",
    [
        ("User: a\nAgent: b\nUser: c\nAgent: d", "UAUA"),
        ("Sure! Here it is.\n\n**User:** a\n\n**Assistant:** b\n---\n**User**: c\n**Agent**: d\n**User:** bye", "UAUA"),
        ("CLIENT: a\nWellbeing support agent: b\nclient: c\nassistant: d", "UAUA"),
        ("User (Maya): a\nAgent (wellbeing support agent): b\nUser: c\nAgent: d", "UAUA"),
    ],
)
def test_parse_turns_accepts_common_label_forms(text, speakers):
    turns, problem = parse_turns(text, "client", "wellbeing support agent")
    assert problem is None
    assert "".join(t["speaker"][0].upper() for t in turns) == speakers
    assert [t["text"] for t in turns] == ["a", "b", "c", "d"]


def test_parse_turns_joins_lines_and_keeps_unknown_labels_as_text():
    turns, problem = parse_turns("User: a\nmore a\nAgent: Plan: walk\nStep two: rest\nUser: c\nAgent: d")
    assert problem is None
    assert turns[0]["text"] == "a\nmore a" and turns[1]["text"] == "Plan: walk\nStep two: rest"


@pytest.mark.parametrize(
    "text, reason",
    [
        ("Just prose, no labels.", "no \"User:\" / \"Agent:\" labels"),
        ("Agent: a\nUser: b\nAgent: c\nUser: d", "starts with an agent turn"),
        ("User: a\nUser: b\nAgent: c\nUser: d\nAgent: e", "turn 2 is a second user turn in a row"),
        ("User: a\nAgent: b", "only 1 exchange(s)"),
        ("User: a\nAgent:\nUser: c\nAgent: d", "turn 2 (agent) is empty"),
    ],
)
def test_parse_turns_rejects_malformed_dialogues(text, reason):
    turns, problem = parse_turns(text)
    assert turns == [] and reason in problem


@pytest.mark.parametrize(
    "extra, env, expected",
    [
        (["--generator", "nonsense"], {}, "--generator='nonsense' is not a model spec"),
        (["--generator", "openai:gpt-4o-mini"], {"OPENAI_API_KEY": None}, "no API key: set the environment variable OPENAI_API_KEY"),
        (["--generator", "openai:g@http://127.0.0.1:9/v1", "--conditions", "missing.yaml"], {}, "--conditions=missing.yaml: file not found"),
        (["--generator", "openai:g@http://127.0.0.1:9/v1", "--per-class", "0"], {}, "--per-class: 0 is below the minimum 1"),
        (["--generator", "openai:g@http://127.0.0.1:9/v1", "--per-class", "9999"], {}, "--per-class=9999: expected 1 to 630"),
        (["--generator", "openai:g@http://127.0.0.1:9/v1", "--generator", "openai:g@http://127.0.0.1:9/v1"], {}, "is given twice"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch, extra, env, expected):
    for name, value in env.items():
        monkeypatch.delenv(name) if value is None else monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    argv = ["generate-benevdial", "--out", str(tmp_path / "out.jsonl"), "--cache-dir", str(tmp_path / "cache")]
    if "--conditions" not in extra:
        argv += ["--conditions", str(CONDITIONS)]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "out.jsonl").exists()
