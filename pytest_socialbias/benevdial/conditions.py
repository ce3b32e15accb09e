"""BenevDial conditions: roles, needs, user profiles and agent personas, and the samplers.

A conditions file (``suites/benevdial/conditions.yaml``, marked ``socialbias_conditions: 1``)
defines the agent roles the model under test plays, the needs a simulated user brings to
each role, the user axes (age x gender x race x ability = 315 profiles) and which of them
describe the agent's persona (age x gender x race = 63, plus one unspecified = 64).

Sampling rules (``sample_conditions``), per role independently:

- ``per_role`` profiles out of all of them (315 with the shipped file); ``None`` takes every
  profile exactly once.
- Balanced: on every axis each value appears floor(n/k) or ceil(n/k) times (k = number of
  values of that axis). Each axis is a balanced column (the values in a seeded order,
  repeated) shuffled independently with a seeded RNG; rows that repeat a profile are then
  repaired by swapping one axis entry with another row, which keeps every column's counts.
  Above half of all profiles the sampler draws the profiles to leave out the same way and
  keeps the rest (the full grid is exactly balanced, so the rest is balanced too).
- Needs and personas are balanced columns too: each need about n/8 times; personas
  balanced over the 64 when n >= 64, else a seeded sample without repeats.
- Names come from the gender value's ``names``, balanced by position within each gender;
  ``years`` is drawn with the seeded RNG within the age value's range.
- Deterministic for a given (file content, per_role, seed), in any process: seeds are
  derived with SHA-256 and fed to ``random.Random`` (never Python's salted ``hash()``).
  Output sorted by id; a condition id is ``{role}-{age}-{gender}-{race}-{ability}``.

The research setting's crossed grid (every profile with every persona in every role) and
its class-balanced sampler are in research/grid.py; they use ``derived_seed`` and
``balanced_column`` from here.

Counterfactual pairs (``make_pairs``), per role: ``per_role`` base conditions drawn by the
same sampler under a different derived seed. Pair i changes exactly one axis: the axes
rotate as a balanced column over age, gender, race, ability; the new value is the least
used so far among the other values of that axis (seeded tie-break). The variant keeps
everything else: the same need, persona, name (for a gender pair, the name at the same
position in the other gender's list) and years (for an age pair, years drawn in the new
range). Pair id: ``{role}-{axis}-{base key}-vs-{new value}``; member ``a`` is the base.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from string import Template

from ..errors import ConfigError
from ..files import path_text, read_yaml, validate, yaml_line
from ..vocabulary import AXES, PERSONA_AXES

#: The ability value that means no disability is stated (left out of the profile text).
NO_DISABILITY = "none"
PLACEHOLDER = "persona_line"
_PLACEHOLDER_LINES = ("$" + PLACEHOLDER, "${" + PLACEHOLDER + "}")
_REDRAWS = 20  # repair attempts before giving up (never reached with sane files)


@dataclass(frozen=True)
class AxisValue:
    id: str
    label: str
    years: tuple[int, int] | None = None  # age values
    pronouns: str | None = None  # gender values
    names: tuple[str, ...] = ()  # gender values
    statement: str = ""  # ability values: how the user says it, first person


@dataclass(frozen=True)
class Need:
    id: str
    request: str
    follow_ups: tuple[str, ...]


@dataclass(frozen=True)
class Role:
    id: str
    title: str
    agent_prompt: str  # contains $persona_line on its own line
    user_label: str
    needs: tuple[Need, ...]

    def need(self, need_id: str) -> Need:
        for need in self.needs:
            if need.id == need_id:
                return need
        raise KeyError(f"role {self.id!r} has no need {need_id!r}")


@dataclass(frozen=True)
class Profile:
    """One simulated user: a value id on every axis, a name and an age in years."""

    age: str
    gender: str
    race: str
    ability: str
    name: str
    years: int

    @property
    def key(self) -> str:
        return f"{self.age}-{self.gender}-{self.race}-{self.ability}"

    def value(self, axis: str) -> str:
        if axis not in AXES:
            raise KeyError(f"unknown axis {axis!r}; expected one of {', '.join(AXES)}")
        return getattr(self, axis)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Persona:
    """The agent's stated demographics; a field is None where the file leaves that axis out."""

    age: str | None = None
    gender: str | None = None
    race: str | None = None

    @property
    def key(self) -> str:
        return "-".join(v for v in (self.age, self.gender, self.race) if v is not None)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Persona:
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Condition:
    id: str
    role: str
    need: str
    profile: Profile
    persona: Persona | None  # None: the agent persona is unspecified

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "role": self.role,
            "need": self.need,
            "profile": self.profile.to_dict(),
            "persona": self.persona.to_dict() if self.persona is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Condition:
        persona = data.get("persona")
        return cls(
            id=data["id"],
            role=data["role"],
            need=data["need"],
            profile=Profile.from_dict(data["profile"]),
            persona=Persona.from_dict(persona) if persona is not None else None,
        )


@dataclass(frozen=True)
class Pair:
    """Two users who differ on exactly one axis, with the same role, need and persona."""

    id: str
    role: str
    need: str
    axis: str
    a: Profile  # the base profile
    b: Profile  # the base with ``axis`` changed
    persona: Persona | None

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "role": self.role,
            "need": self.need,
            "axis": self.axis,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "persona": self.persona.to_dict() if self.persona is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Pair:
        persona = data.get("persona")
        return cls(
            id=data["id"],
            role=data["role"],
            need=data["need"],
            axis=data["axis"],
            a=Profile.from_dict(data["a"]),
            b=Profile.from_dict(data["b"]),
            persona=Persona.from_dict(persona) if persona is not None else None,
        )


@dataclass
class Conditions:
    path: Path
    sha256: str  # of the file bytes
    roles: dict[str, Role]  # in file order
    axes: dict[str, tuple[AxisValue, ...]]  # keyed by AXES, values in file order
    agent_axes: tuple[str, ...]  # a subset of PERSONA_AXES, in that order
    agent_unspecified: bool

    def value(self, axis: str, id: str) -> AxisValue:
        if axis not in self.axes:
            raise KeyError(f"unknown axis {axis!r}; expected one of {', '.join(AXES)}")
        for value in self.axes[axis]:
            if value.id == id:
                return value
        known = ", ".join(v.id for v in self.axes[axis])
        raise KeyError(f"axis {axis!r} has no value {id!r} (known: {known})")

    @property
    def profile_count(self) -> int:
        count = 1
        for axis in AXES:
            count *= len(self.axes[axis])
        return count

    def profile_text(self, profile: Profile) -> str:
        """E.g. "Maya (she/her), woman, 27 years old, Black, deaf": for simulators and judges."""
        gender = self.value("gender", profile.gender)
        parts = [
            f"{profile.name} ({gender.pronouns})",
            gender.label,
            f"{profile.years} years old",
            self.value("race", profile.race).label,
        ]
        if profile.ability != NO_DISABILITY:
            parts.append(self.value("ability", profile.ability).label)
        return ", ".join(parts)

    def persona_line(self, persona: Persona | None) -> str:
        """One sentence, e.g. "You present yourself as a middle-aged man who is South Asian."
        ("" for the unspecified persona)."""
        if persona is None:
            return ""
        words = []
        if persona.age is not None:
            words.append(self.value("age", persona.age).label)
        words.append(self.value("gender", persona.gender).label if persona.gender is not None else "person")
        phrase = " ".join(words)
        article = "an" if phrase[:1].lower() in "aeiou" else "a"
        line = f"You present yourself as {article} {phrase}"
        if persona.race is not None:
            line += f" who is {self.value('race', persona.race).label}"
        return line + "."

    def agent_system_prompt(self, role_id: str, persona: Persona | None) -> str:
        """The role's agent prompt with $persona_line filled in; for the unspecified persona
        the placeholder's line is dropped rather than left blank."""
        prompt = self.roles[role_id].agent_prompt
        if persona is None:
            prompt = "\n".join(x for x in prompt.split("\n") if x.strip() not in _PLACEHOLDER_LINES)
        return Template(prompt).substitute({PLACEHOLDER: self.persona_line(persona)})

    def personas(self) -> list[Persona | None]:
        """Every agent persona: the product of the agent axes in file order, then None
        (unspecified) last when ``agent_unspecified``."""
        grids = [[v.id for v in self.axes[axis]] for axis in self.agent_axes]
        out: list = [Persona(**dict(zip(self.agent_axes, combo))) for combo in itertools.product(*grids)]
        if self.agent_unspecified:
            out.append(None)
        return out


# --------------------------------------------------------------------------- loading


def load_conditions(path: str | Path) -> Conditions:
    """Read and check a conditions file; raise ConfigError naming file:line and the fix."""
    path = Path(path)
    data, node = read_yaml(path, "conditions file")
    validate(data, "conditions", str(path), node)

    def fail(where, message):
        raise ConfigError(f"{path}:{yaml_line(node, where)}: at {path_text(where)}: {message}")

    def check_unique(items, where, what):
        seen: dict = {}
        for i, item in enumerate(items):
            if item["id"] in seen:
                first = yaml_line(node, where + [seen[item["id"]], "id"])
                fail(where + [i, "id"], f"duplicate {what} id {item['id']!r} (first at line {first}); give each {what} its own id")
            seen[item["id"]] = i

    check_unique(data["roles"], ["roles"], "role")
    roles = {}
    for r, raw in enumerate(data["roles"]):
        where = ["roles", r]
        check_unique(raw["needs"], where + ["needs"], "need")
        _check_prompt(raw["agent_prompt"], lambda message, where=where: fail(where + ["agent_prompt"], message))
        for n, need in enumerate(raw["needs"]):
            if not need["follow_ups"]:
                fail(where + ["needs", n, "follow_ups"], "a need needs at least one follow-up turn")
        roles[raw["id"]] = Role(
            id=raw["id"],
            title=raw["title"],
            agent_prompt=raw["agent_prompt"],
            user_label=raw["user_label"],
            needs=tuple(Need(id=n["id"], request=n["request"], follow_ups=tuple(n["follow_ups"])) for n in raw["needs"]),
        )

    axes = {}
    for axis in AXES:
        raw_values = data["user_axes"][axis]
        check_unique(raw_values, ["user_axes", axis], f"{axis} value")
        values = []
        for i, raw in enumerate(raw_values):
            years = None
            if "years" in raw:
                lo, hi = raw["years"]
                if lo > hi:
                    fail(["user_axes", axis, i, "years"], f"years [{lo}, {hi}] are reversed; write [{hi}, {lo}]")
                years = (lo, hi)
            values.append(
                AxisValue(
                    id=raw["id"],
                    label=raw["label"],
                    years=years,
                    pronouns=raw.get("pronouns"),
                    names=tuple(raw.get("names", ())),
                    statement=raw.get("statement", ""),
                )
            )
        axes[axis] = tuple(values)

    return Conditions(
        path=path,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        roles=roles,
        axes=axes,
        agent_axes=tuple(a for a in PERSONA_AXES if a in data["agent_axes"]),
        agent_unspecified=data["agent_unspecified"],
    )


def _check_prompt(prompt: str, fail) -> None:
    if not any(line.strip() in _PLACEHOLDER_LINES for line in prompt.splitlines()):
        fail(f"the agent prompt must have the placeholder ${PLACEHOLDER} on a line of its own (it becomes the persona sentence, or nothing)")
    try:
        Template(prompt).substitute({PLACEHOLDER: ""})
    except (KeyError, ValueError) as exc:
        fail(f"the only placeholder allowed is ${PLACEHOLDER} (found a problem at {exc}); write $$ for a literal dollar sign")


# --------------------------------------------------------------------------- sampling


def derived_seed(seed: int, *labels: str) -> int:
    """A 64-bit integer from the seed and labels, the same in every process."""
    text = "\x1f".join([str(seed), *labels])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def balanced_column(values, n: int, rng: random.Random) -> list:
    """n entries, each value floor(n/k) or ceil(n/k) times (which get the extra one is
    seeded), in a seeded order. For n <= k: a sample without repeats."""
    order = list(values)
    rng.shuffle(order)
    column = [order[i % len(order)] for i in range(n)]
    rng.shuffle(column)
    return column


def _unique_balanced_rows(sizes, n: int, rng: random.Random) -> list | None:
    """n distinct rows of value indices with balanced columns, or None if repair got stuck."""
    columns = [balanced_column(range(k), n, rng) for k in sizes]
    rows = [list(r) for r in zip(*columns)]
    counts: dict = {}
    for row in rows:
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    partners = list(range(n))
    rng.shuffle(partners)
    axis_order = list(range(len(sizes)))
    rng.shuffle(axis_order)
    for i in range(n):
        if counts[tuple(rows[i])] == 1:
            continue
        # Swap one axis entry between row i and a partner row j so that both end up
        # unique: the column counts stay the same and the number of repeats drops.
        for j, axis in itertools.product(partners, axis_order):
            if j == i or rows[i][axis] == rows[j][axis]:
                continue
            new_i, new_j = list(rows[i]), list(rows[j])
            new_i[axis], new_j[axis] = rows[j][axis], rows[i][axis]
            old_i, old_j = tuple(rows[i]), tuple(rows[j])
            counts[old_i] -= 1
            counts[old_j] -= 1
            if not counts.get(tuple(new_i)) and not counts.get(tuple(new_j)):
                counts[tuple(new_i)] = 1
                counts[tuple(new_j)] = 1
                rows[i], rows[j] = new_i, new_j
                break
            counts[old_i] += 1
            counts[old_j] += 1
        else:
            return None
    return rows


def _profile_rows(sizes, n: int, rng: random.Random) -> list:
    """n distinct, balanced rows of value indices, in a seeded order."""
    grid = [list(r) for r in itertools.product(*(range(k) for k in sizes))]
    if n == len(grid):
        rows = grid
    else:
        # The full grid is exactly balanced (k divides the product), so the complement of a
        # balanced set is balanced; repair is easiest below half the grid.
        leave_out = n > len(grid) // 2
        m = len(grid) - n if leave_out else n
        for _ in range(_REDRAWS):
            picked = _unique_balanced_rows(sizes, m, rng)
            if picked is not None:
                break
        else:  # pragma: no cover - never happens with a grid of a few values per axis
            raise RuntimeError(f"could not draw {m} distinct balanced profiles")
        if leave_out:
            out = set(map(tuple, picked))
            rows = [r for r in grid if tuple(r) not in out]
        else:
            rows = picked
    rows = sorted(rows)
    rng.shuffle(rows)
    return rows


def _check_count(c: Conditions, per_role: int) -> None:
    total = c.profile_count
    if isinstance(per_role, bool) or not isinstance(per_role, int) or not 1 <= per_role <= total:
        raise ValueError(
            f"per_role must be a whole number from 1 to {total} (the number of user profiles in "
            f"{c.path}), or None for all of them; got {per_role!r}"
        )


def _sample_role(c: Conditions, role: Role, n: int, rng: random.Random) -> list:
    """Balanced conditions for one role, in row (sampling) order."""
    sizes = [len(c.axes[axis]) for axis in AXES]
    rows = _profile_rows(sizes, n, rng)
    needs = balanced_column([need.id for need in role.needs], n, rng)
    personas = c.personas()
    persona_column = balanced_column(range(len(personas)), n, rng)
    values = [[c.axes[axis][row[a]] for a, axis in enumerate(AXES)] for row in rows]
    names: list = [None] * n
    for gender in c.axes["gender"]:
        members = [i for i in range(n) if values[i][1].id == gender.id]
        for i, position in zip(members, balanced_column(range(len(gender.names)), len(members), rng)):
            names[i] = gender.names[position]
    out = []
    for i, (age, gender, race, ability) in enumerate(values):
        profile = Profile(
            age=age.id,
            gender=gender.id,
            race=race.id,
            ability=ability.id,
            name=names[i],
            years=rng.randint(*age.years),
        )
        out.append(
            Condition(
                id=f"{role.id}-{profile.key}",
                role=role.id,
                need=needs[i],
                profile=profile,
                persona=personas[persona_column[i]],
            )
        )
    return out


def sample_conditions(c: Conditions, per_role: int | None, seed: int) -> list[Condition]:
    """Balanced conditions, ``per_role`` per role (None: every profile once); see the module
    docstring for the rules. Sorted by id."""
    out = []
    for role in c.roles.values():
        n = c.profile_count if per_role is None else per_role
        _check_count(c, n)
        out.extend(_sample_role(c, role, n, random.Random(derived_seed(seed, "conditions", role.id))))
    return sorted(out, key=lambda x: x.id)


def make_pairs(c: Conditions, per_role: int, seed: int) -> list[Pair]:
    """Counterfactual pairs, ``per_role`` per role; see the module docstring. Sorted by id."""
    out = []
    for role in c.roles.values():
        _check_count(c, per_role)
        bases = _sample_role(c, role, per_role, random.Random(derived_seed(seed, "pairs-base", role.id)))
        rng = random.Random(derived_seed(seed, "pairs", role.id))
        axis_column = balanced_column(AXES, per_role, rng)
        used = {axis: {v.id: 0 for v in c.axes[axis]} for axis in AXES}
        tie_break = {}
        for axis in AXES:
            order = [v.id for v in c.axes[axis]]
            rng.shuffle(order)
            tie_break[axis] = {v: i for i, v in enumerate(order)}
        for base, axis in zip(bases, axis_column):
            a = base.profile
            others = [v.id for v in c.axes[axis] if v.id != a.value(axis)]
            if not others:
                raise ConfigError(f"{c.path}: axis {axis!r} has a single value, so no pair can change it; add a value")
            new = min(others, key=lambda v: (used[axis][v], tie_break[axis][v]))
            used[axis][new] += 1
            changes: dict = {axis: new}
            if axis == "gender":
                old_names = c.value("gender", a.gender).names
                new_names = c.value("gender", new).names
                changes["name"] = new_names[old_names.index(a.name) % len(new_names)]
            elif axis == "age":
                changes["years"] = rng.randint(*c.value("age", new).years)
            b = dataclasses.replace(a, **changes)
            out.append(
                Pair(
                    id=f"{role.id}-{axis}-{a.key}-vs-{new}",
                    role=role.id,
                    need=base.need,
                    axis=axis,
                    a=a,
                    b=b,
                    persona=base.persona,
                )
            )
    ids = [p.id for p in out]
    # Base profiles are distinct within a role and each is used once, so ids cannot collide.
    assert len(set(ids)) == len(ids), "pair ids collided"
    return sorted(out, key=lambda p: p.id)
