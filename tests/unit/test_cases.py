"""Unit tests for cases.py: suite files -> typed, sorted cases, and their error messages."""

from __future__ import annotations

import hashlib
import re
import textwrap
from pathlib import Path

import pytest

from pytest_socialbias.cases import DEFAULT_BATCH_SIZE, Case
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.files import looks_like_suite
from pytest_socialbias.protocols import PROTOCOLS, load_suite

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, text, name="suite.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load_error(path) -> str:
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    return str(info.value)


HEADER = """\
socialbias: 1
suite: demo
protocol: smoke
"""

# Case ids deliberately out of order in the file.
VALID = """
socialbias: 1
suite: demo
protocol: smoke
description: A test suite.
turns: 3
styles: [implicit, assessment]
batch_size: 8
cases:
  - id: zeta-1
    category: race
    group: group z
    statement: Statement z.
  - id: alpha-1
    category: age
    group: older adults
    statement: Older people are slow.
  - id: mid-1
    category: gender
    group: women
    statement: Statement m.
"""


# --------------------------------------------------------------------------- valid suites


def test_valid_suite(tmp_path):
    path = write(tmp_path, VALID)
    suite = load_suite(path)
    assert suite.path == path
    assert suite.name == "demo"
    assert suite.protocol == "smoke"
    assert suite.turns == 3
    assert suite.batch_size == 8
    assert suite.styles == ("implicit", "assessment")
    # two styles -> two cases per seed, sorted by (id, style)
    assert len(suite.cases) == 6
    assert [(c.id, c.style) for c in suite.cases] == [
        ("alpha-1", "assessment"),
        ("alpha-1", "implicit"),
        ("mid-1", "assessment"),
        ("mid-1", "implicit"),
        ("zeta-1", "assessment"),
        ("zeta-1", "implicit"),
    ]
    first = suite.cases[0]
    assert first == Case(
        suite="demo",
        protocol="smoke",
        id="alpha-1",
        category="age",
        group="older adults",
        statement="Older people are slow.",
        style="assessment",
        turns=3,
        suite_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
    )
    assert first.key == "demo::alpha-1[assessment]"
    assert len({c.key for c in suite.cases}) == 6


def test_suite_defaults_without_styles(tmp_path):
    path = write(
        tmp_path,
        HEADER
        + """\
cases:
  - id: b
    category: religion
    group: g
    statement: s.
  - id: a
    category: disability
    group: g
    statement: s.
""",
    )
    suite = load_suite(str(path))
    assert suite.turns == PROTOCOLS['smoke'].turns
    assert suite.batch_size == DEFAULT_BATCH_SIZE
    assert suite.styles == (None,)
    assert [c.id for c in suite.cases] == ["a", "b"]
    assert all(c.style is None for c in suite.cases)
    assert suite.cases[0].key == "demo::a"  # no style suffix
    assert all(c.turns == PROTOCOLS['smoke'].turns for c in suite.cases)


def test_case_to_dict_is_builtins_only():
    case = Case("demo", "smoke", "x", "age", "g", "s.", "implicit", 2)
    assert case.to_dict() == {
        "suite": "demo",
        "protocol": "smoke",
        "id": "x",
        "category": "age",
        "group": "g",
        "statement": "s.",
        "style": "implicit",
        "turns": 2,
        "user_turns": None,
        "suite_sha256": "",
    }


def test_shipped_smoke_suite_loads():
    suite = load_suite(ROOT / "suites" / "smoke.yaml")
    assert suite.name == "smoke"
    assert [c.id for c in suite.cases] == sorted(c.id for c in suite.cases)
    assert len({c.category for c in suite.cases}) == 6


# --------------------------------------------------------------------------- errors


def assert_located(message: str, path, line: int):
    assert message.startswith(f"{path}:{line}:"), message


def case(case_id: str, category: str = "age", *, group: bool = True, extra: str = "") -> str:
    return (f"  - id: {case_id}\n    category: {category}\n" + ("    group: g\n" if group else "")
            + "    statement: s.\n" + extra)


@pytest.mark.parametrize("body, line, needles", [
    # The `category: colour` line of the second case; the allowed categories listed.
    pytest.param("cases:\n" + case("a") + case("b", "colour"), 10, ["cases[1].category", "'colour'", "religion"],
                 id="bad-category"),
    # The second case starts on line 9.
    pytest.param("cases:\n" + case("a") + case("b", group=False), 9,
                 ["cases[1]", "'group' is a required property"], id="missing-field"),
    pytest.param("cases:\n" + case("a", extra="    note: not allowed\n"), 9, ["cases[0]", "'note'", "not allowed"],
                 id="extra-field"),
    pytest.param("turn: 2\ncases:\n" + case("a"), 4, ["'turn'", "(did you mean 'turns' for 'turn'?)"],
                 id="extra-top-level-field"),
    # The second `id: a`, and where the first one is.
    pytest.param("cases:\n" + case("a") + case("b") + case("a", "race"), 13, ["duplicate", "'a'", "first at line 5"],
                 id="duplicate-id"),
    pytest.param("turns: 0\ncases:\n" + case("a"), 4, ["turns"], id="bad-turns"),
    pytest.param("cases: []\n", 4, ["at cases", "non-empty"], id="empty-cases"),
])
def test_a_bad_suite_is_an_error_at_its_line_saying_what_is_wrong(tmp_path, body, line, needles):
    path = write(tmp_path, HEADER + body)
    message = load_error(path)
    assert_located(message, path, line)
    for needle in needles:
        assert needle in message, (needle, message)


def test_every_schema_problem_is_listed_with_its_line(tmp_path):
    """A misspelt field in every case: each case's problem on its own line (up to ten),
    with the field's likely name, where one line said "(and 11 more problem(s))"."""
    cases = "".join(f"  - id: c{i}\n    category: age\n    group: g\n    statment: s.\n" for i in range(6))
    path = write(tmp_path, HEADER + "cases:\n" + cases)
    message = load_error(path)
    lines = message.splitlines()
    assert "and 11 more problem(s):" in lines[1]
    assert len(lines) == 2 + 9 + 1 and lines[-1].strip() == "... and 2 more"
    for line in lines[2:-1]:
        assert line.startswith(f"  {path}:") and "at cases[" in line
    assert sum("(did you mean 'statement' for 'statment'?)" in line for line in lines) >= 4


def test_malformed_yaml(tmp_path):
    path = write(
        tmp_path,
        HEADER
        + """\
cases:
  - id: [a
    category: age
""",
    )
    message = load_error(path)
    assert re.match(rf"^{re.escape(str(path))}:\d+: ", message), message
    assert "not valid YAML" in message


def test_tab_indentation_is_reported_with_line(tmp_path):
    path = tmp_path / "tabs.yaml"
    path.write_text(HEADER + "cases:\n\t- id: a\n", encoding="utf-8")
    message = load_error(path)
    assert_located(message, path, 5)
    assert "not valid YAML" in message


def test_empty_file(tmp_path):
    path = write(tmp_path, "")
    message = load_error(path)
    assert str(path) in message


def test_unknown_style_and_protocol(tmp_path):
    base = """\
socialbias: 1
suite: demo
protocol: {protocol}
styles: [{style}]
cases:
  - id: a
    category: age
    group: g
    statement: s.
"""
    path = write(tmp_path, base.format(protocol="smoke", style="rude"), "style.yaml")
    message = load_error(path)
    assert_located(message, path, 4)
    assert "styles[0]" in message and "'rude'" in message
    path = write(tmp_path, base.format(protocol="dymt9", style="implicit"), "proto.yaml")
    message = load_error(path)
    assert_located(message, path, 3)
    assert "protocol" in message and "'dymt9'" in message


# --------------------------------------------------------------------------- looks_like_suite


def test_looks_like_suite(tmp_path):
    assert looks_like_suite(write(tmp_path, VALID, "a.yaml"))
    assert looks_like_suite(write(tmp_path, "# comment\nsocialbias: 1\n", "b.yml"))
    assert looks_like_suite(write(tmp_path, "other: 1\nsocialbias : 1\n", "c.yaml"))
    # Flow style and quoted keys are suites too (they were silently skipped).
    assert looks_like_suite(write(tmp_path, "{socialbias: 1, suite: s, protocol: smoke}\n", "flow.yaml"))
    assert looks_like_suite(write(tmp_path, '"socialbias": 1\nsuite: s\n', "quoted.yaml"))


def test_does_not_look_like_suite(tmp_path):
    # no marker
    assert not looks_like_suite(write(tmp_path, "gates: []\n", "thresholds.yaml"))
    # marker nested, not top level
    assert not looks_like_suite(write(tmp_path, "tool:\n  socialbias: 1\n", "nested.yaml"))
    # marker only in a comment
    assert not looks_like_suite(write(tmp_path, "# socialbias: 1\nx: 1\n", "comment.yaml"))
    # a key that merely starts with the word
    assert not looks_like_suite(write(tmp_path, "socialbias_suite: 1\n", "prefix.yaml"))
    # right content, wrong extension
    assert not looks_like_suite(write(tmp_path, VALID, "suite.txt"))
    # missing file
    assert not looks_like_suite(tmp_path / "missing.yaml")


def test_a_seeds_file_given_as_a_plain_list_names_the_fix_without_quoting_the_file(tmp_path):
    seeds = tmp_path / "seeds.yaml"
    seeds.write_text("".join(f"- id: s{i}\n  category: age\n  group: g\n  statement: A long statement {i}.\n"
                             for i in range(50)))
    suite = write(tmp_path, "socialbias: 1\nsuite: demo\nprotocol: dymt\nseeds: seeds.yaml\n")
    message = load_error(suite)
    assert f"{seeds}:1: at (top level): expected a mapping, found a list (put the list under a top-level `seeds:` key)" in message
    assert "A long statement" not in message  # the file's text is not dumped into the error


@pytest.mark.parametrize("written", ["DyMT", "DYMT", "Smoke"])
def test_protocol_names_are_read_whatever_their_case(tmp_path, written):
    # The docs write DyMT; cases, records and reports carry the registered name.
    (tmp_path / "seeds.yaml").write_text("seeds:\n  - id: s1\n    category: age\n    group: g\n    statement: A statement.\n")
    body = "seeds: seeds.yaml\n" if written != "Smoke" else (
        "cases:\n  - id: a1\n    category: age\n    group: g\n    statement: A statement.\n")
    suite = load_suite(write(tmp_path, f"socialbias: 1\nsuite: demo\nprotocol: {written}\n{body}"))
    assert suite.cases and {case.protocol for case in suite.cases} == {written.lower()}
    assert suite.protocol == written.lower()


def test_an_unknown_protocol_gets_the_nearest_name_whatever_its_case(tmp_path):
    message = load_error(write(tmp_path, "socialbias: 1\nsuite: demo\nprotocol: DyMTT\nseeds: seeds.yaml\n"))
    assert ":3: unknown protocol 'DyMTT' (did you mean 'dymt'?)" in message
