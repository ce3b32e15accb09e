"""BenevDial conditions: the shipped file, the balanced sampler, counterfactual pairs, errors."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_socialbias.benevdial.conditions import (
    AXES,
    Condition,
    Pair,
    Persona,
    Profile,
    load_conditions,
    make_pairs,
    sample_conditions,
)
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.files import looks_like_suite

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "suites" / "benevdial" / "conditions.yaml"
PROFILE_FIELDS = [f.name for f in dataclasses.fields(Profile)]


@pytest.fixture(scope="module")
def conditions():
    return load_conditions(SHIPPED)


def by_role(items):
    out = collections.defaultdict(list)
    for item in items:
        out[item.role].append(item)
    return out


def within_one(counts: dict, ids, n: int) -> bool:
    k = len(ids)
    return all(n // k <= counts.get(i, 0) <= -(-n // k) for i in ids)


# --------------------------------------------------------------------------- shipped file


def test_shipped_file_has_the_documented_sizes(conditions):
    assert set(conditions.roles) == {"wellbeing", "lifestyle"}
    assert conditions.profile_count == 315 == 3 * 3 * 7 * 5
    assert [len(conditions.axes[a]) for a in AXES] == [3, 3, 7, 5]
    personas = conditions.personas()
    assert len(personas) == 64 and personas[-1] is None
    assert len(set(personas)) == 64
    assert conditions.roles["wellbeing"].user_label == "client"
    assert conditions.roles["lifestyle"].user_label == "user"
    for role in conditions.roles.values():
        assert len(role.needs) == 8
        assert len({n.id for n in role.needs}) == 8
        assert all(len(n.follow_ups) == 4 for n in role.needs)
        assert any(line.strip() == "$persona_line" for line in role.agent_prompt.splitlines())
    for gender in conditions.axes["gender"]:
        assert len(gender.names) == 8 and gender.pronouns
    for age in conditions.axes["age"]:
        assert age.years[0] <= age.years[1]
    assert conditions.value("ability", "none").statement == ""
    assert all(v.statement for v in conditions.axes["ability"] if v.id != "none")
    assert len(conditions.sha256) == 64
    # Not a suite file: the plugin must not try to collect it.
    assert not looks_like_suite(SHIPPED)
    assert "TEST DATA FOR MEASUREMENT" in SHIPPED.read_text().split("socialbias_conditions")[0]


def test_profile_text_and_persona_line(conditions):
    profile = Profile(age="young", gender="female", race="black", ability="deaf", name="Maya", years=27)
    assert conditions.profile_text(profile) == "Maya (she/her), woman, 27 years old, Black, deaf"
    plain = dataclasses.replace(profile, ability="none")
    assert conditions.profile_text(plain) == "Maya (she/her), woman, 27 years old, Black"
    persona = Persona(age="middle-aged", gender="male", race="south-asian")
    assert conditions.persona_line(persona) == "You present yourself as a middle-aged man who is South Asian."
    assert conditions.persona_line(Persona("elder", "non-binary", "white")).startswith("You present yourself as an ")
    assert conditions.persona_line(None) == ""


def test_agent_system_prompt_fills_or_drops_the_persona_line(conditions):
    persona = Persona(age="young", gender="female", race="indigenous")
    with_persona = conditions.agent_system_prompt("wellbeing", persona)
    assert conditions.persona_line(persona) in with_persona.splitlines()
    assert "$" not in with_persona
    without = conditions.agent_system_prompt("wellbeing", None)
    assert "$" not in without and "" not in without.strip().splitlines()
    assert len(without.splitlines()) == len(with_persona.splitlines()) - 1


# --------------------------------------------------------------------------- sampler


@pytest.mark.parametrize("n", [42, 10])
def test_sampler_is_balanced_on_every_axis_without_repeats(conditions, n):
    sample = sample_conditions(conditions, n, seed=3)
    roles = by_role(sample)
    assert set(roles) == set(conditions.roles)
    for role, items in roles.items():
        assert len(items) == n
        assert len({c.profile.key for c in items}) == n
        for axis in AXES:
            ids = [v.id for v in conditions.axes[axis]]
            counts = collections.Counter(c.profile.value(axis) for c in items)
            assert within_one(counts, ids, n), (role, axis, counts)
            if n >= len(ids):
                assert set(counts) == set(ids)  # every value covered
        need_ids = [x.id for x in conditions.roles[role].needs]
        assert within_one(collections.Counter(c.need for c in items), need_ids, n)
        # fewer than 64: a sample of personas without repeats
        assert len({c.persona for c in items}) == n
        for c in items:
            gender = conditions.value("gender", c.profile.gender)
            lo, hi = conditions.value("age", c.profile.age).years
            assert c.profile.name in gender.names and lo <= c.profile.years <= hi
            assert c.id == f"{role}-{c.profile.key}"
    assert [c.id for c in sample] == sorted(c.id for c in sample)
    assert len({c.id for c in sample}) == len(sample)


def test_personas_and_names_are_balanced_for_larger_samples(conditions):
    n = 128
    for items in by_role(sample_conditions(conditions, n, seed=5)).values():
        personas = collections.Counter(c.persona for c in items)
        assert set(personas) == set(conditions.personas()) and set(personas.values()) == {2}
        for gender in conditions.axes["gender"]:
            names = collections.Counter(c.profile.name for c in items if c.profile.gender == gender.id)
            assert within_one(names, gender.names, sum(names.values()))


def test_none_gives_every_profile_exactly_once(conditions):
    sample = sample_conditions(conditions, None, seed=0)
    for items in by_role(sample).values():
        keys = [c.profile.key for c in items]
        assert len(keys) == len(set(keys)) == 315
    assert sample_conditions(conditions, 315, seed=0) == sample


def test_large_samples_stay_balanced_and_unique(conditions):
    for n in (157, 158, 300, 314):
        for items in by_role(sample_conditions(conditions, n, seed=11)).values():
            assert len({c.profile.key for c in items}) == n
            for axis in AXES:
                counts = collections.Counter(c.profile.value(axis) for c in items)
                assert within_one(counts, [v.id for v in conditions.axes[axis]], n), (n, axis)


def test_sampler_is_deterministic_and_seed_dependent(conditions):
    first = sample_conditions(conditions, 42, seed=7)
    assert sample_conditions(conditions, 42, seed=7) == first
    other = sample_conditions(conditions, 42, seed=8)
    assert {c.id for c in other} != {c.id for c in first}


SNIPPET = """
import json, sys
from pytest_socialbias.benevdial.conditions import load_conditions, make_pairs, sample_conditions
c = load_conditions(sys.argv[1])
print(json.dumps({
    "conditions": [x.to_dict() for x in sample_conditions(c, 42, 7)],
    "pairs": [x.to_dict() for x in make_pairs(c, 20, 7)],
}, sort_keys=True))
"""


def test_samples_are_the_same_in_fresh_processes(conditions):
    expected = {
        "conditions": [x.to_dict() for x in sample_conditions(conditions, 42, 7)],
        "pairs": [x.to_dict() for x in make_pairs(conditions, 20, 7)],
    }
    outputs = []
    for hash_seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run(
            [sys.executable, "-c", SNIPPET, str(SHIPPED)], env=env, capture_output=True, text=True, check=True
        )
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] == json.loads(json.dumps(expected, sort_keys=True))


@pytest.mark.parametrize("bad", [0, 316, -1, True, 2.5])
def test_bad_per_role_is_a_clear_value_error(conditions, bad):
    with pytest.raises(ValueError, match=r"per_role must be a whole number from 1 to 315"):
        sample_conditions(conditions, bad, seed=0)
    with pytest.raises(ValueError, match=r"per_role"):
        make_pairs(conditions, bad, seed=0)


def test_records_round_trip_through_builtins(conditions):
    for item in sample_conditions(conditions, 70, seed=1):
        data = json.loads(json.dumps(item.to_dict()))
        assert Condition.from_dict(data) == item
    for pair in make_pairs(conditions, 10, seed=1):
        assert Pair.from_dict(json.loads(json.dumps(pair.to_dict()))) == pair


# --------------------------------------------------------------------------- pairs


def test_pairs_differ_in_exactly_the_named_axis(conditions):
    n = 42
    pairs = make_pairs(conditions, n, seed=2)
    assert [p.id for p in pairs] == sorted(p.id for p in pairs)
    assert len({p.id for p in pairs}) == len(pairs) == n * len(conditions.roles)
    for role, items in by_role(pairs).items():
        assert len({p.a.key for p in items}) == n
        axes = collections.Counter(p.axis for p in items)
        assert within_one(axes, AXES, n), axes
        for p in items:
            changed = {f for f in PROFILE_FIELDS if getattr(p.a, f) != getattr(p.b, f)}
            expected = {p.axis} | ({"name"} if p.axis == "gender" else set()) | ({"years"} if p.axis == "age" else set())
            assert changed == expected, p
            assert p.id == f"{role}-{p.axis}-{p.a.key}-vs-{p.b.value(p.axis)}"
            old_names = conditions.value("gender", p.a.gender).names
            new_names = conditions.value("gender", p.b.gender).names
            assert old_names.index(p.a.name) == new_names.index(p.b.name)
            lo, hi = conditions.value("age", p.b.age).years
            assert lo <= p.b.years <= hi
            assert p.need in {x.id for x in conditions.roles[role].needs}
    base = {(c.role, c.profile.key) for c in sample_conditions(conditions, n, seed=2)}
    assert {(p.role, p.a.key) for p in pairs} != base  # a different derived seed from the sampler


def test_pair_new_values_are_spread_over_the_other_values(conditions):
    pairs = make_pairs(conditions, 200, seed=4)
    for items in by_role(pairs).values():
        race = collections.Counter(p.b.race for p in items if p.axis == "race")
        assert set(race) == {v.id for v in conditions.axes["race"]}
        assert max(race.values()) - min(race.values()) <= 2


def test_pairs_are_deterministic_and_seed_dependent(conditions):
    assert make_pairs(conditions, 30, seed=1) == make_pairs(conditions, 30, seed=1)
    assert make_pairs(conditions, 30, seed=1) != make_pairs(conditions, 30, seed=2)


# --------------------------------------------------------------------------- bad files


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    lines = text.splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if needle in line]
    return hits[occurrence - 1]


def broken(tmp_path, old: str, new: str, count: int = 1) -> tuple[Path, str]:
    text = SHIPPED.read_text()
    assert old in text
    text = text.replace(old, new, count)
    path = tmp_path / "conditions.yaml"
    path.write_text(text)
    return path, text


def error_of(path) -> str:
    with pytest.raises(ConfigError) as info:
        load_conditions(path)
    return str(info.value)


def test_duplicate_need_id_names_file_and_line(tmp_path):
    path, text = broken(tmp_path, "- id: sleep\n", "- id: work-stress\n")
    message = error_of(path)
    line = line_of(text, "- id: work-stress", 2)
    assert message.startswith(f"{path}:{line}: ")
    assert "duplicate need id 'work-stress'" in message
    assert f"first at line {line_of(text, '- id: work-stress')}" in message


def test_missing_persona_line_names_file_and_line(tmp_path):
    path, text = broken(tmp_path, "      $persona_line\n", "")
    message = error_of(path)
    assert message.startswith(f"{path}:{line_of(text, 'agent_prompt: |')}: ")
    assert "roles[0].agent_prompt" in message and "$persona_line" in message


def test_unknown_placeholder_is_rejected(tmp_path):
    path, text = broken(tmp_path, "      $persona_line\n", "      $persona_line\n      Your name is $agent_name.\n")
    message = error_of(path)
    assert message.startswith(f"{path}:{line_of(text, 'agent_prompt: |')}: ")
    assert "$$" in message


def test_unknown_key_names_file_and_line(tmp_path):
    path, text = broken(tmp_path, "    user_label: client\n", "    user_label: client\n    colour: blue\n")
    message = error_of(path)
    assert re.match(rf"{re.escape(str(path))}:{line_of(text, 'colour: blue')}: ", message)  # the key's own line
    assert "'colour'" in message and "roles[0]" in message


def test_reversed_years_name_file_and_line(tmp_path):
    path, text = broken(tmp_path, "years: [70, 82]", "years: [82, 70]")
    message = error_of(path)
    assert message.startswith(f"{path}:{line_of(text, 'years: [82, 70]')}: ")
    assert "reversed" in message and "[70, 82]" in message


def test_duplicate_axis_value_names_file_and_line(tmp_path):
    path, text = broken(tmp_path, "- id: hispanic\n", "- id: black\n")
    message = error_of(path)
    assert message.startswith(f"{path}:{line_of(text, '- id: black', 2)}: ")
    assert "duplicate race value id 'black'" in message


def test_malformed_yaml_names_file_and_line(tmp_path):
    path, text = broken(tmp_path, "agent_axes: [age, gender, race]\n", "agent_axes: [age, gender, race\n")
    message = error_of(path)
    assert re.match(rf"{re.escape(str(path))}:\d+: conditions file is not valid YAML", message)
    line = int(message[len(str(path)) + 1 :].split(":")[0])
    assert line >= line_of(text, "agent_axes:")


def test_the_documented_conditions_file_and_suite_run_as_written(pytester):
    """docs/benevdial.md's complete example: the conditions file loads, and the suite that
    names it collects its sample of conditions (a dry run: no model called)."""
    from pytest_socialbias.benevdial.conditions import load_conditions, sample_conditions

    text = (Path(__file__).resolve().parents[2] / "docs" / "benevdial.md").read_text(encoding="utf-8")
    conditions, suite = re.findall(r"```yaml\n(.*?)```", text.split("<!-- conditions-example -->")[1], re.S)[:2]
    (pytester.path / "conditions.yaml").write_text(conditions, encoding="utf-8")
    (pytester.path / "agent.yaml").write_text(suite, encoding="utf-8")
    loaded = load_conditions(pytester.path / "conditions.yaml")
    sample = sample_conditions(loaded, 8, seed=0)
    assert len(sample) == 8 and len({c.id for c in sample}) == 8
    result = pytester.runpytest("agent.yaml", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    ids = [line for line in result.stdout.lines if line.startswith("agent.yaml::")]
    assert len(ids) == 8 and all(line.startswith("agent.yaml::coach-") for line in ids)
