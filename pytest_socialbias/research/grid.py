"""The crossed BenevDial grid and its class-balanced sampler (``generate-benevdial --style=paper``).

The BenevDial paper crossed every user profile with every agent persona in each of its two
roles, and wrote every such condition in each of the three classes: 315 x 64 x 2 = 40,320
conditions per class, 120,960 dialogues per class with its three generators, 362,880 in
all; it evaluated a class-balanced 10% (36,288). Here the grid follows the conditions file:
roles x user profiles x agent personas (``grid_size``), so a file with other axes gives
another grid.

A cell is addressed by an index, never by a list of all cells: index ``i`` of role ``r``
(roles in file order) is profile ``i // personas`` (the user axes in file order, the last
axis changing fastest, as ``itertools.product``) with persona ``i % personas``
(``Conditions.personas()`` order, the unspecified persona last). What the paper's
conditions do not fix is drawn per cell, seeded by ``seed``, the role and the profile, and
is the same whichever sample the cell falls in: across the personas of one (role, profile)
the needs form a balanced column (each need personas / needs times, give or take one), so
do the given names of the profile's gender (by position in the list); the age in years
is drawn in the age value's range.

``sample_grid(c, per_class, seed)``: the same ``per_class`` cells serve all three classes
(so the demographics say nothing about the class), split over the roles as evenly as can
be (which roles get one more is seeded); within a role the cells are a simple random
sample without repeats: each cell is ranked by SHA-256 of (seed, role, index) and the
lowest ranks are kept. So the sample is the same in every process, and a
larger sample with the same seed contains the smaller one (a grown run replays the
dialogues it already has from the cache). Memory is the sample itself: the ranking keeps
only the ``per_class`` best indices (``heapq.nsmallest``).
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass

from ..benevdial.conditions import Condition, Conditions, Profile, balanced_column, derived_seed
from ..vocabulary import AXES


@dataclass(frozen=True)
class GridShape:
    """The size of a conditions file's crossed grid (one class)."""

    roles: int
    profiles: int
    personas: int

    @property
    def per_role(self) -> int:
        return self.profiles * self.personas

    @property
    def per_class(self) -> int:
        return self.roles * self.per_role

    def describe(self) -> str:
        def many(n: int, word: str) -> str:
            return f"{n:,} {word}{'' if n == 1 else 's'}"

        return f"{many(self.roles, 'role')} x {many(self.profiles, 'profile')} x {many(self.personas, 'persona')}"


def grid_shape(c: Conditions) -> GridShape:
    return GridShape(len(c.roles), c.profile_count, len(c.personas()))


def grid_size(c: Conditions) -> int:
    """Conditions per class in the crossed grid: roles x profiles x personas."""
    return grid_shape(c).per_class


def condition_id(role: str, profile: Profile, persona_index: int) -> str:
    """``{role}-{profile key}-p{persona index}``, e.g. ``wellbeing-elder-female-black-deaf-p7``
    (the persona by its place in ``Conditions.personas()``, so that ids stay short; the
    record names the persona's demographics)."""
    return f"{role}-{profile.key}-p{persona_index}"


def _profile_values(c: Conditions, profile_index: int) -> list:
    """The axis values of profile ``profile_index`` (mixed radix, the last axis fastest)."""
    values = []
    for axis in reversed(AXES):
        profile_index, digit = divmod(profile_index, len(c.axes[axis]))
        values.append(c.axes[axis][digit])
    return values[::-1]


class _Cells:
    """Conditions of grid cells, with the per-(role, profile) draws kept while sampling."""

    def __init__(self, c: Conditions, seed: int):
        self.c = c
        self.seed = seed
        self.personas = c.personas()
        self._draws: dict = {}

    def _draw(self, role_id: str, profile_index: int):
        key = (role_id, profile_index)
        found = self._draws.get(key)
        if found is None:
            age, gender, race, ability = _profile_values(self.c, profile_index)
            n = len(self.personas)
            rng = random.Random(derived_seed(self.seed, "grid", role_id, f"{age.id}-{gender.id}-{race.id}-{ability.id}"))
            needs = balanced_column([need.id for need in self.c.roles[role_id].needs], n, rng)
            names = balanced_column(gender.names, n, rng)
            years = [rng.randint(*age.years) for _ in range(n)]
            found = self._draws[key] = ((age, gender, race, ability), needs, names, years)
        return found

    def condition(self, role_id: str, index: int) -> Condition:
        persona_index = index % len(self.personas)
        (age, gender, race, ability), needs, names, years = self._draw(role_id, index // len(self.personas))
        profile = Profile(age=age.id, gender=gender.id, race=race.id, ability=ability.id,
                          name=names[persona_index], years=years[persona_index])
        persona = self.personas[persona_index]
        return Condition(id=condition_id(role_id, profile, persona_index), role=role_id, need=needs[persona_index],
                         profile=profile, persona=persona)


def role_counts(c: Conditions, per_class: int, seed: int) -> dict[str, int]:
    """How many of ``per_class`` cells each role gets: an even split, the remainder to roles
    in a seeded order (so a larger ``per_class`` never takes a cell from a role)."""
    roles = list(c.roles)
    base, extra = divmod(per_class, len(roles))
    order = list(roles)
    random.Random(derived_seed(seed, "grid-roles")).shuffle(order)
    return {role: base + (role in order[:extra]) for role in roles}


def _rank(seed: int, role_id: str, index: int) -> bytes:
    return hashlib.sha256(f"{seed}\x1fgrid-sample\x1f{role_id}\x1f{index}".encode("utf-8")).digest()


def sample_indices(c: Conditions, per_class: int, seed: int) -> dict[str, list[int]]:
    """Role -> the sampled cell indices (ascending); see the module docstring."""
    total = grid_size(c)
    if isinstance(per_class, bool) or not isinstance(per_class, int) or not 1 <= per_class <= total:
        raise ValueError(f"per_class must be a whole number from 1 to {total} (the grid of {c.path}); got {per_class!r}")
    per_role = grid_shape(c).per_role
    out = {}
    for role_id, k in role_counts(c, per_class, seed).items():
        if k == per_role:
            out[role_id] = list(range(per_role))
        else:
            out[role_id] = sorted(heapq.nsmallest(k, range(per_role), key=lambda i, r=role_id: _rank(seed, r, i)))
    return out


def sample_grid(c: Conditions, per_class: int, seed: int) -> list[Condition]:
    """``per_class`` conditions of the crossed grid, shared by the three classes; sorted by id."""
    cells = _Cells(c, seed)
    out = [cells.condition(role_id, i) for role_id, indices in sample_indices(c, per_class, seed).items() for i in indices]
    return sorted(out, key=lambda x: x.id)
