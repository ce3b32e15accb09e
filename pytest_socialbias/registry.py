"""One registry type for the house's extension points: providers (models/providers.py),
metrics (metrics/catalogue.py), guard kinds (judges/guards.py) and protocols
(protocols/__init__.py).

A registry holds named entries of one kind. ``register`` adds or replaces one (from the
plugin's own modules, or from a project's conftest.py, which pytest loads before any
suite or option value is read); ``get``, ``names`` and iteration are read when they are
needed, never copied at import, so an entry registered late counts everywhere: spec
parsing, option choices, schema checks, metrics, reports.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable, Iterator
from operator import attrgetter
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, key: Callable[[T], Hashable] = attrgetter("name")):
        self.kind = kind  # what an entry is, for messages ("provider", "guard kind")
        self._key = key
        self._entries: dict = {}

    def register(self, entry: T) -> T:
        """Add ``entry`` under its name, replacing one of the same name; returns it."""
        self._entries[self._key(entry)] = entry
        return entry

    def unregister(self, name: Hashable) -> None:
        self._entries.pop(name, None)

    def get(self, name: Hashable, default: T | None = None) -> T | None:
        return self._entries.get(name, default)

    def names(self) -> tuple:
        return tuple(self._entries)

    def values(self) -> tuple[T, ...]:
        return tuple(self._entries.values())

    def items(self) -> tuple:
        return tuple(self._entries.items())

    def unknown(self, name: str) -> str:
        """The message for a name nothing registered: the nearest one, and all of them."""
        names = [str(n) for n in self._entries]
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
        if not close:  # another spelling of a name: case, - for _ (BenevDial-Agent)
            by_lower = {n.lower().replace("-", "_"): n for n in names}
            lowered = difflib.get_close_matches(str(name).lower().replace("-", "_"), list(by_lower), n=1, cutoff=0.6)
            close = [by_lower[lowered[0]]] if lowered else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown {self.kind} {name!r}{hint}; known: {', '.join(names)}"

    def __getitem__(self, name: Hashable) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown(str(name))) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(map(str, self._entries))})"
